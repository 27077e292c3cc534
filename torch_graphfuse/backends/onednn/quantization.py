"""Quantization: PT2E's quantized_decomposed ops on plain u8/s8 tensors."""

from __future__ import annotations

import torch

from ...aten_ops import DTYPE_OF_CODE, SCALAR_TYPE_CODE
from .graph_desc import QUANTIZED_DTYPES
from .lowering import Lowering, Unsupported, lowering

# Why a quantize is right on finite inputs only (measured on oneDNN 3.12).
QUANTIZE_OF_NAN = "oneDNN and ATen turn NaN into different integers (s8: -128 against 0)"


def _quantized_dtype(lo: Lowering, qmin: int, qmax: int, dtype: int) -> torch.dtype:
    """The integer dtype of a quantize/dequantize; oneDNN saturates to the
    dtype's own range, so a narrower quant_min/quant_max is not mapped."""
    torch_dtype = DTYPE_OF_CODE.get(lo.const(dtype))
    if torch_dtype not in QUANTIZED_DTYPES:
        raise Unsupported("quantized dtype other than uint8/int8")
    info = torch.iinfo(torch_dtype)
    if (lo.const(qmin), lo.const(qmax)) != (info.min, info.max):
        raise Unsupported("quant_min/quant_max narrower than the dtype")
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
    # (input, scale, zero_point, quant_min, quant_max, dtype): round(x / scale) + zp, saturated
    _quantized_dtype(lo, 3, 4, 5)
    lo.emit("Quantize", [lo.input(0)], [lo.output()], qtype="per_tensor",
            scales=[float(lo.const(1))], zps=[int(lo.const(2))], axis=0)


@lowering("quantized_decomposed::dequantize_per_tensor", quantized=True, worth_alone=True)
def dequantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None): (q - zp) * scale
    _quantized_dtype(lo, 3, 4, 5)
    _float_out(lo, 6 if lo.n_inputs() > 6 else None)
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_tensor",
            scales=[float(lo.const(1))], zps=[int(lo.const(2))], axis=0)


@lowering("quantized_decomposed::dequantize_per_channel", quantized=True)
def dequantize_per_channel(lo: Lowering) -> None:
    # (input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None)
    _quantized_dtype(lo, 4, 5, 6)
    _float_out(lo, 7 if lo.n_inputs() > 7 else None)
    scales, zero_points = lo.const(1), lo.const(2)
    if not isinstance(scales, torch.Tensor) or not isinstance(zero_points, torch.Tensor):
        raise Unsupported("scales or zero points are not constant tensors")
    if scales.dim() != 1 or not bool(torch.isfinite(scales).all()):
        raise Unsupported("scales are not a finite vector")
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_channel",
            scales=[float(s) for s in scales.float().tolist()],
            zps=[int(z) for z in zero_points.tolist()], axis=int(lo.const(3)))
