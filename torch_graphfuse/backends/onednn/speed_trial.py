"""Speed trials: a mapping that oneDNN runs faster than ATen on one CPU and slower on
another is kept only where it wins on this one, timed at the node's profiled sizes.

fp32 attention, 12 heads of 64, 2 threads, oneDNN's attention kernel against ATen's
(flash) kernel: on a Zen 5 EPYC oneDNN took 0.52-0.56x ATen's time from 128 to 1024
tokens (0.95x at 64); on a Zen 4 EPYC, ATen's took 0.60-0.92x oneDNN's. Both report the
same instruction set to oneDNN (avx512_core_bf16), so no ISA test tells them apart.
A GELU or SiLU of a linear, which oneDNN makes the matmul's post-op, is tried too
(op_table._post_op_trial): on a Zen 3 EPYC (AVX2) that post-op made the matmul 0.77x
ATen's linear and activation.

A trial times the node's backend ops as a partition of their own (csrc `_time_partition`,
which binds preallocated buffers) against ATen's op on the same inputs, a few runs of each
in interleaved rounds; the fastest round counts. oneDNN must win by `MARGIN`: a tie goes
to ATen, which a fused region must never be slower than. A trial runs once per process
for each description and constants (milliseconds; the whisper encoder's first calls, at 1500
tokens, took 0.3 s longer).

TORCH_GRAPHFUSE_SPEED_TRIALS=fuse maps without timing, =aten leaves the ops with ATen:
the same groups on every machine, as the tests pin each side.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from ... import _C, config, log
from .graph_desc import BackendGraph, BackendOp

NAME = log.module_name(__file__)
ENV = config.SPEED_TRIALS.env
# oneDNN's time must be below this fraction of ATen's: the trial's noise on a quiet machine.
MARGIN = 0.97
ROUNDS = 3
# Each side's runs per round fill about this long (at least 2 runs, at most 20).
ROUND_SECONDS = 0.01

_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "bool": torch.bool}


@dataclass(frozen=True)
class Trial:
    onednn_ms: float | None  # None: oneDNN did not compile the ops as one partition
    aten_ms: float
    why: str = ""  # oneDNN's reason, where it did not compile them

    @property
    def fused(self) -> bool:
        return self.onednn_ms is not None and self.onednn_ms <= MARGIN * self.aten_ms

    def verdict(self) -> str:
        if self.onednn_ms is None:
            return f"oneDNN could not run it alone ({self.why})"
        return f"ATen {self.aten_ms:.3f} ms, oneDNN {self.onednn_ms:.3f} ms on this CPU"


_TRIALS: dict[tuple, Trial] = {}


def mode() -> str:
    """'measure' (the default), 'fuse' or 'aten'."""
    return config.value(config.SPEED_TRIALS)


def standalone(graph: BackendGraph, ops: Sequence[BackendOp], outputs: Sequence[int]
               ) -> tuple[str, list[int]]:
    """The description of `ops` alone, its tensors numbered from 0 in order of use (the same
    text wherever the same ops recur), and the graph's tensor ids of its inputs."""
    produced = {t for op in ops for t in op.outputs}
    inputs = list(dict.fromkeys(t for op in ops for t in op.inputs if t not in produced))
    ids: dict[int, int] = {}
    for t in (*inputs, *(t for op in ops for t in op.outputs)):
        ids.setdefault(t, len(ids))
    lines = [replace(graph.tensors[t], id=new).line() for t, new in ids.items()]
    lines += [BackendOp(i, op.kind, [ids[t] for t in op.inputs], [ids[t] for t in op.outputs],
                        op.attrs).line() for i, op in enumerate(ops)]
    lines.append("in " + " ".join(str(ids[t]) for t in inputs))
    lines.append("out " + " ".join(str(ids[t]) for t in outputs))
    return "\n".join(lines) + "\n", inputs


def _random(graph: BackendGraph, tensor: int) -> torch.Tensor:
    """A tensor of the spec's sizes and strides (an expanded one shares its elements), of
    finite values that make no denormal probabilities."""
    spec = graph.tensors[tensor]
    assert spec.sizes is not None
    strides = spec.strides or torch.empty(spec.sizes).stride()
    span = 1 + sum((n - 1) * s for n, s in zip(spec.sizes, strides, strict=True) if n > 0)
    dtype = _DTYPES[spec.dtype]
    base = torch.rand(span) > 0.1 if dtype == torch.bool else torch.randn(span).to(dtype)
    return base.as_strided(spec.sizes, strides)


def _median_seconds(run: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def measure(text: str, inputs: list[torch.Tensor], aten: Callable[[], object]) -> Trial:
    """Times the description's partition on `inputs` against `aten` (which reads the same
    tensors). A side that raises makes no trial: the ops stay with ATen."""
    try:
        return _timed(text, inputs, aten)
    except (RuntimeError, ValueError) as error:
        return Trial(None, 0.0, f"the trial failed: {error}")


def _timed(text: str, inputs: list[torch.Tensor], aten: Callable[[], object]) -> Trial:
    with torch.no_grad():
        aten()  # warm: ATen's first call allocates its scratch
        start = time.perf_counter()
        aten()
        runs = max(2, min(20, round(ROUND_SECONDS / max(time.perf_counter() - start, 1e-6))))
        onednn, aten_best = float("inf"), float("inf")
        for _ in range(ROUNDS):
            seconds, why = _C._time_partition(text, inputs, runs)
            if seconds is None:
                return Trial(None, 0.0, why)
            onednn = min(onednn, sorted(seconds)[len(seconds) // 2])
            aten_best = min(aten_best, _median_seconds(aten, runs))
    return Trial(onednn * 1e3, aten_best * 1e3)


def trial(graph: BackendGraph, ops: Sequence[BackendOp], outputs: Sequence[int],
          constants: dict[int, torch.Tensor],
          aten: Callable[[dict[int, torch.Tensor]], object]) -> Trial:
    """This CPU's trial of `ops` against `aten` (given their inputs by tensor id), run at
    the first call for their description and `constants` (tensor id -> value), then kept."""
    text, inputs = standalone(graph, ops, outputs)
    key = (text, tuple(tuple(constants[t].flatten().tolist()) for t in inputs
                       if t in constants))
    found = _TRIALS.get(key)
    if found is None:
        tensors = {t: constants[t] if t in constants else _random(graph, t) for t in inputs}
        found = measure(text, [tensors[t] for t in inputs], lambda: aten(tensors))
        _TRIALS[key] = found
        log.debug(NAME, f"{', '.join(op.kind for op in ops)}: {found.verdict()}")
    return found
