"""Quantized mode's error bounds: how far a correct fused value may be from eager's.

A quantize rounds: a fused pre-rounding value a rounding error away from
eager's flips the integer where eager's sits near a rounding boundary, and
the flip travels on. So a value with a quantize on its way carries an
elementwise bound, propagated from eager's own values:

- quantize(x): with x's error e (its fp32 tolerance, or its own bound) and
  z = x / scale, every x' within e of x rounds into
  [clamp(round(z - d) + zp), clamp(round(z + d) + zp)], d = e / scale plus a
  few ulps of z (x * (1/scale) against x / scale): the bound is the farthest
  that interval reaches from eager's integer, 0 where no rounding boundary is
  near, 1 at most for an exact x;
- dequantize: the integer bound times scale;
- conv, linear: conv(e, |W|) with eager's (dequantized) weight W; matmul
  |a| @ e_b + e_a @ |b| + e_a @ e_b; add and sub sum the bounds, mul by a
  tensor |a| e_b + e_a |b| + e_a e_b, by a scalar |s| e;
- a monotone unary op f (relu, clamp, sigmoid, ...): the larger of
  |f(x + e) - f(x)| and |f(x - e) - f(x)| (0 where a clamp holds x well
  beyond its bound); another (gelu, silu, ...): its Lipschitz constant times e;
- views, cat, pooling and mean: the op applied to the bounds themselves
  (each is monotone and positively homogeneous, or picks elements);

plus, on a float result, the op's own fp32 tolerance. Any other op on a
bounded value is not generated (`propagate` raises). The bound is sound and,
where no element is near a rounding boundary, the plain fp32 tolerance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from torch_graphfuse.testing.fuzz.program import Program, layer_call, layer_weight
from torch_graphfuse.testing.fuzz.spec import Op

QDTYPES = {torch.uint8: (0, 255), torch.int8: (-128, 127)}

MONOTONE = ("relu", "relu6", "hardtanh", "clamp", "clamp_min", "clamp_max", "tanh", "sigmoid",
            "softplus", "hardsigmoid", "elu")
# Largest |f'| of the others (leaky_relu: monotone only for a slope >= 0).
LIPSCHITZ: dict[str, Callable[[dict[str, Any]], float]] = {
    "abs": lambda a: 1.0, "gelu": lambda a: 1.13, "silu": lambda a: 1.1,
    "mish": lambda a: 1.1, "hardswish": lambda a: 1.5,
    "leaky_relu": lambda a: max(1.0, abs(a["slope"])),
}
# The op applied to the bounds bounds its result's error.
ON_BOUNDS = ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "mean", "cat", "reshape",
             "permute", "transpose", "t", "flatten", "squeeze", "unsqueeze", "contiguous")
_ULPS = 2.0 ** -20  # a few fp32 ulps, relative


class Unbounded(ValueError):
    """An op the bounds do not follow, on a value a quantize is on the way of."""


def quantize_bound(x: Tensor, e: Tensor, q: Tensor, a: dict[str, Any]) -> Tensor:
    """How far from eager's q = quantize(x) the quantize of any x' within e of x lands."""
    z = x.double() / a["scale"]
    d = e / a["scale"] + z.abs() * _ULPS + _ULPS
    lo = torch.clamp(torch.round(z - d) + a["zero_point"], a["qmin"], a["qmax"])
    hi = torch.clamp(torch.round(z + d) + a["zero_point"], a["qmin"], a["qmax"])
    # NaN/inf are no rounding: a correct group leaves them to ATen (finite guard)
    return torch.where(torch.isfinite(z), torch.maximum(hi - q, q - lo), 0.0)


def _abs(t: Tensor) -> Tensor:
    return t.double().abs().nan_to_num(0.0, 0.0, 0.0)


def follows(op: Op) -> bool:
    """Whether `propagate` bounds op's result (checked before an in-place op runs)."""
    k, a = op.kind, op.attrs
    if k in ("mul", "div") and "scalar" in a:
        return not a.get("reverse") and a["scalar"] != 0
    return k in ("quantize", "dequantize", "conv1d", "conv2d", "conv3d", "linear", "matmul",
                 "mm", "bmm", "add", "sub", "mul", *MONOTONE, *LIPSCHITZ, *ON_BOUNDS)


def _apply(program: Program, index: int, op: Op, args: list[Tensor]) -> Tensor:
    """Value `index`'s expression (op) on other arguments."""
    env: dict[str, Any] = {program.name(v): t for v, t in zip(op.args, args, strict=True)}
    env["self"] = program
    return eval(program.lines[index - program.n_inputs][2], {"torch": torch, "F": F}, env)


def propagate(program: Program, index: int, op: Op, args: list[Tensor], errors: list[Tensor],
              out: Tensor, own: Tensor) -> Tensor:
    """The bound on op's result (value `index`) from its arguments' `errors`;
    `own` is the op's own fp32 tolerance on its result."""
    k, a = op.kind, op.attrs
    if not follows(op):
        raise Unbounded(k)
    if k == "quantize":
        return quantize_bound(args[0], errors[0], out.double(), a)
    if k == "dequantize":
        return errors[0] * a["scale"] * (1 + _ULPS) + _abs(out) * _ULPS
    if k in ("conv1d", "conv2d", "conv3d", "linear"):
        layer = getattr(program, f"m{a.get('reuse', index)}")
        inner = getattr(layer, "layer", layer)
        e = layer_call(inner, errors[0], _abs(layer_weight(layer).detach()), None)
    elif k in ("matmul", "mm", "bmm"):
        x, y = (_abs(t) for t in args)
        e = x @ errors[1] + errors[0] @ y + errors[0] @ errors[1]
    elif k in ("add", "sub") and "scalar" not in a:
        e = errors[0] + abs(a.get("alpha", 1)) * errors[1]
    elif k == "mul" and "scalar" not in a:
        e = _abs(args[0]) * errors[1] + errors[0] * _abs(args[1]) + errors[0] * errors[1]
    elif k in ("add", "sub"):
        e = errors[0]
    elif k in ("mul", "div"):
        e = errors[0] * (abs(a["scalar"]) if k == "mul" else 1 / abs(a["scalar"]))
    elif k in MONOTONE:
        x = args[0].double()
        fx = _apply(program, index, op, [x])
        e = torch.maximum((_apply(program, index, op, [x + errors[0]]) - fx).abs(),
                          (_apply(program, index, op, [x - errors[0]]) - fx).abs())
        e = e.nan_to_num(0.0, 0.0, 0.0)
    elif k in LIPSCHITZ:
        e = errors[0] * LIPSCHITZ[k](a)
    else:
        e = _apply(program, index, op, errors)
    return torch.broadcast_to(e + own, out.shape).clone()
