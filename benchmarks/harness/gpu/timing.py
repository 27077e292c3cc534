"""Timing one peer on one GPU configuration, in the child process that runs it: after a
warm-up, the latency of calls each waited for and the throughput of calls issued back to back,
both with time.perf_counter around torch.cuda.synchronize() rather than CUDA events, which
would leave out the host work before the first kernel and after the last, a large part of a
batch-1 call."""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import tempfile
import time
from collections.abc import Iterable
from typing import Any

import torch

import torch_graphfuse
from torch_graphfuse.backends.cudnn.plans.store import CACHE_DIR_ENV
from torch_graphfuse.testing import runner

from ..calls import Call
from ..children import print_result
from ..text import failure
from .configs import DTYPES, Config
from .peers import Peer


@dataclasses.dataclass(frozen=True)
class Timing:
    warmup_s: float  # calls before any timing, at least this long: clocks and caches settle
    latency_iters: int
    round_s: float  # GPU time a throughput round is sized to, from the measured latency
    rounds: int
    max_loop_s: float = 60.0  # a slow peer's latency loop stops here, after 5 calls


FULL_TIMING = Timing(warmup_s=2.0, latency_iters=100, round_s=1.0, rounds=3)
QUICK_TIMING = Timing(warmup_s=0.5, latency_iters=20, round_s=0.2, rounds=1)


@dataclasses.dataclass(frozen=True)
class Measurement:
    latency_ms: float
    throughput: float  # samples/s
    first_s: float  # building the peer and its first call
    diff: float  # max abs diff against eager in the same dtype
    note: str = ""


Result = Measurement | str  # a string is why the peer failed


def warm_up(call: Call, seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    calls = 0
    while calls < 3 or time.perf_counter() < deadline:
        call()
        torch.cuda.synchronize()
        calls += 1


def latency_ms(call: Call, timing: Timing) -> float:
    """Median ms of one call, each waited for: what a caller sees, host overhead included."""
    times: list[float] = []
    deadline = time.perf_counter() + timing.max_loop_s
    for _ in range(timing.latency_iters):
        start = time.perf_counter()
        call()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - start) * 1e3)
        if len(times) >= 5 and time.perf_counter() > deadline:
            break
    return statistics.median(times)


def throughput(call: Call, batch: int, latency: float, timing: Timing) -> float:
    """Samples/s of calls issued back to back: the host queues the next call's kernels while
    the GPU runs this one's. The best round counts, as interference only ever slows one."""
    calls = max(10, math.ceil(timing.round_s * 1e3 / latency))
    best = 0.0
    for _ in range(timing.rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
        best = max(best, calls * batch / (time.perf_counter() - start))
    return best


GROUP_EVENT = "graphfuse::FusionGroup"
HOST_PROFILE_CALLS = 10


def host_us_per_group_run(events: Iterable[Any]) -> float | None:
    """Mean CPU time of a fusion group's run (its kernel, executor and launches) over the
    torch profiler's averaged events; None where no group ran."""
    groups = [e for e in events if e.key.startswith(GROUP_EVENT)]
    runs = sum(e.count for e in groups)
    return sum(e.cpu_time_total for e in groups) / runs if runs else None


def _graphfuse_note(call: Call) -> str:
    """cuDNN groups in the optimized graph, what building their plans took, which executor
    ran them and their host time per run."""
    from torch_graphfuse.backends.cudnn import runtime  # loads cuDNN: the plugin's child only

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        for _ in range(HOST_PROFILE_CALLS):
            call()
        torch.cuda.synchronize()
    host_us = host_us_per_group_run(profile.key_averages())
    host = "" if host_us is None else f", {host_us:.0f} us of host time per group run"
    graph = torch.jit.last_executed_optimized_graph()
    groups = [g for g in runner.fusion_groups(graph)
              if g.hasAttribute("backend") and g.s("backend") == "cudnn"]
    stats = runtime.stats()
    failures = f", {stats['failures']:.0f} failed runs" if stats["failures"] else ""
    executor = (f", C++ executor ({stats['native_runs']:.0f} of {stats['executions']:.0f} runs)"
                if runtime.native_enabled() else ", Python executor")
    return (f"{len(groups)} cuDNN groups, {stats['plans_built']:.0f} plans built in "
            f"{stats['build_ms']:.0f} ms{failures}{executor}{host}")


def run_job(config: Config, peer: Peer, timing: Timing) -> Measurement:
    # ATen's convolutions time their algorithms, for every peer: the eager baseline at its
    # best, and the ones torch.compile and unfused TorchScript nodes fall back to.
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)  # the same weights and inputs in every child
    dtype = DTYPES[config.dtype]
    model = config.workload.build().eval().to(
        "cuda", dtype, memory_format=config.workload.memory_format)
    inputs = config.workload.inputs(config.batch, dtype)
    with torch.no_grad(), torch_graphfuse.fuser(peer.graphfuse):
        reference = model(*inputs)
        start = time.perf_counter()
        call = peer.build(model, inputs)
        out = call()
        torch.cuda.synchronize()
        first_s = time.perf_counter() - start
        diff = (out.float() - reference.float()).abs().max().item()
        warm_up(call, timing.warmup_s)
        latency = latency_ms(call, timing)
        rate = throughput(call, config.batch, latency, timing)
        note = _graphfuse_note(call) if peer.graphfuse else ""
    return Measurement(latency, rate, first_s, diff, note)


def job_child(config: Config, peer: Peer, quick: bool) -> None:
    """The child's side of the driver's --one: one peer on one configuration, its result
    printed as the line the parent reads."""
    result: Result
    try:
        # An empty plan cache: torch_graphfuse's first call builds its plans, run after run.
        with tempfile.TemporaryDirectory() as plan_cache:
            os.environ[CACHE_DIR_ENV] = plan_cache
            result = run_job(config, peer, QUICK_TIMING if quick else FULL_TIMING)
    except Exception as error:  # the parent's cell says why
        result = failure(error)
    print_result(result)
