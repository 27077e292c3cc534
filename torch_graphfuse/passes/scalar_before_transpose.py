"""Scalar before transpose: `x.transpose(a, b) / s`, s a number or 0-dim tensor, becomes
`(x / s).transpose(a, b)` (and so for permute, and add, sub and mul).

DeBERTa scales its keys and position scores as they are transposed for the product:
`bmm(q, k.transpose(-1, -2) / scale)`. The division reads a transposed view, and oneDNN
computes such a chain in row-major order and transposes back, slower than ATen; so it
stayed with ATen, with the scale's arithmetic. Scaling first reads and writes x in its own
order, and the transpose is a view again, which the product reads as strides.

Eager gives the same result both ways: each element is the same op on the same two
numbers, the dtype is promoted alike (a 0-dim operand never broadcasts), and the result
of an elementwise op takes its input's memory order, so scaling then transposing gives
the strides eager gives. The result is a view of a tensor nothing else holds, where
eager's is that tensor: only `_base` tells them apart. The scaled x is computed where the
division was, so an in-place write of x before or after it is seen as before.
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import BINARY_ARITHMETIC
from .graph_utils import all_nodes, ranks_that_may_vary

NAME = log.module_name(__file__)

_TRANSPOSES = frozenset({"aten::transpose", "aten::permute"})


def _zero_dim(value: torch._C.Value, varying: set[int]) -> bool:
    """A number, or a tensor 0-dim at every call (one after a squeeze may be 1-dim at
    another, and then broadcasts over x's last dim, not the transpose's)."""
    t = value.type()
    return isinstance(t, (torch._C.IntType, torch._C.FloatType)) or (
        isinstance(t, torch._C.TensorType) and t.dim() == 0 and value.unique() not in varying)


def _dense(t: torch._C.TensorType) -> bool:
    sizes, strides = t.sizes(), t.strides()
    if sizes is None or strides is None or None in sizes or None in strides:
        return False
    expected = 1
    for size, stride in sorted(zip(sizes, strides, strict=True), key=lambda p: p[1]):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _rewrite(graph: torch._C.Graph, node: torch._C.Node, varying: set[int]) -> bool:
    view = node.inputsAt(0).node()
    if view.kind() not in _TRANSPOSES or not _zero_dim(node.inputsAt(1), varying):
        return False
    if node.kind() == "aten::div" and node.inputsSize() > 2 \
            and not node.inputsAt(2).node().mustBeNone():
        return False
    x, out = view.inputsAt(0).type(), node.output().type()
    if not (isinstance(x, torch._C.TensorType) and isinstance(out, torch._C.TensorType)
            and out.dtype() is not None and _dense(x)):
        return False
    with graph.insert_point_guard(node):
        scaled = graph.insertNode(graph.create(
            node.kind(), [view.inputsAt(0), *list(node.inputs())[1:]], 1))
        # An elementwise result of a dense x: x's sizes and strides.
        scaled.output().setType(x.with_dtype(out.dtype()))
        moved = graph.insertNode(graph.create(
            view.kind(), [scaled.output(), *list(view.inputs())[1:]], 1))
        moved.output().setType(out)
    node.output().replaceAllUsesWith(moved.output())
    node.destroy()
    return True


def run(graph: torch._C.Graph) -> None:
    varying = ranks_that_may_vary(graph)
    moved = sum(_rewrite(graph, node, varying) for node in all_nodes(graph.block())
                if node.kind() in BINARY_ARITHMETIC)
    if moved:
        torch._C._jit_pass_dce(graph)
    log.update(NAME, lambda: f"{moved} scalar ops moved before their transposes")
