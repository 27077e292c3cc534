"""Graph rewriting: each partition becomes one graphfuse::FusionGroup node.

The group node holds the partition's nodes as its `Subgraph` (what the
fallback runs) and the backend description as `desc` (what the kernel
compiles). It takes the place of the partition's last node; nodes in between
that read partition results move after it. A partition that a node in between
both reads from and feeds is not convex and stays unfused.
"""

from __future__ import annotations

import torch

from .. import log
from ..report import FusionReport
from .partition import Partition, describe

NAME = log.module_name(__file__)
FUSION_GROUP = "graphfuse::FusionGroup"
# Nodes that must keep their place relative to others.
_ORDERED = ("prim::Print", "prim::RaiseException", "prim::SetAttr", "aten::warn")


def _subgraph(part: Partition, inputs: list[torch._C.Value]) -> torch._C.Graph:
    sub = torch._C.Graph()
    env: dict[int, torch._C.Value] = {}
    for v in inputs:
        new = sub.addInput()
        new.setType(v.type())
        env[v.unique()] = new
    for node in part.nodes:
        for v in node.inputs():
            if v.unique() not in env:  # a constant argument (the mapping only takes those)
                const = sub.insertNode(sub.createClone(v.node(), lambda x: x))
                env[v.unique()] = const.output()
        clone = sub.insertNode(sub.createClone(node, lambda x: env[x.unique()]))
        for old, new in zip(node.outputs(), clone.outputs(), strict=True):
            env[old.unique()] = new
    for v in part.outputs:
        sub.registerOutput(env[v.unique()])
    return sub


def group_kinds(group: torch._C.Node) -> list[str]:
    """The aten kinds a fusion group holds, sorted."""
    return sorted(n.kind() for n in group.g("Subgraph").nodes() if n.kind() != "prim::Constant")


def _reads(node: torch._C.Node) -> set[int]:
    """Ids of the values a node reads, its sub-blocks included."""
    reads = {v.unique() for v in node.inputs()}
    for block in node.blocks():
        for inner in block.nodes():
            reads |= _reads(inner)
        reads |= {v.unique() for v in block.returnNode().inputs()}
    return reads


def _nodes_to_move(part: Partition, block_nodes: list[torch._C.Node]) -> list[torch._C.Node] | None:
    """Nodes between the partition's first and last that read its results
    (they move after the group), or None if the partition is not convex."""
    inside = set(part.nodes)
    start, end = block_nodes.index(part.nodes[0]), block_nodes.index(part.nodes[-1])
    tainted = {v.unique() for n in part.nodes for v in n.outputs()}
    moved_outputs: set[int] = set()
    to_move = []
    for node in block_nodes[start:end + 1]:
        reads = _reads(node)
        if node in inside:
            if reads & moved_outputs:
                return None
            continue
        if reads & tainted:
            if node.kind() in _ORDERED:
                return None
            to_move.append(node)
            outs = {v.unique() for v in node.outputs()}
            tainted |= outs
            moved_outputs |= outs
    return to_move


def rewrite(graph: torch._C.Graph, block: torch._C.Block, partitions: list[Partition],
            report: FusionReport) -> list[torch._C.Node]:
    groups = []
    # Outputs of partitions already rewritten, by id: later partitions read
    # the group's outputs instead.
    replaced: dict[int, torch._C.Value] = {}
    for part in partitions:
        inputs = [replaced.get(i, v) for i, v in zip(part.input_ids, part.inputs, strict=True)]
        block_nodes = list(block.nodes())
        to_move = _nodes_to_move(part, block_nodes)
        if to_move is None:
            region = describe(part.nodes)
            report.rejected.append((region, "not convex in the JIT graph"))
            log.debug(NAME, f"partition [{region}] left unfused: not convex in the JIT graph")
            continue
        last = part.nodes[-1]
        anchor = last
        for node in to_move:
            node.moveAfter(anchor)
            anchor = node
        group = graph.create(FUSION_GROUP, inputs, len(part.outputs))
        group.insertAfter(last)
        group.g_("Subgraph", _subgraph(part, inputs))
        group.s_("desc", part.text)
        group.i_("static_shapes", int(part.static_shapes))
        for old, new, old_id in zip(part.outputs, group.outputs(), part.output_ids, strict=True):
            new.setType(old.type())
            old.replaceAllUsesAfterNodeWith(group, new)
            replaced[old_id] = new
        for node in reversed(part.nodes):
            node.destroy()
        groups.append(group)
    return groups
