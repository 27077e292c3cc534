"""Reference quantization: torch.ao's FX reference models in PT2E's form.

`convert_to_reference_fx` models quantize with `aten::quantize_per_tensor`
(quint8/qint8 tensors) and read back with `aten::dequantize`; their weights are
per-channel qint8 constants behind `aten::dequantize` (freezing keeps those:
constant propagation skips dequantize). This pass rewrites them into the
`quantized_decomposed` ops on plain uint8/int8 tensors that PT2E models use,
which the int8 mapping takes:

- `aten::quantize_per_tensor(x, scale, zp, quint8|qint8)` whose every reader is an
  `aten::dequantize`, with constant scale and zero point, becomes
  `quantize_per_tensor(x, scale, zp, qmin, qmax, uint8|int8)` and its readers
  `dequantize_per_tensor(...)`: both compute ATen's values (round half to even of
  x * (1 / scale), plus zp, saturated; (q - zp) * scale);
- `aten::dequantize` of a quantized constant becomes `dequantize_per_channel` (or
  `_per_tensor`) of its integer values, scales and zero points, kept only where
  it gives back ATen's float tensor bit for bit.
A quantized value read any other way keeps its form (and stays with ATen).
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import DTYPE_OF_CODE, SCALAR_TYPE_CODE
from .graph_utils import all_nodes, constant_number, insert_node

NAME = log.module_name(__file__)

# A quantized dtype -> the plain dtype of the same bits.
_QUANTIZED_TO_PLAIN = {torch.quint8: torch.uint8, torch.qint8: torch.int8}


def _insert(graph: torch._C.Graph, before: torch._C.Node, kind: str, args: list,
            like: torch._C.Value, dtype: torch.dtype) -> torch._C.Value:
    """A `kind` node before `before`, typed as `like` in `dtype`."""
    return insert_node(graph, before, kind, args, like.type().with_dtype(dtype)).output()


def _activation(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    scale, zero_point = constant_number(node.inputsAt(1)), constant_number(node.inputsAt(2))
    code = node.inputsAt(3).toIValue() if node.inputsAt(3).node().kind() == "prim::Constant" \
        else None
    readers = [use.user for use in node.output().uses()]
    quantized = DTYPE_OF_CODE.get(code) if isinstance(code, int) else None
    if (scale is None or zero_point is None or quantized not in _QUANTIZED_TO_PLAIN
            or not readers or any(r.kind() != "aten::dequantize" for r in readers)):
        return False
    plain_dtype = _QUANTIZED_TO_PLAIN[quantized]
    plain_code = SCALAR_TYPE_CODE[plain_dtype]
    qmin, qmax = torch.iinfo(plain_dtype).min, torch.iinfo(plain_dtype).max
    q = _insert(graph, node, "quantized_decomposed::quantize_per_tensor",
                [node.inputsAt(0), float(scale), int(zero_point), qmin, qmax, plain_code],
                node.inputsAt(0), plain_dtype)
    for reader in readers:
        d = _insert(graph, reader, "quantized_decomposed::dequantize_per_tensor",
                    [q, float(scale), int(zero_point), qmin, qmax, plain_code, None],
                    reader.output(), torch.float32)
        reader.output().replaceAllUsesWith(d)
        reader.destroy()
    node.destroy()
    return True


def _plain_form(w: torch.Tensor) -> tuple[str, list] | None:
    """The quantized_decomposed dequantization of a quantized constant, as
    (kind, arguments after the integer tensor), if it gives ATen's values exactly."""
    if w.dtype not in _QUANTIZED_TO_PLAIN:
        return None
    plain_dtype = _QUANTIZED_TO_PLAIN[w.dtype]
    code = SCALAR_TYPE_CODE[plain_dtype]
    qmin, qmax = torch.iinfo(plain_dtype).min, torch.iinfo(plain_dtype).max
    values = w.int_repr()
    if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        scales = w.q_per_channel_scales().to(torch.float32)
        zps = w.q_per_channel_zero_points().to(torch.int64)
        axis = w.q_per_channel_axis()
        kind = "quantized_decomposed::dequantize_per_channel"
        args = [scales, zps, axis, qmin, qmax, code, None]
        mine = torch.ops.quantized_decomposed.dequantize_per_channel(
            values, scales, zps, axis, qmin, qmax, plain_dtype)
    elif w.qscheme() in (torch.per_tensor_affine, torch.per_tensor_symmetric):
        kind = "quantized_decomposed::dequantize_per_tensor"
        args = [float(w.q_scale()), int(w.q_zero_point()), qmin, qmax, code, None]
        mine = torch.ops.quantized_decomposed.dequantize_per_tensor(
            values, float(w.q_scale()), int(w.q_zero_point()), qmin, qmax, plain_dtype)
    else:
        return None
    return (kind, [values, *args]) if torch.equal(mine, w.dequantize()) else None


def _weight(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    source = node.inputsAt(0)
    if source.node().kind() != "prim::Constant":
        return False
    w = source.toIValue()
    form = _plain_form(w) if isinstance(w, torch.Tensor) and w.is_quantized else None
    if form is None:
        return False
    kind, args = form
    out = _insert(graph, node, kind, args, node.output(), torch.float32)
    node.output().replaceAllUsesWith(out)
    node.destroy()
    return True


def run(graph: torch._C.Graph) -> None:
    nodes = all_nodes(graph.block())
    if not any(n.kind() == "aten::dequantize" for n in nodes):
        return
    import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)

    # Listed first: a rewrite destroys the dequantize nodes that read its quantize.
    quantizes = [n for n in nodes if n.kind() == "aten::quantize_per_tensor"
                 and n.inputsSize() == 4]
    activations = sum(_activation(graph, n) for n in quantizes)
    dequantizes = [n for n in all_nodes(graph.block())
                   if n.kind() == "aten::dequantize" and n.inputsSize() == 1]
    weights = sum(_weight(graph, n) for n in dequantizes)
    log.update(NAME, f"{activations} quantized activations and {weights} weights "
                     "in quantized_decomposed form")
