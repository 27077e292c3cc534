"""Linear through leading views: a linear maps each row (the last dim) alone, so views that
only regroup the rows commute with it.

Swin partitions its image into windows with `x.view(b, h / 7, 7, w / 7, 7, c).permute(0, 1,
3, 2, 4, 5).contiguous()`, views the windows as rows for the qkv projection, and reverses that
after the output projection: `proj(a).view(-1, 7, 7, c).view(b, h / 7, w / 7, 7, 7, c)
.permute(0, 1, 3, 2, 4, 5).contiguous()`. Both copies were ATen's, between groups.

- Before a linear whose product only views and permutes read: `linear(contiguous(y)
  .view(s1)...)` becomes `linear(y).reshape(out)`: the linear reads y's rows in y's strides
  (oneDNN's matmul partition reorders them itself).
- After a linear: `linear(x).view(s1)...view(sn)`, read by a permute, becomes
  `linear(x.reshape(s'))`:
  the product then has the view's leading dims, and writes its result in the strides of the
  copy the permute's reader makes (the `contiguous` lowering), in one partition.

Eager's values: every view keeps the last dim (the last item of each shape is the constant
the weight fixes; so is y's last dim, through the views and permutes that make y; x's rows
keep x's last size, which the linear checks as eager's did), so the rows are the same rows in
the same order, and the results are new tensors either way. The views dropped raise where the
reshape kept does (their constant items divide its). Not where anything writes these tensors
in place.
"""

from __future__ import annotations

import math

import torch

from .. import log
from ..aten_ops import CONTIGUOUS_FORMAT, RESHAPES
from . import defer_size_check
from .graph_utils import (
    WrittenMemory,
    all_nodes,
    inferred_size,
    int_constant,
    int_list,
    profiled_sizes,
    ranks_that_may_vary,
    shape_items,
    shape_values,
)

NAME = log.module_name(__file__)

_TRANSPOSES = frozenset({"aten::permute", "aten::transpose"})
_MOVES = RESHAPES | _TRANSPOSES


def _weight_sizes(linear: torch._C.Node) -> tuple[int, int] | None:
    """(out features, in features) of a linear's constant 2-d weight."""
    weight = linear.inputsAt(1)
    t = weight.toIValue() if weight.node().kind() == "prim::Constant" else None
    return (t.size(0), t.size(1)) if isinstance(t, torch.Tensor) and t.dim() == 2 else None


def _item_values(view: torch._C.Node) -> list[int | None]:
    """Each of a view's shape items as its constant int, or None where it is computed."""
    items = shape_items(view)
    return [None] if items is None else [int_constant(i) for i in items]


def _last_item(view: torch._C.Node) -> int | None:
    """The constant last item of a view's shape."""
    values = _item_values(view)
    return values[-1] if values else None


def _last_dim_is(graph: torch._C.Graph, value: torch._C.Value, size: int,
                 varying: set[int]) -> bool:
    """Whether the tensor's last dim is `size` at every call: a view's constant last item
    fixes it, through permutes that keep the last dim last and ops that keep the sizes, or
    defer_size_check reads it as a constant (new nodes at the insert point; dead ones go
    with the pass's DCE)."""
    sizes = profiled_sizes(value)
    if sizes is None or not sizes or sizes[-1] != size or value.unique() in varying:
        return False
    while True:
        value = defer_size_check.size_source(value)
        node = value.node()
        if node.kind() in RESHAPES:
            return _last_item(node) == size
        if not _keeps_last_dim(node, len(sizes)):
            break
        value = node.inputsAt(0)
    read = defer_size_check.read_size(graph, value, len(sizes) - 1, varying)
    return read.node().kind() == "prim::Constant" and read.toIValue() == size


def _keeps_last_dim(node: torch._C.Node, rank: int) -> bool:
    """A permute or transpose that leaves the last dim last."""
    moved = [node.inputsAt(i) for i in ((1,) if node.kind() == "aten::permute" else (1, 2))] \
        if node.kind() in _TRANSPOSES else []
    if not moved or any(v.node().kind() != "prim::Constant" for v in moved):
        return False
    dims = [v.toIValue() for v in moved]
    if node.kind() == "aten::permute":
        return isinstance(dims[0], list) and dims[0][-1] % rank == rank - 1
    return all(isinstance(d, int) and d % rank != rank - 1 for d in dims)


def _typed(node: torch._C.Node, sizes: list[int], like: torch._C.TensorType) -> torch._C.Value:
    """The node's output typed as a new row-major tensor of these sizes, of `like`'s dtype
    and device."""
    node.output().setType(torch._C.TensorType.create_from_tensor(
        torch.empty(sizes, dtype=like.dtype(), device=like.device())))
    return node.output()


def _before(graph: torch._C.Graph, linear: torch._C.Node, varying: set[int],
            written: WrittenMemory) -> bool:
    """`linear(contiguous(y).view(...))` -> `linear(y).reshape(out)`."""
    weight = _weight_sizes(linear)
    out_sizes = profiled_sizes(linear.output())
    if weight is None or out_sizes is None:
        return False
    features, k = weight
    chain: list[torch._C.Node] = []  # from the linear's input back
    value, copies = linear.inputsAt(0), 0
    while value.node().kind() in (*RESHAPES, "aten::contiguous") and len(
            [u for u in value.uses() if not _size_read(u.user)]) == 1:
        node = value.node()
        if node.kind() == "aten::contiguous":
            form = node.inputsAt(1)
            if form.node().kind() != "prim::Constant" or form.toIValue() != CONTIGUOUS_FORMAT:
                break
            copies += 1
        elif _last_item(node) != k:
            break
        chain.append(node)
        value = node.inputsAt(0)
        if copies:  # a view of y could raise on y's strides, where the copy's cannot
            break
    out_type = linear.output().type()
    # Only where the product's readers move data: an op that would fuse into the linear as a
    # post-op cannot across the reshape this adds.
    if (copies != 1 or chain[0].kind() not in RESHAPES or out_type.dtype() is None
            or out_type.device() is None
            or not _raise_alike([n for n in chain[1:] if n.kind() in RESHAPES], chain[0])
            or not all(_sizes_computable(n) for n in chain)
            or not all(u.user.kind() in _MOVES for u in linear.output().uses())
            or written.may_write([value, *(n.output() for n in chain)])):
        return False
    y = value
    with graph.insert_point_guard(linear):
        if not _last_dim_is(graph, y, k, varying):
            return False
        items = shape_values(chain[0], graph)
        y_sizes = profiled_sizes(y)
        if items is None or y_sizes is None:
            return False
        product = _typed(graph.insertNode(graph.create(
            "aten::linear", [y, *list(linear.inputs())[1:]], 1)), y_sizes[:-1] + [features],
            out_type)
        shape = int_list(graph, [*items[:-1], graph.insertConstant(features)])
        result = _typed(graph.insertNode(graph.create("aten::reshape", [product, shape], 1)),
                        out_sizes, out_type)
    linear.output().replaceAllUsesWith(result)
    linear.destroy()
    for node in chain:
        _read_sizes_from(graph, node, y, varying)
    return True


def _raise_alike(views: list[torch._C.Node], last: torch._C.Node) -> bool:
    """Whether the views dropped beside the one kept (`last`, whose shape the reshape takes)
    raise only where it does. Each has constant items. One that infers a size (-1) raises
    where its constants do not divide the element count, so they must divide `last`'s (a
    count `last` accepts is a multiple of those); one that infers none takes a single count,
    which `last` must fix to the same: all constants, the same product."""
    kept = _item_values(last)
    constants = math.prod(n for n in kept if n is not None and n != -1)
    for view in views:
        items = _item_values(view)
        if None in items:
            return False
        product = math.prod(n for n in items if n is not None and n != -1)
        if (constants % max(product, 1) if -1 in items
                else None in kept or -1 in kept or product != constants):
            return False
    return True


def _sizes_computable(node: torch._C.Node) -> bool:
    """Whether the sizes read of a dropped node's result can be computed without it: its
    profiled rank known, and a view's items sizes or constants (a computed item could be
    the -1 that the view infers at another call)."""
    reads = [u.user for u in node.output().uses() if _size_read(u.user)]
    if not reads:
        return True
    if profiled_sizes(node.output()) is None:
        return False
    if node.kind() == "aten::contiguous":
        return True
    items = shape_items(node)
    return items is not None and all(
        (n := int_constant(i)) is not None and (n >= 0 or n == -1)
        or (not isinstance(i, int) and i.node().kind() == "aten::size") for i in items)


def _size_read(node: torch._C.Node) -> bool:
    return (node.kind() == "aten::size" and node.inputsSize() == 2
            and node.inputsAt(1).node().kind() == "prim::Constant")


def _read_sizes_from(graph: torch._C.Graph, node: torch._C.Node, y: torch._C.Value,
                     varying: set[int]) -> None:
    """The sizes read of a chain node's result (Swin reads its windows' count for the qkv
    reshape), computed otherwise, so that nothing holds the copy: a contiguous copy has its
    input's sizes, a view its shape's items, the one it infers being y's element count over
    the others."""
    for read in [u.user for u in node.output().uses() if _size_read(u.user)]:
        with graph.insert_point_guard(read):
            d = read.inputsAt(1).toIValue() % len(profiled_sizes(node.output()) or [1])
            if node.kind() == "aten::contiguous":
                value = defer_size_check.read_size(graph, node.inputsAt(0), d, varying)
            else:
                items = shape_values(node, graph) or []
                value = items[d]
                if value.node().kind() == "prim::Constant" and value.toIValue() == -1:
                    value = inferred_size(
                        graph, [defer_size_check.read_size(graph, y, i, varying)
                                for i in range(len(profiled_sizes(y) or []))],
                        [v for i, v in enumerate(items) if i != d])
        read.output().replaceAllUsesWith(value)
        read.destroy()


def _after(graph: torch._C.Graph, linear: torch._C.Node, varying: set[int],
           written: WrittenMemory) -> bool:
    """`linear(x).view(s1)...view(sn)` read by a permute -> `linear(x.reshape(s'))`."""
    weight = _weight_sizes(linear)
    out_type, x = linear.output().type(), linear.inputsAt(0)
    if weight is None or out_type.dtype() is None or out_type.device() is None \
            or x.type().dtype() is None:
        return False
    features, k = weight
    chain: list[torch._C.Node] = []  # from the linear on
    value = linear.output()
    while len(value.uses()) == 1 and value.uses()[0].user.kind() in RESHAPES \
            and value.uses()[0].offset == 0 and _last_item(value.uses()[0].user) == features:
        chain.append(value.uses()[0].user)
        value = chain[-1].output()
    readers = value.uses()
    sizes = profiled_sizes(value)
    if (not chain or len(readers) != 1 or readers[0].user.kind() not in _TRANSPOSES
            or not _raise_alike(chain[:-1], chain[-1])
            or sizes is None
            or written.may_write([x, linear.output(), *(n.output() for n in chain)])):
        return False
    # At the last view, where all of its shape's items are computed. The rows keep x's
    # last size, read here: where it is not the weight's, the linear raises, as eager's did.
    x_sizes = profiled_sizes(x)
    with graph.insert_point_guard(chain[-1]):
        items = shape_values(chain[-1], graph)
        if items is None or x_sizes is None or x.unique() in varying:
            return False
        last = defer_size_check.read_size(graph, x, len(x_sizes) - 1, varying)
        shape = int_list(graph, [*items[:-1], last])
        # Typed as row-major: where x's strides do not allow the view, the reshape copies.
        rows = _typed(graph.insertNode(graph.create("aten::reshape", [x, shape], 1)),
                      sizes[:-1] + [k], x.type())
        product = _typed(graph.insertNode(graph.create(
            "aten::linear", [rows, *list(linear.inputs())[1:]], 1)), sizes, out_type)
    value.replaceAllUsesWith(product)
    for node in reversed(chain):
        node.destroy()
    linear.destroy()
    return True


def run(graph: torch._C.Graph) -> None:
    varying = ranks_that_may_vary(graph)
    written = WrittenMemory(graph)
    moved = 0
    for node in [n for n in all_nodes(graph.block()) if n.kind() == "aten::linear"]:
        moved += _before(graph, node, varying, written) or _after(graph, node, varying, written)
    torch._C._jit_pass_dce(graph)
    log.update(NAME, lambda: f"{moved} linears moved through the views of their rows")
