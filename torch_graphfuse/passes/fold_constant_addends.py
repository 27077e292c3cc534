"""Fold constant addends: `(x + a) + b`, a and b constant tensors (or views and expansions
of constants, as addend_through_views makes), becomes `x + (a + b)`.

Swin adds a relative-position bias and then its shifted-window mask to the attention
scores. oneDNN 3.12's attention pattern takes one addend: with two it left the matmul and
the additions in one partition, the softmax with ATen and the second matmul in another.
The sum of the two constants is itself computed from constants (and sizes), once per
profiled shape by the size-constant backend.

The regrouping changes rounding only, as a fused sum order does: each element is x plus
the same two finite numbers. Each is at most a quarter of the gap between the dtype's
largest number and the next (largest * eps / 8), so neither order overflows where the other
does not (x at most the largest number, plus both, under half that gap, still rounds down
to it), and an infinite or NaN x stays what it was. Taken only where x and both addends
share a floating dtype (no promotion) and a device, both alphas are 1, x + a is read by
nothing else, and nothing writes x or the addends (x is now read at the second add).
"""

from __future__ import annotations

import torch

from .. import log
from .graph_utils import (
    WrittenMemory,
    all_nodes,
    constant_number,
    profiled_dtype,
    profiled_sizes,
)

NAME = log.module_name(__file__)

# Ops through which a value's elements are all a constant's elements.
_MOVES = frozenset({"aten::expand", "aten::reshape", "aten::view", "aten::unsqueeze"})


def _constant_source(value: torch._C.Value) -> torch.Tensor | None:
    """The constant tensor whose elements are all `value`'s."""
    while value.node().kind() in _MOVES:
        value = value.node().inputsAt(0)
    if value.node().kind() != "prim::Constant":
        return None
    t = value.toIValue()
    return t if isinstance(t, torch.Tensor) and t.is_floating_point() else None


def _bounded(t: torch.Tensor) -> bool:
    info = torch.finfo(t.dtype)
    limit = info.max * info.eps / 8
    return bool(torch.isfinite(t).all()) and (t.numel() == 0 or t.abs().max().item() <= limit)


def _fold(graph: torch._C.Graph, outer: torch._C.Node, written: WrittenMemory) -> bool:
    inner, b = outer.inputsAt(0).node(), outer.inputsAt(1)
    if inner.kind() != "aten::add" or inner.inputsSize() != 3 or len(inner.output().uses()) != 1:
        return False
    x, a = inner.inputsAt(0), inner.inputsAt(1)
    sources = [_constant_source(a), _constant_source(b)]
    dtype = profiled_dtype(x)
    sizes = [profiled_sizes(a), profiled_sizes(b)]
    if (constant_number(inner.inputsAt(2)) != 1 or constant_number(outer.inputsAt(2)) != 1
            or None in sizes or dtype is None or not dtype.is_floating_point
            or any(s is None or s.dtype != dtype or not _bounded(s) for s in sources)
            or {profiled_dtype(v) for v in (a, b, inner.output(), outer.output())} != {dtype}
            or written.may_write([x, a, b, inner.output()])):
        return False
    shape = torch.broadcast_shapes(*sizes)
    device = a.type().device()
    if device is None or b.type().device() != device or x.type().device() != device:
        return False
    with graph.insert_point_guard(outer):
        both = graph.insertNode(graph.create("aten::add", [a, b, outer.inputsAt(2)], 1))
        both.output().setType(torch._C.TensorType.create_from_tensor(
            torch.empty(shape, dtype=dtype, device=device)))
        folded = graph.insertNode(graph.create(
            "aten::add", [x, both.output(), outer.inputsAt(2)], 1))
    folded.output().setType(outer.output().type())
    outer.output().replaceAllUsesWith(folded.output())
    outer.destroy()
    inner.destroy()
    return True


def run(graph: torch._C.Graph) -> None:
    written = WrittenMemory(graph)
    # An inner add comes before its outer one, so a fold destroys only visited nodes.
    adds = [n for n in all_nodes(graph.block())
            if n.kind() == "aten::add" and n.inputsSize() == 3]
    folded = sum(_fold(graph, node, written) for node in adds)
    log.update(NAME, lambda: f"{folded} pairs of constant addends folded")
