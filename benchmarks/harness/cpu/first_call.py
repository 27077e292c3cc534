"""First-call times: each compiling peer built in a fresh process of the driver, as a
deployment starting up sees it."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import torch

from .configs import Config, dtype_name, model_and_inputs
from .peers import PEERS, Peer, autocast, fusers
from .timing import StallProbe, ms_since


def first_calls(config: Config, quick: bool, probe: StallProbe,
                script: str) -> dict[str, float | str]:
    """Median first-call ms of each compiling peer, each time in a fresh process (`script`
    with --first-call), as a deployment starting up sees it: within one process, whichever
    peer came first would warm the allocator, the page cache and oneDNN's kernels for the
    others. Rounds interleave the peers, so that a slow spell of the machine hits them alike."""
    peers = [p for p in PEERS if p.first_calls]
    samples: dict[str, list[float]] = {p.key: [] for p in peers}
    failed: dict[str, str] = {}
    for round_ in range(1 if quick else max(p.first_calls for p in peers)):
        for peer in peers:
            if round_ >= peer.first_calls or peer.key in failed:
                continue
            probe.wait(10.0)
            command = [sys.executable, script, "--first-call", peer.key, "--models",
                       config.model, "--batch", str(config.batch),
                       "--dtype", dtype_name(config.dtype), *(["--quick"] if quick else [])]
            child = subprocess.run(command, capture_output=True, text=True)
            lines = child.stdout.split()
            if child.returncode or not lines:
                failed[peer.key] = (child.stderr.strip().splitlines() or ["no output"])[-1][:160]
            else:
                samples[peer.key].append(float(lines[-1]))
    return {p.key: failed.get(p.key) or statistics.median(samples[p.key]) for p in peers}


def first_call_child(config: Config, peer: Peer) -> None:
    """The fresh process of first_calls: build one peer for one configuration and print the
    milliseconds it took (trace, freeze and profiling runs, or torch.compile's first call)."""
    torch._C._jit_set_autocast_mode(False)
    model, inputs = model_and_inputs(config)
    with torch.no_grad(), autocast(config.dtype), fusers(peer.onednn, peer.graphfuse):
        start = time.perf_counter()
        peer.build(model, inputs)
        print(f"{ms_since(start):.3f}")
