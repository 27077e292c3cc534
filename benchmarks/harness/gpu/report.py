"""The GPU benchmark's GPU_RESULTS.md and its plot: latency and throughput per peer, with
torch_graphfuse's speedups, first calls, its cuDNN groups and the failures."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from torch_graphfuse.backends.cudnn.plans.compiler import AUTOTUNE_ENV, autotune_enabled

from .. import plots
from ..text import failed_cell, table, utc_now
from .configs import Config
from .peers import GRAPHFUSE, Peer
from .timing import Measurement, Result

Runs = dict[Config, dict[str, Result]]


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    value: Callable[[Measurement], float]
    higher_is_better: bool
    fmt: str

    @property
    def title(self) -> str:
        return f"{self.name} ({self.unit})"


LATENCY = Metric("Latency", "ms", lambda m: m.latency_ms, False, "{:.3f}")
THROUGHPUT = Metric("Throughput", "samples/s", lambda m: m.throughput, True, "{:.0f}")


def cell(result: Result | None, fmt: Callable[[Measurement], str]) -> str:
    if result is None:  # not run yet: the report is rewritten as the children finish
        return "-"
    if isinstance(result, str):
        return failed_cell(result)
    return fmt(result)


def speedup(results: dict[str, Result], metric: Metric, over: str,
            peer: str = GRAPHFUSE) -> float | None:
    """How many times faster `peer` is than `over`; None where either has no measurement."""
    base, ours = results.get(over), results.get(peer)
    if not isinstance(base, Measurement) or not isinstance(ours, Measurement):
        return None
    ratio = metric.value(ours) / metric.value(base)
    return ratio if metric.higher_is_better else 1 / ratio


def _row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), config.dtype]


def metric_table(runs: Runs, peers: Sequence[Peer], metric: Metric) -> list[str]:
    """A column per peer, then torch_graphfuse's speedup over each other peer (if it ran)."""
    ran_graphfuse = any(p.key == GRAPHFUSE for p in peers)
    others = [p for p in peers if p.key != GRAPHFUSE] if ran_graphfuse else []
    header = ["model", "batch", "dtype", *(p.label for p in peers),
              *(f"torch_graphfuse vs {p.short}" for p in others)]
    rows = []
    for config, results in runs.items():
        speedups = [speedup(results, metric, p.key) for p in others]
        rows.append([*_row_start(config),
                     *(cell(results.get(p.key), lambda m: metric.fmt.format(metric.value(m)))
                       for p in peers),
                     *("-" if s is None else f"{s:.2f}x" for s in speedups)])
    return table(header, rows)


def first_call_table(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    header = ["model", "batch", "dtype", *(p.label for p in peers)]
    rows = [[*_row_start(config),
             *(cell(results.get(p.key), lambda m: f"{m.first_s:.1f} s, {m.diff:.1e}")
               for p in peers)] for config, results in runs.items()]
    return table(header, rows)


def note_lines(runs: Runs) -> list[str]:
    return [f"- {config.label}: {result.note}" for config, results in runs.items()
            if isinstance(result := results.get(GRAPHFUSE), Measurement)]


def failure_lines(runs: Runs, peers: Sequence[Peer]) -> list[str]:
    """The reasons in full: the cells shorten them."""
    return [f"- {config.label}, {p.label}: {result}" for config, results in runs.items()
            for p in peers if isinstance(result := results.get(p.key), str)]


def cudnn_version(version: int) -> str:
    """cuDNN 9 encodes its version as major * 10000 + minor * 100 + patch."""
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def environment() -> str:
    """The GPU and the library versions, for the report's header."""
    try:
        import cudnn

        frontend = (f"frontend {cudnn.__version__} on cuDNN "
                    f"{cudnn_version(cudnn.backend_version())}")
    except ImportError:
        frontend = "no cuDNN frontend (the cuda extra)"
    torch_cudnn = torch.backends.cudnn.version()
    return (f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__} (CUDA "
            f"{torch.version.cuda}, cuDNN {cudnn_version(torch_cudnn) if torch_cudnn else '-'}"
            f"), torch_graphfuse's {frontend}")


def report(runs: Runs, peers: Sequence[Peer], header: str, command: str, quick: bool) -> str:
    failures = failure_lines(runs, peers)
    return "\n".join([
        "# torch_graphfuse GPU benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"{header}  ", f"Date: {utc_now()}  ", f"Command: `{command}`", "",
        "Each peer of each configuration ran in a process of its own. Model and inputs are "
        "cast to the dtype. Every peer runs with torch.backends.cudnn.benchmark on; both "
        "torch.compile peers with inductor's freezing, as TorchScript's peers are frozen. "
        "Latency: the median of calls each waited for (torch.cuda.synchronize, "
        "time.perf_counter). Throughput: calls issued back to back, one synchronize per round, "
        "the best round. Speedups are torch_graphfuse's, above 1x where it is faster. "
        "torch_graphfuse's cuDNN plans are chosen by cuDNN's heuristics"
        + (f" and timed ({AUTOTUNE_ENV}=1)" if autotune_enabled() else "") + ".",
        "",
        f"## {LATENCY.title}", "", *metric_table(runs, peers, LATENCY), "",
        f"## {THROUGHPUT.title}", "", *metric_table(runs, peers, THROUGHPUT), "",
        "## First call (s) and max abs diff against eager", "",
        "Building the peer and its first call: trace, freeze and profiling runs for "
        "TorchScript (torch_graphfuse from an empty plan cache), compilation for "
        "torch.compile. The diff is against eager in the same dtype.", "",
        *first_call_table(runs, peers), "",
        "## torch_graphfuse's cuDNN groups", "", *note_lines(runs), "",
        *(["## Failures", "", *failures, ""] if failures else []),
    ])


def plot(runs: Runs, peers: Sequence[Peer], path: Path, title: str) -> bool:
    """Each peer's speedup over eager, per configuration, in latency and in throughput;
    False where there is nothing to plot it with or against."""
    shown = [p for p in peers if p.key != "eager"]
    if not shown or "eager" not in {p.key for p in peers}:
        return False
    try:
        plt = plots.pyplot()
    except ImportError:
        return False
    fig, axes = plt.subplots(2, 1, figsize=(max(6.0, 1.2 * len(runs)), 8.0), sharex=True)
    for ax, metric in zip(axes, (LATENCY, THROUGHPUT), strict=True):
        plots.bars(ax, [(peer.label, [speedup(results, metric, "eager", peer.key) or 0.0
                                      for results in runs.values()]) for peer in shown])
        ax.set_ylabel(f"speedup over eager, {metric.name.lower()}")
    plots.x_labels(axes[-1], [c.label for c in runs], rotation=30, fontsize=8)
    axes[0].set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    plots.save(fig, path)
    return True
