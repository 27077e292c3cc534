"""Which nodes of a block compute tensors from sizes and constants alone (see partition.py):
the size-determined values, the in-place writes that count among them, and the sets of
nodes that share a tensor."""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import torch

from ...passes.graph_utils import written_values

# Ops that read only what the tensor's type says of it.
METADATA = frozenset({"aten::size", "aten::dim", "aten::numel", "prim::device", "prim::dtype"})
# Results that are no function of the arguments.
_UNINITIALIZED = frozenset({"aten::empty", "aten::empty_like", "aten::new_empty",
                            "aten::empty_strided", "aten::new_empty_strided"})
_PURE_PRIMS = frozenset({"prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
                         "prim::TupleUnpack", "prim::TupleIndex", "prim::NumToTensor"})
# Containers, whose escaping (returned) makes their elements escape.
_CONTAINERS = frozenset({"prim::TupleConstruct", "prim::ListConstruct", "prim::DictConstruct"})


def _pure(node: torch._C.Node) -> bool:
    """A deterministic op with no blocks whose result is a function of its arguments."""
    kind = node.kind()
    if list(node.blocks()) or kind in _UNINITIALIZED or node.isNondeterministic():
        return False
    return kind in _PURE_PRIMS if kind.startswith("prim::") else kind.startswith("aten::")


def _computes(node: torch._C.Node) -> bool:
    """A pure op that writes nothing."""
    written = written_values(node)
    return _pure(node) and written is not None and not written


def writes(node: torch._C.Node) -> bool:
    """A pure op that writes some of its arguments in place."""
    return _pure(node) and bool(written_values(node))


def _escaping(block: torch._C.Block) -> set[int]:
    """Ids of the values the block returns, in containers or not, or hands to a node with
    blocks (which may return them; determined also leaves out those its blocks read)."""
    nodes = list(block.nodes())
    escaping = {v.unique() for v in block.returnNode().inputs()}
    for node in nodes:
        if list(node.blocks()):
            escaping |= {v.unique() for v in node.inputs()}
    for node in reversed(nodes):
        if node.kind() in _CONTAINERS and any(v.unique() in escaping for v in node.outputs()):
            escaping |= {v.unique() for v in node.inputs()}
    return escaping


def _data_inputs(node: torch._C.Node) -> list[torch._C.Value]:
    """The inputs whose values the node reads: all but a metadata read's tensor."""
    inputs = list(node.inputs())
    return inputs[1:] if node.kind() in METADATA else inputs


Writers = Mapping[torch._C.Node, AbstractSet[torch._C.Node]]


def walk(start: torch._C.Node, within: AbstractSet[torch._C.Node], writers: Writers,
          stop: AbstractSet[torch._C.Node] = frozenset()) -> set[torch._C.Node]:
    """The nodes of `within` computing what `start` reads (itself included), through data
    inputs and the writes to what they make, not past the nodes of `stop` (but `start`)."""
    found: set[torch._C.Node] = set()
    stack = [start]
    while stack:
        node = stack.pop()
        if node in found or node not in within or (node in stop and node is not start):
            continue
        found.add(node)
        stack += [v.node() for v in _data_inputs(node)]
        stack += writers.get(node, ())
    return found


def _closure(block: torch._C.Block, refused: AbstractSet[torch._C.Node]) -> set[torch._C.Node]:
    """The block's nodes whose results are size-determined (constants left out), but for
    those that escape it, counting every write but the `refused`."""
    values: set[int] = set()
    nodes: set[torch._C.Node] = set()
    returned = _escaping(block)
    top = set(block.nodes())
    for node in block.nodes():
        kind = node.kind()
        if kind == "prim::Constant":
            values |= {v.unique() for v in node.outputs()}
            continue
        counts = (kind in METADATA or _computes(node)
                  or (node not in refused and writes(node)))
        if (not counts
                or any(v.unique() not in values for v in _data_inputs(node))
                or any(v.unique() in returned or any(u.user not in top for u in v.uses())
                       for v in node.outputs())):
            continue
        values |= {v.unique() for v in node.outputs()}
        nodes.add(node)
    return nodes


def _shares(node: torch._C.Node) -> list[torch._C.Value] | None:
    """The inputs whose memory the node's results may share (a view's, an in-place op's
    self, a list's elements), from its schema's alias annotations; None where they do not
    say (a schema-less op, an alias into a list's elements)."""
    kind = node.kind()
    if kind in ("prim::ListConstruct", "prim::TupleConstruct"):
        return list(node.inputs())
    if kind in ("prim::Constant", "prim::NumToTensor"):
        return []
    schema = node.schema()
    if schema == "(no schema)":
        return None
    arguments = torch._C.parse_schema(schema).arguments
    annotated = [(v, a.alias_info) for v, a in zip(node.inputs(), arguments, strict=False)
                 if a.alias_info is not None]
    if any(info.before_set != info.after_set or "*" in info.before_set
           for _, info in annotated):
        return None
    return [v for v, _ in annotated]


def _changed(write: torch._C.Node, nodes: AbstractSet[torch._C.Node]
             ) -> list[torch._C.Value] | None:
    """Every value that may share the memory `write` writes, where that memory is one the
    nodes made; None where it is not, or where a schema does not say. Followed through the
    schemas' alias annotations: alias analysis puts every tensor in a list (as aten::index
    takes its indices) among the wildcards that may alias the graph's inputs."""
    found: dict[int, torch._C.Value] = {}
    for written in written_values(write) or ():
        base = written
        while (shared := _shares(base.node())):
            if len(shared) != 1:
                return None
            base = shared[0]
        if shared is None or base.node() not in nodes:
            return None
        stack = [base]
        while stack:
            value = stack.pop()
            if value.unique() in found:
                continue
            found[value.unique()] = value
            for use in value.uses():
                into = _shares(use.user)
                if into is None:
                    return None
                if any(v.unique() == value.unique() for v in into):
                    stack += list(use.user.outputs())
    return list(found.values())


def _read_before(write: torch._C.Node, changed: list[torch._C.Value],
                 nodes: AbstractSet[torch._C.Node], position: dict[torch._C.Node, int]) -> bool:
    """Whether a node other than `nodes` reads the changed memory before `write` (or in a
    nested block)."""
    at = position[write]
    return any(u.user not in nodes and position.get(u.user, -1) < at
               for v in changed for u in v.uses())


@dataclass
class Determined:
    """A block's size-determined nodes (constants left out, and those whose results
    escape it); for each node, the writes that may change its results; and the nodes that
    make, read or write memory a write changes, which are never copied (a copy would run
    outside the region, on its kept value after every write) and hold their region
    together like nodes computing arrays."""

    nodes: set[torch._C.Node]
    writers: dict[torch._C.Node, set[torch._C.Node]]
    memory: set[torch._C.Node]


def determined(block: torch._C.Block) -> Determined:
    position = {node: i for i, node in enumerate(block.nodes())}
    refused: set[torch._C.Node] = set()
    while True:
        nodes = _closure(block, refused)
        changed = {w: _changed(w, nodes) for w in nodes if writes(w)}
        shared = {w for w, values in changed.items()
                  if values is None or _read_before(w, values, nodes, position)}
        if shared:
            # Refusing a write can leave others without their inputs: look again.
            refused |= shared
            continue
        found = Determined(nodes, {}, set(changed))
        for w, values in changed.items():
            for v in values or ():
                found.writers.setdefault(v.node(), set()).add(w)
                found.memory.add(v.node())
                found.memory |= {u.user for u in v.uses()
                                 if u.user in nodes and u.user.kind() not in METADATA}
        return found


def is_tensor(value: torch._C.Value) -> bool:
    return isinstance(value.type(), torch._C.TensorType)


def computes_tensor(node: torch._C.Node) -> bool:
    """Whether the node computes an array: a 0-dim tensor (a size as a tensor) is
    arithmetic, copied for each group that reads it rather than joining them."""
    return any(is_tensor(v) and v.type().dim() != 0 for v in node.outputs())


def components(block: torch._C.Block, found: Determined) -> list[set[torch._C.Node]]:
    """The nodes of each group: the closures of the size-determined tensors other nodes
    read, merged where they share a node computing an array or touching written memory."""
    determined = found.nodes
    outputs = []
    for node in block.nodes():
        if node in determined:
            outputs += [v for v in node.outputs() if is_tensor(v)
                        and any(u.user not in determined for u in v.uses())]
    groups: list[set[torch._C.Node]] = []
    for value in outputs:
        nodes = walk(value.node(), determined, found.writers)
        tensors = {n for n in nodes if computes_tensor(n) or n in found.memory}
        merged = [g for g in groups if g & tensors]
        for g in merged:
            groups.remove(g)
            nodes |= g
        groups.append(nodes)
    return groups
