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
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from .picture import Picture

_last: FusionReport | None = None


def op_key(node: torch._C.Node) -> str:
    """A node's identity within its graph, as long as the graph lives: its
    outputs' debug names (unique in a graph), which outlive the pass objects."""
    outputs = ",".join(v.debugName() for v in node.outputs())
    return outputs or f"{node.kind()}({','.join(v.debugName() for v in node.inputs())})"


@dataclass(frozen=True)
class Unfused:
    """Why an op stayed with ATen, as the picture marks it."""
    why: str
    region: int | None = None  # index in FusionReport.rejected of the region oneDNN offered


_ids = itertools.count()


@dataclass
class FusionReport:
    # Numbers the pipeline run: each group carries it (its `report` attribute), so the
    # kernel files the input specs a group runs unfused under this report.
    id: int = field(default_factory=lambda: next(_ids))
    groups: list[list[str]] = field(default_factory=list)  # aten kinds of each group
    unmapped: list[tuple[str, str]] = field(default_factory=list)  # (kind, why not mapped)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (region, why not fused)
    unfused: dict[str, Unfused] = field(default_factory=dict)  # by op_key: what picture() shows
    graph: Picture | None = None  # the optimized graph, as picture() draws it

    def add_unmapped(self, node: torch._C.Node, why: str) -> None:
        self.unmapped.append((node.kind(), why))
        self.unfused[op_key(node)] = Unfused(f"not mapped: {why}")

    def add_rejected(self, region: str, nodes: list[torch._C.Node], why: str) -> None:
        """A region oneDNN offered (`region` names its ops) that stays unfused."""
        unfused = Unfused(f"offered by oneDNN, left unfused: {why}", len(self.rejected))
        self.rejected.append((region, why))
        self.unfused.update((op_key(n), unfused) for n in nodes)

    def unfused_specs(self) -> list[tuple[str, str]]:
        """(group label, why) for each group that met an input spec it runs unfused: one
        oneDNN cannot compile on this CPU (bf16 without bf16 instructions), or one whose
        layout differs from the profiling runs. Filled in as the model runs."""
        from . import _C

        return [tuple(u) for u in _C._unfused_specs(self.id)]

    def picture(self, path: str | Path) -> Path:
        """Draw the optimized graph into `path` (.svg, .png, .pdf, .dot or .txt) and
        return the file written: the text form when Graphviz's `dot` is missing."""
        from . import picture  # picture imports the passes, which import this module

        if self.graph is None:
            raise ValueError("this report holds no graph to draw")
        return picture.write(self.graph, Path(path))

    @property
    def fused_ops(self) -> int:
        return sum(len(g) for g in self.groups)

    @property
    def total_ops(self) -> int:
        """The ops the fuser looked at: fused, unmapped, or in a region left unfused."""
        return self.fused_ops + len(self.unmapped) + sum(
            region.count(",") + 1 for region, _ in self.rejected)

    def top_reasons(self, count: int = 3) -> list[tuple[str, int]]:
        """The commonest reasons ops stayed with ATen ("aten::view: argument 1 is not a
        constant", ...), with the number of ops each kept out, most first."""
        ops: Counter[str] = Counter(f"{kind}: {why}" for kind, why in self.unmapped)
        for region, why in self.rejected:
            ops[f"[{region}]: {why}"] += region.count(",") + 1
        return ops.most_common(count)

    def __str__(self) -> str:
        lines = [f"torch_graphfuse: {len(self.groups)} fusion groups, "
                 f"{self.fused_ops} of {self.total_ops} aten ops fused"]
        lines += [f"  group {i}: {', '.join(k.split('::')[-1] for k in g)}"
                  for i, g in enumerate(self.groups, 1)]
        if self.unmapped:
            lines.append("not mapped (stay with ATen):")
            lines += [f"  {kind}{f' x{n}' if n > 1 else ''}: {why}"
                      for (kind, why), n in Counter(self.unmapped).items()]
        if self.rejected:
            lines.append("regions oneDNN offered, left unfused:")
            lines += [f"  [{region}]{f' x{n}' if n > 1 else ''}: {why}"
                      for (region, why), n in Counter(self.rejected).items()]
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
