"""Op mapping: a JIT block becomes a oneDNN Graph backend graph.

Each node is looked up in op_table.LOWERINGS. A mapped node contributes its
backend ops; any other node (no entry, a condition its entry refuses, an
unsupported dtype or device, a node with blocks) becomes a Wildcard op over
the same values, and each value the block returns an End op, so that oneDNN
knows every consumer outside its reach and never fuses across one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ... import log
from ...passes import alias_casts, shape_arguments
from ...passes.finiteness import Facts
from .convolution import takes_padding
from .graph_desc import BACKEND_DTYPES, BackendGraph
from .lowering import Lowering, Unsupported, tensor_spec
from .op_table import LOWERINGS, NOT_MAPPED

NAME = log.module_name(__file__)


@dataclass
class MappedBlock:
    block: torch._C.Block
    backend: BackendGraph
    nodes: list[torch._C.Node]  # the block's nodes in order (keeps their wrappers alive)
    values: dict[int, torch._C.Value] = field(default_factory=dict)  # tensor id -> value
    unmapped: dict[torch._C.Node, str] = field(default_factory=dict)  # node -> why


def _captured(node: torch._C.Node, defined: set[int]) -> list[torch._C.Value]:
    """Values of the enclosing block that the node's sub-blocks read."""
    blocks = list(node.blocks())
    if not blocks:
        return []
    seen: dict[int, torch._C.Value] = {}

    def visit(block: torch._C.Block) -> None:
        for inner in block.nodes():
            for v in inner.inputs():
                if v.unique() in defined:
                    seen.setdefault(v.unique(), v)
            for b in inner.blocks():
                visit(b)
        for v in block.returnNode().inputs():
            if v.unique() in defined:
                seen.setdefault(v.unique(), v)

    for b in blocks:
        visit(b)
    return list(seen.values())


# Values the passes create from here on (a lowering's constants) take the graph's next
# ids: internal tensors count from well above them.
_INTERNAL_ID_GAP = 1 << 24


def first_free_id(graph: torch._C.Graph) -> int:
    """An id above every value's, for tensors internal to a node's mapping, and above
    those of the values the passes will add."""
    top = 0

    def visit(block: torch._C.Block) -> None:
        nonlocal top
        for v in block.inputs():
            top = max(top, v.unique())
        for node in block.nodes():
            for v in node.outputs():
                top = max(top, v.unique())
            for b in node.blocks():
                visit(b)

    visit(graph.block())
    return top + 1 + _INTERNAL_ID_GAP


def _list_taken_in(node: torch._C.Node) -> bool:
    """A list whose only user is a mapping that takes it in (cat's tensors)."""
    if node.kind() != "prim::ListConstruct" or len(node.output().uses()) != 1:
        return False
    use = node.output().uses()[0]
    entry = LOWERINGS.get(use.user.kind())
    return entry is not None and entry.list_input == use.offset


def _alias_cast(node: torch._C.Node) -> bool:
    """`x.to(x.dtype)` at the profiled dtypes, read by one node a mapping may take: eager
    returns x itself (copy=False, no memory format), so it waits for its user's mapping,
    which reads x in its place and takes the node in (the group's guard pins x's dtype; its
    unfused run keeps the cast)."""
    return (alias_casts.same_dtype_cast(node) and len(node.output().uses()) == 1
            and node.inputsAt(0).type().dtype() in BACKEND_DTYPES
            and node.inputsAt(1).node().kind() == "prim::Constant"
            and node.output().uses()[0].user.kind() in LOWERINGS)


def _pending_shapes(nodes: list[torch._C.Node]) -> dict[torch._C.Node, shape_arguments.ShapeChain]:
    """The views whose shape, and the binary ops whose 0-dim operand, is arithmetic over
    sizes that they alone read: that arithmetic waits for their mapping, which takes it in."""
    pending = {}
    for node in nodes:
        if node.kind() not in LOWERINGS:
            continue
        for i, scalar in shape_arguments.arguments(node):
            found = shape_arguments.chain(node.inputsAt(i), scalar)
            if (found is not None and shape_arguments.private(found, node)
                    and (not scalar or shape_arguments.floating_scalar(found.value))):
                pending[node] = found
                break
    return pending


# Why a node computing integer data stays with ATen (passes/integer_data.py).
INTEGER_DATA = ("computes from integer data (positions, distances), whose exact value a later "
                "cast or comparison reads: oneDNN rounds otherwise than ATen")


def map_block(graph: torch._C.Graph, block: torch._C.Block, free_id: int, facts: Facts,
              integer_data: frozenset[int] = frozenset()) -> MappedBlock:
    mapped = MappedBlock(block, BackendGraph(free_id), list(block.nodes()))
    backend = mapped.backend

    def tensor(v: torch._C.Value) -> int:
        mapped.values[v.unique()] = v
        return backend.add_tensor(tensor_spec(v))

    def wildcard(node: torch._C.Node, inputs: list[torch._C.Value]) -> None:
        backend.add_op("Wildcard", [tensor(v) for v in inputs],
                       [tensor(v) for v in node.outputs()], node=node)

    defined = {v.unique() for v in block.inputs()}
    # Lists, alias casts and paddings a convolution takes in, waiting for their user's
    # mapping, by their value's id.
    waiting: dict[int, torch._C.Node] = {}
    shapes = _pending_shapes(mapped.nodes)
    waiting_shape = {n for found in shapes.values() for n in found.nodes}
    for node in mapped.nodes:
        entry = LOWERINGS.get(node.kind())
        if node.kind() == "prim::Constant" or node in waiting_shape:
            pass
        elif _list_taken_in(node):
            waiting[node.output().unique()] = node
        elif _alias_cast(node) or takes_padding(node):
            waiting[node.output().unique()] = node
            backend.aliases[node.output().unique()] = tensor(node.inputsAt(0))
        elif entry is None or list(node.blocks()):
            mapped.unmapped[node] = (NOT_MAPPED.get(node.kind(), "no mapping") if entry is None
                                     else "has blocks")
        elif any(v.unique() in integer_data for v in node.outputs()):
            mapped.unmapped[node] = INTEGER_DATA
        else:
            start = len(backend.ops)
            lowering = Lowering(backend, graph, node, facts, entry.quantized)
            try:
                if entry.finite_only and not lowering.finite(0):
                    raise Unsupported(f"{entry.finite_only}, and its input is not proven finite")
                entry.lower(lowering)
                lowering.absorbed += [waiting.pop(v.unique()) for v in node.inputs()
                                      if v.unique() in waiting
                                      and waiting[v.unique()].kind() != "prim::ListConstruct"]
                if lowering.joins is not None:  # mapped as its input: in that op's partition
                    lowering.joins.absorbed += [*lowering.absorbed, node]
                    lowering.joins.shape_sources += lowering.shape_sources
                    lowering.joins.static_shapes |= entry.static_shapes or lowering.pinned
                    lowering.joins.last_dims |= lowering.last_dims
                else:
                    backend.ops[start].absorbed = lowering.absorbed
                    backend.ops[start].shape_sources = lowering.shape_sources
                for op in backend.ops[start:]:
                    op.static_shapes = entry.static_shapes or lowering.pinned
                    op.last_dims = frozenset(lowering.last_dims)
                    op.assumes_finite = lowering.assumes_finite
                for v in (*node.inputs(), *node.outputs(), *lowering.constants,
                          *(x for n in lowering.absorbed for x in n.inputs())):
                    if v.unique() in backend.tensors:
                        mapped.values[v.unique()] = v
            except Unsupported as e:
                del backend.ops[start:]
                mapped.unmapped[node] = str(e)
        if node in mapped.unmapped:
            for v in node.inputs():
                if v.unique() in waiting:  # the list's or cast's user is not mapped after all
                    backend.aliases.pop(v.unique(), None)
                    wildcard(waiting.pop(v.unique()), list(v.node().inputs()))
            wildcard(node, [*node.inputs(), *_captured(node, defined)])
        if node in shapes:
            _settle_shape(node, shapes[node], mapped, wildcard, tensor)
        defined.update(v.unique() for v in node.outputs())
    for v in block.returnNode().inputs():
        backend.add_op("End", [tensor(v)], [])
    for node, why in mapped.unmapped.items():
        log.debug(NAME, f"not mapped: {node.kind()}: {why}")
    log.update(NAME, lambda: "backend graph:\n" + backend.to_text())
    return mapped


def _settle_shape(consumer: torch._C.Node, found: shape_arguments.ShapeChain,
                  mapped: MappedBlock, wildcard: Callable[[torch._C.Node, list[torch._C.Value]],
                                                          None],
                  tensor: Callable[[torch._C.Value], int]) -> None:
    """Once a view is mapped or not: its shape arithmetic stays with ATen with it, or joins
    its partition. Then oneDNN is told of each size read but of the view's own input, so
    that a tensor whose sizes the group reads stays a partition output (the view reads its
    input anyway)."""
    if consumer in mapped.unmapped:
        for node in found.nodes:
            mapped.unmapped[node] = NOT_MAPPED.get(node.kind(), "no mapping")
            wildcard(node, list(node.inputs()))
        return
    own = consumer.inputsAt(0).unique()
    for source in found.sources:
        if source.unique() != own:
            mapped.backend.add_op("Wildcard", [tensor(source)], [])
