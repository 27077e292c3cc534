"""View tails: the views a model takes of a partition's results join its group.

Hugging Face models reshape around every projection with sizes read at run time:

    %y : Tensor = graphfuse::FusionGroup[...](...)       # the linear
    %b : int = aten::size(%hidden, 0)
    %shape : int[] = prim::ListConstruct(%b, %s, 12, 64)
    %q : Tensor = aten::view(%y, %shape)
    %k : Tensor = aten::transpose(%q, 1, 2)

oneDNN offers such a chain as a partition of its own, which would copy it (a group's
outputs are new tensors, and eager's are views). Here the chain joins the partition that
computes its input, as the group's `tail`: a graph from the backend's outputs (and the
tensors whose sizes it reads) to the group's outputs, of views only. The kernel runs it
once per input spec and keeps each result as strides over a backend output, so later
calls make the same views with no interpreter, aliasing what eager aliases.

A chain joins only where that changes nothing eager shows: no op anywhere writes memory
it may alias, the sizes it reads are known before the partition starts, and the group
can still take the place of its last node (fusion/rewrite's convexity).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .. import log
from ..backends.base import Partition
from ..passes import shape_arguments
from ..passes.graph_utils import all_nodes, written_values
from . import rewrite

NAME = log.module_name(__file__)

# Ops whose eager result is a view of input 0, with no other tensor argument. Reshape,
# flatten and contiguous copy where the input's strides cannot give the result: they join
# only where they view at the profiled strides (at others, the kernel runs the tail on
# each call, and its result is eager's copy).
VIEWS = frozenset({
    "aten::view", "aten::reshape", "aten::flatten", "aten::unflatten", "aten::squeeze",
    "aten::unsqueeze", "aten::permute", "aten::transpose", "aten::t", "aten::expand",
    "aten::slice", "aten::select", "aten::narrow", "aten::contiguous",
})
# Ops whose result is a list of views of input 0, taken apart by one prim::ListUnpack.
SPLITS = frozenset({"aten::split", "aten::split_with_sizes", "aten::chunk", "aten::unbind"})
_MAY_COPY = frozenset({"aten::reshape", "aten::flatten", "aten::contiguous"})
_CONTIGUOUS_FORMAT = 0  # torch.contiguous_format, as TorchScript passes a memory format


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
        return (form.node().kind() != "prim::Constant" or form.toIValue() != _CONTIGUOUS_FORMAT
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
        self.writers = [n for n in all_nodes(graph.block())
                        if (w := written_values(n)) is None or w]
        self._alias_db = None

    def defined_before(self, value: torch._C.Value, index: int) -> bool:
        node = value.node()
        if node.kind() == "prim::Param":
            return True
        return node in self.position and self.position[node] < index

    def written(self, values: Iterable[torch._C.Value]) -> bool:
        """Whether any op of the graph may write memory one of `values` may alias."""
        if not self.writers:
            return False
        if self._alias_db is None:
            self._alias_db = self.graph.alias_db()
        values = list(values)
        for writer in self.writers:
            written = written_values(writer)
            if written is None or any(self._alias_db.may_contain_alias(w, v)
                                      for w in written for v in values):
                return True
        return False


def _grow(part: Partition, within: _Block) -> tuple[list[torch._C.Node], list[torch._C.Value]]:
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
            elif (node.kind() not in VIEWS or node.outputsSize() != 1
                  or (node.kind() in _MAY_COPY and _copies_as_profiled(node))):
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


def _used_outside(nodes: list[torch._C.Node]) -> list[torch._C.Value]:
    inside = set(nodes)
    return [v for n in nodes for v in n.outputs()
            if any(use.user not in inside for use in v.uses())]


def extend(graph: torch._C.Graph, block: torch._C.Block, partitions: list[Partition]
           ) -> tuple[list[Partition], set[torch._C.Node]]:
    """Each partition with the tail of views its results take, and the nodes the tails
    took."""
    within = _Block(graph, block, partitions)
    absorbed: set[torch._C.Node] = set()
    result = []
    for part in partitions:
        result.append(part)
        tail, sources = _grow(part, within)
        aliases = [*part.outputs, *(v for n in tail for v in n.outputs()
                                    if isinstance(v.type(), torch._C.TensorType))]
        if not tail or within.written(aliases):
            continue
        tail.sort(key=within.position.__getitem__)
        nodes = sorted([*part.nodes, *tail], key=within.position.__getitem__)
        outputs = _used_outside(nodes)
        candidate = Partition(nodes, [*part.inputs, *sources], outputs,
                              [*part.input_ids, *(v.unique() for v in sources)],
                              [v.unique() for v in outputs], part.text, part.static_shapes,
                              part.assumes_finite, part.backend, part.offered_by,
                              part.shape_inputs + len(sources), tail=tail,
                              desc_outputs=list(part.outputs))
        if isinstance(rewrite.nodes_to_move(graph, candidate, within.nodes), str):
            continue
        log.debug(NAME, f"{len(tail)} nodes of views join a partition of {len(part.nodes)}")
        result[-1] = candidate
        within.taken |= set(tail)
        absorbed |= set(tail)
    log.update(NAME, f"{len(absorbed)} nodes of views joined their partitions")
    return result, absorbed
