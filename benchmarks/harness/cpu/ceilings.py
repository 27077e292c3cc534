"""What the CPU allows at best, as the report's yardsticks: the GEMM rates that make the
ceiling of each dtype, and the per-call cost of a fusion group on a chain of tiny layers."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Sequence

import torch
from torch import nn

from torch_graphfuse.testing import runner

from ..calls import Call
from ..text import progress
from .compare import compare
from .configs import DTYPES, INT8, dtype_name
from .peers import GRAPHFUSE, SCRIPT
from .timing import StallProbe, Timing

GEMM_SIZE = 2048
CHAIN_LENGTH = 20
CHAIN_WIDTH = 16

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
INT8_GEMMS = ("oneDNN u8 x s8 (torch.ops.onednn.qlinear_pointwise, prepacked weight)",
              "torch._int_mm (s8 x s8 -> s32)")


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
            progress(f"  not on this CPU: {str(e).splitlines()[0][:120]}")
            return math.nan
        return 2 * GEMM_SIZE ** 3 / ms / 1e6

    for name, gemm in GEMMS.items():
        gflops[name] = {}
        for dtype in DTYPES:
            a = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            w = torch.randn(GEMM_SIZE, GEMM_SIZE).to(dtype)
            gflops[name][dtype] = rate(functools.partial(gemm, a, w))
        progress(f"GEMM {name}: " + ", ".join(f"{dtype_name(d)} {rate_text(g)} GFLOP/s"
                                              for d, g in gflops[name].items()))
    for name, gemm in _int8_gemms().items():
        gflops[name] = {INT8: rate(lambda gemm=gemm: gemm)}
        progress(f"GEMM {name}: int8 {rate_text(gflops[name][INT8])} GOP/s")
    return gflops


def rate_text(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.0f}"


def _best(values: Iterable[float]) -> float:
    """The largest measured value; NaN when none was measured."""
    measured = [v for v in values if not math.isnan(v)]
    return max(measured) if measured else math.nan


def best_ceilings(measured: Sequence[dict[str, Ceilings]]) -> Ceilings:
    ceiling = next(iter(GEMMS))
    best = {dtype: _best(m[ceiling][dtype] for m in measured) for dtype in DTYPES}
    best[INT8] = _best(m[name][INT8] for m in measured for name in INT8_GEMMS)
    return best


def gemm_lines(measured: Sequence[dict[str, Ceilings]]) -> list[str]:
    lines = [f"GEMM ({GEMM_SIZE}^3 linear) GFLOP/s, measured at the start and at the end of the "
             "run; the best oneDNN one is the ceiling (int8: the best of both int8 GEMMs):", ""]
    for name in GEMMS:
        values = "; ".join(", ".join(rate_text(m[name][d]) for d in DTYPES) for m in measured)
        lines.append(f"- {name}: fp32, bf16 = {values}")
    for name in INT8_GEMMS:
        values = "; ".join(rate_text(m[name][INT8]) for m in measured)
        lines.append(f"- {name}: int8 GOP/s = {values}")
    best = best_ceilings(measured)
    lines += ["", f"Ceiling: {rate_text(best[torch.float32])} GFLOP/s fp32, "
              f"{rate_text(best[torch.bfloat16])} GFLOP/s bf16, {rate_text(best[INT8])} GOP/s "
              f"int8 ({best[INT8] / best[torch.float32]:.1f}x fp32)."]
    return lines


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
