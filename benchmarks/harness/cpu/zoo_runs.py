"""The zoo benchmark's runs: one architecture of torch_graphfuse.testing.zoo checked against
eager and timed with the CPU peers, in a process of its own; and the Zoo section of RESULTS.md
and zoo.png that they make."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from torch_graphfuse import last_report
from torch_graphfuse.testing import runner, zoo

from .. import plots
from ..children import json_child_or_why
from ..text import ratio, table, utc_now
from .compare import STOPPED, Measurement, compare
from .configs import FLOAT_DTYPES
from .peers import PEERS, autocast
from .report import ZOO_SECTION, machine
from .tables import geomean, speedup
from .timing import StallProbe, Timing

SECTION = ZOO_SECTION.strip()
# Peers a speedup is given over, in the table's order.
OVER = ("eager", "script", "onednn", "inductor")


@dataclasses.dataclass
class ZooRun:
    name: str
    family: str
    dtype: str
    error: float  # torch_graphfuse's against eager: relative (fp32), or against eager fp32 (bf16)
    eager_error: float | None  # bf16: eager bf16's against eager fp32
    fused: int
    total: int
    groups: int
    reasons: list[tuple[str, int]]
    results: dict[str, Measurement | str]

    @property
    def correct(self) -> bool:
        if self.dtype == "fp32":
            return self.error <= zoo.FP32_TOLERANCE
        return self.error <= zoo.BF16_FACTOR * (self.eager_error or 0.0) + 1e-6

    def speedup(self, over: str) -> float | None:
        return speedup(self.results, over)


def run_model(name: str, dtype: str, small: bool, timing: Timing, probe: StallProbe,
              build_seconds: float | None = None) -> ZooRun:
    model, inputs = zoo.build(name, small)
    with runner.precision(dtype):
        _, out, graph = runner.fused(model, inputs)
    report = last_report()
    with torch.no_grad():
        exact = model(*inputs).float()
        eager_error = None
        if dtype != "fp32":
            with autocast(FLOAT_DTYPES[dtype]):
                eager_error = zoo.relative_error(model(*inputs).float(), exact)
    error = zoo.relative_error(out.float(), exact)
    comparison = compare(model, inputs, FLOAT_DTYPES[dtype], PEERS, timing, probe,
                         f"{name} {dtype}", build_seconds=build_seconds)
    return ZooRun(name, zoo.lookup(name).family, dtype, error, eager_error, report.fused_ops,
                  report.total_ops, len(runner.fusion_groups(graph)), report.top_reasons(2),
                  comparison.results)


def zoo_child(name: str, dtype: str, small: bool, rounds: int, path: Path,
              build_seconds: float | None = None) -> None:
    """The process of one model: its run, or why it failed, written to `path`. A peer
    whose build passes `build_seconds` is left out of the run."""
    try:
        run = run_model(name, dtype, small, Timing(2, rounds, 20.0), StallProbe(), build_seconds)
    except Exception as error:  # reported by the parent in the failures
        message = str(error).splitlines()[0][:200] if str(error) else ""
        path.write_text(json.dumps({"failure": f"{type(error).__name__}: {message}"}))
        return
    path.write_text(json.dumps(dataclasses.asdict(run)))


def run_in_child(name: str, dtype: str, argv: Sequence[str], limit: float,
                 script: str) -> ZooRun | str:
    """One model in a process of its own (`script` with `argv` and --child): a peer's build
    can take minutes and gigabytes (inductor on Swin: over 10 minutes and 20 GB), and what it
    leaves behind must not weigh on the next model. The run, or why it failed."""
    data = json_child_or_why(lambda path: [sys.executable, script, *argv, "--child",
                                           f"{name} {dtype} {path}"], limit)
    if isinstance(data, str):
        return data
    data["results"] = {k: v if isinstance(v, str) else Measurement(**v)
                       for k, v in data["results"].items()}
    data["reasons"] = [tuple(r) for r in data["reasons"]]
    return ZooRun(**data)


def _stopped(result: Measurement | str | None) -> bool:
    """Whether the peer's build ran past the build limit."""
    return isinstance(result, str) and result.startswith(STOPPED)


def _cell(result: Measurement | str | None) -> str:
    if isinstance(result, Measurement):
        return f"{result.ms:.2f}"
    if _stopped(result):
        return "stopped"
    return "failed" if result else "n/a"


def section(runs: Sequence[ZooRun], failures: Sequence[str], command: str, small: bool) -> str:
    peers = list(PEERS)
    lines = [SECTION, "",
             f"Machine: {machine()}, torch {torch.__version__}  ",
             f"Date: {utc_now()}  ",
             f"Command: `{command}`", "",
             ("The zoo's small configurations (few, narrow layers; small images). "
              if small else "Published sizes, batch 1, random weights. ") +
             "Median ms after warm-up, peers interleaved in rounds as in the table above. "
             "Error: torch_graphfuse against eager, relative to eager's largest magnitude "
             f"(fp32: at most {zoo.FP32_TOLERANCE:g}); bf16: against eager fp32, beside eager "
             f"bf16's own (at most {zoo.BF16_FACTOR:g} times it). Fused: aten ops inside "
             "fusion groups, of those the fuser looked at. Speedups are torch_graphfuse's.", ""]
    header = ["model", "family", "dtype", "error", "fused ops", "groups",
              *[f"{p.label} ms" for p in peers],
              *[f"vs {p.label}" for p in peers if p.key in OVER], "top reason left unfused"]
    rows = []
    for r in runs:
        error = f"{r.error:.1e}" + (f" (eager {r.eager_error:.1e})" if r.eager_error else "")
        reason = r.reasons[0][0] if r.reasons else ""
        rows.append([r.name, r.family, r.dtype, error + ("" if r.correct else " WRONG"),
                     f"{r.fused}/{r.total} ({100 * r.fused / max(r.total, 1):.0f}%)",
                     str(r.groups), *[_cell(r.results.get(p.key)) for p in peers],
                     *[ratio(r.speedup(p.key), "n/a") for p in peers if p.key in OVER],
                     reason.replace("|", "/")[:90]])
    lines += table(header, rows)
    lines += ["", "Geomean speedup of torch_graphfuse:", ""]
    for dtype in sorted({r.dtype for r in runs}):
        for p in peers:
            if p.key not in OVER:
                continue
            values = [s for r in runs if r.dtype == dtype
                      for s in [r.speedup(p.key)] if s is not None]
            mean = ratio(geomean(values) if values else None, "n/a")
            lines.append(f"- {dtype}, over {p.label}: {mean} ({len(values)} models)")
    wrong = [f"{r.name} {r.dtype}" for r in runs if not r.correct]
    lines += ["", f"Results off eager: {', '.join(wrong) if wrong else 'none'}.", ""]
    stopped = [f"- {r.name} {r.dtype}, {p.label}: {result}" for r in runs for p in peers
               for result in [r.results.get(p.key)] if _stopped(result)]
    if stopped:
        lines += ["Peers left out of a model's row (stopped: their build ran past the limit):",
                  "", *stopped, ""]
    if failures:
        lines += ["Models that did not run:", "", *[f"- {f}" for f in failures], ""]
    return "\n".join(lines)


def write_section(results: Path, text: str) -> None:
    """Replace RESULTS.md's Zoo section (from its heading to the end) with `text`."""
    old = results.read_text() if results.exists() else ""
    kept = ("\n" + old).split(ZOO_SECTION, 1)[0].strip("\n")
    results.write_text((kept + "\n\n" if kept else "") + text)


def plot(runs: Sequence[ZooRun], path: Path) -> None:
    """torch_graphfuse's speedup over frozen TorchScript and over LLGA, per model."""
    plt = plots.pyplot()
    fig, ax = plt.subplots(figsize=(max(8.0, 0.3 * len(runs) + 2), 4.5))
    plots.bars(ax, [(label, [r.speedup(key) or 0.0 for r in runs])
                    for key, label in (("script", "over frozen TorchScript"),
                                       ("onednn", "over built-in oneDNN fuser"))])
    plots.x_labels(ax, [f"{r.name} {r.dtype}" for r in runs], rotation=60, fontsize=7)
    ax.set_ylabel("torch_graphfuse speedup")
    ax.legend(fontsize=8)
    fig.suptitle(f"zoo, batch 1: {machine()}", fontsize=10)
    plots.save(fig, path)
