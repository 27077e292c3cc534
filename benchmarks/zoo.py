"""The zoo benchmark: the architectures of torch_graphfuse.testing.zoo (transformers, timm and
torchvision at their published sizes, batch 1, random weights) with bench.py's peers side by
side in one process: correctness against eager, the share of aten ops fused with the top
reasons the rest stayed with ATen, and latency. Writes the Zoo section of RESULTS.md (the rest
of the file is bench.py's) and zoo.png.

    python benchmarks/zoo.py [--models hf/bert,timm/resnet50] [--dtypes fp32,bf16]
                             [--rounds N] [--small] [--out benchmarks]

--small runs the zoo's small configurations (the test slice's), for a quick look.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import torch
from bench import (
    GRAPHFUSE,
    PEERS,
    ZOO_SECTION,
    Measurement,
    StallProbe,
    Timing,
    _cpu_model,
    _progress,
    _table,
    autocast,
    compare,
)

from torch_graphfuse import last_report
from torch_graphfuse.testing import runner, zoo

SECTION = ZOO_SECTION.strip()
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
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

    def ms(self, key: str) -> float | None:
        result = self.results.get(key)
        return result.ms if isinstance(result, Measurement) else None

    def speedup(self, over: str) -> float | None:
        base, ours = self.ms(over), self.ms(GRAPHFUSE.key)
        return base / ours if base and ours else None


def run_model(name: str, dtype: str, small: bool, timing: Timing, probe: StallProbe) -> ZooRun:
    model, inputs = zoo.build(name, small)
    with runner.precision(dtype):
        _, out, graph = runner.fused(model, inputs)
    report = last_report()
    with torch.no_grad():
        exact = model(*inputs).float()
        eager_error = None
        if dtype != "fp32":
            with autocast(DTYPES[dtype]):
                eager_error = zoo.relative_error(model(*inputs).float(), exact)
    error = zoo.relative_error(out.float(), exact)
    comparison = compare(model, inputs, DTYPES[dtype], PEERS, timing, probe, f"{name} {dtype}")
    return ZooRun(name, zoo.MODELS[name].family, dtype, error, eager_error, report.fused_ops,
                  report.total_ops, len(runner.fusion_groups(graph)), report.top_reasons(2),
                  comparison.results)


def _geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def _cell(result: Measurement | str | None) -> str:
    if isinstance(result, Measurement):
        return f"{result.ms:.2f}"
    return "failed" if result else "n/a"


def section(runs: Sequence[ZooRun], failures: Sequence[str], command: str, small: bool) -> str:
    peers = list(PEERS)
    lines = [SECTION, "",
             f"Machine: {_cpu_model()}, {torch.get_num_threads()} threads, torch "
             f"{torch.__version__}  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ",
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
                     *[_ratio(r.speedup(p.key)) for p in peers if p.key in OVER],
                     reason.replace("|", "/")[:90]])
    lines += _table(header, rows)
    lines += ["", "Geomean speedup of torch_graphfuse:", ""]
    for dtype in sorted({r.dtype for r in runs}):
        for p in peers:
            if p.key not in OVER:
                continue
            values = [s for r in runs if r.dtype == dtype
                      for s in [r.speedup(p.key)] if s is not None]
            lines.append(f"- {dtype}, over {p.label}: {_ratio(_geomean(values))} "
                         f"({len(values)} models)")
    wrong = [f"{r.name} {r.dtype}" for r in runs if not r.correct]
    lines += ["", f"Results off eager: {', '.join(wrong) if wrong else 'none'}.", ""]
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
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(8.0, 0.3 * len(runs) + 2), 4.5))
    width = 0.4
    for i, (key, label) in enumerate((("script", "over frozen TorchScript"),
                                      ("onednn", "over built-in oneDNN fuser"))):
        values = [r.speedup(key) or 0.0 for r in runs]
        ax.bar([x + (i - 0.5) * width for x in range(len(runs))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([f"{r.name} {r.dtype}" for r in runs], rotation=60, ha="right",
                       fontsize=7)
    ax.set_ylabel("torch_graphfuse speedup")
    ax.legend(fontsize=8)
    fig.suptitle(f"zoo, batch 1: {_cpu_model()}, {torch.get_num_threads()} threads",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def run_child(name: str, dtype: str, argv: Sequence[str], limit: float) -> ZooRun | str:
    """One model in a process of its own: a peer's build can take minutes and gigabytes
    (inductor on Swin: over 10 minutes and 20 GB), and what it leaves behind must not
    weigh on the next model. The run, or why it failed."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        try:
            done = subprocess.run([sys.executable, __file__, *argv, "--child",
                                   f"{name} {dtype} {path}"], timeout=limit)
        except subprocess.TimeoutExpired:
            return f"stopped after {limit:.0f} s"
        if done.returncode != 0 or not path.exists():
            return f"its process failed (exit {done.returncode})"
        data = json.loads(path.read_text())
    if "failure" in data:
        return data["failure"]
    data["results"] = {k: v if isinstance(v, str) else Measurement(**v)
                       for k, v in data["results"].items()}
    data["reasons"] = [tuple(r) for r in data["reasons"]]
    return ZooRun(**data)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(zoo.MODELS), help="zoo names")
    parser.add_argument("--dtypes", default="fp32", help="fp32,bf16")
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds per model")
    parser.add_argument("--small", action="store_true", help="the small configurations")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--limit", type=float, default=1200.0,
                        help="seconds per model and dtype (its own process) before it is stopped")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # "<model> <dtype> <json path>"
    args = parser.parse_args(argv)
    if zoo.missing():
        raise SystemExit(zoo.missing())
    names = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = set(names) - set(zoo.MODELS)
    if unknown:
        raise SystemExit(f"not in the zoo: {', '.join(sorted(unknown))}")
    torch._C._jit_set_autocast_mode(False)
    warnings.filterwarnings("ignore")  # the libraries' deprecation notices, per model
    if args.child:
        name, dtype, path = args.child.split(" ")
        try:
            run = run_model(name, dtype, args.small, Timing(2, args.rounds, 20.0), StallProbe())
        except Exception as error:  # reported by the parent in the failures
            message = str(error).splitlines()[0][:200] if str(error) else ""
            Path(path).write_text(json.dumps({"failure": f"{type(error).__name__}: {message}"}))
            return
        Path(path).write_text(json.dumps(dataclasses.asdict(run)))
        return
    args.out.mkdir(parents=True, exist_ok=True)
    command = " ".join(["python", "benchmarks/zoo.py", *argv])
    runs, failures = [], []
    for i, name in enumerate(names, 1):
        for dtype in [d.strip() for d in args.dtypes.split(",") if d.strip()]:
            _progress(f"[{i}/{len(names)}] {name} {dtype}")
            run = run_child(name, dtype, argv, args.limit)
            if isinstance(run, str):  # a model that cannot run is reported, not fatal
                failures.append(f"{name} {dtype}: {run}")
                _progress(f"  failed: {failures[-1]}")
            else:
                runs.append(run)
        # After every model, so that an interrupted run leaves what it measured.
        write_section(args.out / "RESULTS.md", section(runs, failures, command, args.small))
        if runs:
            plot(runs, args.out / "zoo.png")
    _progress(f"wrote the Zoo section of {args.out / 'RESULTS.md'} and {args.out / 'zoo.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
