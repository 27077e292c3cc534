"""Boundary views: the views a model takes of a partition's inputs and results join its group.

Hugging Face models reshape around every projection with sizes read at run time:

    %y : Tensor = graphfuse::FusionGroup[...](...)       # the linear
    %b : int = aten::size(%hidden, 0)
    %shape : int[] = prim::ListConstruct(%b, %s, 12, 64)
    %q : Tensor = aten::view(%y, %shape)
    %k : Tensor = aten::transpose(%q, 1, 2)

oneDNN offers such a chain as a partition of its own, which would copy it (a group's
outputs are new tensors, and eager's are views). Here the chain joins the partition that
computes its input, as the group's `tail`: a graph from the backend's outputs (and the
tensors whose sizes it reads) to the group's outputs, of views only. Likewise the views
through which only a partition reads a tensor (the heads' merge reshaped for the output
projection) join it as its `head`: a graph from the group's inputs to the backend's.
The kernel runs each once per input spec and keeps each result as strides over one of
the graph's inputs, so later calls make the same views with no interpreter, aliasing
what eager aliases.

A view joins only where that changes nothing eager shows: no op anywhere writes memory a
tail may alias, the sizes a tail reads are known before the partition starts, the group
can still take the place of its last node (fusion/rewrite's convexity), and a reshape,
flatten or contiguous views at the profiled strides (a copy stays ATen's).
"""

from __future__ import annotations

import dataclasses

import torch

from .. import log
from ..aten_ops import CONTIGUOUS_FORMAT
from ..passes import shape_arguments
from ..passes.graph_utils import WrittenMemory
from . import rewrite
from .partition import Partition

NAME = log.module_name(__file__)

# Ops whose eager result is a view of input 0, with no other tensor argument. Reshape,
# flatten and contiguous copy where the input's strides cannot give the result: they join
# only where they view at the profiled strides (at others, the kernel runs the view graph
# on each call, and its result is eager's copy).
VIEWS = frozenset({
    "aten::view", "aten::reshape", "aten::flatten", "aten::unflatten", "aten::squeeze",
    "aten::unsqueeze", "aten::permute", "aten::transpose", "aten::t", "aten::expand",
    "aten::slice", "aten::select", "aten::narrow", "aten::contiguous",
})
# Ops whose result is a list of views of input 0, taken apart by one prim::ListUnpack.
SPLITS = frozenset({"aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind"})
_MAY_COPY = frozenset({"aten::reshape", "aten::flatten", "aten::contiguous"})


def _copies_as_profiled(node: torch._C.Node) -> bool:
    """Whether an op of _MAY_COPY copies at the profiled sizes and strides (or cannot
    be told not to)."""
    try:
        sizes, strides = node.inputsAt(0).type().sizes(), node.inputsAt(0).type().strides()
        result = node.output().type().sizes()
    except RuntimeError:  # a rank the profiling did not fix
        return True
    if None in (*sizes, *strides, *result):
        return True
    source = torch.empty_strided(sizes, strides, device="meta")
    if node.kind() == "aten::contiguous":
        form = node.inputsAt(1)
        return (form.node().kind() != "prim::Constant" or form.toIValue() != CONTIGUOUS_FORMAT
                or not source.is_contiguous())
    return not source.reshape(result)._is_view()


def _arguments(node: torch._C.Node) -> list[torch._C.Node] | None:
    """The shape arithmetic a view's non-tensor arguments need (nodes of the chains only it
    reads), or None where an argument is neither a constant nor such a chain."""
    nodes: list[torch._C.Node] = []
    for value in list(node.inputs())[1:]:
        if value.node().kind() == "prim::Constant":
            continue
        if isinstance(value.type(), torch._C.TensorType):
            return None
        shape = shape_arguments.chain(value)
        if shape is None or not shape_arguments.private(shape, node):
            return None
        nodes += shape.nodes
    return nodes


class _Block:
    """What every partition's tail in one block is checked against."""

    def __init__(self, graph: torch._C.Graph, block: torch._C.Block,
                 partitions: list[Partition]) -> None:
        self.graph = graph
        self.nodes = list(block.nodes())
        self.position = {node: i for i, node in enumerate(self.nodes)}
        self.taken = {node for part in partitions for node in part.nodes}
        self.written = WrittenMemory(graph).may_write

    def defined_before(self, value: torch._C.Value, index: int) -> bool:
        node = value.node()
        if node.kind() == "prim::Param":
            return True
        return node in self.position and self.position[node] < index


def _joins(node: torch._C.Node) -> bool:
    """Whether a single-output op gives a view of its input 0 at the profiled strides."""
    return (node.kind() in VIEWS and node.outputsSize() == 1
            and not (node.kind() in _MAY_COPY and _copies_as_profiled(node)))


def _grow_tail(part: Partition, within: _Block) -> tuple[list[torch._C.Node], list[torch._C.Value]]:
    """The view nodes (with their shape arithmetic) reachable from the partition's outputs
    through views only, and the tensors outside whose sizes they read."""
    start = within.position[part.nodes[0]]
    produced = {v.unique() for n in part.nodes for v in n.outputs()}
    tail: list[torch._C.Node] = []
    sources: dict[int, torch._C.Value] = {}
    frontier = list(part.outputs)
    while frontier:
        value = frontier.pop()
        for use in value.uses():
            node = use.user
            if (use.offset != 0 or node in within.taken or node in tail
                    or node not in within.position):
                continue
            members = [node]
            if node.kind() in SPLITS:
                unpack = [u.user for u in node.output().uses()]
                if len(unpack) != 1 or unpack[0].kind() != "prim::ListUnpack":
                    continue
                members.append(unpack[0])
            elif not _joins(node):
                continue
            arithmetic = _arguments(node)
            if arithmetic is None or any(n in within.taken for n in arithmetic):
                continue
            reads = [n.inputsAt(0) for n in arithmetic if n.kind() == "aten::size"]
            if any(v.unique() not in produced and not within.defined_before(v, start)
                   for v in reads):
                continue
            for v in reads:
                if v.unique() not in produced:
                    sources.setdefault(v.unique(), v)
            for member in [*arithmetic, *members]:
                tail.append(member)
                produced |= {v.unique() for v in member.outputs()}
            frontier += list(members[-1].outputs())
    return tail, list(sources.values())


def _profiled(value: torch._C.Value) -> bool:
    """Whether the profiling runs fixed a tensor's dtype and rank, which a group's guard
    checks on its inputs."""
    t = value.type()
    return isinstance(t, torch._C.TensorType) and None not in (t.dim(), t.scalarType())


def _grow_head(part: Partition, within: _Block
               ) -> tuple[list[torch._C.Node], list[torch._C.Value], list[torch._C.Value]]:
    """The views (with their shape arithmetic) through which only the partition reads its
    description's inputs, the tensors they start from, and those whose sizes they read."""
    inside = set(part.nodes)
    head: list[torch._C.Node] = []
    read_for_sizes = {v.unique() for v in part.inputs[part.ports:]}  # stay group inputs
    frontier = list(part.inputs[:part.ports])
    while frontier:
        value = frontier.pop()
        node = value.node()
        if (node not in within.position or node in within.taken or node in inside
                or value.unique() in read_for_sizes or not _joins(node)
                or not _profiled(node.inputsAt(0))
                or any(u.user not in inside for u in value.uses())):
            continue
        arithmetic = _arguments(node)
        if arithmetic is None or any(n in within.taken for n in arithmetic):
            continue
        head += [*arithmetic, node]
        inside |= {*arithmetic, node}
        frontier.append(node.inputsAt(0))
    if not head:
        return [], [], []
    made = {v.unique() for n in head for v in n.outputs()}
    roots: dict[int, torch._C.Value] = {}
    for value in [*part.inputs[:part.ports],
                  *(n.inputsAt(0) for n in head if n.kind() in VIEWS)]:
        if value.unique() not in made:
            roots.setdefault(value.unique(), value)
    sources: dict[int, torch._C.Value] = {}
    for n in head:
        if n.kind() == "aten::size" and n.inputsAt(0).unique() not in made:
            sources.setdefault(n.inputsAt(0).unique(), n.inputsAt(0))
    return head, list(roots.values()), list(sources.values())


def _used_outside(nodes: list[torch._C.Node]) -> list[torch._C.Value]:
    inside = set(nodes)
    return [v for n in nodes for v in n.outputs()
            if any(use.user not in inside for use in v.uses())]


def _with_tail(part: Partition, within: _Block) -> Partition | None:
    tail, sources = _grow_tail(part, within)
    aliases = [*part.outputs, *(v for n in tail for v in n.outputs()
                                if isinstance(v.type(), torch._C.TensorType))]
    if not tail or within.written(aliases):
        return None
    tail.sort(key=within.position.__getitem__)
    nodes = sorted([*part.nodes, *tail], key=within.position.__getitem__)
    outputs = _used_outside(nodes)
    return dataclasses.replace(
        part, nodes=nodes, inputs=[*part.inputs, *sources], outputs=outputs,
        input_ids=[*part.input_ids, *(v.unique() for v in sources)],
        output_ids=[v.unique() for v in outputs],
        shape_inputs=part.shape_inputs + len(sources), tail=tail,
        desc_outputs=list(part.outputs))


def _with_head(part: Partition, within: _Block) -> Partition | None:
    head, ports, sources = _grow_head(part, within)
    if not head:
        return None
    head.sort(key=within.position.__getitem__)
    shape_inputs = [*part.inputs[part.ports:], *sources]
    inputs = [*ports, *shape_inputs]
    ids = dict(zip((v.unique() for v in part.inputs), part.input_ids, strict=True))
    return dataclasses.replace(
        part, nodes=sorted([*part.nodes, *head], key=within.position.__getitem__),
        inputs=inputs, input_ids=[ids.get(v.unique(), v.unique()) for v in inputs],
        shape_inputs=len(shape_inputs), head=head,
        desc_input_ids=part.input_ids[:part.ports])


def extend(graph: torch._C.Graph, block: torch._C.Block, partitions: list[Partition]
           ) -> tuple[list[Partition], set[torch._C.Node]]:
    """Each partition with the views of its inputs and results it can take, and the nodes
    they took."""
    within = _Block(graph, block, partitions)
    absorbed: set[torch._C.Node] = set()
    result = []
    for part in partitions:
        result.append(part)
        for grow in (_with_tail, _with_head):
            candidate = grow(result[-1], within)
            if candidate is None or isinstance(
                    rewrite.nodes_to_move(graph, candidate, within.nodes), str):
                continue
            joined = set(candidate.nodes) - set(result[-1].nodes)
            log.debug(NAME, f"{len(joined)} nodes of views join a partition of "
                            f"{len(part.nodes)}")
            result[-1] = candidate
            within.taken |= joined
            absorbed |= joined
    log.update(NAME, f"{len(absorbed)} nodes of views joined their partitions")
    return result, absorbed
