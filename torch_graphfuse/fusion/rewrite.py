"""Graph rewriting: each partition becomes one graphfuse::FusionGroup node.

The group node holds the partition's nodes as its `Subgraph` (what the
fallback runs), the backend description as `desc` (what the kernel
compiles), and the views at its boundary as `head` and `tail` graphs (what
the kernel makes around the description; fusion/boundary_views). It takes
the place of the partition's last node; nodes in between that read partition
results move after it. A partition that a node in between both reads from and
feeds is not convex and stays unfused, and so is one that an in-place op in
between would see reordered: a node in the span that writes memory another
node of the span reads (as alias analysis tells) keeps its place relative to
them only if nothing moves, so the partition stays unfused.
"""

from __future__ import annotations

import torch

from .. import log
from ..group_schema import ATTR, KIND, ONEDNN, subgraph
from ..passes.finiteness import Facts
from ..passes.graph_utils import written_values
from ..report import FusionReport
from .partition import Partition, describe

NAME = log.module_name(__file__)
# Nodes that must keep their place relative to others.
_ORDERED = ("prim::Print", "prim::RaiseException", "prim::SetAttr", "aten::warn")
_NOT_CONVEX = "not convex in the JIT graph"


def graph_of(inputs: list[tuple[int, torch._C.Value]], nodes: list[torch._C.Node],
              outputs: list[int]) -> torch._C.Graph:
    """A graph of `nodes` (in block order) from `inputs`, each known by the id the
    partition has for it and as the graph has it now, to the values of the `outputs` ids.
    Other arguments are constants (the mappings and fusion/boundary_views take only
    those), copied in."""
    sub = torch._C.Graph()
    env: dict[int, torch._C.Value] = {}
    for known_as, v in inputs:
        new = sub.addInput()
        new.setType(v.type())
        env.setdefault(known_as, new)
        env.setdefault(v.unique(), new)
    for node in nodes:
        for v in node.inputs():
            if v.unique() not in env:
                env[v.unique()] = sub.insertNode(sub.createClone(v.node(), lambda x: x)).output()
        clone = sub.insertNode(sub.createClone(node, lambda x: env[x.unique()]))
        for old, new in zip(node.outputs(), clone.outputs(), strict=True):
            env[old.unique()] = new
    for i in outputs:
        sub.registerOutput(env[i])
    return sub


def _ops(group: torch._C.Node) -> list[torch._C.Node]:
    """The nodes a fusion group holds, its copied constants left out."""
    return [n for n in subgraph(group).nodes() if n.kind() != "prim::Constant"]


def group_kinds(group: torch._C.Node) -> list[str]:
    """The aten kinds a fusion group holds, sorted."""
    return sorted(n.kind() for n in _ops(group))


def label(groups: list[torch._C.Node], report: int) -> None:
    """The name each group has in the profiler and the kernel's log, numbered
    as the report numbers them: "graphfuse::FusionGroup_3 [linear, gelu]"; and
    the report's id, under which the kernel files the specs it runs unfused."""
    for i, group in enumerate(groups, 1):
        group.s_(ATTR.label, f"{KIND}_{i} [{describe(_ops(group))}]")
        group.i_(ATTR.report, report)


def _read_values(node: torch._C.Node) -> list[torch._C.Value]:
    """The values a node reads, its sub-blocks included."""
    reads = list(node.inputs())
    for block in node.blocks():
        for inner in block.nodes():
            reads += _read_values(inner)
        reads += list(block.returnNode().inputs())
    return reads


def _reads(node: torch._C.Node) -> set[int]:
    """Ids of the values a node reads, its sub-blocks included."""
    return {v.unique() for v in _read_values(node)}


def nodes_to_move(graph: torch._C.Graph, part: Partition,
                  block_nodes: list[torch._C.Node]) -> list[torch._C.Node] | str:
    """Nodes between the partition's first and last that read its results
    (they move after the group), or why the group cannot take its last node's place."""
    inside = set(part.nodes)
    start, end = block_nodes.index(part.nodes[0]), block_nodes.index(part.nodes[-1])
    tainted = {v.unique() for n in part.nodes for v in n.outputs()}
    moved_outputs: set[int] = set()
    to_move = []
    for node in block_nodes[start:end + 1]:
        reads = _reads(node)
        if node in inside:
            if reads & moved_outputs:
                return _NOT_CONVEX
            continue
        if reads & tainted:
            if node.kind() in _ORDERED:
                return _NOT_CONVEX
            to_move.append(node)
            outs = {v.unique() for v in node.outputs()}
            tainted |= outs
            moved_outputs |= outs
    if _writes_seen_by_span(graph, block_nodes[start:end + 1], inside):
        return "an in-place op between its nodes writes what they read"
    return to_move


def _writes_seen_by_span(graph: torch._C.Graph, span: list[torch._C.Node],
                         inside: set[torch._C.Node]) -> bool:
    """True when a node of the span outside the partition writes memory that
    another node of the span may read: the rewrite would reorder the two."""
    writers = {}
    for node in span:
        if node not in inside:
            written = written_values(node)
            if written is None or written:
                writers[node] = written
    if not writers:
        return False
    if any(w is None for w in writers.values()):
        return True
    alias_db = graph.alias_db()
    for writer, written in writers.items():
        for node in span:
            if node is not writer and any(alias_db.may_contain_alias(r, w)
                                          for r in _read_values(node) for w in written):
                return True
    return False


def rewrite(graph: torch._C.Graph, block: torch._C.Block, partitions: list[Partition],
            report: FusionReport, finite: Facts | None = None) -> list[torch._C.Node]:
    """The groups made of the partitions. `finite` (passes/finiteness) gets the facts of the
    values each group's outputs replace, for the backends that partition after this one."""
    groups = []
    # Outputs of partitions already rewritten, by id: later partitions read
    # the group's outputs instead.
    replaced: dict[int, torch._C.Value] = {}
    for part in partitions:
        inputs = [replaced.get(i, v) for i, v in zip(part.input_ids, part.inputs, strict=True)]
        block_nodes = list(block.nodes())
        to_move = nodes_to_move(graph, part, block_nodes)
        if isinstance(to_move, str):
            region = describe(part.nodes)
            report.add_rejected(region, part.nodes, to_move, by=part.offered_by)
            log.debug(NAME, f"partition [{region}] left unfused: {to_move}")
            continue
        last = part.nodes[-1]
        anchor = last
        for node in to_move:
            node.moveAfter(anchor)
            anchor = node
        group = graph.create(KIND, inputs, len(part.outputs))
        group.insertAfter(last)
        known = list(zip(part.input_ids, inputs, strict=True))
        group.g_(ATTR.subgraph, graph_of(known, part.nodes, part.output_ids))
        group.s_(ATTR.desc, part.text)
        if part.head:  # the group's inputs (with the shape inputs) to the description's
            group.g_(ATTR.head, graph_of(known, part.head, part.desc_input_ids))
        if part.tail:  # the description's outputs (with the shape inputs) to the group's
            group.g_(ATTR.tail, graph_of([*((v.unique(), v) for v in part.desc_outputs),
                                           *known[part.ports:]], part.tail, part.output_ids))
        group.s_(ATTR.backend, part.backend)
        if part.backend != ONEDNN:
            # The external kernel lays the executor's outputs over these: the optimized
            # graph keeps attributes, not the profiled types of values.
            group.tys_(ATTR.output_types, [v.type() for v in part.outputs])
        # A pinned last size of a tensor the head views instead of taking pins them all.
        last_dims = [i for i, v in enumerate(part.input_ids) if v in part.last_dims]
        static = part.static_shapes or len(last_dims) < len(part.last_dims)
        group.i_(ATTR.static_shapes, int(static))
        if last_dims and not static:
            group.is_(ATTR.last_dims, last_dims)
        if part.shape_inputs:
            group.i_(ATTR.shape_inputs, part.shape_inputs)
        if part.assumes_finite:
            group.is_(ATTR.finite_inputs, sorted(part.assumes_finite))
        if part.cpu_needs:
            group.s_(ATTR.cpu_needs, " ".join(sorted(part.cpu_needs)))
        for old, new, old_id in zip(part.outputs, group.outputs(), part.output_ids, strict=True):
            new.setType(old.type())
            old.replaceAllUsesAfterNodeWith(group, new)
            replaced[old_id] = new
            if finite is not None and old.unique() in finite:
                finite[new.unique()] = finite[old.unique()]
        for node in reversed(part.nodes):
            node.destroy()
        groups.append(group)
    return groups
