"""Quantized mode's proposers: programs in PT2E's form.

Activations are quantized per tensor (u8 or s8, the dtype's full range) with
a scale and zero point an observer would pick from the value's eager range
(randomly widened or narrowed a little), dequantized right before
conv/linear/matmul; conv/linear weights are per-channel s8 module buffers
dequantized in forward (`program.QuantizedWeight`). Around them: residual
adds with a dequantized or a float operand, activations, a dequantized value
read by two ops, outputs requantized or kept quantized.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from torch_graphfuse.testing.fuzz.builder import Gen
from torch_graphfuse.testing.fuzz.propose_layers import conv_op, linear_op
from torch_graphfuse.testing.fuzz.quantized import QDTYPES
from torch_graphfuse.testing.fuzz.spec import Op, chance, choice, weighted

_ACTIVATIONS = [("relu", {}), ("gelu", {"approximate": "none"}), ("relu6", {}),
                ("hardtanh", {"lo": -1.0, "hi": 1.0}), ("silu", {}), ("hardswish", {}),
                ("sigmoid", {}), ("gelu", {"approximate": "tanh"})]


def kind_of(g: Gen, v: int) -> str:
    return g.ops[v - len(g.inputs)].kind if v >= len(g.inputs) else "input"


def qparams(g: Gen, v: int, qdtype: torch.dtype) -> dict[str, object]:
    """Scale and zero point from v's range at every shape, as a min/max observer
    picks them (the range widened, or narrowed so that the extremes saturate)."""
    values = [ev.values[v].detach().float() for ev in g.evals]
    finite = torch.cat([t[torch.isfinite(t)].flatten() for t in values])
    lo, hi = (min(float(finite.min()), 0.0), max(float(finite.max()), 0.0)) \
        if finite.numel() else (0.0, 0.0)
    widen = choice(g.c, [1.0, 1.0, 1.25, 0.9, 2.0])
    lo, hi = lo * widen, hi * widen
    qmin, qmax = QDTYPES[qdtype]
    if qdtype == torch.uint8 and chance(g.c, 0.3):  # 7-bit: X86InductorQuantizer's reduce_range
        qmax = 127
    if qdtype == torch.int8 and chance(g.c, 0.6):  # symmetric
        scale, zero_point = max(-lo, hi) / 127.5, 0
    else:
        scale = (hi - lo) / (qmax - qmin)
        zero_point = qmin - round(lo / scale) if scale > 0 else 0
        zero_point += choice(g.c, [0, 0, 0, 1, -2])
    scale = float(f"{max(scale, 1e-3):.4g}")  # a short repr; floored for constant values
    return {"scale": scale, "zero_point": min(max(zero_point, qmin), qmax), "qmin": qmin,
            "qmax": qmax, "qdtype": qdtype}


def quantize(g: Gen, x: int) -> int | None:
    qdtype = choice(g.c, [torch.uint8, torch.int8])
    return g.emit(Op("quantize", (x,), qparams(g, x, qdtype)))


def dequantize(g: Gen, q: int) -> int | None:
    return g.emit(Op("dequantize", (q,), dict(g.ops[q - len(g.inputs)].attrs)))


def quantizable(g: Gen, v: int) -> bool:
    """fp32 and finite, or a graph input (NaN/inf there: the plugin's finite guard)."""
    return g.dtype_of(v) == torch.float32 and (v < len(g.inputs) or g.all_finite(v))


def dequantized(g: Gen, ok: Callable[[int], bool]) -> int | None:
    """A dequantized value passing `ok`: one already dequantized
    (then read twice), a quantized one dequantized again, or a float one
    quantized and dequantized."""
    how = weighted(g.c, [("new", 6), ("shared", 2), ("again", 2)])
    if how == "shared":
        v = g.pick(lambda v: kind_of(g, v) == "dequantize" and ok(v))
        if v is not None:
            return v
    if how == "again":
        q = g.pick(lambda v: kind_of(g, v) == "quantize" and ok(v))
        if q is not None:
            return dequantize(g, q)
    x = g.pick(lambda v: quantizable(g, v) and ok(v))
    q = None if x is None else quantize(g, x)
    return None if q is None else dequantize(g, q)


def requantize(g: Gen, y: int) -> int | None:
    """y quantized and, more often than not, dequantized again."""
    q = quantize(g, y) if g.dtype_of(y) == torch.float32 else None
    return q if q is None or not chance(g.c, 0.7) else dequantize(g, q)


def _epilogue(g: Gen, y: int, operand: int | None) -> int:
    """A residual add (the layer's own dequantized input, another dequantized
    value or a float one), an activation, a requantize: each maybe."""
    if chance(g.c, 0.35):
        def same(v: int) -> bool:
            return g.shapes(v) == g.shapes(y) and v != y
        other = weighted(g.c, [("input", 2), ("dequantized", 2), ("float", 1)])
        if other == "input" and operand is not None and same(operand):
            b: int | None = operand
        elif other == "float":
            b = g.pick(lambda v: same(v) and g.dtype_of(v) == torch.float32)
        else:
            b = dequantized(g, same)
        if b is not None:
            y = g.emit(Op("add", (y, b) if chance(g.c, 0.7) else (b, y))) or y
    if chance(g.c, 0.5):
        kind, attrs = choice(g.c, _ACTIVATIONS)
        y = g.emit(Op(kind, (y,), dict(attrs))) or y
    if chance(g.c, 0.6):
        y = requantize(g, y) or y
    return y


def p_qlayer(g: Gen) -> int | None:
    """dequantize -> conv/linear with an s8 weight (a float one sometimes) -> epilogue."""
    conv = chance(g.c, 0.6)
    d = dequantized(g, (lambda v: 3 <= len(g.shape(v)) <= 5) if conv else
                    (lambda v: len(g.shape(v)) >= 1))
    if d is None:
        return None
    op = conv_op(g, d) if conv else linear_op(g, d)
    op.attrs["qweight"] = chance(g.c, 0.85)
    y = g.emit(op)
    return None if y is None else _epilogue(g, y, d)


def p_qmatmul(g: Gen) -> int | None:
    """Two dequantized activations multiplied (one transposed), or one and a constant."""
    a = dequantized(g, lambda v: 2 <= len(g.shape(v)) <= 4)
    if a is None:
        return None
    shape = g.shape(a)
    if chance(g.c, 0.6):
        b = dequantized(g, lambda v: len(g.shape(v)) == len(shape)
                        and g.shape(v)[-1] == shape[-1] and g.shape(v)[:-2] == shape[:-2])
        bt = None if b is None else g.emit(Op("transpose", (b,), {"d0": -1, "d1": -2}))
    else:
        bt = g.const((shape[-1], choice(g.c, [4, 8, 3])))
    y = None if bt is None else g.emit(Op("matmul", (a, bt)))
    if y is None:
        return None
    if chance(g.c, 0.4):
        y = g.emit(Op("div", (y,), {"scalar": choice(g.c, [4.0, 2.0, 0.35])})) or y
    return _epilogue(g, y, None)


def p_qadd(g: Gen) -> int | None:
    """Two dequantized values added (or one and a float value), then the epilogue."""
    a = dequantized(g, lambda v: len(g.shape(v)) >= 1)
    if a is None:
        return None
    b = dequantized(g, lambda v: g.shapes(v) == g.shapes(a))
    y = None if b is None else g.emit(Op("add", (a, b)))
    return None if y is None else _epilogue(g, y, None)


def p_requantize(g: Gen) -> int | None:
    x = g.pick(lambda v: quantizable(g, v) and v >= len(g.inputs))
    return None if x is None else requantize(g, x)
