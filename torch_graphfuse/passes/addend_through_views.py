"""Addend through views: `(x.view(shape) + c).view(back)`, with c a constant, becomes
`(x + c.expand(shape).reshape(x.shape)).reshape(back)`.

Swin adds its shifted-window mask over a view that splits the windows off the batch,
`attn.view(-1, windows, heads, n, n) + mask.unsqueeze(1).unsqueeze(0)`, and views the sum
back to the scores' shape. oneDNN's attention pattern takes one addend on the scores
themselves, so over the view the chain split into three partitions with ATen's softmax
between them. On the scores, the addend is a tensor computed from sizes and a constant,
which the size-constant backend computes once per profiled shape.

Eager gives the same result: a view reads its input in row-major order whatever its
strides, so the element at each flat index of the sum is that of x plus the constant's
element the view's multi-index broadcasts to, which is what the constant expanded to the
view's shape and reshaped to x's puts at that index. The view's inferred size (-1) is
x's element count over the others, computed from x's sizes as the view computes it (where
it does not divide, the view raised; the reshape to x's shape then raises). The sum is a
new tensor either way, read only by the view back, which a reshape makes: x's layout need
not allow a view.

Taken only where the view splits one dim of x in two at the profiled sizes (a view of any
strides), and, for a view (not a reshape), x is profiled row-major: eager's view of other
sizes at another call could raise only for strides a row-major x does not have. The constant
keeps the view's shape (a dim of the constant above 1 faces a constant size of the same
value), has x's floating dtype and device and a dim at least, and nothing writes x or the
views in place.
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import RESHAPES
from . import defer_size_check
from .graph_utils import (
    ShapeItem,
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

def _strides(value: torch._C.Value) -> list[int] | None:
    strides = value.type().strides()
    return None if strides is None or None in strides else list(strides)


def _contiguous(sizes: list[int], strides: list[int]) -> bool:
    return torch.empty_strided(sizes, strides, device="meta").is_contiguous()


def _keeps_shape(constant: torch.Tensor, items: list[ShapeItem]) -> bool:
    """Whether adding the constant to a tensor of these shape items keeps its shape at every
    call: each dim of the constant above 1 faces a constant item of that size."""
    if constant.dim() > len(items):
        return False
    aligned = items[len(items) - constant.dim():]
    return all(size == 1 or int_constant(item) == size
               for size, item in zip(constant.shape, aligned, strict=True))


def _splits_one_dim(x_sizes: list[int], view_sizes: list[int]) -> bool:
    """Whether the view splits one dim of x in two and keeps the others, a view of x
    whatever its strides."""
    return len(view_sizes) == len(x_sizes) + 1 and any(
        view_sizes[:d] == x_sizes[:d] and view_sizes[d + 2:] == x_sizes[d + 1:]
        and view_sizes[d] * view_sizes[d + 1] == x_sizes[d] for d in range(len(x_sizes)))


def _rewrite(graph: torch._C.Graph, add: torch._C.Node, varying: set[int],
             written: WrittenMemory) -> bool:
    view, addend = add.inputsAt(0).node(), add.inputsAt(1)
    if view.kind() not in RESHAPES or addend.node().kind() != "prim::Constant":
        return False
    constant = addend.toIValue()
    users = add.output().uses()
    items = shape_items(view)
    if (not isinstance(constant, torch.Tensor) or items is None or len(users) != 1
            or users[0].user.kind() not in RESHAPES or users[0].offset != 0):
        return False
    back = users[0].user
    x = view.inputsAt(0)
    x_sizes, view_sizes = profiled_sizes(x), profiled_sizes(view.output())
    x_type, x_strides = x.type(), _strides(x)
    if (x_sizes is None or x_strides is None or view_sizes is None or x.unique() in varying
            or not _splits_one_dim(x_sizes, view_sizes)
            or (view.kind() == "aten::view" and not _contiguous(x_sizes, x_strides))
            or x_type.device() != constant.device or constant.dim() == 0
            or profiled_sizes(add.output()) != view_sizes
            or profiled_sizes(back.output()) != x_sizes
            or not _keeps_shape(constant, items) or not constant.is_floating_point()
            or x_type.dtype() != constant.dtype or add.output().type().dtype() != constant.dtype
            or written.may_write([x, view.output(), add.output()])):
        return False
    inferred = [i for i, item in enumerate(items) if int_constant(item) == -1]
    with graph.insert_point_guard(add):
        reads = [defer_size_check.read_size(graph, x, d, varying) for d in range(len(x_sizes))]
        full = shape_values(view, graph) or []
        if inferred:
            others = [item for i, item in enumerate(full) if i != inferred[0]]
            full[inferred[0]] = inferred_size(graph, reads, others)
        expand_shape = int_list(graph, full)
        expanded = graph.insertNode(graph.create(
            "aten::expand", [addend, expand_shape, graph.insertConstant(False)], 1))
        expanded_value = constant.expand(view_sizes)
        expanded.output().setType(torch._C.TensorType.create_from_tensor(expanded_value))
        x_shape = int_list(graph, reads)
        moved = graph.insertNode(graph.create("aten::reshape", [expanded.output(), x_shape], 1))
        moved_value = expanded_value.reshape(x_sizes)
        moved.output().setType(torch._C.TensorType.create_from_tensor(moved_value))
        summed = graph.insertNode(graph.create(
            "aten::add", [x, moved.output(), add.inputsAt(2)], 1))
        # ATen lays an elementwise result out as its strided operand.
        summed.output().setType(torch._C.TensorType.create_from_tensor(
            torch.empty_strided(x_sizes, x_strides, dtype=constant.dtype,
                                device=constant.device) + moved_value))
    with graph.insert_point_guard(back):
        reshaped = graph.insertNode(graph.create(
            "aten::reshape", [summed.output(), back.inputsAt(1)], 1))
    reshaped.output().setType(back.output().type())
    back.output().replaceAllUsesWith(reshaped.output())
    back.destroy()
    add.destroy()
    return True


def run(graph: torch._C.Graph) -> None:
    varying = ranks_that_may_vary(graph)
    written = WrittenMemory(graph)
    adds = [n for n in all_nodes(graph.block())
            if n.kind() == "aten::add" and n.inputsSize() == 3]
    moved = sum(_rewrite(graph, node, varying, written) for node in adds)
    if moved:
        torch._C._jit_pass_dce(graph)
    log.update(NAME, lambda: f"{moved} constant addends moved from a view onto its input")

