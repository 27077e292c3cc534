"""The regions of a block that compute tensors from sizes and constants alone, and their
values at the profiled sizes.

A value is size-determined when it is a constant, a size (or rank, element count, device or
dtype) of any tensor, or the result of a deterministic op without blocks that writes
nothing, of size-determined values. Each tensor of them that another node reads is a group
output; the nodes computing it form the group, one per set sharing a tensor (the size
arithmetic they share is copied for each). The group's inputs are the tensors whose sizes it
reads: at their profiled types the outputs are known, so they are computed here, once, and
the group returns them as constants. Values the graph returns or that an op may write in
place stay as they are (the caller or that op would change the constant).
"""

from __future__ import annotations

import torch

from ... import log
from ...fusion import rewrite
from ...fusion.rewrite import graph_of
from ...passes.graph_utils import all_nodes, written_values
from ..base import Partition, describe
from . import BACKEND, OFFERED_BY

NAME = log.module_name(__file__)

# Ops that read only what the tensor's type says of it.
METADATA = frozenset({"aten::size", "aten::dim", "aten::numel", "prim::device", "prim::dtype"})
# Results that are no function of the arguments.
_UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty",
                            "aten::empty_strided", "aten::new_empty_strided"})
_PURE_PRIMS = frozenset({"prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
                         "prim::TupleUnpack", "prim::TupleIndex", "prim::NumToTensor"})
# What one graph's groups keep (the storage of their values).
MAX_BYTES = 64 << 20


def _computes(node: torch._C.Node) -> bool:
    """A deterministic op with no blocks that writes nothing: its result is a function of
    its arguments."""
    kind = node.kind()
    if list(node.blocks()) or kind in _UNINITIALIZED or node.isNondeterministic():
        return False
    if kind.startswith("prim::"):
        return kind in _PURE_PRIMS
    written = written_values(node)
    return kind.startswith("aten::") and written is not None and not written


_CONTAINERS = frozenset({"prim::TupleConstruct", "prim::ListConstruct", "prim::DictConstruct"})


def _escaping(block: torch._C.Block) -> set[int]:
    """Ids of the values the block returns, in containers or not, or hands to a node with
    blocks (which may return them; _determined also leaves out those its blocks read)."""
    nodes = list(block.nodes())
    escaping = {v.unique() for v in block.returnNode().inputs()}
    for node in nodes:
        if list(node.blocks()):
            escaping |= {v.unique() for v in node.inputs()}
    for node in reversed(nodes):
        if node.kind() in _CONTAINERS and any(v.unique() in escaping for v in node.outputs()):
            escaping |= {v.unique() for v in node.inputs()}
    return escaping


def _determined(block: torch._C.Block) -> set[torch._C.Node]:
    """The block's nodes whose results are size-determined (constants left out), but for
    those that escape it."""
    values: set[int] = set()
    nodes: set[torch._C.Node] = set()
    returned = _escaping(block)
    top = set(block.nodes())
    for node in block.nodes():
        kind = node.kind()
        if kind == "prim::Constant":
            values |= {v.unique() for v in node.outputs()}
            continue
        inputs = list(node.inputs())
        read = inputs[1:] if kind in METADATA else inputs
        if (not (kind in METADATA or _computes(node))
                or any(v.unique() not in values for v in read)
                or any(v.unique() in returned or any(u.user not in top for u in v.uses())
                       for v in node.outputs())):
            continue
        values |= {v.unique() for v in node.outputs()}
        nodes.add(node)
    return nodes


def _is_tensor(value: torch._C.Value) -> bool:
    return isinstance(value.type(), torch._C.TensorType)


def _closure(value: torch._C.Value, determined: set[torch._C.Node]) -> set[torch._C.Node]:
    """The size-determined nodes computing `value` (not through a metadata read's tensor)."""
    found: set[torch._C.Node] = set()
    stack = [value.node()]
    while stack:
        node = stack.pop()
        if node in found or node not in determined:
            continue
        found.add(node)
        inputs = list(node.inputs())
        stack += [v.node() for v in (inputs[1:] if node.kind() in METADATA else inputs)]
    return found


def _components(block: torch._C.Block, determined: set[torch._C.Node]
                ) -> list[set[torch._C.Node]]:
    """The nodes of each group: the closures of the size-determined tensors other nodes
    read, merged where they share a node computing a tensor."""
    outputs = []
    for node in block.nodes():
        if node in determined:
            outputs += [v for v in node.outputs() if _is_tensor(v)
                        and any(u.user not in determined for u in v.uses())]
    groups: list[set[torch._C.Node]] = []
    for value in outputs:
        nodes = _closure(value, determined)
        tensors = {n for n in nodes if _computes_tensor(n)}
        merged = [g for g in groups if g & tensors]
        for g in merged:
            groups.remove(g)
            nodes |= g
        groups.append(nodes)
    return groups


def _computes_tensor(node: torch._C.Node) -> bool:
    return any(_is_tensor(v) for v in node.outputs())


def _given(nodes: set[torch._C.Node], order: list[torch._C.Node]) -> list[torch._C.Value] | None:
    """The values of `nodes` that other nodes read, in block order: tensors, or None where
    one is not (the arithmetic that only computes numbers is copied before, see
    _private_arithmetic)."""
    given = []
    for node in sorted(nodes, key=order.index):
        for v in node.outputs():
            if any(u.user not in nodes for u in v.uses()):
                if not _is_tensor(v):
                    return None
                given.append(v)
    return given


def _private_arithmetic(graph: torch._C.Graph, nodes: set[torch._C.Node],
                        order: list[torch._C.Node]) -> set[torch._C.Node]:
    """The nodes, with a copy of each that computes no tensor and that others read too (the
    sizes and shape arithmetic shared with the rest of the graph, which stays there)."""
    result = set(nodes)
    for node in order:
        if node not in result or any(_is_tensor(v) for v in node.outputs()):
            continue
        if all(u.user in result for v in node.outputs() for u in v.uses()):
            continue
        clone = graph.createClone(node, lambda v: v)
        clone.insertAfter(node)
        for old, new in zip(node.outputs(), clone.outputs(), strict=True):
            new.setType(old.type())
            for use in old.uses():
                if use.user in result:
                    use.user.replaceInput(use.offset, new)
        result.discard(node)
        result.add(clone)
    return result


def _complete(value: torch._C.Value) -> bool:
    """Whether the value's type fixes everything a metadata read can see (the guard checks
    it all)."""
    t = value.type()
    if not isinstance(t, torch._C.TensorType) or t.dim() is None:
        return False
    sizes, strides = t.sizes(), t.strides()
    return (t.scalarType() is not None and t.device() is not None and strides is not None
            and None not in (*sizes, *strides))


def _sample(value: torch._C.Value) -> torch.Tensor:
    """A tensor of the value's profiled type (its data is never read)."""
    t = value.type()
    return torch.empty_strided(t.sizes(), t.strides(), dtype=t.dtype(), device=t.device())


def _evaluate(nodes: list[torch._C.Node], sources: list[torch._C.Value],
              outputs: list[torch._C.Value]) -> list[torch.Tensor] | None:
    graph = graph_of([(v.unique(), v) for v in sources], nodes, [v.unique() for v in outputs])
    if len(outputs) > 1:  # a function returns one value
        results = list(graph.outputs())
        for i in reversed(range(len(results))):
            graph.eraseOutput(i)
        pack = graph.insertNode(graph.create("prim::TupleConstruct", results, 1))
        pack.output().setType(torch._C.TupleType([v.type() for v in results]))
        graph.registerOutput(pack.output())
    try:
        function = torch._C._create_function_from_graph("size_constants", graph)
        with torch.no_grad():
            result = function(*(_sample(v) for v in sources))
    except Exception as e:  # noqa: BLE001 - any failure leaves the region to run as it is
        log.debug(NAME, f"[{describe(nodes)}] not computed: {type(e).__name__}: {e}")
        return None
    values = list(result) if isinstance(result, tuple) else [result]
    return values if all(isinstance(t, torch.Tensor) for t in values) else None


class _Hazards:
    """Whether an op of the graph may write memory a value may alias, or the caller may get
    it (a value the graph returns may contain it): a kept constant would change."""

    def __init__(self, graph: torch._C.Graph, block: torch._C.Block) -> None:
        self.writes = [w for n in all_nodes(graph.block()) if (w := written_values(n)) is None or w]
        self.returned = [*graph.outputs(), *block.returnNode().inputs()]
        self.alias_db = graph.alias_db()

    def any(self, values: list[torch._C.Value]) -> bool:
        db = self.alias_db
        return any(db.may_contain_alias(r, v) for r in self.returned for v in values) or any(
            w is None or any(db.may_contain_alias(x, v) for x in w for v in values)
            for w in self.writes)


def _pieces(nodes: set[torch._C.Node]) -> list[set[torch._C.Node]]:
    """The region cut after each node computing a tensor that two of its nodes read, or a
    node outside: a region that cannot take the place of its last node (a mask every layer
    reads, each where with the sizes of its own layer) becomes groups that can. Every
    other node that computes a tensor has one reader, and is in that reader's piece."""
    roots = {n for n in nodes if _computes_tensor(n) and (
        len({u.user for v in n.outputs() for u in v.uses()}) > 1
        or any(u.user not in nodes for v in n.outputs() for u in v.uses()))}
    pieces = []
    for root in roots:
        found: set[torch._C.Node] = set()
        stack = [root]
        while stack:
            node = stack.pop()
            if node in found or node not in nodes or (node in roots and node is not root):
                continue
            found.add(node)
            inputs = list(node.inputs())
            stack += [v.node() for v in (inputs[1:] if node.kind() in METADATA else inputs)]
        pieces.append(found)
    return pieces


def _partition(nodes: list[torch._C.Node], inputs: list[torch._C.Value],
               outputs: list[torch._C.Value], held: list[torch._C.Value]) -> Partition:
    """The group of `nodes`, guarded on `inputs`, giving the constants `held` as `outputs`."""
    ports = [*inputs, *held]
    return Partition(
        nodes=nodes, inputs=ports, outputs=outputs, input_ids=[v.unique() for v in ports],
        output_ids=[v.unique() for v in outputs], text=str(len(inputs)), static_shapes=True,
        assumes_finite=frozenset(), backend=BACKEND, offered_by=OFFERED_BY)


class _Finder:
    """The groups of one block, and the constants they keep."""

    def __init__(self, graph: torch._C.Graph, block: torch._C.Block) -> None:
        self.graph = graph
        self.block = block
        self.hazards = _Hazards(graph, block)
        self.first = next(iter(block.nodes()))
        self.kept = 0

    def order(self) -> list[torch._C.Node]:
        return list(self.block.nodes())

    def hold(self, values: list[torch.Tensor]) -> list[torch._C.Value]:
        """Constants of the values, at the block's start."""
        with self.graph.insert_point_guard(self.first):
            held = [self.graph.insertConstant(t) for t in values]
        for c, t in zip(held, values, strict=True):
            c.setType(torch._C.TensorType.create_from_tensor(t))
        return held

    def region(self, nodes: set[torch._C.Node]) -> list[Partition]:
        order = self.order()
        named = f"[{describe(sorted(nodes, key=order.index))}]"
        nodes = _private_arithmetic(self.graph, nodes, order)
        order = self.order()
        members = sorted(nodes, key=order.index)
        outputs = _given(nodes, order)
        constants = [v for n in nodes for v in n.inputs()
                     if v.node().kind() == "prim::Constant" and _is_tensor(v)]
        if outputs is None or self.hazards.any([*outputs, *constants]):
            log.debug(NAME, f"{named} stays: an op may write a value it reads or gives, or "
                            "the caller get one")
            return []
        sources = list({v.unique(): v for n in members for v in n.inputs()
                        if v.node() not in nodes and v.node().kind() != "prim::Constant"}.values())
        if not all(_complete(v) for v in sources):
            log.debug(NAME, f"{named} stays: a tensor whose sizes it reads was not profiled")
            return []
        pieces = [nodes]
        if isinstance(rewrite.nodes_to_move(
                self.graph, _partition(members, sources, outputs, []), order), str):
            pieces = _pieces(nodes)
        # What each piece gives once it copies the arithmetic it shares (tensors only).
        given = {v.unique(): v for piece in pieces for n in sorted(piece, key=order.index)
                 for v in n.outputs()
                 if _is_tensor(v) and any(u.user not in piece for u in v.uses())}
        values = _evaluate(members, sources, list(given.values()))
        if values is None:
            return []
        size = sum(t.untyped_storage().nbytes() for t in values)
        if self.kept + size > MAX_BYTES:
            log.debug(NAME, f"{named} stays: its values would pass {MAX_BYTES} bytes kept")
            return []
        self.kept += size
        return self.groups(pieces, dict(zip(given, values, strict=True)))

    def groups(self, pieces: list[set[torch._C.Node]], values: dict[int, torch.Tensor]
               ) -> list[Partition]:
        """A group per piece, in block order; each is guarded on the tensors whose sizes it
        reads and on those the pieces computing its inputs read."""
        order = self.order()
        pieces.sort(key=lambda p: max(order.index(n) for n in p))
        made: dict[int, list[torch._C.Value]] = {}  # piece output id -> the sources behind it
        partitions = []
        for piece in pieces:
            nodes = _private_arithmetic(self.graph, piece, self.order())
            order = self.order()
            members = sorted(nodes, key=order.index)
            outputs = _given(nodes, order)
            read = {v.unique(): v for n in members for v in n.inputs()
                    if v.node() not in nodes and v.node().kind() != "prim::Constant"}
            inputs = dict(read)
            for i in read:
                inputs.update((v.unique(), v) for v in made.get(i, []))
            guarded = list(inputs.values())
            for v in outputs or []:
                made[v.unique()] = [u for u in guarded if u.unique() not in made]
            if not outputs or all(values[v.unique()].dim() == 0 for v in outputs):
                continue  # numbers only: no group is worth it (its readers guard its sources)
            held = self.hold([values[v.unique()] for v in outputs])
            partitions.append(_partition(members, guarded, outputs, held))
        return partitions


def find_partitions(graph: torch._C.Graph, block: torch._C.Block) -> list[Partition]:
    determined = _determined(block)
    if not determined:
        return []
    finder = _Finder(graph, block)
    partitions = []
    for nodes in _components(block, determined):
        partitions += finder.region(nodes)
    log.update(NAME, f"{len(partitions)} groups of sizes and constants, "
                     f"{finder.kept} bytes kept")
    return partitions
