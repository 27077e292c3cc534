"""Split dequantize: a dequantized value read by several ops gets one
dequantize node per reader.

oneDNN Graph's int8 patterns begin at a Dequantize of their own (a conv's input,
the other operand of a residual add); one dequantize node shared by two
readers could join only one of their partitions. Dequantizing is pure, so each
reader computing its own copy changes no result. (torch's and Intel's oneDNN
Graph integrations split the same way.) Readers that may keep the tensor itself
(views, tuples, lists, the graph's result) share the original, so their aliasing stays
eager's; a dequantized value written in place is not split.
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import VIEW_KINDS
from .graph_utils import all_nodes

NAME = log.module_name(__file__)

DEQUANTIZE = ("quantized_decomposed::dequantize_per_tensor",
              "quantized_decomposed::dequantize_per_channel")


def aliasing_reader(user: torch._C.Node) -> bool:
    """A reader that may keep the dequantized tensor itself (a view of it; a
    tuple, list or the graph's result holding it): such readers must keep
    seeing one tensor."""
    return user.kind() in VIEW_KINDS or user.kind().startswith("prim::")


def run(graph: torch._C.Graph) -> None:
    split = 0
    alias_db = None
    for node in all_nodes(graph.block()):
        if node.kind() not in DEQUANTIZE or len(node.output().uses()) < 2:
            continue
        alias_db = alias_db or graph.alias_db()
        if alias_db.has_writers(node.output()):
            continue  # an in-place write must be seen by every reader
        uses = node.output().uses()
        keep = next((u for u in uses if aliasing_reader(u.user)), uses[0])
        for use in uses:
            if use is keep or aliasing_reader(use.user):
                continue
            clone = graph.createClone(node, lambda v: v)
            clone.insertAfter(node)
            clone.output().setType(node.output().type())
            use.user.replaceInput(use.offset, clone.output())
            split += 1
    log.update(NAME, f"{split} dequantize nodes added, one per extra reader")
