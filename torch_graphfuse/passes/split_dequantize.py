"""Split dequantize: a dequantized value read by several ops gets one
dequantize node per reader.

oneDNN Graph's int8 patterns begin at a Dequantize of their own (a conv's input,
the other operand of a residual add); one dequantize node shared by two
readers could join only one of their partitions. Dequantizing is pure, so each
reader computing its own copy changes no result. (torch's and Intel's oneDNN
Graph integrations split the same way.)
"""

from __future__ import annotations

import torch

from .. import log
from .graph_utils import all_nodes

NAME = log.module_name(__file__)

DEQUANTIZE = ("quantized_decomposed::dequantize_per_tensor",
              "quantized_decomposed::dequantize_per_channel")


def run(graph: torch._C.Graph) -> None:
    split = 0
    for node in all_nodes(graph.block()):
        if node.kind() not in DEQUANTIZE:
            continue
        for use in node.output().uses()[1:]:
            clone = graph.createClone(node, lambda v: v)
            clone.insertAfter(node)
            clone.output().setType(node.output().type())
            use.user.replaceInput(use.offset, clone.output())
            split += 1
    log.update(NAME, f"{split} dequantize nodes added, one per extra reader")
