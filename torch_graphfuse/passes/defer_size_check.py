"""Defer size checks: `aten::size` reads the value its result is known from.

`x.size(0)` taken on the output of an elementwise op keeps that output alive
outside any fusion group, forcing it out of the partition. An elementwise
op's output has its input's sizes, so the size is read from the input instead,
through any chain of such ops.

Views move a size to another dimension, or fix it: `x.transpose(1, 2).size(1)` is
`x.size(2)`, and `x.view(b, t, 12, 64).size(0)` is `b`. Hugging Face merges the heads
after attention with `attn.transpose(1, 2).contiguous()` and reshapes it with that copy's
sizes, so the copy is read for its sizes and could not join the projection's group as a
view of its input; read through the views, the sizes come from the attention's output.
"""

from __future__ import annotations

import torch

from ..aten_ops import BINARY_ARITHMETIC, UNARY_ELEMENTWISE
from .graph_utils import all_nodes, constant_number

# Ops whose output has exactly the sizes of their first input, whatever they are.
SHAPE_PRESERVING = UNARY_ELEMENTWISE | {
    "aten::softmax", "aten::log_softmax", "aten::layer_norm", "aten::to", "aten::contiguous",
}
_RESHAPES = frozenset({"aten::view", "aten::reshape"})


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


def _constant_ints(value: torch._C.Value) -> list[int] | None:
    if value.node().kind() != "prim::Constant":
        return None
    v = value.toIValue()
    if isinstance(v, int) and not isinstance(v, bool):
        return [v]
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return list(v)
    return None


def _rank(value: torch._C.Value) -> int | None:
    t = value.type()
    return t.dim() if isinstance(t, torch._C.TensorType) else None


def _normalized(dim: int, rank: int) -> int | None:
    dim = dim + rank if dim < 0 else dim
    return dim if 0 <= dim < rank else None


def _through_view(value: torch._C.Value, dim: int
                  ) -> tuple[torch._C.Value, int] | torch._C.Value | None:
    """Where size `dim` of a view's result is read instead: (its input, that input's dim),
    the int value the view's shape gives it, or None."""
    node = value.node()
    kind = node.kind()
    if kind in _RESHAPES:
        shape = node.inputsAt(1)
        if shape.node().kind() != "prim::ListConstruct":
            return None
        items = list(shape.node().inputs())
        d = _normalized(dim, len(items))
        if d is None:
            return None
        item = items[d]
        # A size read is never negative; a constant is the size only where it is not the
        # -1 that view infers.
        if item.node().kind() == "aten::size" or (
                (n := _constant_ints(item)) is not None and n[0] >= 0):
            return item
        return None
    if kind == "aten::permute":
        order = _constant_ints(node.inputsAt(1))
        d = None if order is None else _normalized(dim, len(order))
        source = None if d is None else _normalized(order[d], len(order))
        return None if source is None else (node.inputsAt(0), source)
    rank = _rank(value)
    if rank is None:  # a transpose keeps its input's rank
        rank = _rank(node.inputsAt(0))
    d = None if rank is None else _normalized(dim, rank)
    if d is None:
        return None
    if kind == "aten::transpose":
        pair = [_constant_ints(node.inputsAt(i)) for i in (1, 2)]
        if None in pair:
            return None
        a, b = (_normalized(p[0], rank) for p in pair)
        if a is None or b is None:
            return None
        return node.inputsAt(0), b if d == a else a if d == b else d
    return None


def _defer(graph: torch._C.Graph, node: torch._C.Node) -> torch._C.Value | None:
    """The value a `size(x, dim)` node's result is read from instead, if another."""
    dim = _constant_ints(node.inputsAt(1))
    if dim is None:
        return None
    tensor, d = node.inputsAt(0), dim[0]
    moved = False
    while True:
        source = size_source(tensor)
        moved |= source is not tensor
        found = _through_view(source, d)
        if found is None:
            tensor = source
            break
        if isinstance(found, torch._C.Value):
            return found
        tensor, d = found
        moved = True
    if not moved:
        return None
    with graph.insert_point_guard(node):
        read = graph.insertNode(graph.create("aten::size", [tensor, graph.insertConstant(d)], 1))
    read.output().setType(node.output().type())
    return read.output()


def run(graph: torch._C.Graph) -> None:
    deferred = False
    for node in all_nodes(graph.block()):
        if node.kind() == "aten::size" and node.inputsSize() == 2:
            value = _defer(graph, node)
            if value is not None:
                node.output().replaceAllUsesWith(value)
                deferred = True
    if deferred:
        torch._C._jit_pass_dce(graph)
