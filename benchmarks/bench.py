"""Side-by-side benchmark: torch_graphfuse against eager, frozen TorchScript, PyTorch's
built-in oneDNN Graph fuser, torch.compile (inductor) and torch_graphfuse through torch.compile
(backend "graphfuse"), on ResNet-50, BERT-base and an MLP, in fp32 and bf16 (autocast), in one
process with the same inputs and threads.

    python benchmarks/bench.py [--quick] [--models resnet50,bert,mlp] [--out benchmarks]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import itertools
import math
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import bert_base, bert_inputs, bert_layer, mlp

Inputs = list[torch.Tensor]
Call = Callable[[], torch.Tensor]

BERT_SEQ = 128
MLP_SIZES = (1024, 4096, 4096, 1024)
GEMM_SIZE = 2048
CHAIN_LENGTH = 20
CHAIN_WIDTH = 16
PROBE_SIZE = 1 << 16
DTYPES = (torch.float32, torch.bfloat16)


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], Inputs]
    flops: Callable[[int], float]  # per call, from the batch size
    batches: tuple[int, ...]


def _images(resolution: int) -> Callable[[int], Inputs]:
    return lambda batch: [torch.randn(batch, 3, resolution, resolution)]


def _bert_inputs(batch: int) -> Inputs:
    return list(bert_inputs(batch, BERT_SEQ, padding=BERT_SEQ // 8))


def _bert_flops(layers: int, hidden: int = 768, intermediate: int = 3072) -> Callable[[int], float]:
    """Per layer: 4 hidden x hidden and 2 hidden x intermediate linears per token, plus
    q @ k^T and probs @ v (seq x seq x hidden each) per sequence."""
    def flops(batch: int) -> float:
        tokens = batch * BERT_SEQ
        linear = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate)
        attention = 2 * 2 * batch * BERT_SEQ * BERT_SEQ * hidden
        return layers * (linear + attention)
    return flops


def _mlp_flops(batch: int) -> float:
    return 2 * batch * sum(a * b for a, b in itertools.pairwise(MLP_SIZES))


FULL = {
    "resnet50": Workload("ResNet-50 224", resnet50, _images(224), lambda b: 2 * 4.1e9 * b,
                         (1, 32)),
    "bert": Workload(f"BERT-base s{BERT_SEQ}", bert_base, _bert_inputs, _bert_flops(12), (1, 8)),
    "mlp": Workload("MLP", lambda: mlp(MLP_SIZES), lambda b: [torch.randn(b, MLP_SIZES[0])],
                    _mlp_flops, (1, 32)),
}
QUICK = {  # small stand-ins, batch 1 only
    "resnet50": Workload("ResNet-18 112", resnet18, _images(112), lambda b: 2 * 1.82e9 / 4 * b,
                         (1,)),
    "bert": Workload(f"BERT layer s{BERT_SEQ}", bert_layer, _bert_inputs, _bert_flops(1), (1,)),
    "mlp": dataclasses.replace(FULL["mlp"], batches=(1,)),
}


def _dtype_name(dtype: torch.dtype) -> str:
    return "bf16" if dtype == torch.bfloat16 else "fp32"


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # key of FULL / QUICK
    workload: Workload
    batch: int
    dtype: torch.dtype

    @property
    def label(self) -> str:
        return f"{self.workload.name} b{self.batch} {_dtype_name(self.dtype)}"


def configs(models: Sequence[str], quick: bool) -> list[Config]:
    workloads = QUICK if quick else FULL
    unknown = set(models) - set(workloads)
    if unknown:
        raise SystemExit(f"unknown models: {', '.join(sorted(unknown))}")
    return [Config(m, workloads[m], batch, dtype) for m in models
            for batch in workloads[m].batches for dtype in DTYPES]


# ---------------------------------------------------------------- peers


@contextlib.contextmanager
def fusers(onednn: bool, graphfuse: bool) -> Iterator[None]:
    """The built-in oneDNN fuser and torch_graphfuse on or off inside the block."""
    previous = torch.jit.onednn_fusion_enabled()
    torch.jit.enable_onednn_fusion(onednn)
    try:
        with torch_graphfuse.fuser(graphfuse):
            yield
    finally:
        torch.jit.enable_onednn_fusion(previous)


def autocast(dtype: torch.dtype) -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)


def _eager(model: nn.Module, inputs: Inputs) -> Call:
    return lambda: model(*inputs)


def _jit(model: nn.Module, inputs: Inputs) -> Call:
    """Trace, freeze and run the profiling runs (the fusers compile at the last one)."""
    module = runner.freeze(model, inputs)
    for _ in range(runner.PROFILING_RUNS):
        module(*inputs)
    return lambda: module(*inputs)


def _inductor(model: nn.Module, inputs: Inputs) -> Call:
    torch._dynamo.reset()
    torch._inductor.config.freezing = True
    compiled = torch.compile(copy.deepcopy(model), backend="inductor")  # freezing folds weights
    compiled(*inputs)
    return lambda: compiled(*inputs)


def _graphfuse_compile(model: nn.Module, inputs: Inputs) -> Call:
    """torch.compile with torch_graphfuse's backend: the first call traces, freezes and runs
    the profiling runs; the backend switches fusion on around its own calls. No dynamo reset:
    it would drop the inductor peer's compiled code."""
    compiled = torch.compile(model, backend="graphfuse")
    compiled(*inputs)
    return lambda: compiled(*inputs)


@dataclasses.dataclass(frozen=True)
class Peer:
    key: str
    label: str
    build: Callable[[nn.Module, Inputs], Call]
    onednn: bool = False
    graphfuse: bool = False
    first_calls: int = 3  # fresh processes that time its first call (0: not a compilation)


PEERS = (
    Peer("eager", "eager", _eager, first_calls=0),
    Peer("script", "TorchScript (frozen)", _jit),
    Peer("onednn", "built-in oneDNN fuser", _jit, onednn=True),
    Peer("inductor", "torch.compile (inductor)", _inductor, first_calls=1),  # seconds each
    Peer("graphfuse_compile", "torch.compile (graphfuse)", _graphfuse_compile, first_calls=1),
    Peer("graphfuse", "torch_graphfuse", _jit, graphfuse=True),
)
PEERS_BY_KEY = {p.key: p for p in PEERS}
SCRIPT, GRAPHFUSE = PEERS[1], PEERS[-1]


# ---------------------------------------------------------------- measuring


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _failure(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".strip().splitlines()[0]
    return text if len(text) <= 160 else text[:157] + "..."


class StallProbe:
    """Detects stalls of the machine. On a shared host one intra-op thread can lose its core
    for seconds, and every parallel op then waits a scheduler quantum (milliseconds): a small
    parallel add, timed against its single-thread time, shows it."""

    def __init__(self) -> None:
        self._a, self._b = torch.randn(PROBE_SIZE), torch.randn(PROBE_SIZE)
        self._out = torch.empty(PROBE_SIZE)
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            single_ms = min(self._ms() for _ in range(20))
        finally:
            torch.set_num_threads(threads)
        self.threshold_ms = max(10 * single_ms, 0.5)

    def _ms(self) -> float:
        start = time.perf_counter()
        torch.add(self._a, self._b, out=self._out)
        return _ms_since(start)

    def stalled(self) -> bool:
        return statistics.median(self._ms() for _ in range(5)) > self.threshold_ms

    def wait(self, max_seconds: float) -> None:
        """Wait (at most max_seconds) for the machine to run without stalls."""
        deadline = time.perf_counter() + max_seconds
        while self.stalled() and time.perf_counter() < deadline:
            time.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup: int  # rounds before the measured ones
    iters: int  # measured rounds without a stall
    max_seconds: float  # per peer: stop early (after at least 3 rounds) past it


@dataclasses.dataclass(frozen=True)
class Built:
    peer: Peer
    call: Call
    diff: float
    groups: int | None  # torch_graphfuse only: fusion groups in the optimized graph


@dataclasses.dataclass(frozen=True)
class Measurement:
    ms: float
    diff: float
    groups: int | None = None  # torch_graphfuse only: fusion groups and unfused fallback runs
    fallbacks: int = 0

    @property
    def note(self) -> str:
        if self.groups is None:
            return ""
        fallbacks = f", {self.fallbacks} fallback runs" if self.fallbacks else ""
        return f"{self.groups} groups{fallbacks}"


Result = Measurement | str  # a string is the reason a peer failed


@dataclasses.dataclass(frozen=True)
class Comparison:
    results: dict[str, Result]  # by peer key
    first_ms: dict[str, float | str]  # median first call in fresh processes, or why it failed
    rounds: int
    stalled: int  # calls the machine stalled in: left out of the medians while 3 others remain


def _max_abs_diff(out: torch.Tensor, reference: torch.Tensor) -> float:
    return (out.float() - reference.float()).abs().max().item()


def build(peer: Peer, model: nn.Module, inputs: Inputs, dtype: torch.dtype,
          reference: torch.Tensor) -> Built:
    with torch.no_grad(), autocast(dtype), fusers(peer.onednn, peer.graphfuse):
        call = peer.build(model, inputs)
        diff = _max_abs_diff(call(), reference)
        graph = torch.jit.last_executed_optimized_graph() if peer.graphfuse else None
    groups = None if graph is None else len(runner.fusion_groups(graph))
    return Built(peer, call, diff, groups)


def _round(built: Sequence[Built], failed: dict[str, str],
           probe: StallProbe) -> dict[str, tuple[float, bool]]:
    """One call of each peer that has not failed yet: its ms, and whether the machine ran
    without a stall before and after it."""
    times = {}
    quiet = not probe.stalled()
    for b in built:
        if b.peer.key in failed:
            continue
        try:
            with fusers(b.peer.onednn, b.peer.graphfuse):
                start = time.perf_counter()
                b.call()
                ms = _ms_since(start)
        except Exception as error:  # reported, never ends the run
            failed[b.peer.key] = _failure(error)
            continue
        after = not probe.stalled()
        times[b.peer.key] = (ms, quiet and after)
        quiet = after
    return times


def timed_rounds(built: Sequence[Built], dtype: torch.dtype, timing: Timing,
                 probe: StallProbe) -> tuple[dict[str, float | str], int, int]:
    """Median ms of each peer (or why it failed), the rounds, and the calls the machine stalled
    in. Each round calls every peer once, so that the machine's speed changing during the run
    hits all peers alike; calls during a stall are left out while 3 others remain. All rounds
    run in one autocast context, so eager bf16 casts its weights once (autocast's cache)."""
    failed: dict[str, str] = {}
    clean: dict[str, list[float]] = {b.peer.key: [] for b in built}
    stalled: dict[str, list[float]] = {b.peer.key: [] for b in built}
    rounds = 0
    deadline = time.perf_counter() + timing.max_seconds * len(built)
    with torch.no_grad(), autocast(dtype):
        for _ in range(timing.warmup):
            _round(built, failed, probe)
        while (min((len(v) for k, v in clean.items() if k not in failed), default=timing.iters)
               < timing.iters and (rounds < 3 or time.perf_counter() < deadline)):
            probe.wait(timing.max_seconds)
            for key, (ms, quiet) in _round(built, failed, probe).items():
                (clean if quiet else stalled)[key].append(ms)
            rounds += 1
    medians: dict[str, float | str] = {}
    for key, samples in clean.items():
        if key in failed:
            medians[key] = failed[key]
        else:
            medians[key] = statistics.median(samples if len(samples) >= 3
                                             else samples + stalled[key])
    return medians, rounds, sum(map(len, stalled.values()))


def compare(model: nn.Module, inputs: Inputs, dtype: torch.dtype, peers: Sequence[Peer],
            timing: Timing, probe: StallProbe, label: str) -> Comparison:
    """Build every peer (each its own module) and time them against each other."""
    with torch.no_grad(), autocast(dtype):
        reference = model(*inputs)
    results: dict[str, Result] = {}
    built = []
    for peer in peers:
        probe.wait(timing.max_seconds)
        try:
            b = build(peer, model, inputs, dtype, reference)
        except Exception as error:  # a failing peer is reported, never ends the run
            results[peer.key] = _failure(error)
            _progress(f"  {label} | {peer.label}: failed: {results[peer.key]}")
            continue
        built.append(b)
        groups = "" if b.groups is None else f", {b.groups} fusion groups"
        _progress(f"  {label} | {peer.label}: max abs diff {b.diff:.2e}{groups}")
    torch_graphfuse.reset_kernel_stats()
    times, rounds, stalls = timed_rounds(built, dtype, timing, probe)
    fallbacks = torch_graphfuse.kernel_stats()["fallbacks"]
    for b in built:
        ms = times[b.peer.key]
        results[b.peer.key] = ms if isinstance(ms, str) else Measurement(
            ms, b.diff, b.groups, fallbacks if b.peer.graphfuse else 0)
    results = {peer.key: results[peer.key] for peer in peers}
    _progress(f"  {label} | median ms: " + ", ".join(
        f"{key} {r if isinstance(r, str) else f'{r.ms:.2f}'}" for key, r in results.items())
        + f" ({rounds} rounds, {stalls} calls stalled)")
    return Comparison(results, {}, rounds, stalls)


def _model_and_inputs(config: Config) -> tuple[nn.Module, Inputs]:
    torch.manual_seed(0)
    return config.workload.build().eval(), config.workload.inputs(config.batch)


def run_config(config: Config, timing: Timing, probe: StallProbe, quick: bool) -> Comparison:
    model, inputs = _model_and_inputs(config)
    comparison = compare(model, inputs, config.dtype, PEERS, timing, probe, config.label)
    del model, inputs
    first_ms = first_calls(config, quick, probe)
    _progress(f"  {config.label} | first call ms: " + ", ".join(
        f"{key} {ms if isinstance(ms, str) else f'{ms:.0f}'}" for key, ms in first_ms.items()))
    return dataclasses.replace(comparison, first_ms=first_ms)


# ---------------------------------------------------------------- first call


def first_calls(config: Config, quick: bool, probe: StallProbe) -> dict[str, float | str]:
    """Median first-call ms of each compiling peer, each time in a fresh process, as a
    deployment starting up sees it: within one process, whichever peer came first would warm
    the allocator, the page cache and oneDNN's kernels for the others. Rounds interleave the
    peers, so that a slow spell of the machine hits them alike."""
    peers = [p for p in PEERS if p.first_calls]
    samples: dict[str, list[float]] = {p.key: [] for p in peers}
    failed: dict[str, str] = {}
    for round_ in range(1 if quick else max(p.first_calls for p in peers)):
        for peer in peers:
            if round_ >= peer.first_calls or peer.key in failed:
                continue
            probe.wait(10.0)
            command = [sys.executable, __file__, "--first-call", peer.key, "--models",
                       config.model, "--batch", str(config.batch),
                       "--dtype", _dtype_name(config.dtype), *(["--quick"] if quick else [])]
            child = subprocess.run(command, capture_output=True, text=True)
            lines = child.stdout.split()
            if child.returncode or not lines:
                failed[peer.key] = (child.stderr.strip().splitlines() or ["no output"])[-1][:160]
            else:
                samples[peer.key].append(float(lines[-1]))
    return {p.key: failed.get(p.key) or statistics.median(samples[p.key]) for p in peers}


def first_call_child(args: argparse.Namespace) -> None:
    """The fresh process of first_calls: build one peer for one configuration and print the
    milliseconds it took (trace, freeze and profiling runs, or torch.compile's first call)."""
    dtype = {_dtype_name(d): d for d in DTYPES}[args.dtype]
    config, = (c for c in configs([args.models], args.quick)
               if c.batch == args.batch and c.dtype == dtype)
    peer = PEERS_BY_KEY[args.first_call]
    torch._C._jit_set_autocast_mode(False)
    model, inputs = _model_and_inputs(config)
    with torch.no_grad(), autocast(dtype), fusers(peer.onednn, peer.graphfuse):
        start = time.perf_counter()
        peer.build(model, inputs)
        print(f"{_ms_since(start):.3f}")


Ceilings = dict[torch.dtype, float]


def _onednn_gemm(a: torch.Tensor, w: torch.Tensor) -> Call:
    packed = torch.ops.mkldnn._reorder_linear_weight(w, a.shape[0])
    return lambda: torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")


def _torch_gemm(a: torch.Tensor, w: torch.Tensor) -> Call:
    return lambda: nn.functional.linear(a, w)


GEMMS = {  # the first is the ceiling
    "oneDNN (torch.ops.mkldnn._linear_pointwise, prepacked weight)": _onednn_gemm,
    "torch.nn.functional.linear (MKL for fp32 in this torch build, oneDNN for bf16)": _torch_gemm,
}


def gemm_gflops(probe: StallProbe) -> dict[str, Ceilings]:
    """GFLOP/s of a GEMM_SIZE^3 linear per way of running it in torch, per dtype."""
    gflops: dict[str, Ceilings] = {}
    for name, gemm in GEMMS.items():
        gflops[name] = {}
        for dtype in DTYPES:
            a = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            w = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            probe.wait(10.0)
            with torch.no_grad():
                ms = runner.median_ms(gemm(a, w), warmup=2, iters=10)
            gflops[name][dtype] = 2 * GEMM_SIZE ** 3 / ms / 1e6
        _progress(f"GEMM {name}: " + ", ".join(f"{_dtype_name(d)} {g:.0f} GFLOP/s"
                                               for d, g in gflops[name].items()))
    return gflops


@dataclasses.dataclass(frozen=True)
class Overhead:
    script_ms: float
    graphfuse_ms: float
    groups: int


def chain_overhead(timing: Timing, probe: StallProbe) -> Overhead:
    """CHAIN_LENGTH x (linear CHAIN_WIDTH^2 + relu) on a 1 x CHAIN_WIDTH input: so little compute
    that the latency is mostly the per-op (TorchScript) or per-group (fused) cost."""
    torch.manual_seed(0)
    model = nn.Sequential(*[layer for _ in range(CHAIN_LENGTH)
                            for layer in (nn.Linear(CHAIN_WIDTH, CHAIN_WIDTH), nn.ReLU())])
    inputs = [torch.randn(1, CHAIN_WIDTH)]
    many = Timing(timing.warmup * 10, timing.iters * 20, timing.max_seconds)
    results = compare(model, inputs, torch.float32, (SCRIPT, GRAPHFUSE), many, probe,
                      "linear+relu chain").results
    script, fused = results[SCRIPT.key], results[GRAPHFUSE.key]
    if isinstance(script, str) or isinstance(fused, str):
        raise RuntimeError(script if isinstance(script, str) else fused)
    return Overhead(script.ms, fused.ms, fused.groups or 0)


# ---------------------------------------------------------------- report


Runs = dict[Config, Comparison]


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _cell(result: Result, fmt: Callable[[Measurement], str]) -> str:
    if isinstance(result, str):
        return "failed: " + result.replace("|", "\\|")[:60]
    return fmt(result)


def _speedup(results: dict[str, Result], over: str, peer: str = GRAPHFUSE.key) -> float | None:
    """How many times faster `peer` is than `over`; None if either failed."""
    base, ours = results[over], results[peer]
    if isinstance(base, str) or isinstance(ours, str):
        return None
    return base.ms / ours.ms


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def _row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), _dtype_name(config.dtype)]


def latency_table(runs: Runs) -> list[str]:
    header = ["model", "batch", "dtype", *(f"{p.label} ms" for p in PEERS),
              "speedup vs oneDNN fuser", "speedup vs inductor", "torch_graphfuse max abs diff",
              "torch_graphfuse groups", "rounds (stalled calls)"]
    rows = []
    for config, run in runs.items():
        ours = run.results[GRAPHFUSE.key]
        speedups = [_speedup(run.results, key) for key in ("onednn", "inductor")]
        rows.append([*_row_start(config),
                     *(_cell(run.results[p.key], lambda m: f"{m.ms:.2f}") for p in PEERS),
                     *("-" if s is None else f"{s:.2f}x" for s in speedups),
                     _cell(ours, lambda m: f"{m.diff:.2e}"), _cell(ours, lambda m: m.note),
                     f"{run.rounds} ({run.stalled})"])
    return _table(header, rows)


def first_call_table(runs: Runs) -> list[str]:
    peers = [p for p in PEERS if p.first_calls]
    header = ["model", "batch", "dtype", *(p.label for p in peers),
              "torch_graphfuse / built-in"]
    rows = []
    for c, run in runs.items():
        first = run.first_ms
        ratio = (f"{first['graphfuse'] / first['onednn']:.2f}x"
                 if all(isinstance(first.get(k), float) for k in ("graphfuse", "onednn")) else "-")
        rows.append([*_row_start(c), *(_first_cell(first.get(p.key)) for p in peers), ratio])
    return _table(header, rows)


def _first_cell(ms: float | str | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}" if isinstance(ms, float) else "failed: " + ms.replace("|", "\\|")[:60]


def accuracy_table(runs: Runs) -> list[str]:
    peers = PEERS[1:]
    header = ["model", "batch", "dtype", *(p.label for p in peers)]
    rows = [[*_row_start(c), *(_cell(run.results[p.key], lambda m: f"{m.diff:.2e}")
                               for p in peers)] for c, run in runs.items()]
    return _table(header, rows)


def throughput_table(runs: Runs, ceilings: Ceilings) -> list[str]:
    header = ["model", "batch", "dtype", "GFLOP per call", *(p.label for p in PEERS)]
    rows = []
    for config, run in runs.items():
        flops = config.workload.flops(config.batch)
        ceiling = ceilings[config.dtype]

        def gflops(m: Measurement, flops: float = flops, ceiling: float = ceiling) -> str:
            rate = flops / m.ms / 1e6
            return f"{rate:.0f} ({100 * rate / ceiling:.0f}%)"

        rows.append([*_row_start(config), f"{flops / 1e9:.2f}",
                     *(_cell(run.results[p.key], gflops) for p in PEERS)])
    return _table(header, rows)


def geomean_lines(runs: Runs) -> list[str]:
    lines = []
    for peer in PEERS[:-1]:
        speedups = [s for s in (_speedup(run.results, peer.key) for run in runs.values()) if s]
        if speedups:
            mean = math.exp(sum(map(math.log, speedups)) / len(speedups))
            lines.append(f"- over {peer.label}: {mean:.2f}x ({len(speedups)} configurations)")
        else:
            lines.append(f"- over {peer.label}: no configuration where both ran")
    return lines


def failure_lines(runs: Runs) -> list[str]:
    return [f"- {config.label}, {peer.label}: {run.results[peer.key]}"
            for config, run in runs.items() for peer in PEERS
            if isinstance(run.results[peer.key], str)]


def gemm_lines(measured: Sequence[dict[str, Ceilings]]) -> list[str]:
    lines = [f"GEMM ({GEMM_SIZE}^3 linear) GFLOP/s, measured at the start and at the end of the "
             "run; the best oneDNN one is the ceiling:", ""]
    for name in GEMMS:
        values = "; ".join(", ".join(f"{m[name][d]:.0f}" for d in DTYPES) for m in measured)
        lines.append(f"- {name}: fp32, bf16 = {values}")
    best = best_ceilings(measured)
    lines += ["", f"Ceiling: {best[torch.float32]:.0f} GFLOP/s fp32, "
              f"{best[torch.bfloat16]:.0f} GFLOP/s bf16."]
    return lines


def best_ceilings(measured: Sequence[dict[str, Ceilings]]) -> Ceilings:
    ceiling = next(iter(GEMMS))
    return {dtype: max(m[ceiling][dtype] for m in measured) for dtype in DTYPES}


def overhead_lines(overhead: Overhead) -> list[str]:
    per_group = overhead.graphfuse_ms / max(overhead.groups, 1) * 1e3
    per_pair = overhead.script_ms / CHAIN_LENGTH * 1e3
    return [f"A chain of {CHAIN_LENGTH} x (linear {CHAIN_WIDTH}x{CHAIN_WIDTH} + relu) on a "
            f"1x{CHAIN_WIDTH} input, fp32: almost no compute, so the latency is the cost of "
            "dispatching each op (unfused) or each fusion group (fused).", "",
            f"- torch_graphfuse: {overhead.graphfuse_ms * 1e3:.1f} us for {overhead.groups} "
            f"fusion groups = {per_group:.1f} us per group",
            f"- frozen TorchScript, no fuser: {overhead.script_ms * 1e3:.1f} us for "
            f"{CHAIN_LENGTH} linear+relu pairs = {per_pair:.1f} us per pair"]


def report(runs: Runs, gemms: Sequence[dict[str, Ceilings]], overhead: Overhead | None,
           command: str, quick: bool) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# torch_graphfuse benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"Machine: {_cpu_model()}, {torch.get_num_threads()} threads, torch {torch.__version__}, "
        f"oneDNN {torch_graphfuse._C._onednn_version()} (torch_graphfuse)  ",
        f"Date: {date}  ", f"Command: `{command}`", "",
        "Median latency in ms after warm-up. The peers run in rounds of one call each, so that "
        "changes in the machine's speed hit them alike; calls around which a probe saw the "
        "machine stall (a thread losing its core) are left out while 3 others remain. bf16 is "
        "autocast: traced under eager autocast with JIT autocast off, and timed inside one "
        "autocast context (eager casts its weights once, from autocast's cache). "
        "Speedups are torch_graphfuse's over that peer; max abs diff is against eager in the "
        "same dtype.", "",
        "## Latency", "", *latency_table(runs), "",
        "## Geomean speedup of torch_graphfuse", "", *geomean_lines(runs), "",
        "## First call (ms)", "",
        "Each in a fresh process, as a deployment starting up sees it: trace + freeze + "
        "profiling runs (where the fusers compile and oneDNN reorders the weights) for the "
        "TorchScript peers, the first call (compilation) for torch.compile. Median of "
        f"{1 if quick else max(p.first_calls for p in PEERS)} processes per TorchScript peer, "
        "interleaved; torch.compile: one process (its on-disk caches as configured, default "
        "on).", "",
        *first_call_table(runs), "",
        "## Max abs diff vs eager", "", *accuracy_table(runs), "",
        "## Achieved GFLOP/s (fraction of the GEMM ceiling)", "",
        *gemm_lines(gemms), "", *throughput_table(runs, best_ceilings(gemms)), "",
    ]
    if overhead is not None:
        lines += ["## Per-call overhead of a fusion group", "", *overhead_lines(overhead), ""]
    failures = failure_lines(runs)
    if failures:
        lines += ["## Failures", "", *failures, ""]
    return "\n".join(lines)


def plot(runs: Runs, path: Path) -> None:
    """Grouped bars: each peer's speedup over eager, per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = PEERS[1:]
    width = 0.8 / len(peers)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(runs)), 4.5))
    for i, peer in enumerate(peers):
        speedups = [_speedup(run.results, "eager", peer.key) or 0.0 for run in runs.values()]
        offset = (i - (len(peers) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(runs))], speedups, width, label=peer.label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([c.label for c in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("speedup over eager")
    ax.set_title(f"{_cpu_model()}, {torch.get_num_threads()} threads", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------- main


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="small batch-1 stand-ins and few iterations (CI smoke run)")
    parser.add_argument("--models", default="resnet50,bert,mlp",
                        help="comma-separated subset of resnet50,bert,mlp")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: benchmarks/, and *-quick files for --quick)")
    # internal: the fresh process that times one peer's first call (see first_calls)
    parser.add_argument("--first-call", choices=[p.key for p in PEERS if p.first_calls],
                        help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=[_dtype_name(d) for d in DTYPES],
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    if args.first_call:
        first_call_child(args)
        return
    todo = configs([m.strip() for m in args.models.split(",") if m.strip()], args.quick)
    timing = Timing(2, 10, 2.0) if args.quick else Timing(3, 20, 20.0)
    suffix = "-quick" if args.quick and args.out is None else ""
    out = args.out or Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)
    torch._C._jit_set_autocast_mode(False)
    probe = StallProbe()

    gemms = [gemm_gflops(probe)]
    runs: Runs = {}
    for i, config in enumerate(todo, 1):
        _progress(f"[{i}/{len(todo)}] {config.label}")
        runs[config] = run_config(config, timing, probe, args.quick)
    try:
        overhead: Overhead | None = chain_overhead(timing, probe)
    except Exception as error:  # left out of the report, never ends the run
        _progress(f"per-group overhead: failed: {_failure(error)}")
        overhead = None
    gemms.append(gemm_gflops(probe))

    results = out / f"RESULTS{suffix}.md"
    results.write_text(report(runs, gemms, overhead, " ".join(["python", *sys.argv]),
                              args.quick))
    plot(runs, out / f"speedup{suffix}.png")
    _progress(f"wrote {results} and {out / f'speedup{suffix}.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
