"""The regions of a block that compute tensors from sizes and constants alone, and their
values at the profiled sizes.

A value is size-determined when it is a constant, a size (or rank, element count, device or
dtype) of any tensor, or the result of a deterministic op without blocks, of size-determined
values. An op that writes in place counts only where all it may write is memory such ops
made, which no other node has read before it (BEiT fills its relative-position index with
slice assignments): computed once, the region leaves that memory as the graph would. Each
tensor of them that another node reads is a group output; the nodes computing it form the
group, one per set sharing a tensor, with the writes to its memory (the size arithmetic
they share, numbers and 0-dim tensors, is copied for each). The group's inputs are the
tensors whose sizes it reads: at their profiled types the outputs are known, so they are
computed here, once, and the group returns them as constants. Values the graph returns or
that another op may write in place stay as they are (the caller or that op would change the
constant).
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import torch

from ... import log
from ...fusion import rewrite
from ...fusion.partition import Partition, describe
from ...fusion.rewrite import graph_of
from ...passes.graph_utils import WrittenMemory
from . import BACKEND, OFFERED_BY
from .determined import components, computes_tensor, determined, is_tensor, walk, writes

NAME = log.module_name(__file__)

# What one graph's groups keep at most (the storage of their values).
MAX_BYTES = 64 << 20


def _given(nodes: set[torch._C.Node], position: dict[torch._C.Node, int]
           ) -> list[torch._C.Value] | None:
    """The values of `nodes` that other nodes read, in block order: tensors, or None where
    one is not (the arithmetic that only computes numbers is copied before, see
    _private_arithmetic)."""
    given = []
    for node in sorted(nodes, key=position.__getitem__):
        for v in node.outputs():
            if any(u.user not in nodes for u in v.uses()):
                if not is_tensor(v):
                    return None
                given.append(v)
    return given


Copies = list[tuple[torch._C.Node, torch._C.Node]]


def _private_arithmetic(graph: torch._C.Graph, nodes: set[torch._C.Node],
                        position: dict[torch._C.Node, int], memory: AbstractSet[torch._C.Node]
                        ) -> tuple[set[torch._C.Node], Copies]:
    """The nodes, with a copy of each that computes no array and that others read too (the
    sizes and shape arithmetic shared with the rest of the graph, which stays there), but
    for those of `memory`; and the (original, copy) pairs, for _restore."""
    result = set(nodes)
    copies: Copies = []
    # Last first: a copied node's original stays outside reading the originals, so what
    # it reads is copied in turn.
    for node in sorted(nodes, key=position.__getitem__, reverse=True):
        if computes_tensor(node) or node in memory:
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
        copies.append((node, clone))
    return result, copies


def _restore(copies: Copies) -> None:
    """Undo _private_arithmetic: the readers of each copy read its original again."""
    for original, clone in copies:
        for old, new in zip(original.outputs(), clone.outputs(), strict=True):
            new.replaceAllUsesWith(old)
        clone.destroy()


def _read_from_outside(nodes: set[torch._C.Node], position: dict[torch._C.Node, int]
                       ) -> list[torch._C.Value]:
    """The values the nodes read that neither they nor a constant give, each once, in the
    order of their readers."""
    members = sorted(nodes, key=position.__getitem__)
    return list({v.unique(): v for n in members for v in n.inputs()
                 if v.node() not in nodes and v.node().kind() != "prim::Constant"}.values())


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

    def __init__(self, written: WrittenMemory, block: torch._C.Block) -> None:
        self.written = written
        self.returned = [*written.graph.outputs(), *block.returnNode().inputs()]

    def any(self, values: list[torch._C.Value], region: AbstractSet[torch._C.Node]) -> bool:
        """Whether the caller may get one of `values`, or an op outside `region` write one
        (the region's own writes are part of computing them)."""
        db = self.written.alias_db
        return (any(db.may_contain_alias(r, v) for r in self.returned for v in values)
                or self.written.may_write(values, ignoring=region))


def _pieces(nodes: set[torch._C.Node]) -> list[set[torch._C.Node]] | None:
    """The region cut after each node computing a tensor that two of its nodes read, or a
    node outside: a region that cannot take the place of its last node (a mask every layer
    reads, each where with the sizes of its own layer) becomes groups that can. Every
    other node that computes a tensor has one reader, and is in that reader's piece. None
    for a region that writes: a piece whose guard fails would run its writes on the values
    another piece keeps."""
    if any(writes(n) for n in nodes):
        return None
    roots = {n for n in nodes if computes_tensor(n) and (
        len({u.user for v in n.outputs() for u in v.uses()}) > 1
        or any(u.user not in nodes for v in n.outputs() for u in v.uses()))}
    return [walk(root, nodes, {}, roots) for root in roots]


def _partition(nodes: list[torch._C.Node], inputs: list[torch._C.Value],
               outputs: list[torch._C.Value], held: list[torch._C.Value]) -> Partition:
    """The group of `nodes`, guarded on `inputs`, giving the constants `held` as `outputs`."""
    ports = [*inputs, *held]
    return Partition(
        nodes=nodes, inputs=ports, outputs=outputs, input_ids=[v.unique() for v in ports],
        output_ids=[v.unique() for v in outputs], text=str(len(inputs)), static_shapes=True,
        assumes_finite=frozenset(), backend=BACKEND, offered_by=OFFERED_BY)


class Budget:
    """What one graph's groups may keep (the storage of their values)."""

    def __init__(self, limit: int = MAX_BYTES) -> None:
        self.limit = limit
        self.kept = 0

    def take(self, size: int) -> bool:
        if self.kept + size > self.limit:
            return False
        self.kept += size
        return True

    def give_back(self, size: int) -> None:
        self.kept -= size


class _Finder:
    """The groups of one block, and the constants they keep."""

    def __init__(self, graph: torch._C.Graph, block: torch._C.Block, budget: Budget,
                 written: WrittenMemory, memory: AbstractSet[torch._C.Node]) -> None:
        self.graph = graph
        self.block = block
        self.budget = budget
        self.hazards = _Hazards(written, block)
        self.memory = memory
        self.first = next(iter(block.nodes()))

    def positions(self) -> dict[torch._C.Node, int]:
        """Each node's place in the block (copies of arithmetic change them)."""
        return {node: i for i, node in enumerate(self.block.nodes())}

    def hold(self, values: list[torch.Tensor]) -> list[torch._C.Value]:
        """Constants of the values, at the block's start."""
        with self.graph.insert_point_guard(self.first):
            held = [self.graph.insertConstant(t) for t in values]
        for c, t in zip(held, values, strict=True):
            c.setType(torch._C.TensorType.create_from_tensor(t))
        return held

    def region(self, nodes: set[torch._C.Node]) -> list[Partition]:
        if not any(computes_tensor(n) for n in nodes):
            return []  # numbers and 0-dim tensors only: their readers compute them
        position = self.positions()
        named = f"[{describe(sorted(nodes, key=position.__getitem__))}]"
        nodes, copies = _private_arithmetic(self.graph, nodes, position, self.memory)
        found = self._groups_of(nodes, named)
        if not found:
            _restore(copies)
        return found

    def _groups_of(self, nodes: set[torch._C.Node], named: str) -> list[Partition]:
        position = self.positions()
        members = sorted(nodes, key=position.__getitem__)
        outputs = _given(nodes, position)
        constants = [v for n in nodes for v in n.inputs()
                     if v.node().kind() == "prim::Constant" and is_tensor(v)]
        if outputs is None or self.hazards.any([*outputs, *constants], nodes):
            log.debug(NAME, f"{named} stays: an op may write a value it reads or gives, or "
                            "the caller get one")
            return []
        sources = _read_from_outside(nodes, position)
        if not all(_complete(v) for v in sources):
            log.debug(NAME, f"{named} stays: a tensor whose sizes it reads was not profiled")
            return []
        pieces: list[set[torch._C.Node]] | None = [nodes]
        if isinstance(rewrite.nodes_to_move(self.graph, _partition(members, sources, outputs, []),
                                            list(self.block.nodes())), str):
            pieces = _pieces(nodes)
            if pieces is None:
                log.debug(NAME, f"{named} stays: it cannot take one place, and it writes")
                return []
        # What each piece gives once it copies the arithmetic it shares (tensors only).
        given = {v.unique(): v for piece in pieces
                 for n in sorted(piece, key=position.__getitem__) for v in n.outputs()
                 if is_tensor(v) and any(u.user not in piece for u in v.uses())}
        values = _evaluate(members, sources, list(given.values()))
        if values is None:
            return []
        size = sum(t.untyped_storage().nbytes() for t in values)
        if not self.budget.take(size):
            log.debug(NAME, f"{named} stays: its values would pass the "
                            f"{self.budget.limit} bytes a graph keeps")
            return []
        made = self.groups(pieces, dict(zip(given, values, strict=True)))
        if not made:
            self.budget.give_back(size)
        return made

    def groups(self, pieces: list[set[torch._C.Node]], values: dict[int, torch.Tensor]
               ) -> list[Partition]:
        """A group per piece, in block order; each is guarded on the tensors whose sizes it
        reads and on those the pieces computing its inputs read."""
        position = self.positions()
        pieces.sort(key=lambda p: max(position[n] for n in p))
        made: dict[int, list[torch._C.Value]] = {}  # piece output id -> the sources behind it
        partitions = []
        for piece in pieces:
            nodes, copies = _private_arithmetic(self.graph, piece, self.positions(),
                                                self.memory)
            position = self.positions()
            outputs = _given(nodes, position)
            read = _read_from_outside(nodes, position)
            inputs = {v.unique(): v for v in read}
            for v in read:
                inputs.update((u.unique(), u) for u in made.get(v.unique(), []))
            guarded = list(inputs.values())
            for v in outputs or []:
                made[v.unique()] = [u for u in guarded if u.unique() not in made]
            if not outputs or all(values[v.unique()].dim() == 0 for v in outputs):
                # Numbers only: no group is worth it (its readers guard its sources).
                _restore(copies)
                continue
            held = self.hold([values[v.unique()] for v in outputs])
            partitions.append(_partition(sorted(nodes, key=position.__getitem__), guarded,
                                         outputs, held))
        return partitions


def find_partitions(graph: torch._C.Graph, block: torch._C.Block,
                    budget: Budget) -> list[Partition]:
    found = determined(block)
    if not found.nodes:
        return []
    finder = _Finder(graph, block, budget, WrittenMemory(graph), found.memory)
    partitions = []
    for nodes in components(block, found):
        partitions += finder.region(nodes)
    log.update(NAME, f"{len(partitions)} groups of sizes and constants, "
                     f"{budget.kept} bytes kept in the graph")
    return partitions
