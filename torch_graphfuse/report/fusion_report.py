"""What the last pipeline run fused, and why the rest was not.

    >>> print(torch_graphfuse.last_report())
    torch_graphfuse: 2 fusion groups, 5 of 7 aten ops fused
      group 1: _convolution, relu
      ...
    not mapped (stay with ATen):
      aten::size x2: no mapping
    regions oneDNN offered, left unfused:
      [sigmoid]: a lone op ATen runs as fast

    >>> torch_graphfuse.last_report().picture("fused.svg")   # see picture.py
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch

from .. import _C
from . import picture
from .snapshot import Picture, Unfused, op_key, snapshot

_last: FusionReport | None = None


class Rejection(NamedTuple):
    region: str  # its ops: "_convolution, relu"
    why: str  # why it stayed unfused
    by: str  # who offered it: "oneDNN", "the cuDNN partitioner"
    aten_ops: int  # how many of its ops are aten's (not prim::ListConstruct and the like)


_ids = itertools.count()


def _is_aten(node: torch._C.Node) -> bool:
    return node.kind().startswith("aten::")


@dataclass
class FusionReport:
    # Numbers the pipeline run: each group carries it (its `report` attribute), so the
    # kernel files the input specs a group runs unfused under this report.
    id: int = field(default_factory=lambda: next(_ids))
    groups: list[list[str]] = field(default_factory=list)  # aten kinds of each group
    unmapped: list[tuple[str, str]] = field(default_factory=list)  # (kind, why not mapped)
    rejections: list[Rejection] = field(default_factory=list)  # regions left unfused
    unfused: dict[str, Unfused] = field(default_factory=dict)  # by op_key: what picture() shows
    graph: Picture | None = None  # the optimized graph, as picture() draws it

    def add_unmapped(self, node: torch._C.Node, why: str) -> None:
        self.unmapped.append((node.kind(), why))
        self.unfused[op_key(node)] = Unfused(f"not mapped: {why}")

    def add_rejected(self, region: str, nodes: list[torch._C.Node], why: str, *,
                     by: str) -> None:
        """A region `by` offered (a backend's `offered_by`; `region` names its ops) that
        stays unfused: its partitioner's refusal, or the rewrite's."""
        unfused = Unfused(f"offered by {by}, left unfused: {why}",
                          len(self.rejections))
        self.rejections.append(Rejection(region, why, by, sum(map(_is_aten, nodes))))
        self.unfused.update((op_key(n), unfused) for n in nodes)

    def add_graph(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        """Keep what picture() draws of the optimized `graph`; its groups are
        numbered by their place in `groups`, as the report numbers them."""
        self.graph = snapshot(graph, groups, self.headline, self.unfused)

    @property
    def rejected(self) -> list[tuple[str, str]]:
        """(region, why) of each region left unfused, whichever backend it was offered for."""
        return [(r.region, r.why) for r in self.rejections]

    def unfused_specs(self) -> list[tuple[str, str]]:
        """(group label, why) for each group that met an input spec it runs unfused: one
        oneDNN cannot compile on this CPU (bf16 without bf16 instructions), or one whose
        layout differs from the profiling runs. Filled in as the model runs."""
        return [tuple(u) for u in _C._unfused_specs(self.id)]

    def picture(self, path: str | Path) -> Path:
        """Draw the optimized graph into `path` (.svg, .png, .pdf, .dot or .txt) and
        return the file written: the text form when Graphviz's `dot` is missing."""
        if self.graph is None:
            raise ValueError("this report holds no graph to draw")
        return picture.write(self.graph, Path(path))

    @property
    def fused_ops(self) -> int:
        """The aten ops inside groups (their prim::ListConstruct and the like left out)."""
        return sum(kind.startswith("aten::") for group in self.groups for kind in group)

    @property
    def total_ops(self) -> int:
        """The aten ops the fuser looked at: fused, unmapped, or in a region left unfused."""
        return self.fused_ops + len(self.unmapped) + sum(r.aten_ops for r in self.rejections)

    @property
    def headline(self) -> str:
        """The report's first line, which titles the picture too."""
        return (f"torch_graphfuse: {len(self.groups)} fusion groups, "
                f"{self.fused_ops} of {self.total_ops} aten ops fused")

    def top_reasons(self, count: int = 3) -> list[tuple[str, int]]:
        """The commonest reasons ops stayed with ATen ("aten::view: argument 1 is not a
        constant", ...), with the number of ops each kept out, most first."""
        ops: Counter[str] = Counter(f"{kind}: {why}" for kind, why in self.unmapped)
        for r in self.rejections:
            ops[f"[{r.region}]: {r.why}"] += r.aten_ops
        return ops.most_common(count)

    def __str__(self) -> str:
        lines = [self.headline]
        lines += [f"  group {i}: {', '.join(k.split('::')[-1] for k in g)}"
                  for i, g in enumerate(self.groups, 1)]
        if self.unmapped:
            lines.append("not mapped (stay with ATen):")
            lines += [f"  {kind}{f' x{n}' if n > 1 else ''}: {why}"
                      for (kind, why), n in Counter(self.unmapped).items()]
        for by in dict.fromkeys(r.by for r in self.rejections):
            lines.append(f"regions {by} offered, left unfused:")
            regions = Counter((r.region, r.why) for r in self.rejections if r.by == by)
            lines += [f"  [{region}]{f' x{n}' if n > 1 else ''}: {why}"
                      for (region, why), n in regions.items()]
        unfused = self.unfused_specs()
        if unfused:
            lines.append("groups that ran an input spec unfused:")
            lines += [f"  {group}: {why}" for group, why in unfused]
        return "\n".join(lines)


def publish(report: FusionReport) -> None:
    global _last
    _last = report


def last_report() -> FusionReport | None:
    """The report of the most recent graph torch_graphfuse optimized, if any."""
    return _last
