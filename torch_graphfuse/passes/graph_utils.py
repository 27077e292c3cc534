"""Small helpers over torch's Python IR bindings shared by the passes."""

from __future__ import annotations

import torch


def all_nodes(block: torch._C.Block) -> list[torch._C.Node]:
    """Every node of `block` and of the blocks nested in it, in order."""
    nodes = []
    for node in block.nodes():
        nodes.append(node)
        for inner in node.blocks():
            nodes += all_nodes(inner)
    return nodes
