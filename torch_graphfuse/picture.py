"""A picture of what the last pipeline run fused:

    torch_graphfuse.last_report().picture("fused.svg")

Each fusion group is a box holding its ops; ops left with ATen are drawn
outside, marked with why, as the text report says it ("not mapped: no
mapping"); a region oneDNN offered that the plugin left unfused is a dashed
box saying why. Edges are the data flow between ops, from the graph inputs
and to its outputs; constants, lists and other prim:: plumbing are looked
through, and the graphfuse::all_finite check is a note.

Big models stay readable: a run of identical consecutive blocks is drawn
once, in a box marked "xN". Blocks are found as a period in the sequence of
items (a group, or an op left with ATen) in graph order: two items match when
they hold the same ops, marked alike, reading their inputs from items the
same distance back (or from the same op or input outside). Of all runs, the ones
covering the most items win; among equal ones the shortest period, ending
last, so a run lines up with the end of a stage, where a repeated block ends
(ResNet's blocks differ from the stage's first one at their start). A fold
must be a chain of blocks that hang together, each repetition reading the
one before (side by side branches such as BERT's query, key and value stay
drawn), and hide three items or more. Then runs of ops inside each group drawn are folded the
same way. This folds the bottleneck blocks of each ResNet stage (as groups,
as ops of one group, or as ops of a region left unfused) and BERT's layers.

The Graphviz DOT text is always written; the picture is rendered with
Graphviz's `dot` when it is installed, else an indented text listing is
written instead, and the log (name `picture`) says so.
"""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from collections import Counter
from collections.abc import Iterator, Sequence, Set
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from . import log
from .passes.finite_guard import ALL_FINITE
from .passes.graph_utils import all_nodes
from .passes.rewrite import FUSION_GROUP
from .report import FusionReport, Unfused, op_key

NAME = log.module_name(__file__)
RENDERED = (".svg", ".png", ".pdf")


@dataclass(frozen=True)
class Op:
    name: str  # unique: its first output's debug name ("g<N>/..." inside group N)
    kind: str  # "aten::relu"
    reads: tuple[str, ...]  # names of the ops and graph inputs it reads
    box: int | None = None  # index in Picture.boxes: its fusion group or offered region
    why: str | None = None  # why it stayed with ATen, when no box says it


@dataclass(frozen=True)
class Box:
    label: str  # "group 3", or why a region oneDNN offered stayed unfused
    fused: bool


@dataclass
class Picture:
    """The optimized graph as drawn, without the torch objects (they die with the graph)."""
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
    sub = group.g("Subgraph")
    # The group's inputs past the subgraph's are checks (all_finite), not data.
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
    return (f"graphfuse::all_finite checks {', '.join(checked)} once per call; "
            f"{'group' if one else 'groups'} {', '.join(map(str, users))} "
            f"{'runs' if one else 'run'} unfused when it holds NaN or inf")


def snapshot(graph: torch._C.Graph, groups: list[torch._C.Node],
             report: FusionReport) -> Picture:
    """What picture() draws of `graph`, with the reasons `report` recorded;
    groups are numbered by their place in `groups`, as the report numbers them."""
    picture = Picture(str(report).splitlines()[0])
    numbers = {g: i for i, g in enumerate(groups, 1)}
    sources: Sources = {}
    for v in graph.inputs():
        if v.uses():  # not the frozen module's `self`
            picture.inputs.append(v.debugName())
        sources[v.unique()] = (v.debugName(),)
    # Regions of two or more drawn ops get a box (index -1 until drawn).
    regions = (report.unfused.get(op_key(n)) for n in all_nodes(graph.block())
               if n.kind() != "prim::Constant" and not _plumbing(n, n.kind()))
    sizes = Counter(u.region for u in regions if u is not None and u.region is not None)
    region_boxes = {region: -1 for region, size in sizes.items() if size > 1}
    for node in all_nodes(graph.block()):
        kind = node.kind()
        if kind == "prim::Constant":
            continue  # reads nothing, so carries no edge
        reads = _read(list(node.inputs()), sources)
        if kind == FUSION_GROUP:
            _add_group(picture, node, numbers.get(node, len(picture.boxes) + 1), sources)
        elif kind == ALL_FINITE:
            picture.notes.append(_finite_note(node, reads, numbers))
        elif _plumbing(node, kind):
            sources.update((v.unique(), reads) for v in node.outputs())
        else:
            name = _name(node)
            _add_unfused(picture, Op(name, kind, reads), report.unfused.get(op_key(node)),
                         region_boxes)
            sources.update((v.unique(), (name,)) for v in node.outputs())
    picture.outputs = [_read([v], sources) for v in graph.outputs()]
    return picture


@dataclass
class Element:
    """One thing drawn: an op, or a box holding elements (a fusion group, a
    region oneDNN offered left unfused, a block repeated: "x3")."""
    style: str  # "op", "group", "region" or "repeat"
    label: str
    op: Op | None = None
    children: list[Element] = field(default_factory=list)


@dataclass
class Layout:
    elements: list[Element]
    edges: list[tuple[str, str]]  # (op or input name, op name or "output <k>")


@dataclass
class _Fold:
    """Runs folded at one level: each op to the op drawn for it, each op in a
    run to (run, repetition), and each run's count."""
    shown: dict[str, str] = field(default_factory=dict)
    place: dict[str, tuple[int, int]] = field(default_factory=dict)
    counts: list[int] = field(default_factory=list)


def _items(picture: Picture) -> list[list[Op]]:
    """A fusion group's ops as one item, each other op as one."""
    items: list[list[Op]] = []
    for op in picture.ops:
        if picture.fused(op) and items and items[-1][0].box == op.box:
            items[-1].append(op)
        else:
            items.append([op])
    return items


def _region(picture: Picture, item: list[Op]) -> int | None:
    box = item[0].box
    return box if box is not None and not picture.boxes[box].fused else None


def _keys(picture: Picture, items: list[list[Op]]) -> tuple[list[tuple], list[set[int]]]:
    """What makes two items alike (their ops, marks and where they read from),
    and how many items back each reads."""
    item_of = {op.name: i for i, item in enumerate(items) for op in item}
    keys = []
    for i, item in enumerate(items):
        local = {op.name: q for q, op in enumerate(item)}

        def where(name: str, i: int = i, local: dict[str, int] = local) -> tuple:
            if name in local:
                return ("own", local[name])
            if name in item_of:
                return ("back", i - item_of[name])
            return ("outside", name)

        keys.append(tuple((op.kind, op.why, _region(picture, item),
                           tuple(where(r) for r in op.reads)) for op in item))
    backs = [{where[1] for op_key in key for where in op_key[3] if where[0] == "back"}
             for key in keys]
    return keys, backs


def _chained_block(backs: Sequence[Set[int]], start: int, period: int) -> bool:
    """Whether the block of `period` keys at `start` reads the block before it,
    and its keys hang together (a block cut across side by side branches does not)."""
    parent = list(range(period))  # union-find over the block's keys

    def root(t: int) -> int:
        while parent[t] != t:
            t = parent[t]
        return t

    chained = False
    for t in range(period):
        for d in backs[start + t]:
            if d <= t:
                parent[root(t)] = root(t - d)
            chained |= t < d <= t + period
    return chained and len({root(t) for t in range(period)}) == 1


def find_runs(keys: Sequence[object], backs: Sequence[Set[int]], containers: list[int | None],
              max_period: int = 64, min_hidden: int = 3) -> list[tuple[int, int, int]]:
    """Non-overlapping runs of `keys`, (start, period, count): a block of
    `period` keys repeated, each repetition reading the one before and
    hanging together (`backs`: how many keys back each key reads), all in one
    container (region box), whose folding hides `min_hidden` keys or more."""
    n = len(keys)
    candidates = []
    for period in range(1, min(max_period, n // 2) + 1):
        same = 0  # how many keys from x on equal the key `period` later
        for x in range(n - period - 1, -1, -1):
            same = same + 1 if keys[x] == keys[x + period] else 0
            count = same // period + 1
            if period * (count - 1) >= min_hidden:
                candidates.append((-count * period, period, -x, count))
    runs: list[tuple[int, int, int]] = []
    taken = [False] * n
    for _, period, minus_x, count in sorted(candidates):
        start = -minus_x
        span = range(start, start + period * count)
        free = not any(taken[j] for j in span) and len({containers[j] for j in span}) == 1
        if not free or not _chained_block(backs, start, period):
            continue
        for j in span:
            taken[j] = True
        runs.append((start, period, count))
    return sorted(runs)


def _fold(picture: Picture, items: list[list[Op]], containers: list[int | None],
          fold: _Fold) -> list[tuple[int, int | None, list[int]]]:
    """Fold the runs of `items` into `fold`; the items drawn, each with its run
    (index in fold.counts) and the items it stands for."""
    drawn: dict[int, tuple[int | None, list[int]]] = {j: (None, [j]) for j in range(len(items))}
    for start, period, count in find_runs(*_keys(picture, items), containers):
        run = len(fold.counts)
        fold.counts.append(count)
        for j in range(start, start + period * count):
            rep, offset = divmod(j - start, period)
            first = start + offset
            for op, shown in zip(items[j], items[first], strict=True):
                fold.shown[op.name] = shown.name
                fold.place[op.name] = (run, rep)
            if rep:
                del drawn[j]
                drawn[first][1].append(j)
            else:
                drawn[j] = (run, [j])
    return [(j, run, stands) for j, (run, stands) in sorted(drawn.items())]


def _short(kind: str) -> str:
    return kind.split("::")[-1]


def _box(boxes: dict[tuple[str, int], Element], key: tuple[str, int], style: str, label: str,
         parent: list[Element]) -> list[Element]:
    """The children of the box `key`, made in `parent` the first time."""
    if key not in boxes:
        boxes[key] = Element(style, label)
        parent.append(boxes[key])
    return boxes[key].children


def _group(picture: Picture, stands: list[list[Op]], fold: _Fold) -> Element:
    """A group drawn for itself and the groups in `stands` after it, repeated
    blocks of ops inside it folded into `fold`."""
    labels = [picture.boxes[item[0].box].label for item in stands]
    label = labels[0] if len(labels) == 1 else (
        "groups " + ", ".join(label.removeprefix("group ") for label in labels))
    group = Element("group", label)
    ops = stands[0]
    boxes: dict[tuple[str, int], Element] = {}
    for q, run, _ in _fold(picture, [[op] for op in ops], [None] * len(ops), fold):
        parent = group.children
        if run is not None:
            parent = _box(boxes, ("run", run), "repeat", f"x{fold.counts[run]}", parent)
        parent.append(Element("op", _short(ops[q].kind), ops[q]))
    return group


def layout(picture: Picture) -> Layout:
    """The elements to draw, repeated blocks folded (runs of groups and ops,
    then runs of ops inside each group drawn), and the edges between them."""
    items = _items(picture)
    outer, inner = _Fold(), _Fold()
    elements: list[Element] = []
    boxes: dict[tuple[str, int], Element] = {}
    regions = [_region(picture, item) for item in items]
    for j, run, stands in _fold(picture, items, regions, outer):
        parent = elements
        if regions[j] is not None:
            label = picture.boxes[regions[j]].label
            parent = _box(boxes, ("region", regions[j]), "region", label, parent)
        if run is not None:
            parent = _box(boxes, ("run", run), "repeat", f"x{outer.counts[run]}", parent)
        if picture.fused(items[j][0]):
            parent.append(_group(picture, [items[i] for i in stands], inner))
        else:
            parent += [Element("op", _short(op.kind), op) for op in items[j]]
    return Layout(elements, _edges(picture, [outer, inner]))


def _edges(picture: Picture, folds: list[_Fold]) -> list[tuple[str, str]]:
    edges: dict[tuple[str, str], None] = {}
    for op in picture.ops:
        for name in op.reads:
            a, b = name, op.name
            for fold in folds:
                place_a, place_b = fold.place.get(a), fold.place.get(b)
                # A block feeding the next repetition of itself: the "xN" says it.
                if place_a and place_b and place_a[0] == place_b[0] and place_a[1] != place_b[1]:
                    break
                a, b = fold.shown.get(a, a), fold.shown.get(b, b)
            else:
                edges[(a, b)] = None
    for k, names in enumerate(picture.outputs):
        for name in names:
            for fold in folds:
                name = fold.shown.get(name, name)
            edges[(name, f"output {k}")] = None
    return list(edges)


def _dot_text(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _wrap(text: str) -> str:
    return "\n".join(textwrap.wrap(text, 36))


_BOX_STYLE = {
    "group": 'style="rounded,filled"; fillcolor="#e3f1df"; color="#4d8f3f"',
    "region": 'style="dashed"; color="#c0392b"; fontcolor="#c0392b"',
    "repeat": 'style="bold"; color="#555555"',
}
_OP_STYLE = {  # fused, or left with ATen
    True: 'style="filled", fillcolor="#ffffff"',
    False: 'style="filled", fillcolor="#fbe3e1", color="#c0392b"',
}


def to_dot(picture: Picture) -> str:
    """Graphviz DOT text: one statement a line, clusters for boxes."""
    drawn = layout(picture)
    ids: dict[str, str] = {}

    def node_id(name: str) -> str:
        return ids.setdefault(name, f"n{len(ids)}")

    lines = ["digraph fusion {", f'  label="{_dot_text(picture.title)}"; labelloc=t;',
             "  ranksep=0.2; nodesep=0.2;",
             '  node [shape=box, fontname="Helvetica", fontsize=10, height=0.3, '
             'margin="0.08,0.03"];',
             '  edge [color="#777777"];']
    lines += [f'  {node_id(name)} [label="input {_dot_text(name)}", shape=oval];'
              for name in picture.inputs]

    def emit(elements: list[Element], indent: str) -> None:
        for element in elements:
            if element.op is not None:
                op = element.op
                label = element.label + (f"\n{_wrap(op.why)}" if op.why else "")
                lines.append(f'{indent}{node_id(op.name)} [label="{_dot_text(label)}", '
                             f"{_OP_STYLE[picture.fused(op)]}];")
                continue
            lines.append(f"{indent}subgraph cluster_{len(lines)} {{")
            lines.append(f'{indent}  label="{_dot_text(_wrap(element.label))}"; '
                         f"{_BOX_STYLE[element.style]};")
            emit(element.children, indent + "  ")
            lines.append(f"{indent}}}")

    emit(drawn.elements, "  ")
    lines += [f'  {node_id(f"output {k}")} [label="output {k}", shape=oval];'
              for k in range(len(picture.outputs))]
    lines += [f"  {node_id(a)} -> {node_id(b)};" for a, b in drawn.edges]
    lines += [f'  note{k} [label="{_dot_text(_wrap(note))}", shape=note];'
              for k, note in enumerate(picture.notes)]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _walk(elements: list[Element]) -> Iterator[Element]:
    for element in elements:
        yield element
        yield from _walk(element.children)


def _ops(elements: list[Element]) -> list[Op]:
    return [element.op for element in _walk(elements) if element.op is not None]


def _kinds(elements: list[Element]) -> str:
    """A group's ops in one line, a repeated block of them as "[conv, relu] x3"."""
    return ", ".join(element.label if element.op is not None
                     else f"[{_kinds(element.children)}] {element.label}" for element in elements)


def to_text(picture: Picture) -> str:
    """The same picture as an indented listing: each item, what it reads, and
    for an op left with ATen why."""
    drawn = layout(picture)
    display = {name: f"input {name}" for name in picture.inputs}
    for element in _walk(drawn.elements):
        if element.style == "group":
            display.update((op.name, element.label) for op in _ops(element.children))
        elif element.op is not None:
            display.setdefault(element.op.name, f"{element.label} %{element.op.name}")
    reads: dict[str, list[str]] = {}
    for a, b in drawn.edges:
        reads.setdefault(display.get(b, b), []).append(display[a])
    lines = [picture.title]

    def from_(name: str) -> str:
        sources = [s for s in dict.fromkeys(reads.get(name, ())) if s != name]
        return f"  <- {', '.join(sources)}" if sources else ""

    def emit(elements: list[Element], indent: str) -> None:
        for element in elements:
            if element.op is not None:
                name = display[element.op.name]
                why = f"  [{element.op.why}]" if element.op.why else ""
                lines.append(f"{indent}{name}{from_(name)}{why}")
            elif element.style == "group":
                kinds = _kinds(element.children)
                lines.append(f"{indent}{element.label}: {kinds}{from_(element.label)}")
            else:
                lines.append(f"{indent}{element.label}:")
                emit(element.children, indent + "  ")

    emit(drawn.elements, "  ")
    lines += [f"  output {k}{from_(f'output {k}')}" for k in range(len(picture.outputs))]
    lines += [f"note: {note}" for note in picture.notes]
    return "\n".join(lines) + "\n"


def write(picture: Picture, path: Path) -> Path:
    """Write `path`'s DOT text next to it (.dot) and render `path` with Graphviz's
    `dot`; without `dot`, write the text form (.txt) instead. Returns the picture written."""
    dot_path = path.with_suffix(".dot")
    dot_path.write_text(to_dot(picture))
    if path.suffix == ".dot":
        return dot_path
    dot = shutil.which("dot")
    if path.suffix in RENDERED and dot is not None:
        subprocess.run([dot, f"-T{path.suffix[1:]}", str(dot_path), "-o", str(path)],
                       check=True, capture_output=True)
        return path
    text_path = path.with_suffix(".txt")
    text_path.write_text(to_text(picture))
    if path.suffix != ".txt":
        log.dump(NAME, f"Graphviz's dot is not installed: wrote the picture as text, {text_path}")
    return text_path
