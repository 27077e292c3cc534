"""int8 as float: on a CPU whose int8 products saturate, a quantized activation that
only dequantize nodes read becomes one `graphfuse::fake_quantize_per_tensor`, computed
in float32.

Without VNNI, oneDNN multiplies u8 x s8 pairs with vpmaddubsw, whose int16 pair sums
saturate for 8-bit activations: such int8 convolutions and linears stay with ATen
(int8_workarounds.int8_products_saturate), and a PT2E ResNet-50 ran at frozen TorchScript's
speed, 2.2x slower than its fp32 model with the plugin (Zen 3 EPYC). A PT2E model is
defined by its float math, and `dequantize(quantize(x))` is

    (clamp(round(x * (1 / scale)) + zero_point, quant_min, quant_max) - zero_point) * scale

in float32 for finite x (the integers it rounds to are exact in float32). The op makes
the same ATen calls as the pair (csrc/decomposed_quant.cpp), NaN's cast to the integer
dtype included, and oneDNN computes it as that chain of elementwise ops, which it fuses
into the convolution before it as post-ops; the convolution then reads its float
weight (freezing folded it; quantized_weights restores int8 weights only for
dequantized inputs). An fp32 partition computing the reference's values.

Left as they are: a u8 activation quantized to at most 128, whose products cannot
saturate (7-bit: PT2E's reduce_range), and a quantized value read other than by
dequantize nodes of its own parameters (a graph output, a view, another scheme).
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import SCALAR_TYPE_CODE
from .graph_utils import all_nodes, constant_number, insert_node

NAME = log.module_name(__file__)

QUANTIZE = "quantized_decomposed::quantize_per_tensor"
DEQUANTIZE = "quantized_decomposed::dequantize_per_tensor"
FAKE_QUANTIZE = "graphfuse::fake_quantize_per_tensor"
# Pair sums of u8 values up to this times s8 data stay within int16 (2 x 128 x -128).
UNSATURATED_U8_MAX = 128


def _parameters(node: torch._C.Node) -> tuple | None:
    """(scale, zero point, quant_min, quant_max, dtype code) of a per-tensor quantize or
    dequantize, where all are constants."""
    values = tuple(constant_number(node.inputsAt(i)) for i in range(1, 6))
    return None if any(v is None for v in values) else values


def _float_result(dequantize: torch._C.Node) -> bool:
    if dequantize.inputsSize() < 7:
        return True
    out = dequantize.inputsAt(6)
    return out.node().mustBeNone() or constant_number(out) == SCALAR_TYPE_CODE[torch.float32]


def exact_in_int8(quantize: torch._C.Node) -> bool:
    """Whether oneDNN's int8 products (with s8 data) of what a quantize_per_tensor makes
    cannot saturate without VNNI: u8 of constant range within [0, UNSATURATED_U8_MAX],
    which the quantize clamps to."""
    params = _parameters(quantize) if quantize.kind() == QUANTIZE else None
    if params is None:
        return False
    _, _, low, high, dtype = params
    return dtype == SCALAR_TYPE_CODE[torch.uint8] and low >= 0 and high <= UNSATURATED_U8_MAX


def _rewrite(graph: torch._C.Graph, quantize: torch._C.Node) -> bool:
    params = _parameters(quantize)
    t = quantize.inputsAt(0).type()
    if (params is None or exact_in_int8(quantize) or not isinstance(t, torch._C.TensorType)
            or t.dtype() != torch.float32):
        return False
    readers = [u.user for u in quantize.output().uses()]
    if not readers or any(r.kind() != DEQUANTIZE or r.inputsAt(0).unique()
                          != quantize.output().unique() or _parameters(r) != params
                          or not _float_result(r) for r in readers):
        return False
    fake = insert_node(graph, quantize, FAKE_QUANTIZE,
                       [quantize.inputsAt(i) for i in range(6)], t)
    for reader in readers:
        reader.output().replaceAllUsesWith(fake.output())
        reader.destroy()
    quantize.destroy()
    return True


def run(graph: torch._C.Graph, int8_saturates: bool) -> None:
    """`int8_saturates`: the CPU backend's int8 products saturate on this CPU."""
    if not int8_saturates:
        return
    quantizes = [n for n in all_nodes(graph.block()) if n.kind() == QUANTIZE]
    rewritten = sum(_rewrite(graph, n) for n in quantizes)
    log.update(NAME, f"{rewritten} quantize-dequantize pairs computed in float32 "
                     "(int8 products saturate on this CPU)")
