"""Alias casts: a cast to its input's own dtype, copied for each node that reads it.

`x.to(torch.float32)` of a float32 `x` returns `x` itself, and tracing then records every
later use of `x` as a use of the cast: T5's normalization reads it, and so does the residual
add after the block. op_mapping lets a cast read by one node join that node's partition
(the node reads `x` in its place), so each reader gets its own copy of the cast. A copy
differs from the shared cast only where the dtypes differ (a call unlike the profiled
ones): each then makes its own converted tensor, of the same values, which only an
in-place write could tell apart; so nothing is copied where an op may write `x`.
"""

from __future__ import annotations

import torch

from .. import log
from .graph_utils import WrittenMemory

NAME = log.module_name(__file__)


def same_dtype_cast(node: torch._C.Node) -> bool:
    """to(x, dtype, non_blocking, copy=False, memory_format=None) of x profiled in dtype."""
    if node.kind() != "aten::to" or node.inputsSize() != 5:
        return False
    x, out, copy = node.inputsAt(0).type(), node.output().type(), node.inputsAt(3)
    return (isinstance(x, torch._C.TensorType) and isinstance(out, torch._C.TensorType)
            and x.dtype() is not None and x.dtype() == out.dtype()
            and copy.node().kind() == "prim::Constant" and copy.toIValue() is False
            and node.inputsAt(4).node().mustBeNone())


def run(graph: torch._C.Graph) -> None:
    casts = [n for n in graph.nodes() if same_dtype_cast(n) and len(n.output().uses()) > 1]
    if not casts:
        return
    # Decided before any copy: the alias analysis knows only the nodes it was built over
    # (a cast may read another cast's copy).
    written = WrittenMemory(graph)
    casts = [c for c in casts if not written.may_write([c.inputsAt(0)])]
    copied = 0
    for cast in casts:
        for use in cast.output().uses()[1:]:
            with graph.insert_point_guard(use.user):
                clone = graph.insertNode(graph.createClone(cast, lambda v: v))
            clone.output().setType(cast.output().type())
            use.user.replaceInput(use.offset, clone.output())
            copied += 1
    log.update(NAME, f"{copied} same-dtype casts copied for their readers")
