"""Eager evaluation of a program op by op, with what the comparison needs.

`Evaluator` keeps a `Meta` per value (bit-exact, touched by bf16, magnitude on
its way, rounding depth; past a quantize, an elementwise error bound, see
`quantized`); `tolerance` is the fp32/bf16 allowance; `admissible` says
whether an op applied to concrete values is well-conditioned, so that
legitimate rounding differences of a fused result cannot become false failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from torch_graphfuse.testing.fuzz.ops import KINDS, op_exact
from torch_graphfuse.testing.fuzz.program import Program
from torch_graphfuse.testing.fuzz.quantized import Unbounded, follows, propagate
from torch_graphfuse.testing.fuzz.spec import MAX_NUMEL, Op


@dataclass
class Meta:
    """What the comparison needs to know of a value: bit-exact, touched by bf16,
    the largest finite magnitude on its way (absolute error scales with it) and
    how many rounding ops it went through."""

    exact: bool = True
    lowp: bool = False
    scale: float = 1.0
    depth: int = 0
    dep: bool = True  # depends on a graph input
    grid: bool = False  # eager rounded it to bf16 and changed it only exactly since
    # A quantize on its way: |fused - eager| <= bound elementwise (instead of tolerance)
    bound: Tensor | None = field(default=None, repr=False, compare=False)

    def merge(self, other: Meta) -> Meta:
        # In-place ops never write bounded values (quantized.propagate refuses them).
        return Meta(self.exact and other.exact, self.lowp or other.lowp,
                    max(self.scale, other.scale), max(self.depth, other.depth),
                    self.dep or other.dep, self.grid and other.grid, self.bound)


def tolerance(meta: Meta) -> tuple[float, float]:
    """(rtol, atol) for a value; none for a bit-exact one.

    fp32: rtol 1e-4, atol 1e-5 times the largest magnitude on the value's way
    (after a cancellation the absolute error is relative to the operands, not
    to the result), widened by an eighth per rounding op on the way (oneDNN sums
    in another order and keeps fused intermediates in registers). bf16 (the
    value or one on its way was bf16): 2e-2 of the same, widened by a quarter
    per op (each bf16 rounding adds up to 2^-8, and oneDNN keeps fused
    intermediates in fp32 where eager rounds each)."""
    if meta.exact:
        return 0.0, 0.0
    if meta.lowp:
        slack = 1 + meta.depth / 4
        return 2e-2 * slack, 2e-2 * slack * meta.scale
    slack = 1 + meta.depth / 8
    return 1e-4 * slack, 1e-5 * slack * meta.scale


def float_error(meta: Meta, t: Tensor) -> Tensor:
    """The elementwise error `meta` allows on a float value t (its bound if it has one)."""
    if meta.bound is not None:
        return meta.bound
    rtol, atol = tolerance(meta)
    return atol + rtol * t.detach().double().abs().nan_to_num(0.0, 0.0, 0.0)


def finite_max(t: Tensor) -> float:
    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    a = t.detach().float().abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def storage(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


class Evaluator:
    """Runs a program op by op on concrete inputs, keeping a `Meta` per value."""

    def __init__(self, program: Program, inputs: list[Tensor]) -> None:
        self.program = program
        self.env: dict[str, Any] = {program.name(i): x for i, x in enumerate(inputs)}
        self.env["self"] = program
        self.values: list[Tensor] = list(inputs)
        self.meta = [Meta(scale=max(1.0, finite_max(x))) for x in inputs]
        self.const_storages: set[int] = set()

    def run(self, op: Op) -> Tensor:
        """Apply the program's next op (already added to it); raises if eager
        does or if the result is not a floating tensor of bounded size."""
        i = len(self.values) - self.program.n_inputs
        args = [self.meta[a] for a in op.args]
        # Refused before it runs: an in-place op would have changed the environment.
        if any(not self.values[a].is_floating_point() for a in op.args) \
                and op.kind != "dequantize":
            raise Unbounded("only a dequantize reads a quantized tensor")
        if any(m.bound is not None for m in args) and not follows(op):
            raise Unbounded(op.kind)
        out = self.program.step(self.env, i)
        if not isinstance(out, Tensor) or \
                not (out.is_floating_point() or op.kind == "quantize"):
            raise ValueError("not a floating tensor")
        if out.numel() > MAX_NUMEL or out.numel() == 0:
            raise ValueError("size out of bounds")
        exact = op_exact(op)
        meta = Meta(exact and all(m.exact for m in args),
                    out.dtype == torch.bfloat16 or any(m.lowp for m in args),
                    max([max(1.0, finite_max(out))] + [m.scale for m in args]),
                    max([m.depth for m in args], default=0) + (not exact),
                    any(m.dep for m in args),
                    out.dtype == torch.bfloat16 or (exact and op.kind != "floor_divide"
                                                    and bool(args) and all(m.grid for m in args)))
        if op.kind == "quantize" or any(m.bound is not None for m in args):
            own = torch.zeros(()) if out.dtype in (torch.uint8, torch.int8) else \
                float_error(meta, out)
            meta.bound = propagate(self.program, len(self.values), op,
                                   [self.values[a] for a in op.args],
                                   [float_error(m, self.values[a])
                                    for m, a in zip(args, op.args, strict=True)], out, own)
        self.values.append(out)
        self.meta.append(meta)
        if op.kind == "const":
            self.const_storages.add(storage(out))
        if KINDS[op.kind].inplace:
            self._merge_aliases(out, meta)
        return out

    def _merge_aliases(self, out: Tensor, meta: Meta) -> None:
        """An in-place op changed every value sharing its storage."""
        s = storage(out)
        for j, v in enumerate(self.values):
            if storage(v) == s:
                self.meta[j] = self.meta[j].merge(meta)

    def pop(self) -> None:
        self.values.pop()
        self.meta.pop()


# Thresholds against the error a correct fused result may carry (relative to
# `Meta.scale`): an op whose result jumps or blows up within that error of its
# input would turn legitimate rounding differences into false failures.
_MARGIN = {False: 1e-2, True: 0.25}
NEAR_ZERO = ("log", "sqrt", "reciprocal")


def _margin(m: Meta) -> float:
    return _MARGIN[m.lowp] * m.scale


def _min_abs(t: Tensor) -> float:
    a = t.detach().float().abs()
    a = a[torch.isfinite(a)]
    return float(a.min()) if a.numel() else math.inf


def away_from_zero(t: Tensor, m: Meta) -> bool:
    return m.exact or _min_abs(t) >= _margin(m)


def _softplus_ok(op: Op, x: Tensor, m: Meta) -> bool:
    beta, threshold = op.attrs["beta"], op.attrs["threshold"]
    if m.exact or math.log1p(math.exp(-threshold)) / beta < 1e-6:
        return True
    return _min_abs(x - threshold / beta) >= _margin(m)


def _layer_norm_ok(x: Tensor, m: Meta) -> bool:
    """1/std amplifies the input's error: rows must not be near-constant."""
    if x.shape[-1] < 2:
        return False
    xf = x.detach().float()
    xf = torch.where(torch.isfinite(xf), xf, 0.0)
    return float(xf.std(-1).min()) >= _margin(m)


def _group_norm_ok(x: Tensor, m: Meta, groups: int) -> bool:
    """As for layer_norm: no group of near-constant values."""
    xf = x.detach().float().reshape(x.shape[0], groups, -1)
    if xf.shape[-1] < 2:
        return False
    xf = torch.where(torch.isfinite(xf), xf, 0.0)
    return float(xf.std(-1).min()) >= _margin(m)


SUMS_OF_PRODUCTS = frozenset({"linear", "matmul", "mm", "bmm", "addmm", "conv1d", "conv2d",
                              "conv3d", "window_linear", "mean"})


def admissible(op: Op, args: list[Tensor], metas: list[Meta]) -> bool:
    """Whether the op, applied to these concrete values, is well-conditioned."""
    k, a = op.kind, op.attrs
    if k in SUMS_OF_PRODUCTS and any(finite_max(t) > 1e30 for t in args):
        # A sum of products near float32's largest (a score masked with its lowest) is
        # finite or infinite by summation order.
        return False
    if k in ("round", "floor_divide", "bucket"):
        return metas[0].exact
    if k in NEAR_ZERO or (k == "pow" and float(a["exponent"]) not in (1.0, 2.0, 3.0)):
        return away_from_zero(args[0], metas[0])
    if k in ("div", "div_") and "scalar" not in a:
        return away_from_zero(args[1], metas[1])
    if k == "div" and (a.get("reverse") or a.get("scalar") == 0):
        # x / 0.0 is +-inf by the sign of x: a rounding error flips it near zero.
        return away_from_zero(args[0], metas[0])
    if k == "exp":
        return metas[0].exact or float(args[0].float().nan_to_num(0, 0, 0).max()) <= 10
    if k == "pow":
        return finite_max(args[0]) <= 30
    if k == "softplus":
        return _softplus_ok(op, args[0], metas[0])
    if k == "layer_norm":
        return _layer_norm_ok(args[0], metas[0])
    if k == "group_norm":
        return _group_norm_ok(args[0], metas[0], op.attrs["groups"])
    return True
