"""Defer size checks: `aten::size` reads the value its result is known from.

`x.size(0)` taken on the output of an elementwise op keeps that output alive
outside any fusion group, forcing it out of the partition. An elementwise
op's output has its input's sizes, so the size is read from the input instead,
through any chain of such ops.
"""

from __future__ import annotations

import torch

from ..op_table import UNARY
from .graph_utils import all_nodes

# Ops whose output has exactly the sizes of their first input, whatever they are.
SHAPE_PRESERVING = frozenset(UNARY) | {
    "aten::gelu", "aten::silu", "aten::leaky_relu", "aten::elu", "aten::clamp",
    "aten::clamp_min", "aten::clamp_max", "aten::hardtanh", "aten::softplus",
    "aten::softmax", "aten::log_softmax", "aten::layer_norm", "aten::to",
}
_BINARY = ("aten::add", "aten::sub", "aten::mul", "aten::div")


def _scalar(value: torch._C.Value) -> bool:
    """A number, or a constant tensor of one element: it cannot change the
    other operand's sizes by broadcasting (for inputs of rank >= 1)."""
    if value.node().kind() != "prim::Constant":
        return False
    v = value.toIValue()
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1)


def _source(value: torch._C.Value) -> torch._C.Value:
    while True:
        node = value.node()
        kind = node.kind()
        if kind in SHAPE_PRESERVING or (kind in _BINARY and _scalar(node.inputsAt(1))):
            source = node.inputsAt(0)
            t = source.type()
            if isinstance(t, torch._C.TensorType) and t.dim() is not None and t.dim() >= 1:
                value = source
                continue
        return value


def run(graph: torch._C.Graph) -> None:
    for node in all_nodes(graph.block()):
        if node.kind() == "aten::size":
            source = _source(node.inputsAt(0))
            if source is not node.inputsAt(0):
                node.replaceInput(0, source)
