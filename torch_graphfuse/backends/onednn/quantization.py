"""Quantization: PT2E's quantized_decomposed ops on plain u8/s8 tensors."""

from __future__ import annotations

import math

import torch

from ...aten_ops import DTYPE_OF_CODE, SCALAR_TYPE_CODE
from .graph_desc import QUANTIZED_DTYPES
from .lowering import Lowering, Unsupported, lowering

# Why a quantize is right on finite inputs only (measured on oneDNN 3.12).
QUANTIZE_OF_NAN = "oneDNN and ATen turn NaN into different integers (s8: -128 against 0)"


def _quantized_dtype(lo: Lowering, dtype: int) -> torch.dtype:
    """The integer dtype of a quantize/dequantize. A dequantize computes
    (q - zero point) * scale whatever its quant_min/quant_max (ATen's too), so 7-bit
    activations (PT2E's reduce_range: [0, 127]) map as 8-bit ones."""
    torch_dtype = DTYPE_OF_CODE.get(lo.const(dtype))
    if torch_dtype not in QUANTIZED_DTYPES:
        raise Unsupported("quantized dtype other than uint8/int8")
    return torch_dtype


def _float_out(lo: Lowering, out_dtype: int | None) -> None:
    if (out_dtype is not None and not lo.is_none(out_dtype)
            and lo.const(out_dtype) != SCALAR_TYPE_CODE[torch.float32]):
        raise Unsupported("dequantize to another dtype than float32")


# Alone too: ATen's decomposed quantize is five passes over the tensor
# (mul, round, add, clamp, cast), oneDNN's one.
@lowering("quantized_decomposed::quantize_per_tensor", quantized=True, worth_alone=True,
          finite_only=QUANTIZE_OF_NAN)
def quantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype): round(x / scale) + zp, clamped
    # to [quant_min, quant_max]
    dtype = _quantized_dtype(lo, 5)
    scale, zero_point = float(lo.const(1)), int(lo.const(2))
    x = lo.input(0)
    low, high = _narrowed(lo.const(3), lo.const(4), dtype, scale, zero_point)
    if low is not None or high is not None:
        clamped = lo.temp(x)
        lo.emit("Clamp", [x], [clamped], min=-math.inf if low is None else low,
                max=math.inf if high is None else high)
        x = clamped
    lo.emit("Quantize", [x], [lo.output()], qtype="per_tensor", scales=[scale],
            zps=[zero_point], axis=0)


def _narrowed(qmin: int, qmax: int, dtype: torch.dtype, scale: float, zero_point: int
              ) -> tuple[float | None, float | None]:
    """Where quant_min/quant_max narrow the dtype's range (PT2E's reduce_range: u8 in
    [0, 127]), the float bounds that clamp the input first, as oneDNN's quantize only
    saturates to the dtype's range: a quarter step past the last integer kept, so that
    a value beyond it quantizes to that integer by either rounding of x / scale, and one
    within it is left as it was. None: that side is the dtype's own."""
    info = torch.iinfo(dtype)
    if not info.min <= qmin <= qmax <= info.max:
        raise Unsupported("quant_min/quant_max outside the dtype's range")
    if (qmin, qmax) != (info.min, info.max) and scale <= 0:
        raise Unsupported("a narrowed quantize of a scale not above 0")
    low = None if qmin == info.min else (qmin - zero_point - 0.25) * scale
    high = None if qmax == info.max else (qmax - zero_point + 0.25) * scale
    return low, high


# Alone too: ATen runs the pair as eight passes over the tensor, oneDNN as one.
@lowering("graphfuse::fake_quantize_per_tensor", worth_alone=True, finite_only=QUANTIZE_OF_NAN)
def fake_quantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype): dequantize(quantize(x)), as
    # ATen computes it in float32 (passes/int8_as_float). The zero point is added and taken
    # off even where it is 0: a -0.0 rounded to becomes +0.0, as eager's cast to an integer.
    _quantized_dtype(lo, 5)
    scale, zero_point = float(lo.const(1)), int(lo.const(2))
    x, out = lo.input(0), lo.output()
    steps = [lo.temp(x) for _ in range(5)]

    def number(value: float) -> int:
        return lo.constant(torch.tensor([value], dtype=torch.float32))

    lo.emit("Multiply", [x, number(1.0 / scale)], [steps[0]], auto_broadcast="numpy")
    lo.emit("Round", [steps[0]], [steps[1]])
    lo.emit("Add", [steps[1], number(zero_point)], [steps[2]], auto_broadcast="numpy")
    lo.emit("Clamp", [steps[2]], [steps[3]], min=float(lo.const(3)), max=float(lo.const(4)))
    lo.emit("Subtract", [steps[3], number(zero_point)], [steps[4]], auto_broadcast="numpy")
    lo.emit("Multiply", [steps[4], number(scale)], [out], auto_broadcast="numpy")


@lowering("quantized_decomposed::dequantize_per_tensor", quantized=True, worth_alone=True)
def dequantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None): (q - zp) * scale
    _quantized_dtype(lo, 5)
    _float_out(lo, 6 if lo.n_inputs() > 6 else None)
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_tensor",
            scales=[float(lo.const(1))], zps=[int(lo.const(2))], axis=0)


@lowering("quantized_decomposed::dequantize_per_channel", quantized=True)
def dequantize_per_channel(lo: Lowering) -> None:
    # (input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None)
    _quantized_dtype(lo, 6)
    _float_out(lo, 7 if lo.n_inputs() > 7 else None)
    scales, zero_points = lo.const(1), lo.const(2)
    if not isinstance(scales, torch.Tensor) or not isinstance(zero_points, torch.Tensor):
        raise Unsupported("scales or zero points are not constant tensors")
    if scales.dim() != 1 or not bool(torch.isfinite(scales).all()):
        raise Unsupported("scales are not a finite vector")
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_channel",
            scales=[float(s) for s in scales.float().tolist()],
            zps=[int(z) for z in zero_points.tolist()], axis=int(lo.const(3)))
