"""One call's outcome, and how it is compared with eager's.

`compare_call` checks output structure, shapes, dtypes, NaN/inf positions,
values (within the tolerance a value's `Meta` allows, or on the bf16 grid, or
within its quantization bound),
storage aliasing and the inputs after the call, and names each difference by
its cause.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from torch_graphfuse.testing.fuzz.evaluate import Meta, storage, tolerance

CAUSES = ("exception", "structure", "shape", "dtype", "nan", "aliasing", "values")
CAUSE_TITLES = {"exception": "exception", "structure": "output structure", "shape": "shape",
                "dtype": "dtype", "nan": "NaN/inf positions", "aliasing": "aliasing",
                "values": "values"}


@dataclass
class Problem:
    cause: str  # one of CAUSES
    where: str  # "call 3 output 0", "new shape input 1", ...
    detail: str

    def key(self) -> tuple[str, str]:
        return self.cause, self.where

    def __str__(self) -> str:
        return f"[{self.cause}] {self.where}: {self.detail}"


@dataclass
class Outcome:
    """One call: the outputs and the inputs afterwards, or the error."""

    outputs: list[Tensor] | None = None
    tuple_out: bool = False
    inputs: list[Tensor] = field(default_factory=list)
    error: str = ""


def outcome(fn: Callable[..., Any], inputs: list[Tensor]) -> Outcome:
    try:
        out = fn(*inputs)
    except Exception as e:
        return Outcome(error=short_error(e))
    outs = list(out) if isinstance(out, tuple) else [out]
    return Outcome(outs, isinstance(out, tuple), inputs)


def short_error(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    # TorchScript errors carry the whole traceback; the last line says what failed.
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:400]


def _first_index(mask: Tensor) -> list[int]:
    return [int(i) for i in mask.nonzero()[0]] if mask.any() else []


def compare_tensor(where: str, got: Tensor, ref: Tensor, meta: Meta) -> list[Problem]:
    if not isinstance(got, Tensor):
        return [Problem("structure", where, f"{type(got).__name__} instead of a tensor")]
    if tuple(got.shape) != tuple(ref.shape):
        return [Problem("shape", where, f"{tuple(got.shape)} vs eager {tuple(ref.shape)}")]
    if got.dtype != ref.dtype:
        return [Problem("dtype", where, f"{got.dtype} vs eager {ref.dtype}")]
    g, r = got.detach().double(), ref.detach().double()
    problems = []
    for name, fn in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        diff = fn(g) != fn(r)
        if diff.any():
            i = _first_index(diff)
            problems.append(Problem("nan", where, f"{name} at {int(diff.sum())} positions "
                                    f"differ, first {i}: got {g[tuple(i)].item()}, eager "
                                    f"{r[tuple(i)].item()}"))
    if meta.bound is not None:
        return problems + _beyond_bound(where, g, r, meta.bound)
    if meta.grid and got.dtype == torch.float32:
        problems += _off_grid(where, got)
    rtol, atol = tolerance(meta)
    finite = torch.isfinite(g) & torch.isfinite(r)
    err = torch.where(finite, (g - r).abs() - (atol + rtol * r.abs()), 0.0)
    if (err > 0).any():
        i = _first_index(err == err.max())
        problems.append(Problem("values", where, f"{int((err > 0).sum())} of {g.numel()} beyond "
                                f"rtol={rtol:.1e} atol={atol:.1e}; worst at {i}: got "
                                f"{g[tuple(i)].item():.6g}, eager {r[tuple(i)].item():.6g}"))
    return problems


def _beyond_bound(where: str, g: Tensor, r: Tensor, bound: Tensor) -> list[Problem]:
    """Quantized mode: the elementwise bound of `quantized` (in integer steps
    for a quantized tensor)."""
    finite = torch.isfinite(g) & torch.isfinite(r)
    err = torch.where(finite, (g - r).abs() - bound, 0.0)
    if not (err > 0).any():
        return []
    i = _first_index(err == err.max())
    return [Problem("values", where, f"{int((err > 0).sum())} of {g.numel()} beyond the "
                    f"quantization bound; worst at {i}: got {g[tuple(i)].item():.6g}, eager "
                    f"{r[tuple(i)].item():.6g}, bound {bound[tuple(i)].item():.3g}")]


def _off_grid(where: str, got: Tensor) -> list[Problem]:
    """Eager rounded this fp32 value through bf16 (then only exact ops): a fused
    result must be on the bf16 grid too. Half a bf16 ulp of missed rounding is
    inside any bf16 tolerance; this catches it exactly."""
    g = got.detach()
    off = (g.bfloat16().float() != g) & ~torch.isnan(g)
    if not off.any():
        return []
    i = _first_index(off)
    return [Problem("values", where, f"{int(off.sum())} values not representable in bf16 "
                    f"(eager rounds them through bf16), first {i}: {g[tuple(i)].item():.9g}")]


def _aliasing(o: Outcome) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per output, the inputs and the earlier outputs it shares storage with."""
    ins = [storage(x) for x in o.inputs]
    outs = [storage(t) if isinstance(t, Tensor) else -1 for t in o.outputs or []]
    return [(tuple(i for i, s in enumerate(ins) if s == p),
             tuple(j for j, s in enumerate(outs[:k]) if s == p)) for k, p in enumerate(outs)]


def compare_call(where: str, got: Outcome, ref: Outcome, out_meta: list[Meta],
                 in_meta: list[Meta]) -> list[Problem]:
    if got.error:
        return [Problem("exception", where, got.error)]
    assert got.outputs is not None and ref.outputs is not None
    if got.tuple_out != ref.tuple_out or len(got.outputs) != len(ref.outputs):
        return [Problem("structure", where, f"{len(got.outputs)} outputs "
                        f"(tuple: {got.tuple_out}) vs eager {len(ref.outputs)} "
                        f"(tuple: {ref.tuple_out})")]
    problems = []
    for j, (a, b) in enumerate(zip(got.outputs, ref.outputs, strict=True)):
        problems += compare_tensor(f"{where} output {j}", a, b, out_meta[j])
    for i, (a, b) in enumerate(zip(got.inputs, ref.inputs, strict=True)):
        problems += compare_tensor(f"{where} input {i} after the call", a, b, in_meta[i])
    if (ga := _aliasing(got)) != (ra := _aliasing(ref)):
        problems.append(Problem("aliasing", where, f"(inputs, earlier outputs) each output "
                                f"shares storage with: {ga} vs eager {ra}"))
    return problems
