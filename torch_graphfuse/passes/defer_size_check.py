"""Defer size checks: `aten::size` reads the value its result is known from.

`x.size(0)` taken on the output of an elementwise op keeps that output alive
outside any fusion group, forcing it out of the partition. An elementwise
op's output has its input's sizes, so the size is read from the input instead,
through any chain of such ops.

Views move a size to another dimension, or fix it: `x.transpose(1, 2).size(1)` is
`x.size(2)`, `x.view(b, t, 12, 64).size(0)` is `b`, and the dim a view infers is the
input's element count over the others: `y.view(y.size(0), y.size(1), 12, -1).size(3)` is
`y.size(2) // 12`, taken where that is a constant (exact: the view raises where it does not
divide). A linear keeps its input's sizes but the last, its weight's first. A piece of
`x.unbind(u)` has x's sizes without dim u. A sum (or difference, product, quotient) with a
constant tensor has the constant's size where that is not 1 (the broadcast raises unless the
other's is 1 or the same) and the other operand's elsewhere. A product of two tensors of one
rank, 3 or more, has the first's rows and the second's columns, and a batch dim where both operands'
sizes are read from the same value (q and k, pieces of one unbind); operands read apart may
broadcast one against the other, so that read stays. A convolution's channels are its
constant weight's first dim; a padding keeps the dims it pads by constant zeros (or not at
all), and a roll all of them.

Hugging Face merges the heads after attention with `attn.transpose(1, 2).contiguous()` and
reshapes it with that copy's sizes, so the copy is read for its sizes and could not join the
projection's group as a view of its input; read through the views, the sizes come from the
attention's output. DeBERTa splits the heads off a projection with `-1` and reads the split
view's sizes after copying it: read through the view and the linear, those sizes are the
input's and a constant, and the projection, its views and the copy become one partition.
"""

from __future__ import annotations

import torch

from ..aten_ops import BINARY_ARITHMETIC, RESHAPES, UNARY_ELEMENTWISE
from .graph_utils import (
    all_nodes,
    constant_number,
    int_constant,
    ranks_that_may_vary,
    shape_items,
)

# Ops whose output has exactly the sizes of their first input, whatever they are.
SHAPE_PRESERVING = UNARY_ELEMENTWISE | {
    "aten::softmax", "aten::log_softmax", "aten::layer_norm", "aten::to", "aten::contiguous",
    "aten::roll",
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


def _known_size(item: torch._C.Value) -> bool:
    """A shape item that is a size: a size read is never negative, and a constant is one
    where it is not the -1 that view infers."""
    return item.node().kind() == "aten::size" or (
        (n := _constant_ints(item)) is not None and n[0] >= 0)


def _read_of(value: torch._C.Value) -> tuple[int, int] | None:
    """(the read tensor's id, the dim) of a size read with a constant dim."""
    node = value.node()
    dim = _constant_ints(node.inputsAt(1)) if node.kind() == "aten::size" else None
    return None if dim is None else (node.inputsAt(0).unique(), dim[0])


def _inferred(graph: torch._C.Graph, view: torch._C.Node, items: list[torch._C.Value],
              d: int, varying: set[int]) -> torch._C.Value | None:
    """The size view infers for item d (-1), where it is a constant or one of the input's
    sizes: the input's element count over the product of the other items, the sizes read
    on both sides cancelling (a view splitting a last dim of constant size into heads
    infers a constant). The count reads the input's sizes at its profiled rank, so not
    where that may vary. New nodes go at the graph's insert point."""
    rank = _rank(view.inputsAt(0))
    others = items[:d] + items[d + 1:]
    if (rank is None or view.inputsAt(0).unique() in varying
            or _constant_ints(items[d]) != [-1] or not all(map(_known_size, others))):
        return None
    count: list[torch._C.Value] = []
    for i in range(rank):
        read = graph.insertNode(graph.create("aten::size", [view.inputsAt(0),
                                                            graph.insertConstant(i)], 1))
        read.output().setType(torch._C.IntType.get())
        moved = _moved(graph, read, varying)
        count.append(read.output() if moved is None else moved)
    count_constant, count_reads = _split(count)
    known_constant, known_reads = _split(others)
    for factor in list(known_reads):
        match = next((c for c in count_reads if _read_of(c) is not None
                      and _read_of(c) == _read_of(factor)), None)
        if match is not None:
            count_reads.remove(match)
            known_reads.remove(factor)
    # Only a constant or a single read is taken: more arithmetic would cost more per call
    # than the read it replaces (and where the count does not divide, the view raises).
    if known_reads or known_constant == 0 or count_constant % known_constant:
        return None
    if not count_reads:
        return graph.insertConstant(count_constant // known_constant)
    return count_reads[0] if len(count_reads) == 1 and count_constant == known_constant else None


def _split(factors: list[torch._C.Value]) -> tuple[int, list[torch._C.Value]]:
    """The product of the constant factors, and the others."""
    constant, others = 1, []
    for factor in factors:
        n = _constant_ints(factor)
        if n is None:
            others.append(factor)
        else:
            constant *= n[0]
    return constant, others


def _through_view(graph: torch._C.Graph, value: torch._C.Value, dim: int, varying: set[int]
                  ) -> tuple[torch._C.Value, int] | torch._C.Value | None:
    """Where size `dim` of a view's (or a linear's, an unbind piece's, a product's, a sum
    with a constant's) result is read instead: (its input, that input's dim), the int value
    the view's shape gives it, or None. A linear or a transpose maps dims by its input's
    rank, so not where that may vary (`varying`)."""
    node = value.node()
    kind = node.kind()
    if kind in ("aten::linear", "aten::transpose") and node.inputsAt(0).unique() in varying:
        return None
    if kind in RESHAPES:
        shape = node.inputsAt(1)
        if shape.node().kind() == "prim::ListConstruct":
            items = list(shape.node().inputs())
        elif (listed := _constant_ints(shape)) is not None and len(listed) == _rank(value):
            items = [graph.insertConstant(n) for n in listed]
        else:
            return None
        d = _normalized(dim, len(items))
        if d is None:
            return None
        return items[d] if _known_size(items[d]) else _inferred(graph, node, items, d, varying)
    if kind == "prim::ListUnpack":
        return _through_unbind(graph, node, dim, varying)
    if kind in _CONVOLUTIONS:
        return _through_convolution(graph, node, value, dim, varying)
    if kind in ("aten::pad", "aten::constant_pad_nd"):
        return _through_pad(node, dim, varying)
    if kind == "aten::matmul":
        return _through_matmul(graph, node, dim, varying)
    if kind in BINARY_ARITHMETIC:
        return _through_constant_operand(graph, node, dim, varying)
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
    if kind == "aten::linear":
        if d < rank - 1:
            return node.inputsAt(0), d
        weight = node.inputsAt(1)
        if weight.node().kind() != "prim::Constant" or not isinstance(
                weight.toIValue(), torch.Tensor) or weight.toIValue().dim() != 2:
            return None
        return graph.insertConstant(weight.toIValue().size(0))
    if kind == "aten::transpose":
        pair = [_constant_ints(node.inputsAt(i)) for i in (1, 2)]
        if None in pair:
            return None
        a, b = (_normalized(p[0], rank) for p in pair)
        if a is None or b is None:
            return None
        return node.inputsAt(0), b if d == a else a if d == b else d
    return None


Resolved = tuple[torch._C.Value, int] | torch._C.Value


def _resolve(graph: torch._C.Graph, tensor: torch._C.Value, d: int, varying: set[int]
             ) -> Resolved:
    """Where size `d` of `tensor` is known from: (the tensor earliest in the chain, its
    dim), or the int value giving it. New nodes go at the graph's insert point."""
    while True:
        tensor = size_source(tensor)
        found = _through_view(graph, tensor, d, varying)
        if found is None:
            return tensor, d
        if isinstance(found, torch._C.Value):
            return found
        tensor, d = found


def _same(a: torch._C.Value, b: torch._C.Value) -> bool:
    n = _constant_ints(a)
    return a.unique() == b.unique() or (n is not None and n == _constant_ints(b))


def _known(graph: torch._C.Graph, tensor: torch._C.Value, d: int, varying: set[int]
           ) -> torch._C.Value | None:
    """The int value size `d` of `tensor` is known from, if any. The ops below move a read
    only to such a value: a read of an unbind's input or of a product's operand could
    pin a tensor inside a partition (the scores in attention) where the read it replaces
    pinned the partition's own output."""
    found = _resolve(graph, tensor, d, varying)
    return found if isinstance(found, torch._C.Value) else None


def _through_unbind(graph: torch._C.Graph, node: torch._C.Node, dim: int, varying: set[int]
                    ) -> torch._C.Value | None:
    """A piece of `x.unbind(u)` has x's sizes without dim u."""
    unbind = node.inputsAt(0).node()
    if unbind.kind() != "aten::unbind":
        return None
    u, x = _constant_ints(unbind.inputsAt(1)), unbind.inputsAt(0)
    rank = _rank(x)
    if u is None or rank is None or x.unique() in varying:
        return None
    u_, d = _normalized(u[0], rank), _normalized(dim, rank - 1)
    if u_ is None or d is None:
        return None
    return _known(graph, x, d if d < u_ else d + 1, varying)


# Convolutions, and the index of their `transposed` flag where they have one.
_CONVOLUTIONS = {"aten::conv1d": None, "aten::conv2d": None, "aten::conv3d": None,
                 "aten::_convolution": 6, "aten::convolution": 6}


def _through_convolution(graph: torch._C.Graph, node: torch._C.Node, value: torch._C.Value,
                         dim: int, varying: set[int]) -> torch._C.Value | None:
    """A convolution's channels are its constant weight's first dim (Swin reads its patch
    embedding's channels for every window view)."""
    flag = _CONVOLUTIONS[node.kind()]
    weight = node.inputsAt(1)
    rank = _rank(value)
    # An unbatched input (one rank less) puts the channels first.
    if (rank is None or rank < 3 or _normalized(dim, rank) != 1
            or node.inputsAt(0).unique() in varying
            or weight.node().kind() != "prim::Constant"
            or not isinstance(weight.toIValue(), torch.Tensor)
            or (flag is not None and (node.inputsAt(flag).node().kind() != "prim::Constant"
                                      or node.inputsAt(flag).toIValue() is not False))):
        return None
    return graph.insertConstant(weight.toIValue().size(0))


def _through_pad(node: torch._C.Node, dim: int, varying: set[int]
                 ) -> tuple[torch._C.Value, int] | None:
    """A padding keeps the size of a dim it pads by constant zeros, or does not pad."""
    x, amounts = node.inputsAt(0), shape_items(node)
    rank = _rank(x)
    d = None if rank is None or x.unique() in varying else _normalized(dim, rank)
    if d is None or amounts is None:
        return None
    pair = 2 * (rank - 1 - d)
    if pair + 1 < len(amounts) and (int_constant(amounts[pair]) != 0
                                    or int_constant(amounts[pair + 1]) != 0):
        return None
    return x, d


def _through_matmul(graph: torch._C.Graph, node: torch._C.Node, dim: int, varying: set[int]
                    ) -> torch._C.Value | None:
    """A product of two tensors of one rank (3 or more): its rows are the first's, its
    columns the second's, and a batch dim is the value both operands' sizes there are read
    from (broadcast of a size with itself)."""
    a, b = node.inputsAt(0), node.inputsAt(1)
    rank = _rank(a)
    if (rank is None or rank < 3 or _rank(b) != rank
            or a.unique() in varying or b.unique() in varying):
        return None
    d = _normalized(dim, rank)
    if d is None:
        return None
    if d >= rank - 2:
        return _known(graph, a, d, varying) if d == rank - 2 else _known(graph, b, d, varying)
    from_a, from_b = _known(graph, a, d, varying), _known(graph, b, d, varying)
    return from_a if from_a is not None and from_b is not None and _same(from_a, from_b) \
        else None


def _through_constant_operand(graph: torch._C.Graph, node: torch._C.Node, dim: int,
                              varying: set[int]) -> torch._C.Value | None:
    """`x + c`, c a constant tensor of no higher rank: where c's size is 1 (or it has no such
    dim) the size is x's, elsewhere c's (the broadcast raises unless x's is 1 or the same)."""
    x, operand = node.inputsAt(0), node.inputsAt(1)
    c = operand.toIValue() if operand.node().kind() == "prim::Constant" else None
    rank = _rank(x)
    if (not isinstance(c, torch.Tensor) or rank is None or x.unique() in varying
            or c.dim() > rank):
        return None
    d = _normalized(dim, rank)
    if d is None:
        return None
    j = d - (rank - c.dim())
    if j < 0 or c.shape[j] == 1:
        return _known(graph, x, d, varying)
    return graph.insertConstant(c.shape[j])


def _moved(graph: torch._C.Graph, node: torch._C.Node, varying: set[int]
           ) -> torch._C.Value | None:
    """The value a `size(x, dim)` node's result is read from instead, if another; new nodes
    go before `node`."""
    dim = _constant_ints(node.inputsAt(1))
    if dim is None:
        return None
    with graph.insert_point_guard(node):
        found = _resolve(graph, node.inputsAt(0), dim[0], varying)
    if isinstance(found, torch._C.Value):
        return found
    tensor, d = found
    if tensor.unique() == node.inputsAt(0).unique() and d == dim[0]:
        return None
    with graph.insert_point_guard(node):
        read = graph.insertNode(graph.create("aten::size", [tensor, graph.insertConstant(d)], 1))
    read.output().setType(node.output().type())
    return read.output()


def read_size(graph: torch._C.Graph, tensor: torch._C.Value, dim: int, varying: set[int]
              ) -> torch._C.Value:
    """`tensor.size(dim)`, read where this pass reads it, at the graph's insert point (for
    a pass that adds size reads after this one ran)."""
    read = graph.insertNode(graph.create("aten::size", [tensor, graph.insertConstant(dim)], 1))
    read.output().setType(torch._C.IntType.get())
    moved = _moved(graph, read, varying)
    if moved is None:
        return read.output()
    read.output().replaceAllUsesWith(moved)
    read.destroy()
    return moved


def run(graph: torch._C.Graph) -> None:
    varying = ranks_that_may_vary(graph)
    for node in all_nodes(graph.block()):
        if node.kind() == "aten::size" and node.inputsSize() == 2:
            value = _moved(graph, node, varying)
            if value is not None:
                node.output().replaceAllUsesWith(value)
    # The replaced reads, and those an inferred size made and did not use.
    torch._C._jit_pass_dce(graph)
