"""Long mode's summary: progress lines and the final report by cause.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from torch_graphfuse.testing.fuzz.compare import CAUSE_TITLES, CAUSES
from torch_graphfuse.testing.fuzz.longrun import Report


class Summary:
    def __init__(self, seed: int, anchor: str | None = None) -> None:
        self.seed = seed
        self.anchor = anchor
        self.reports: list[Report] = []
        self.start = time.monotonic()

    def add(self, r: Report) -> None:
        self.reports.append(r)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.reports)

    def progress(self, total: int) -> str:
        rs = self.reports
        return (f"[{len(rs)}/{total}] {time.monotonic() - self.start:.0f} s: "
                f"{sum(r.groups for r in rs)} groups, {sum(r.groups > 0 for r in rs)} fused, "
                f"{self.count('plugin')} failures, {self.count('torchscript')} torchscript, "
                f"{self.count('invalid')} invalid")

    def failures(self) -> dict[str, list[Report]]:
        by: dict[str, list[Report]] = defaultdict(list)
        for r in self.reports:
            if r.status == "plugin":
                by[r.cause].append(r)
        return by

    def render(self, minimized: dict[tuple[str, int], str]) -> str:
        rs = self.reports
        out = [
            "=" * 78,
            f"graphs run: {len(rs)} (seed {self.seed}; "
            + ", ".join(f"{d} {n}" for d in ("fp32", "bf16", "int8")
                        if (n := sum(r.dtype == d for r in rs))) + ")",
            f"fusion groups formed: {sum(r.groups for r in rs)}",
            f"graphs with at least one fusion group: {sum(r.groups > 0 for r in rs)}",
            f"invalid graphs (eager or tracing failed; skipped): {self.count('invalid')}",
            f"TorchScript-only differences (unfused differs from eager too; not failures): "
            f"{self.count('torchscript')}",
            f"plugin failures: {self.count('plugin')}"
            + "".join(f", {CAUSE_TITLES[c]} {len(g)}" for c, g in sorted(
                self.failures().items(), key=lambda item: CAUSES.index(item[0]))),
        ]
        reasons = Counter(r.reason.split(":")[0] + ": " + r.reason[:90]
                          for r in rs if r.status == "invalid")
        out += [f"  invalid x{n}: {why}" for why, n in reasons.most_common(5)]
        out += [f"  torchscript {r.dtype}:{r.index}: {r.torchscript[0][:150]}"
                for r in rs if r.status == "torchscript" and r.torchscript][:10]
        warned = Counter(w for r in rs for w in r.warnings)
        first: dict[str, str] = {}  # a warning -> the first graph that gave it (for --index)
        for r in rs:
            for w in r.warnings:
                first.setdefault(w, f"{r.dtype}:{r.index}")
        out += [f"  plugin warning x{n} (graph {first[w]} first): {w}"
                for w, n in warned.most_common(5)]
        for cause in CAUSES:
            group = self.failures().get(cause, [])
            if group:
                out += self._render_cause(cause, group, minimized)
        return "\n".join(out)

    def _render_cause(self, cause: str, group: list[Report],
                      minimized: dict[tuple[str, int], str]) -> list[str]:
        flags = "--quantized" if group[0].dtype == "int8" else "--dtype DTYPE"
        flags += f" --anchor {self.anchor}" if self.anchor else ""
        out = ["", "-" * 78, f"{CAUSE_TITLES[cause]}: {len(group)} graphs: "
               + " ".join(f"{r.dtype}:{r.index}" for r in group),
               f"(one in detail: python -m torch_graphfuse.testing.fuzz --seed {self.seed} "
               f"{flags} --index INDEX)", "-" * 78]
        for r in group:
            out.append(f"# graph {r.index} ({r.dtype}), seed {self.seed}: "
                       + "; ".join(p[:160] for p in r.problems[:3]))
        for r in group:
            small = minimized.get((r.dtype, r.index))
            if small:
                out += [f"## minimized from graph {r.index} ({r.dtype}):", small, ""]
        if not any(minimized.get((r.dtype, r.index)) for r in group):
            out += [f"## graph {group[0].index} ({group[0].dtype}):", group[0].text]
        return out
