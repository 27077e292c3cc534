"""The CPU report's tables, one row per configuration: latency, first calls, accuracy and
throughput, of the float and of the int8 peers."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

import torch_graphfuse

from ..text import failed_cell, ratio, table
from .ceilings import Ceilings
from .compare import Measurement, Result, Runs
from .configs import INT8, NATIVE, Config, dtype_name
from .int8 import GRAPHFUSE_FP32, GRAPHFUSE_INT8, INT8_PEERS
from .peers import GRAPHFUSE, PEERS


def cell(result: Result, fmt: Callable[[Measurement], str]) -> str:
    return failed_cell(result) if isinstance(result, str) else fmt(result)


def speedup(results: dict[str, Result], over: str, peer: str = GRAPHFUSE.key) -> float | None:
    """How many times faster `peer` is than `over`; None if either failed."""
    base, ours = results[over], results[peer]
    if isinstance(base, str) or isinstance(ours, str):
        return None
    return base.ms / ours.ms


def geomean(values: Sequence[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def isa_cell(config: Config) -> str:
    if config.isa == NATIVE:
        return torch_graphfuse.onednn_info()["isa"] or "?"
    return f"{config.isa} (emulated)"


def _row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), dtype_name(config.dtype), isa_cell(config)]


def _int8_row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), isa_cell(config)]


def _rate(flops: float, ceiling: float) -> Callable[[Measurement], str]:
    """A peer's GFLOP/s (or GOP/s) at `flops` per call, and its share of `ceiling`."""
    def fmt(m: Measurement) -> str:
        rate = flops / m.ms / 1e6
        share = "" if math.isnan(ceiling) else f" ({100 * rate / ceiling:.0f}%)"
        return f"{rate:.0f}{share}"
    return fmt


def latency_table(runs: Runs) -> list[str]:
    header = ["model", "batch", "dtype", "ISA", *(f"{p.label} ms" for p in PEERS),
              "speedup vs oneDNN fuser", "speedup vs inductor", "torch_graphfuse max abs diff",
              "torch_graphfuse groups", "rounds (stalled calls)"]
    rows = []
    for config, run in runs.items():
        ours = run.results[GRAPHFUSE.key]
        speedups = [speedup(run.results, key) for key in ("onednn", "inductor")]
        rows.append([*_row_start(config),
                     *(cell(run.results[p.key], lambda m: f"{m.ms:.2f}") for p in PEERS),
                     *map(ratio, speedups),
                     cell(ours, lambda m: f"{m.diff:.2e}"), cell(ours, lambda m: m.note),
                     f"{run.rounds} ({run.stalled})"])
    return table(header, rows)


def first_call_table(runs: Runs) -> list[str]:
    peers = [p for p in PEERS if p.first_calls]
    header = ["model", "batch", "dtype", "ISA", *(p.label for p in peers),
              "torch_graphfuse / built-in"]
    rows = []
    for c, run in runs.items():
        first = run.first_ms
        if not first:  # an emulated ISA's row
            continue
        ratio = (f"{first['graphfuse'] / first['onednn']:.2f}x"
                 if all(isinstance(first.get(k), float) for k in ("graphfuse", "onednn")) else "-")
        rows.append([*_row_start(c), *(_first_cell(first.get(p.key)) for p in peers), ratio])
    return table(header, rows)


def _first_cell(ms: float | str | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}" if isinstance(ms, float) else failed_cell(ms)


def accuracy_table(runs: Runs) -> list[str]:
    peers = PEERS[1:]
    header = ["model", "batch", "dtype", "ISA", *(p.label for p in peers)]
    rows = [[*_row_start(c), *(cell(run.results[p.key], lambda m: f"{m.diff:.2e}")
                               for p in peers)] for c, run in runs.items()]
    return table(header, rows)


def throughput_table(runs: Runs, ceilings: dict[str, Ceilings]) -> list[str]:
    header = ["model", "batch", "dtype", "ISA", "GFLOP per call", *(p.label for p in PEERS)]
    rows = []
    for config, run in runs.items():
        flops = config.workload.flops(config.batch)
        gflops = _rate(flops, ceilings[config.isa][config.dtype])
        rows.append([*_row_start(config), f"{flops / 1e9:.2f}",
                     *(cell(run.results[p.key], gflops) for p in PEERS)])
    return table(header, rows)


def geomean_lines(runs: Runs) -> list[str]:
    """Per ISA the runs were made on, torch_graphfuse's geomean speedup over each peer."""
    lines = []
    for isa in dict.fromkeys(c.isa for c in runs):
        on = [run for c, run in runs.items() if c.isa == isa]
        where = next(isa_cell(c) for c in runs if c.isa == isa)
        for peer in PEERS[:-1]:
            speedups = [s for s in (speedup(run.results, peer.key) for run in on) if s]
            if speedups:
                lines.append(f"- {where}, over {peer.label}: {geomean(speedups):.2f}x "
                             f"({len(speedups)} configurations)")
            else:
                lines.append(f"- {where}, over {peer.label}: no configuration where both ran")
    return lines


def failure_lines(runs: Runs) -> list[str]:
    return [f"- {config.label}, {peer.label}: {run.results[peer.key]}"
            for config, run in runs.items()
            for peer in (INT8_PEERS if config.dtype == INT8 else PEERS)
            if isinstance(run.results[peer.key], str)]


def int8_latency_table(runs: Runs) -> list[str]:
    quantized = INT8_PEERS[1:]
    header = ["model", "batch", "ISA", *(f"{p.label} ms" for p in INT8_PEERS),
              *(f"{p.label}: speedup vs torch_graphfuse fp32" for p in quantized),
              "torch_graphfuse int8 groups", "rounds (stalled calls)"]
    rows = []
    for config, run in runs.items():
        speedups = [speedup(run.results, GRAPHFUSE_FP32.key, p.key) for p in quantized]
        rows.append([*_int8_row_start(config),
                     *(cell(run.results[p.key], lambda m: f"{m.ms:.2f}") for p in INT8_PEERS),
                     *map(ratio, speedups),
                     cell(run.results[GRAPHFUSE_INT8.key], lambda m: m.note),
                     f"{run.rounds} ({run.stalled})"])
    return table(header, rows)


def _agreement_cell(result: Result) -> str:
    if isinstance(result, str) or result.agreement is None:
        return "-"
    if isinstance(result.agreement, str):
        return failed_cell(result.agreement)
    return f"{100 * result.agreement:.1f}%"


def int8_accuracy_table(runs: Runs) -> list[str]:
    header = ["model", "batch", "ISA", *(f"{p.label}: max abs diff" for p in INT8_PEERS),
              *(f"{p.label}: top-1 agreement" for p in INT8_PEERS)]
    rows = [[*_int8_row_start(c),
             *(cell(run.results[p.key], lambda m: f"{m.diff:.2e}") for p in INT8_PEERS),
             *(_agreement_cell(run.results[p.key]) for p in INT8_PEERS)]
            for c, run in runs.items()]
    return table(header, rows)


def int8_throughput_table(runs: Runs, ceilings: dict[str, Ceilings]) -> list[str]:
    header = ["model", "batch", "ISA", "GOP per call", *(p.label for p in INT8_PEERS)]
    rows = []
    for config, run in runs.items():
        ops = config.workload.flops(config.batch)
        cells = [cell(run.results[p.key], _rate(
            ops, ceilings[config.isa][torch.float32 if p is GRAPHFUSE_FP32 else INT8]))
            for p in INT8_PEERS]
        rows.append([*_int8_row_start(config), f"{ops / 1e9:.2f}", *cells])
    return table(header, rows)
