"""Timing peers on the CPU against each other: warm-up, then rounds of one call each, with a
probe that leaves out the calls the machine stalled in."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence

import torch

from ..text import failure
from .peers import Built, autocast, fusers

PROBE_SIZE = 1 << 16


def ms_since(start: float) -> float:
    return (time.perf_counter() - start) * 1e3


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
        return ms_since(start)

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
                ms = ms_since(start)
        except Exception as error:  # reported, never ends the run
            failed[b.peer.key] = failure(error)
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
