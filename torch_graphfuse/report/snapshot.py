"""The optimized graph as the picture draws it, kept without the torch objects
(they die with the graph).

Each fusion group is a box holding its ops; ops left with ATen stand outside,
marked with why, as the text report says it ("not mapped: no mapping"); a
region a backend offered that the plugin left unfused is a dashed box saying why.
Edges are the data flow between ops, from the graph inputs and to its outputs;
constants, lists and other prim:: plumbing are looked through, and the
finite check (group_schema.ALL_FINITE) is a note.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import torch

from .. import group_schema
from ..passes.graph_utils import all_nodes


def op_key(node: torch._C.Node) -> str:
    """A node's identity within its graph, as long as the graph lives: its
    outputs' debug names (unique in a graph), which outlive the pass objects."""
    outputs = ",".join(v.debugName() for v in node.outputs())
    return outputs or f"{node.kind()}({','.join(v.debugName() for v in node.inputs())})"


@dataclass(frozen=True)
class Unfused:
    """Why an op stayed with ATen, as the picture marks it."""
    why: str
    region: int | None = None  # index in FusionReport.rejections of the region it was in


@dataclass(frozen=True)
class Op:
    name: str  # unique: its first output's debug name ("g<N>/..." inside group N)
    kind: str  # "aten::relu"
    reads: tuple[str, ...]  # names of the ops and graph inputs it reads
    box: int | None = None  # index in Picture.boxes: its fusion group or offered region
    why: str | None = None  # why it stayed with ATen, when no box says it


@dataclass(frozen=True)
class Box:
    label: str  # "group 3", or why an offered region stayed unfused
    fused: bool


@dataclass
class Picture:
    """The optimized graph as drawn."""
    title: str
    inputs: list[str] = field(default_factory=list)  # graph inputs' debug names
    ops: list[Op] = field(default_factory=list)  # in graph order, a group's ops together
    boxes: list[Box] = field(default_factory=list)
    outputs: list[tuple[str, ...]] = field(default_factory=list)  # what each output comes from
    notes: list[str] = field(default_factory=list)

    def fused(self, op: Op) -> bool:
        return op.box is not None and self.boxes[op.box].fused


# Sizes and int arithmetic (tensor arithmetic on sizes, traced as 0-dim tensors, is drawn).
_SHAPE_KINDS = frozenset({"aten::size", "aten::Int", "aten::floordiv", "aten::__getitem__"})

# Names of the ops and graph inputs a value comes from, by value id.
Sources = dict[int, tuple[str, ...]]



def _plumbing(node: torch._C.Node, kind: str) -> bool:
    """Lists, tuples, sizes and arithmetic over them: looked through, not drawn."""
    return (kind.startswith("prim::") or kind in _SHAPE_KINDS) and not list(node.blocks())


def _read(values: list[torch._C.Value], sources: Sources) -> tuple[str, ...]:
    """The ops and graph inputs `values` come from, each once."""
    names = (name for v in values for name in sources.get(v.unique(), ()))
    return tuple(dict.fromkeys(names))


def _name(node: torch._C.Node, prefix: str = "") -> str:
    outputs = list(node.outputs())
    return prefix + (outputs[0].debugName() if outputs else op_key(node))


def _add_group(picture: Picture, group: torch._C.Node, number: int, sources: Sources) -> None:
    box = len(picture.boxes)
    picture.boxes.append(Box(f"group {number}", fused=True))
    sub = group_schema.subgraph(group)
    # The group's inputs past the subgraph's are for the finiteness check (all_finite's
    # answers, or the inputs an external backend checks itself), not data.
    inner = {v.unique(): _read([outer], sources)
             for v, outer in zip(sub.inputs(), group.inputs(), strict=False)}
    for node in sub.nodes():
        kind = node.kind()
        if kind == "prim::Constant":
            continue  # reads nothing, so carries no edge
        reads = _read(list(node.inputs()), inner)
        if _plumbing(node, kind):
            inner.update((v.unique(), reads) for v in node.outputs())
            continue
        name = _name(node, f"g{number}/")
        picture.ops.append(Op(name, kind, reads, box))
        inner.update((v.unique(), (name,)) for v in node.outputs())
    for out, sub_out in zip(group.outputs(), sub.outputs(), strict=True):
        sources[out.unique()] = inner.get(sub_out.unique(), ())


def _add_unfused(picture: Picture, op: Op, unfused: Unfused | None,
                 region_boxes: dict[int, int]) -> None:
    """An op left with ATen: marked with why, or put in the box of its region
    (a region of one op is marked like an op)."""
    if unfused is None or unfused.region not in region_boxes:
        picture.ops.append(replace(op, why=unfused.why if unfused is not None else None))
        return
    region = unfused.region
    if region_boxes[region] < 0:
        region_boxes[region] = len(picture.boxes)
        picture.boxes.append(Box(unfused.why, fused=False))
    picture.ops.append(replace(op, box=region_boxes[region]))


def _finite_note(check: torch._C.Node, checked: tuple[str, ...],
                 numbers: dict[torch._C.Node, int]) -> str:
    users = sorted(numbers[use.user] for use in check.output().uses() if use.user in numbers)
    one = len(users) == 1
    return (f"{group_schema.ALL_FINITE} checks {', '.join(checked)} once per call; "
            f"{'group' if one else 'groups'} {', '.join(map(str, users))} "
            f"{'runs' if one else 'run'} unfused when it holds NaN or inf")


def snapshot(graph: torch._C.Graph, groups: list[torch._C.Node], title: str,
             unfused: dict[str, Unfused]) -> Picture:
    """What the picture draws of `graph` under `title`, its ops left with ATen
    marked as `unfused` (by op_key) says; groups are numbered by their place in
    `groups`, as the report numbers them."""
    picture = Picture(title)
    numbers = {g: i for i, g in enumerate(groups, 1)}
    sources: Sources = {}
    for v in graph.inputs():
        if v.uses():  # not the frozen module's `self`
            picture.inputs.append(v.debugName())
        sources[v.unique()] = (v.debugName(),)
    # Constants read nothing, so they carry no edge.
    nodes = [n for n in all_nodes(graph.block()) if n.kind() != "prim::Constant"]
    # Regions of two or more drawn ops get a box (index -1 until drawn).
    regions = (unfused.get(op_key(n)) for n in nodes if not _plumbing(n, n.kind()))
    sizes = Counter(u.region for u in regions if u is not None and u.region is not None)
    region_boxes = {region: -1 for region, size in sizes.items() if size > 1}
    for node in nodes:
        kind = node.kind()
        reads = _read(list(node.inputs()), sources)
        if kind == group_schema.KIND:
            _add_group(picture, node, numbers.get(node, len(picture.boxes) + 1), sources)
        elif kind == group_schema.ALL_FINITE:
            picture.notes.append(_finite_note(node, reads, numbers))
        elif _plumbing(node, kind):
            sources.update((v.unique(), reads) for v in node.outputs())
        else:
            name = _name(node)
            _add_unfused(picture, Op(name, kind, reads), unfused.get(op_key(node)),
                         region_boxes)
            sources.update((v.unique(), (name,)) for v in node.outputs())
    picture.outputs = [_read([v], sources) for v in graph.outputs()]
    return picture
