"""What the last pipeline run fused, and why the rest was not.

    >>> print(torch_graphfuse.last_report())
    torch_graphfuse: 2 fusion groups, 5 of 7 aten ops fused
      group 1: _convolution, relu
      ...
    not mapped (stay with ATen):
      aten::size x2: no mapping
    regions oneDNN offered, left unfused:
      [sigmoid]: a lone op ATen runs as fast
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

_last: FusionReport | None = None


@dataclass
class FusionReport:
    groups: list[list[str]] = field(default_factory=list)  # aten kinds of each group
    unmapped: list[tuple[str, str]] = field(default_factory=list)  # (kind, why not mapped)
    rejected: list[tuple[str, str]] = field(default_factory=list)  # (region, why not fused)

    def __str__(self) -> str:
        fused = sum(len(g) for g in self.groups)
        total = fused + len(self.unmapped) + sum(r.count(",") + 1 for r, _ in self.rejected)
        lines = [f"torch_graphfuse: {len(self.groups)} fusion groups, "
                 f"{fused} of {total} aten ops fused"]
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
        return "\n".join(lines)


def publish(report: FusionReport) -> None:
    global _last
    _last = report


def last_report() -> FusionReport | None:
    """The report of the most recent graph torch_graphfuse optimized, if any."""
    return _last
