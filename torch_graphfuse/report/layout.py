"""Where the picture repeats itself, folded: a run of identical consecutive
blocks is drawn once, in a box marked "xN", so that big models stay readable.

Blocks are found as a period in the sequence of items (a group, or an op left
with ATen) in graph order: two items match when they hold the same ops, marked
alike, reading their inputs from items the same distance back (or from the same
op or input outside). Of all runs, the ones covering the most items win; among
equal ones the shortest period, ending last, so a run lines up with the end of
a stage, where a repeated block ends (ResNet's blocks differ from the stage's
first one at their start). A fold must be a chain of blocks that hang together,
each repetition reading the one before (side by side branches such as BERT's
query, key and value stay drawn), and hide three items or more. Then runs of
ops inside each group drawn are folded the same way. This folds the bottleneck
blocks of each ResNet stage (as groups, as ops of one group, or as ops of a
region left unfused) and BERT's layers.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import dataclass, field

from .snapshot import Op, Picture


@dataclass
class Element:
    """One thing drawn: an op, or a box holding elements (a fusion group, a
    region a backend offered left unfused, a block repeated: "x3")."""
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
