"""Side-by-side benchmark: torch_graphfuse against eager, frozen TorchScript, PyTorch's
built-in oneDNN Graph fuser, torch.compile (inductor) and torch_graphfuse through torch.compile
(backend "graphfuse"), on ResNet-50, BERT-base and an MLP, in fp32 and bf16 (autocast), in one
process with the same inputs and threads. int8 rows (ResNet-50, BERT-base): the models
statically quantized, torch_graphfuse against eager int8 PyTorch, torch.compile (inductor) of
the PT2E model, OpenVINO with NNCF, and torch_graphfuse's own fp32.

    python benchmarks/bench.py [--quick] [--models resnet50,bert,mlp] [--dtypes fp32,bf16,int8]
                               [--isas native,avx2] [--agreement N] [--out benchmarks]

--isas also runs every configuration under an emulated older ISA, in a child process whose
oneDNN and ATen are limited to its kernels (avx2: an AMD Zen 2/3 or Intel client CPU;
avx512_core: AVX-512 without VNNI or bf16). Emulation gives that CPU's kernels, not its speed:
its rows are labelled so.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import functools
import itertools
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn import library
from torch_graphfuse.testing import quantize, runner
from torch_graphfuse.testing.models import resnet18, resnet50
from torch_graphfuse.testing.transformer import bert_base, bert_inputs, bert_layer, mlp

Inputs = list[torch.Tensor]
Call = Callable[[], torch.Tensor]
Forward = Callable[..., torch.Tensor]  # a model's forward: called with its inputs

BERT_SEQ = 128
MLP_SIZES = (1024, 4096, 4096, 1024)
GEMM_SIZE = 2048
CHAIN_LENGTH = 20
CHAIN_WIDTH = 16
PROBE_SIZE = 1 << 16
DTYPES = (torch.float32, torch.bfloat16)
INT8 = torch.int8  # the dtype of int8 configurations: statically quantized models
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", INT8: "int8"}
CALIBRATION_SAMPLES = 16  # per int8 configuration, in batches of the configuration's size
CALIBRATION_SAMPLES_QUICK = 4
AGREEMENT_SAMPLES = 200  # images for the int8 peers' top-1 agreement with the float model
AGREEMENT_SAMPLES_QUICK = 8
ZOO_SECTION = "\n## Zoo\n"  # RESULTS.md's part that benchmarks/zoo.py writes


# ---------------------------------------------------------------- workloads


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], Inputs]
    flops: Callable[[int], float]  # per call, from the batch size
    batches: tuple[int, ...]
    int8_batches: tuple[int, ...] = ()
    classifier: bool = False  # int8: top-1 agreement with the float model is reported
    transformer: bool = False  # int8: only linears quantized (FX), NNCF's transformer scheme


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
                         (1, 32), int8_batches=(1, 32), classifier=True),
    "bert": Workload(f"BERT-base s{BERT_SEQ}", bert_base, _bert_inputs, _bert_flops(12), (1, 8),
                     int8_batches=(1,), transformer=True),
    "mlp": Workload("MLP", lambda: mlp(MLP_SIZES), lambda b: [torch.randn(b, MLP_SIZES[0])],
                    _mlp_flops, (1, 32)),
}
QUICK = {  # small stand-ins, batch 1 only
    "resnet50": Workload("ResNet-18 112", resnet18, _images(112), lambda b: 2 * 1.82e9 / 4 * b,
                         (1,), int8_batches=(1,), classifier=True),
    "bert": Workload(f"BERT layer s{BERT_SEQ}", bert_layer, _bert_inputs, _bert_flops(1), (1,),
                     int8_batches=(1,), transformer=True),
    "mlp": dataclasses.replace(FULL["mlp"], batches=(1,)),
}


def _dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]


NATIVE = "native"
# Older ISAs emulated by limiting oneDNN (torch's and torch_graphfuse's, one library), ATen's
# vectorized kernels and MKL (fp32 linear) in a child process.
EMULATED_ISAS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512_core": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # key of FULL / QUICK
    workload: Workload
    batch: int
    dtype: torch.dtype
    isa: str = NATIVE  # NATIVE, or a key of EMULATED_ISAS

    @property
    def label(self) -> str:
        emulated = "" if self.isa == NATIVE else f" [{self.isa}, emulated]"
        return f"{self.workload.name} b{self.batch} {_dtype_name(self.dtype)}{emulated}"


def configs(models: Sequence[str], quick: bool,
            dtypes: Sequence[str] = tuple(DTYPE_NAMES.values())) -> list[Config]:
    """Each model's fp32 and bf16 configurations, then its int8 ones, of the named dtypes."""
    workloads = QUICK if quick else FULL
    unknown = set(models) - set(workloads)
    if unknown:
        raise SystemExit(f"unknown models: {', '.join(sorted(unknown))}")
    unknown = set(dtypes) - set(DTYPE_NAMES.values())
    if unknown:
        raise SystemExit(f"unknown dtypes: {', '.join(sorted(unknown))}")
    todo = []
    for m in models:
        todo += [Config(m, workloads[m], batch, dtype) for batch in workloads[m].batches
                 for dtype in DTYPES if _dtype_name(dtype) in dtypes]
        if "int8" in dtypes:
            todo += [Config(m, workloads[m], batch, INT8) for batch in workloads[m].int8_batches]
    return todo


def _runnable(todo: Sequence[Config]) -> list[Config]:
    """The configurations worth running on this CPU: without bf16 instructions, the bf16
    ones at each model's smallest batch only. There eager's bf16 convolutions fall back to
    ATen's scalar path (2.8 s per ResNet-50 image on emulated AVX2), so a larger batch takes
    hours; the smallest one shows the same."""
    isa = library.isa()
    if isa is None or isa.bf16:
        return list(todo)
    smallest = {c.model: min(c.workload.batches) for c in todo}
    kept = [c for c in todo if c.dtype != torch.bfloat16 or c.batch == smallest[c.model]]
    for c in todo:
        if c not in kept:
            _progress(f"{c.label}: not run, {isa.name} has no bf16 instructions (the smallest "
                      "batch stands for it)")
    return kept


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
    module = runner.profiled(model, inputs)
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
    build: Callable[[Any, Inputs], Call | Forward]  # from the model (int8: Int8Models)
    onednn: bool = False
    graphfuse: bool = False
    first_calls: int = 3  # fresh processes that time its first call (0: not a compilation)
    forward: bool = False  # build gives a Forward, which also runs other inputs (int8 peers)


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


class NotInstalled(Exception):
    """An optional benchmark dependency is missing: the peer reports `not installed`."""


@dataclasses.dataclass(frozen=True)
class Int8Models:
    """A float model and its statically quantized versions, from one calibration set. Called,
    it runs the reference quantized model: the PT2E GraphModule in eager PyTorch."""

    fp32: nn.Module
    pt2e: torch.fx.GraphModule  # torchao PT2E, X86InductorQuantizer
    fbgemm: torch.fx.GraphModule  # torch.ao FX, converted to the x86 engine's quantized ops
    calibration: list[Inputs]
    transformer: bool

    def __call__(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.pt2e(*inputs)


def int8_models(model: nn.Module, config: Config, quick: bool) -> Int8Models:
    """Quantize `model` for an int8 configuration: calibration batches of the configuration's
    batch size (PT2E exports with static shapes), drawn from its input distribution."""
    samples = CALIBRATION_SAMPLES_QUICK if quick else CALIBRATION_SAMPLES
    calibration = [config.workload.inputs(config.batch)
                   for _ in range(max(1, samples // config.batch))]
    example = calibration[0]
    only = (nn.Linear,) if config.workload.transformer else None
    return Int8Models(model, quantize.pt2e(model, example, calibration),
                      quantize.fx_fbgemm(model, example, calibration, only), calibration,
                      config.workload.transformer)


def _profiled(module: torch.jit.ScriptModule, inputs: Inputs) -> Forward:
    """Run the profiling runs: the fusers compile at the last one."""
    for _ in range(runner.PROFILING_RUNS):
        module(*inputs)
    return module


def _graphfuse_fp32(models: Int8Models, inputs: Inputs) -> Forward:
    return _profiled(runner.freeze(models.fp32, inputs), inputs)


def _graphfuse_int8(models: Int8Models, inputs: Inputs) -> Forward:
    return _profiled(quantize.freeze_quantized(models.pt2e, inputs), inputs)


def _eager_int8(models: Int8Models, inputs: Inputs) -> Forward:
    torch.backends.quantized.engine = "x86"
    return models.fbgemm


def _inductor_int8(models: Int8Models, inputs: Inputs) -> Forward:
    torch._dynamo.reset()
    torch._inductor.config.freezing = True
    compiled = torch.compile(copy.deepcopy(models.pt2e), backend="inductor")
    compiled(*inputs)
    return compiled


def _openvino_int8(models: Int8Models, inputs: Inputs) -> Forward:
    """The float model converted by OpenVINO, quantized by NNCF's post-training quantization
    on the same calibration batches, compiled for the CPU with torch's thread count."""
    try:
        import nncf
        import openvino as ov
    except ImportError as error:
        raise NotInstalled(error.name or "openvino / nncf") from error

    nncf.set_log_level(logging.WARNING)
    converted = ov.convert_model(copy.deepcopy(models.fp32), example_input=tuple(inputs))
    dataset = nncf.Dataset(models.calibration, lambda batch: tuple(t.numpy() for t in batch))
    quantized = nncf.quantize(
        converted, dataset, subset_size=len(models.calibration),
        model_type=nncf.ModelType.TRANSFORMER if models.transformer else None)
    compiled = ov.Core().compile_model(quantized, "CPU", {
        "INFERENCE_NUM_THREADS": torch.get_num_threads(), "PERFORMANCE_HINT": "LATENCY"})
    _progress(f"  OpenVINO {ov.get_version()}, NNCF {nncf.__version__}, inference precision "
              f"{compiled.get_property('INFERENCE_PRECISION_HINT')}")
    request = compiled.create_infer_request()

    def forward(*args: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(request.infer([a.numpy() for a in args], share_inputs=True)[0])

    return forward


INT8_PEERS = (
    Peer("graphfuse_fp32", "torch_graphfuse fp32", _graphfuse_fp32, graphfuse=True,
         first_calls=0, forward=True),
    Peer("eager_int8", "eager int8 (x86 engine)", _eager_int8, first_calls=0, forward=True),
    Peer("inductor_int8", "torch.compile int8 (inductor, PT2E)", _inductor_int8,
         first_calls=0, forward=True),
    Peer("openvino_int8", "OpenVINO int8 (NNCF)", _openvino_int8, first_calls=0, forward=True),
    Peer("graphfuse_int8", "torch_graphfuse int8 (PT2E)", _graphfuse_int8, graphfuse=True,
         first_calls=0, forward=True),
)
GRAPHFUSE_FP32, GRAPHFUSE_INT8 = INT8_PEERS[0], INT8_PEERS[-1]


# ---------------------------------------------------------------- measuring


def _ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _failure(error: Exception) -> str:
    if isinstance(error, NotInstalled):
        return f"not installed ({error}): pip install -r requirements-bench.txt"
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
    forward: Forward | None = None  # peers that run other inputs too (Peer.forward)


@dataclasses.dataclass(frozen=True)
class Measurement:
    ms: float
    diff: float
    groups: int | None = None  # torch_graphfuse only: fusion groups and unfused fallback runs
    fallbacks: int = 0
    agreement: float | str | None = None  # int8 classifiers: top-1 agreement with float

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


def build(peer: Peer, model: nn.Module | Int8Models, inputs: Inputs, dtype: torch.dtype,
          reference: torch.Tensor) -> Built:
    with torch.no_grad(), autocast(dtype), fusers(peer.onednn, peer.graphfuse):
        made = peer.build(model, inputs)
        forward = made if peer.forward else None
        call = functools.partial(made, *inputs) if peer.forward else made
        diff = _max_abs_diff(call(), reference)
        graph = torch.jit.last_executed_optimized_graph() if peer.graphfuse else None
    groups = None if graph is None else len(runner.fusion_groups(graph))
    return Built(peer, call, diff, groups, forward)


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


def compare(model: nn.Module | Int8Models, inputs: Inputs, dtype: torch.dtype,
            peers: Sequence[Peer], timing: Timing, probe: StallProbe, label: str,
            agreement: Callable[[Built], float] | None = None) -> Comparison:
    """Build every peer (each its own module) and time them against each other; then, given
    `agreement`, each peer's top-1 agreement with the float model."""
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
            ms, b.diff, b.groups, fallbacks if b.peer.graphfuse else 0,
            _agreement(agreement, b, label))
    results = {peer.key: results[peer.key] for peer in peers}
    _progress(f"  {label} | median ms: " + ", ".join(
        f"{key} {r if isinstance(r, str) else f'{r.ms:.2f}'}" for key, r in results.items())
        + f" ({rounds} rounds, {stalls} calls stalled)")
    return Comparison(results, {}, rounds, stalls)


def _agreement(agreement: Callable[[Built], float] | None, built: Built,
               label: str) -> float | str | None:
    if agreement is None:
        return None
    try:
        share = agreement(built)
    except Exception as error:  # reported in the peer's cell, never ends the run
        _progress(f"  {label} | {built.peer.label}: top-1 agreement failed: {_failure(error)}")
        return _failure(error)
    _progress(f"  {label} | {built.peer.label}: top-1 agreement with float {100 * share:.1f}%")
    return share


def top1_agreement(models: Int8Models, config: Config, samples: int) -> Callable[[Built], float]:
    """The share of `samples` synthetic inputs (whole batches of the configuration's size, from
    its input distribution) where a peer's top-1 class is the float model's."""
    torch.manual_seed(1)
    batches = [config.workload.inputs(config.batch)
               for _ in range(max(1, math.ceil(samples / config.batch)))]
    with torch.no_grad():
        expected = [models.fp32(*batch).argmax(-1) for batch in batches]

    def share(built: Built) -> float:
        if built.forward is None:
            raise ValueError("the peer runs its benchmark inputs only")
        same = 0
        with torch.no_grad(), fusers(built.peer.onednn, built.peer.graphfuse):
            for batch, classes in zip(batches, expected, strict=True):
                same += int((built.forward(*batch).argmax(-1) == classes).sum())
        return same / sum(len(classes) for classes in expected)

    return share


def _model_and_inputs(config: Config) -> tuple[nn.Module, Inputs]:
    torch.manual_seed(0)
    return config.workload.build().eval(), config.workload.inputs(config.batch)


def run_int8_config(config: Config, timing: Timing, probe: StallProbe, quick: bool,
                    samples: int) -> Comparison:
    """The int8 peers, against the reference quantized model (PT2E, eager). No first-call
    times: the quantization recipe itself (calibration) dominates a deployment's start."""
    model, inputs = _model_and_inputs(config)
    start = time.perf_counter()
    models = int8_models(model, config, quick)
    _progress(f"  {config.label} | quantized (PT2E and FX, {len(models.calibration)} "
              f"calibration batches) in {_ms_since(start) / 1e3:.0f} s")
    agreement = top1_agreement(models, config, samples) if config.workload.classifier else None
    return compare(models, inputs, INT8, INT8_PEERS, timing, probe, config.label, agreement)


def run_config(config: Config, timing: Timing, probe: StallProbe, quick: bool,
               first: bool = True) -> Comparison:
    model, inputs = _model_and_inputs(config)
    comparison = compare(model, inputs, config.dtype, PEERS, timing, probe, config.label)
    del model, inputs
    if not first:
        return comparison
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


def _int8_gemms() -> dict[str, Call]:
    """int8 GEMM_SIZE^3 matmuls: oneDNN's u8 x s8 (the form VNNI takes directly, as quantized
    convs and linears run) with a prepacked weight, and torch._int_mm's s8 x s8."""
    shape = (GEMM_SIZE, GEMM_SIZE)
    a = torch.randint(0, 256, shape, dtype=torch.uint8)
    b = torch.randint(-128, 128, shape, dtype=torch.int8)
    packed = torch.ops.onednn.qlinear_prepack(b, list(shape))
    scales, zeros = torch.full((GEMM_SIZE,), 0.01), torch.zeros(GEMM_SIZE, dtype=torch.long)
    signed = torch.randint(-128, 128, shape, dtype=torch.int8)
    return {
        INT8_GEMMS[0]: lambda: torch.ops.onednn.qlinear_pointwise(
            a, 0.02, 0, packed, scales, zeros, None, 1.0, 0, torch.float32, "none", [], ""),
        INT8_GEMMS[1]: lambda: torch._int_mm(signed, b),
    }


INT8_GEMMS = ("oneDNN u8 x s8 (torch.ops.onednn.qlinear_pointwise, prepacked weight)",
              "torch._int_mm (s8 x s8 -> s32)")


def gemm_gflops(probe: StallProbe) -> dict[str, Ceilings]:
    """GFLOP/s of a GEMM_SIZE^3 linear per way of running it in torch, per dtype; and GOP/s of
    the int8 ones."""
    gflops: dict[str, Ceilings] = {}

    def rate(gemm: Callable[[], Call]) -> float:
        """NaN where this CPU cannot run it (torch's prepacked bf16 linear needs
        AVX-512 bf16, say)."""
        probe.wait(10.0)
        try:
            with torch.no_grad():
                ms = runner.median_ms(gemm(), warmup=2, iters=10)
        except RuntimeError as e:
            _progress(f"  not on this CPU: {str(e).splitlines()[0][:120]}")
            return math.nan
        return 2 * GEMM_SIZE ** 3 / ms / 1e6

    for name, gemm in GEMMS.items():
        gflops[name] = {}
        for dtype in DTYPES:
            a = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            w = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            gflops[name][dtype] = rate(functools.partial(gemm, a, w))
        _progress(f"GEMM {name}: " + ", ".join(f"{_dtype_name(d)} {_rate(g)} GFLOP/s"
                                               for d, g in gflops[name].items()))
    for name, gemm in _int8_gemms().items():
        gflops[name] = {INT8: rate(lambda gemm=gemm: gemm)}
        _progress(f"GEMM {name}: int8 {_rate(gflops[name][INT8])} GOP/s")
    return gflops


def _rate(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def _best(values: Iterable[float]) -> float:
    """The largest measured value; NaN when none was measured."""
    measured = [v for v in values if not math.isnan(v)]
    return max(measured) if measured else math.nan


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


def _isa_cell(config: Config) -> str:
    if config.isa == NATIVE:
        return torch_graphfuse.onednn_info()["isa"] or "?"
    return f"{config.isa} (emulated)"


def _row_start(config: Config) -> list[str]:
    return [config.workload.name, str(config.batch), _dtype_name(config.dtype), _isa_cell(config)]


def latency_table(runs: Runs) -> list[str]:
    header = ["model", "batch", "dtype", "ISA", *(f"{p.label} ms" for p in PEERS),
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
    return _table(header, rows)


def _first_cell(ms: float | str | None) -> str:
    if ms is None:
        return "-"
    return f"{ms:.0f}" if isinstance(ms, float) else "failed: " + ms.replace("|", "\\|")[:60]


def accuracy_table(runs: Runs) -> list[str]:
    peers = PEERS[1:]
    header = ["model", "batch", "dtype", "ISA", *(p.label for p in peers)]
    rows = [[*_row_start(c), *(_cell(run.results[p.key], lambda m: f"{m.diff:.2e}")
                               for p in peers)] for c, run in runs.items()]
    return _table(header, rows)


def throughput_table(runs: Runs, ceilings: dict[str, Ceilings]) -> list[str]:
    header = ["model", "batch", "dtype", "ISA", "GFLOP per call", *(p.label for p in PEERS)]
    rows = []
    for config, run in runs.items():
        flops = config.workload.flops(config.batch)
        ceiling = ceilings[config.isa][config.dtype]

        def gflops(m: Measurement, flops: float = flops, ceiling: float = ceiling) -> str:
            rate = flops / m.ms / 1e6
            share = "" if math.isnan(ceiling) else f" ({100 * rate / ceiling:.0f}%)"
            return f"{rate:.0f}{share}"

        rows.append([*_row_start(config), f"{flops / 1e9:.2f}",
                     *(_cell(run.results[p.key], gflops) for p in PEERS)])
    return _table(header, rows)


def geomean_lines(runs: Runs) -> list[str]:
    """Per ISA the runs were made on, torch_graphfuse's geomean speedup over each peer."""
    lines = []
    for isa in dict.fromkeys(c.isa for c in runs):
        on = [run for c, run in runs.items() if c.isa == isa]
        where = next(_isa_cell(c) for c in runs if c.isa == isa)
        for peer in PEERS[:-1]:
            speedups = [s for s in (_speedup(run.results, peer.key) for run in on) if s]
            if speedups:
                mean = math.exp(sum(map(math.log, speedups)) / len(speedups))
                lines.append(f"- {where}, over {peer.label}: {mean:.2f}x "
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
        speedups = [_speedup(run.results, GRAPHFUSE_FP32.key, p.key) for p in quantized]
        rows.append([config.workload.name, str(config.batch), _isa_cell(config),
                     *(_cell(run.results[p.key], lambda m: f"{m.ms:.2f}") for p in INT8_PEERS),
                     *("-" if s is None else f"{s:.2f}x" for s in speedups),
                     _cell(run.results[GRAPHFUSE_INT8.key], lambda m: m.note),
                     f"{run.rounds} ({run.stalled})"])
    return _table(header, rows)


def _agreement_cell(result: Result) -> str:
    if isinstance(result, str) or result.agreement is None:
        return "-"
    if isinstance(result.agreement, str):
        return "failed: " + result.agreement.replace("|", "\\|")[:60]
    return f"{100 * result.agreement:.1f}%"


def int8_accuracy_table(runs: Runs) -> list[str]:
    header = ["model", "batch", "ISA", *(f"{p.label}: max abs diff" for p in INT8_PEERS),
              *(f"{p.label}: top-1 agreement" for p in INT8_PEERS)]
    rows = [[c.workload.name, str(c.batch), _isa_cell(c),
             *(_cell(run.results[p.key], lambda m: f"{m.diff:.2e}") for p in INT8_PEERS),
             *(_agreement_cell(run.results[p.key]) for p in INT8_PEERS)]
            for c, run in runs.items()]
    return _table(header, rows)


def int8_throughput_table(runs: Runs, ceilings: dict[str, Ceilings]) -> list[str]:
    header = ["model", "batch", "ISA", "GOP per call", *(p.label for p in INT8_PEERS)]
    rows = []
    for config, run in runs.items():
        ops = config.workload.flops(config.batch)

        def rate(m: Measurement, ceiling: float, ops: float = ops) -> str:
            gops = ops / m.ms / 1e6
            share = "" if math.isnan(ceiling) else f" ({100 * gops / ceiling:.0f}%)"
            return f"{gops:.0f}{share}"

        cells = [_cell(run.results[p.key], functools.partial(
            rate, ceiling=ceilings[config.isa][torch.float32 if p is GRAPHFUSE_FP32 else INT8]))
            for p in INT8_PEERS]
        rows.append([config.workload.name, str(config.batch), _isa_cell(config),
                     f"{ops / 1e9:.2f}", *cells])
    return _table(header, rows)


def int8_lines(runs: Runs, ceilings: dict[str, Ceilings], samples: int) -> list[str]:
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


def gemm_lines(measured: Sequence[dict[str, Ceilings]]) -> list[str]:
    lines = [f"GEMM ({GEMM_SIZE}^3 linear) GFLOP/s, measured at the start and at the end of the "
             "run; the best oneDNN one is the ceiling (int8: the best of both int8 GEMMs):", ""]
    for name in GEMMS:
        values = "; ".join(", ".join(_rate(m[name][d]) for d in DTYPES) for m in measured)
        lines.append(f"- {name}: fp32, bf16 = {values}")
    for name in INT8_GEMMS:
        values = "; ".join(_rate(m[name][INT8]) for m in measured)
        lines.append(f"- {name}: int8 GOP/s = {values}")
    best = best_ceilings(measured)
    lines += ["", f"Ceiling: {_rate(best[torch.float32])} GFLOP/s fp32, "
              f"{_rate(best[torch.bfloat16])} GFLOP/s bf16, {_rate(best[INT8])} GOP/s int8 "
              f"({best[INT8] / best[torch.float32]:.1f}x fp32)."]
    return lines


def best_ceilings(measured: Sequence[dict[str, Ceilings]]) -> Ceilings:
    ceiling = next(iter(GEMMS))
    best = {dtype: _best(m[ceiling][dtype] for m in measured) for dtype in DTYPES}
    best[INT8] = _best(m[name][INT8] for m in measured for name in INT8_GEMMS)
    return best


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


def report(runs: Runs, gemms: dict[str, Sequence[dict[str, Ceilings]]],
           overhead: Overhead | None, command: str, quick: bool, samples: int) -> str:
    """`gemms`: per ISA the runs were made on, its GEMM measurements."""
    int8_runs = {c: run for c, run in runs.items() if c.dtype == INT8}
    float_runs = {c: run for c, run in runs.items() if c.dtype != INT8}
    ceilings = {isa: best_ceilings(measured) for isa, measured in gemms.items()}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    emulated = [isa for isa in gemms if isa != NATIVE]
    lines = [
        "# torch_graphfuse benchmark" + (" (quick smoke run)" if quick else ""), "",
        f"Machine: {_cpu_model()} (oneDNN's ISA: {torch_graphfuse.onednn_info()['isa']}), "
        f"{torch.get_num_threads()} threads, torch {torch.__version__}, oneDNN "
        f"{torch_graphfuse.onednn_info()['version']} (torch's, used by torch_graphfuse)  ",
        f"Date: {date}  ", f"Command: `{command}`", "",
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
            *first_call_lines(float_runs, quick),
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
        lines += ["## int8", "", *int8_lines(int8_runs, ceilings, samples)]
    if overhead is not None:
        lines += ["## Per-call overhead of a fusion group", "", *overhead_lines(overhead), ""]
    failures = failure_lines(runs)
    if failures:
        lines += ["## Failures", "", *failures, ""]
    return "\n".join(lines)


def first_call_lines(runs: Runs, quick: bool) -> list[str]:
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


def _bars(ax: Any, runs: Runs, peers: Sequence[Peer], over: str, ylabel: str) -> None:
    """Grouped bars: each peer's speedup over the peer `over`, per configuration."""
    width = 0.8 / len(peers)
    for i, peer in enumerate(peers):
        speedups = [_speedup(run.results, over, peer.key) or 0.0 for run in runs.values()]
        offset = (i - (len(peers) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(runs))], speedups, width, label=peer.label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(range(len(runs)))
    ax.set_xticklabels([c.label for c in runs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)


def plot(runs: Runs, path: Path) -> None:
    """fp32 / bf16: each peer's speedup over eager; int8 (a second panel): each int8 peer's
    speedup over torch_graphfuse fp32."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(r, peers, over, label) for r, peers, over, label in (
        ({c: run for c, run in runs.items() if c.dtype != INT8}, PEERS[1:], "eager",
         "speedup over eager"),
        ({c: run for c, run in runs.items() if c.dtype == INT8}, INT8_PEERS[1:],
         GRAPHFUSE_FP32.key, "int8: speedup over torch_graphfuse fp32")) if r]
    fig, axes = plt.subplots(1, len(panels), squeeze=False, width_ratios=[
        max(len(r), 2) for r, *_ in panels], figsize=(max(6.0, 1.2 * len(runs) + 2), 4.5))
    for ax, (panel_runs, peers, over, ylabel) in zip(axes[0], panels, strict=True):
        _bars(ax, panel_runs, peers, over, ylabel)
    fig.suptitle(f"{_cpu_model()}, {torch.get_num_threads()} threads", fontsize=10)
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
    parser.add_argument("--dtypes", default=",".join(DTYPE_NAMES.values()),
                        help="comma-separated subset of fp32,bf16,int8 (int8: ResNet-50, BERT)")
    parser.add_argument("--agreement", type=int, default=None, metavar="N",
                        help="int8 ResNet rows: top-1 agreement with the float model over N "
                        f"synthetic images (default {AGREEMENT_SAMPLES}, "
                        f"{AGREEMENT_SAMPLES_QUICK} with --quick)")
    parser.add_argument("--out", type=Path, default=None,
                        help="output folder (default: benchmarks/, and *-quick files for --quick)")
    parser.add_argument("--isas", default=NATIVE,
                        help=f"comma-separated ISAs to run on: {NATIVE} (this CPU) and "
                        f"emulated {', '.join(EMULATED_ISAS)} (see the module's doc)")
    # internal: a child process run under an emulated ISA (see run_emulated)
    parser.add_argument("--isa-child", choices=list(EMULATED_ISAS), help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    # internal: the fresh process that times one peer's first call (see first_calls)
    parser.add_argument("--first-call", choices=[p.key for p in PEERS if p.first_calls],
                        help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--dtype", choices=[_dtype_name(d) for d in DTYPES],
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_all(todo: Sequence[Config], timing: Timing, quick: bool, samples: int,
            first: bool = True) -> tuple[Runs, list[dict[str, Ceilings]], Overhead | None]:
    """Every configuration in this process, between two GEMM measurements; with `first`,
    the first-call times in fresh processes too."""
    probe = StallProbe()
    gemms = [gemm_gflops(probe)]
    runs: Runs = {}
    todo = _runnable(todo)
    for i, config in enumerate(todo, 1):
        _progress(f"[{i}/{len(todo)}] {config.label}")
        if config.dtype != INT8:
            runs[config] = run_config(config, timing, probe, quick, first)
            continue
        try:
            runs[config] = run_int8_config(config, timing, probe, quick, samples)
        except Exception as error:  # quantizing failed: every int8 peer reports why
            _progress(f"  {config.label} | quantization failed: {_failure(error)}")
            runs[config] = Comparison({p.key: f"quantization: {_failure(error)}"
                                       for p in INT8_PEERS}, {}, 0, 0)
    try:
        overhead: Overhead | None = chain_overhead(timing, probe)
    except Exception as error:  # left out of the report, never ends the run
        _progress(f"per-group overhead: failed: {_failure(error)}")
        overhead = None
    gemms.append(gemm_gflops(probe))
    return runs, gemms, overhead


def _encode(runs: Runs, gemms: Sequence[dict[str, Ceilings]]) -> dict[str, Any]:
    def result(r: Result) -> Any:
        return r if isinstance(r, str) else dataclasses.asdict(r)

    return {
        "runs": [{"model": c.model, "batch": c.batch, "dtype": _dtype_name(c.dtype),
                  "results": {k: result(r) for k, r in run.results.items()},
                  "first_ms": run.first_ms, "rounds": run.rounds, "stalled": run.stalled}
                 for c, run in runs.items()],
        "gemms": [{name: {_dtype_name(d): v for d, v in c.items()} for name, c in g.items()}
                  for g in gemms]}


def _decode(data: dict[str, Any], isa: str, quick: bool) -> tuple[Runs, list[dict[str, Ceilings]]]:
    workloads = QUICK if quick else FULL
    dtypes = {name: d for d, name in DTYPE_NAMES.items()}
    runs: Runs = {}
    for r in data["runs"]:
        config = Config(r["model"], workloads[r["model"]], r["batch"], dtypes[r["dtype"]], isa)
        results = {k: v if isinstance(v, str) else Measurement(**v)
                   for k, v in r["results"].items()}
        runs[config] = Comparison(results, r["first_ms"], r["rounds"], r["stalled"])
    gemms = [{name: {dtypes[d]: v for d, v in c.items()} for name, c in g.items()}
             for g in data["gemms"]]
    return runs, gemms


def run_emulated(isa: str, argv: Sequence[str],
                 quick: bool) -> tuple[Runs, list[dict[str, Ceilings]]]:
    """The same configurations in a child process limited to an older ISA's kernels."""
    _progress(f"on emulated {isa}: a child process with "
              + " ".join(f"{k}={v}" for k, v in EMULATED_ISAS[isa].items()))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "runs.json"
        subprocess.run([sys.executable, __file__, *argv, "--isa-child", isa, "--json", str(path)],
                       env={**os.environ, **EMULATED_ISAS[isa]}, check=True)
        return _decode(json.loads(path.read_text()), isa, quick)


def main(argv: Sequence[str]) -> None:
    args = parse_args(argv)
    if args.first_call:
        first_call_child(args)
        return
    todo = configs([m.strip() for m in args.models.split(",") if m.strip()], args.quick,
                   [d.strip() for d in args.dtypes.split(",") if d.strip()])
    samples = args.agreement or (AGREEMENT_SAMPLES_QUICK if args.quick else AGREEMENT_SAMPLES)
    timing = Timing(2, 10, 2.0) if args.quick else Timing(3, 20, 20.0)
    torch._C._jit_set_autocast_mode(False)
    for message in quantize.DEPRECATIONS:  # the FX int8 models warn as they run
        warnings.filterwarnings("ignore", message=message)
    if args.isa_child:  # emulation approximates speed: first calls are measured natively
        runs, gemms, _ = run_all(todo, timing, args.quick, samples, first=False)
        args.json.write_text(json.dumps(_encode(runs, gemms)))
        return
    isas = [i.strip() for i in args.isas.split(",") if i.strip()]
    unknown = set(isas) - {NATIVE, *EMULATED_ISAS}
    if unknown:
        raise SystemExit(f"unknown ISAs: {', '.join(sorted(unknown))}")
    suffix = "-quick" if args.quick and args.out is None else ""
    out = args.out or Path(__file__).resolve().parent
    out.mkdir(parents=True, exist_ok=True)

    runs: Runs = {}
    gemms: dict[str, Sequence[dict[str, Ceilings]]] = {}
    overhead = None
    for isa in isas:
        if isa == NATIVE:
            native, gemms[isa], overhead = run_all(todo, timing, args.quick, samples)
            runs.update(native)
        else:
            emulated, gemms[isa] = run_emulated(isa, _without_isas(argv), args.quick)
            runs.update(emulated)

    results = out / f"RESULTS{suffix}.md"
    # zoo.py's section (from its heading to the end) stays as that run wrote it.
    old = results.read_text() if results.exists() else ""
    zoo = old[old.index(ZOO_SECTION) + 1:] if ZOO_SECTION in old else ""
    text = report(runs, gemms, overhead, " ".join(["python", *sys.argv]), args.quick, samples)
    results.write_text(text.rstrip("\n") + "\n\n" + zoo if zoo else text)
    plot(runs, out / f"speedup{suffix}.png")
    _progress(f"wrote {results} and {out / f'speedup{suffix}.png'}")


def _without_isas(argv: Sequence[str]) -> list[str]:
    """argv less its --isas option (the parent runs each ISA itself)."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--isas":
            skip = True
        elif not arg.startswith("--isas="):
            kept.append(arg)
    return kept


if __name__ == "__main__":
    main(sys.argv[1:])
