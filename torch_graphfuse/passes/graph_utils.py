"""Small helpers over torch's Python IR bindings shared by the passes."""

from __future__ import annotations

import numbers

import torch


def all_nodes(block: torch._C.Block) -> list[torch._C.Node]:
    """Every node of `block` and of the blocks nested in it, in order."""
    nodes = []
    for node in block.nodes():
        nodes.append(node)
        for inner in node.blocks():
            nodes += all_nodes(inner)
    return nodes


def constant_number(value: torch._C.Value) -> numbers.Number | None:
    """The constant number a value holds (a Python number, or a 0-dim tensor
    as tracing records the scalar of an in-place op), else None."""
    if value.node().kind() != "prim::Constant":
        return None
    v = value.toIValue()
    if isinstance(v, torch.Tensor):
        if v.dim() != 0 or v.dtype == torch.bool or v.is_complex():
            return None
        v = v.item()
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
