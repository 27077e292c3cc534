"""One configuration's comparison on the CPU: every peer built for the same model and inputs,
timed against the others, and what each measured."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

import torch_graphfuse

from ..calls import Forward, Inputs
from ..deadline import deadline, overran
from ..text import failure, progress
from .configs import Config
from .peers import Built, Peer, autocast, build
from .timing import StallProbe, Timing, timed_rounds


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
# Starts the reason of a peer whose build ran past its time limit.
STOPPED = "build stopped"


@dataclasses.dataclass(frozen=True)
class Comparison:
    results: dict[str, Result]  # by peer key
    first_ms: dict[str, float | str]  # median first call in fresh processes, or why it failed
    rounds: int
    stalled: int  # calls the machine stalled in: left out of the medians while 3 others remain


Runs = dict[Config, Comparison]


def compare(model: Forward, inputs: Inputs, dtype: torch.dtype, peers: Sequence[Peer],
            timing: Timing, probe: StallProbe, label: str,
            agreement: Callable[[Built], float] | None = None,
            build_seconds: float | None = None) -> Comparison:
    """Build every peer (each its own module) and time them against each other; then, given
    `agreement`, each peer's top-1 agreement with the float model. A peer whose build passes
    `build_seconds` is left out, with a reason starting with STOPPED."""
    with torch.no_grad(), autocast(dtype):
        reference = model(*inputs)
    results: dict[str, Result] = {}
    built = []
    for peer in peers:
        probe.wait(timing.max_seconds)
        try:
            with deadline(build_seconds):
                b = build(peer, model, inputs, dtype, reference)
        except Exception as error:  # a failing peer is reported, never ends the run
            stopped = overran(error)
            results[peer.key] = f"{STOPPED} ({stopped})" if stopped else failure(error)
            progress(f"  {label} | {peer.label}: {'' if stopped else 'failed: '}"
                     f"{results[peer.key]}")
            continue
        built.append(b)
        groups = "" if b.groups is None else f", {b.groups} fusion groups"
        progress(f"  {label} | {peer.label}: max abs diff {b.diff:.2e}{groups}")
    torch_graphfuse.reset_kernel_stats()
    times, rounds, stalls = timed_rounds(built, dtype, timing, probe)
    fallbacks = torch_graphfuse.kernel_stats()["fallbacks"]
    for b in built:
        ms = times[b.peer.key]
        results[b.peer.key] = ms if isinstance(ms, str) else Measurement(
            ms, b.diff, b.groups, fallbacks if b.peer.graphfuse else 0,
            _agreement(agreement, b, label))
    results = {peer.key: results[peer.key] for peer in peers}
    progress(f"  {label} | median ms: " + ", ".join(
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
        progress(f"  {label} | {built.peer.label}: top-1 agreement failed: {failure(error)}")
        return failure(error)
    progress(f"  {label} | {built.peer.label}: top-1 agreement with float {100 * share:.1f}%")
    return share
