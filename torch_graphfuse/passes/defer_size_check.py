"""Defer size checks: `aten::size` reads the value its result is known from.

`x.size(0)` taken on the output of an elementwise op keeps that output alive
outside any fusion group, forcing it out of the partition. An elementwise
op's output has its input's sizes, so the size is read from the input instead,
through any chain of such ops.
"""

from __future__ import annotations

import torch

from ..aten_ops import BINARY_ARITHMETIC, UNARY_ELEMENTWISE
from .graph_utils import all_nodes, constant_number

# Ops whose output has exactly the sizes of their first input, whatever they are.
SHAPE_PRESERVING = UNARY_ELEMENTWISE | {
    "aten::softmax", "aten::log_softmax", "aten::layer_norm", "aten::to",
}


def size_source(value: torch._C.Value) -> torch._C.Value:
    """The value earliest in a chain of shape-preserving ops whose sizes are `value`'s."""
    while True:
        node = value.node()
        kind = node.kind()
        # A number or 0-dim operand cannot change the sizes of an operand of
        # rank >= 1 (a [1, 1] tensor could raise its rank).
        if kind in SHAPE_PRESERVING or (
                kind in BINARY_ARITHMETIC and constant_number(node.inputsAt(1)) is not None):
            source = node.inputsAt(0)
            t = source.type()
            if isinstance(t, torch._C.TensorType) and t.dim() is not None and t.dim() >= 1:
                value = source
                continue
        return value


def run(graph: torch._C.Graph) -> None:
    for node in all_nodes(graph.block()):
        if node.kind() == "aten::size":
            source = size_source(node.inputsAt(0))
            if source is not node.inputsAt(0):
                node.replaceInput(0, source)
