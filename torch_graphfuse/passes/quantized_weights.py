"""Quantized weights: put back the weight dequantization that freezing folded.

A PT2E int8 model (torchao's `convert_pt2e`) reads each conv/linear weight as
`dequantize_per_channel(w_int8, scales, zero_points, 0, -128, 127, int8)`;
`torch.jit.freeze` folds that into a float constant, and the fused op would run
in fp32. For a conv or linear whose input is a dequantized activation (an int8
region), this pass looks for int8 values and per-output-channel scales that
give back the float weight exactly, checked bit for bit by ATen's own
`dequantize_per_channel`, and puts the dequantization back in the graph. The
graph then computes the same numbers as before, and oneDNN sees an int8 weight
with per-channel scales. A weight with no exact int8 form stays as it is.
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import SCALAR_TYPE_CODE
from .graph_utils import all_nodes, insert_node

NAME = log.module_name(__file__)

DEQUANTIZE_PER_TENSOR = "quantized_decomposed::dequantize_per_tensor"
DEQUANTIZE_PER_CHANNEL = "quantized_decomposed::dequantize_per_channel"
_WEIGHTED = ("aten::_convolution", "aten::convolution", "aten::conv1d", "aten::conv2d",
             "aten::conv3d", "aten::linear")


def _dequantize(q: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    zero_points = torch.zeros(q.shape[0], dtype=torch.int64)
    return torch.ops.quantized_decomposed.dequantize_per_channel(
        q, scales, zero_points, 0, -128, 127, torch.int8)


def int8_form(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(int8 values, float32 scale per output channel) whose dequantization
    equals `weight` bit for bit, or None. A symmetric per-channel observer puts
    each channel's largest magnitude at 127 or -128 steps; the scale read back
    from it may be a few ulps off the original, so neighbours are tried too. A
    channel of small weights has the observer's floor for a scale (torchao's x86
    config: 2**-12), a power of two, which the last candidates cover."""
    if weight.dtype != torch.float32 or weight.dim() < 2 or not torch.isfinite(weight).all():
        return None
    flat = weight.reshape(weight.shape[0], -1)
    amax = flat.abs().amax(1)
    chosen_q = torch.zeros_like(flat, dtype=torch.int8)
    chosen_scale = torch.ones_like(amax)
    found = amax == 0  # an all-zero channel: q = 0 with any scale
    candidates = []
    for steps in (127.0, 128.0):
        base = torch.where(amax > 0, amax / steps, torch.ones_like(amax))
        candidates.append(base)
        up, down = base, base
        for _ in range(2):
            up = torch.nextafter(up, torch.full_like(up, float("inf")))
            down = torch.nextafter(down, torch.zeros_like(down))
            candidates += [up, down]
    candidates += [torch.full_like(amax, 2.0 ** -k) for k in range(4, 25)]
    for scale in candidates:
        rows = (~found).nonzero().squeeze(1)  # the channels still without a form
        if rows.numel() == 0:
            break
        part, part_scale = flat[rows], scale[rows]
        q = torch.round(part / part_scale[:, None]).clamp(-128, 127).to(torch.int8)
        exact = (_dequantize(q, part_scale) == part).all(1)
        chosen_q[rows[exact]] = q[exact]
        chosen_scale[rows[exact]] = part_scale[exact]
        found[rows[exact]] = True
    if bool(found.all()):
        return chosen_q.reshape(weight.shape), chosen_scale
    return None


def _reads_int8_region(node: torch._C.Node) -> bool:
    return node.inputsAt(0).node().kind() == DEQUANTIZE_PER_TENSOR


def _restore(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    weight = node.inputsAt(1)
    if weight.node().kind() != "prim::Constant":
        return False
    value = weight.toIValue()
    if not isinstance(value, torch.Tensor):
        return False
    form = int8_form(value)
    if form is None:
        log.debug(NAME, f"{node.kind()}: the weight has no exact int8 form, stays float")
        return False
    q, scales = form
    zero_points = torch.zeros(q.shape[0], dtype=torch.int64)
    dequantize = insert_node(graph, node, DEQUANTIZE_PER_CHANNEL,
                             [q, scales, zero_points, 0, -128, 127,
                              SCALAR_TYPE_CODE[torch.int8], None],
                             weight.type())
    node.replaceInput(1, dequantize.output())
    return True


def run(graph: torch._C.Graph) -> None:
    nodes = all_nodes(graph.block())
    if not any(n.kind() == DEQUANTIZE_PER_TENSOR for n in nodes):
        return
    restored = sum(_restore(graph, n) for n in nodes
                   if n.kind() in _WEIGHTED and _reads_int8_region(n))
    log.update(NAME, f"{restored} weights read as int8 again")
