"""The CPU benchmark's RESULTS.md (all but its Zoo section, which zoo.py writes) and its plot."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

import torch_graphfuse

from .. import plots
from ..text import utc_now
from .ceilings import Ceilings, Overhead, best_ceilings, gemm_lines, overhead_lines
from .compare import Runs
from .configs import EMULATED_ISAS, INT8, NATIVE
from .int8 import CALIBRATION_SAMPLES, CALIBRATION_SAMPLES_QUICK, GRAPHFUSE_FP32, INT8_PEERS
from .peers import PEERS, Peer
from .tables import (
    accuracy_table,
    failure_lines,
    first_call_table,
    geomean_lines,
    int8_accuracy_table,
    int8_latency_table,
    int8_throughput_table,
    latency_table,
    speedup,
    throughput_table,
)

ZOO_SECTION = "\n## Zoo\n"  # RESULTS.md's part that benchmarks/zoo.py writes


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine() -> str:
    """The CPU and the threads the peers ran on."""
    return f"{cpu_model()}, {torch.get_num_threads()} threads"


def report(runs: Runs, gemms: dict[str, Sequence[dict[str, Ceilings]]],
           overhead: Overhead | None, command: str, quick: bool, samples: int) -> str:
    """`gemms`: per ISA the runs were made on, its GEMM measurements."""
    int8_runs = {c: run for c, run in runs.items() if c.dtype == INT8}
    float_runs = {c: run for c, run in runs.items() if c.dtype != INT8}
    ceilings = {isa: best_ceilings(measured) for isa, measured in gemms.items()}
    emulated = [isa for isa in gemms if isa != NATIVE]
    lines = [
        "# torch_graphfuse benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"Machine: {cpu_model()} (oneDNN's ISA: {torch_graphfuse.onednn_info()['isa']}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}, oneDNN "
        f"{torch_graphfuse.onednn_info()['version']} (torch's, used by torch_graphfuse)  ",
        f"Date: {utc_now()}  ", f"Command: `{command}`", "",
        "Median latency in ms after warm-up. The peers run in rounds of one call each, so that "
        "changes in the machine's speed hit them alike; calls around which a probe saw the "
        "machine stall (a thread losing its core) are left out while 3 others remain. bf16 is "
        "autocast: traced under eager autocast with JIT autocast off, and timed inside one "
        "autocast context (eager casts its weights once, from autocast's cache). "
        "Speedups are torch_graphfuse's over that peer; max abs diff is against eager in the "
        "same dtype.", "",
    ]
    if emulated:
        lines += [
            "Rows marked emulated ran in a child process with oneDNN, ATen and MKL limited to "
            "that ISA's kernels (" + "; ".join(
                f"{isa}: " + " ".join(f"{k}={v}" for k, v in EMULATED_ISAS[isa].items())
                for isa in emulated) + "): the kernels and results of such a CPU, at this "
            "machine's clock, cache and memory, so an approximation of its speed.", ""]
    if float_runs:
        lines += [
            "## Latency", "", *latency_table(float_runs), "",
            "## Geomean speedup of torch_graphfuse", "", *geomean_lines(float_runs), "",
            *_first_call_lines(float_runs, quick),
            "## Max abs diff vs eager", "", *accuracy_table(float_runs), "",
        ]
    lines += ["## Achieved GFLOP/s (fraction of the GEMM ceiling)", ""]
    for isa, measured in gemms.items():
        if len(gemms) > 1:
            lines += [f"### {'native' if isa == NATIVE else isa + ' (emulated)'}", ""]
        lines += [*gemm_lines(measured), ""]
    if float_runs:
        lines += [*throughput_table(float_runs, ceilings), ""]
    if int8_runs:
        lines += ["## int8", "", *_int8_lines(int8_runs, ceilings, samples)]
    if overhead is not None:
        lines += ["## Per-call overhead of a fusion group", "", *overhead_lines(overhead), ""]
    failures = failure_lines(runs)
    if failures:
        lines += ["## Failures", "", *failures, ""]
    return "\n".join(lines)


def _first_call_lines(runs: Runs, quick: bool) -> list[str]:
    return [
        "## First call (ms)", "",
        "Each in a fresh process, as a deployment starting up sees it: trace + freeze + "
        "profiling runs (where the fusers compile and oneDNN reorders the weights) for the "
        "TorchScript peers, the first call (compilation) for torch.compile. Median of "
        f"{1 if quick else max(p.first_calls for p in PEERS)} processes per TorchScript peer, "
        "interleaved; torch.compile: one process (its on-disk caches as configured, default "
        "on). On this CPU only: emulating an older ISA approximates its speed.", "",
        *first_call_table(runs), "",
    ]


def _int8_lines(runs: Runs, ceilings: dict[str, Ceilings], samples: int) -> list[str]:
    return [
        "Statically quantized models: per-tensor u8 activations, per-channel s8 weights, "
        "calibrated on the same synthetic batches for every recipe "
        f"({CALIBRATION_SAMPLES} samples, {CALIBRATION_SAMPLES_QUICK} with --quick). "
        "torch_graphfuse int8 and torch.compile int8 run the torchao PT2E model "
        "(X86InductorQuantizer; traced + frozen, or compiled with freezing); eager int8 is the "
        "torch.ao FX model converted to the x86 quantized engine; OpenVINO int8 is the float "
        "model converted by OpenVINO and quantized by NNCF (post-training). BERT: linears "
        "only, as the X86InductorQuantizer does (NNCF: its transformer scheme). "
        "torch_graphfuse fp32 runs the float model. Max abs diff is against the reference "
        "quantized model: the PT2E model in eager PyTorch. Top-1 agreement (ResNet) is with "
        f"the float model, over {samples} synthetic images (rounded up to whole batches).", "",
        "### Latency (ms)", "", *int8_latency_table(runs), "",
        "### Max abs diff vs the reference quantized model, top-1 agreement with float", "",
        *int8_accuracy_table(runs), "",
        "### Achieved GOP/s (fraction of the int8 ceiling; torch_graphfuse fp32: of the fp32 "
        "ceiling)", "", *int8_throughput_table(runs, ceilings), "",
    ]


def write_results(path: Path, text: str) -> None:
    """Write RESULTS.md: `text`, and zoo.py's section (from its heading to the end) as that
    run wrote it."""
    old = path.read_text() if path.exists() else ""
    zoo = old[old.index(ZOO_SECTION) + 1:] if ZOO_SECTION in old else ""
    path.write_text(text.rstrip("\n") + "\n\n" + zoo if zoo else text)


def _bars(ax: Any, runs: Runs, peers: Sequence[Peer], over: str, ylabel: str) -> None:
    """Grouped bars: each peer's speedup over the peer `over`, per configuration."""
    plots.bars(ax, [(peer.label, [speedup(run.results, over, peer.key) or 0.0
                                  for run in runs.values()]) for peer in peers])
    plots.x_labels(ax, [c.label for c in runs], rotation=30, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def plot(runs: Runs, path: Path) -> None:
    """fp32 / bf16: each peer's speedup over eager; int8 (a second panel): each int8 peer's
    speedup over torch_graphfuse fp32."""
    plt = plots.pyplot()
    panels = [(r, peers, over, label) for r, peers, over, label in (
        ({c: run for c, run in runs.items() if c.dtype != INT8}, PEERS[1:], "eager",
         "speedup over eager"),
        ({c: run for c, run in runs.items() if c.dtype == INT8}, INT8_PEERS[1:],
         GRAPHFUSE_FP32.key, "int8: speedup over torch_graphfuse fp32")) if r]
    fig, axes = plt.subplots(1, len(panels), squeeze=False, width_ratios=[
        max(len(r), 2) for r, *_ in panels], figsize=(max(6.0, 1.2 * len(runs) + 2), 4.5))
    for ax, (panel_runs, peers, over, ylabel) in zip(axes[0], panels, strict=True):
        _bars(ax, panel_runs, peers, over, ylabel)
    fig.suptitle(machine(), fontsize=10)
    plots.save(fig, path)
