"""The catalog's groups with a matmul anchor: matmul, mm, bmm, linear and addmm,
epilogues, a final row reduction and the per-column prologue on A."""

from __future__ import annotations

import torch
from pattern_ir import BF16, FLOAT, HALF, Catalog, Ir

PATTERNS = Catalog()


@PATTERNS.pattern(HALF, ("aten::linear", "aten::gelu"))
def linear_bias_gelu_half(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::gelu", ir.linear(dtype, 8), ir.const("none")))


@PATTERNS.pattern(BF16, ("aten::linear", "aten::gelu"))
def linear_3d_gelu_tanh_bf16(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::gelu", ir.linear(dtype, 2, 8), ir.const("tanh")))


@PATTERNS.pattern(BF16, ("aten::linear", "aten::add"))
def linear_3d_residual_add_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.linear(dtype, 2, 8)
    return ir.text(ir.add(y, ir.input(dtype, 2, 8, 32)))


@PATTERNS.pattern(FLOAT, ("aten::matmul", "aten::tanh"))
def matmul_tanh_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    return ir.text(ir.op("aten::tanh", ir.op("aten::matmul", a, b)))


@PATTERNS.pattern(HALF, ("aten::bmm", "aten::div", "aten::add"))
def bmm_scale_mask_half(ir: Ir, dtype: torch.dtype) -> str:
    # Attention scores: q @ k.T / 8 + a mask broadcast over the rows.
    q, k = ir.input(dtype, 2, 8, 64), ir.input(dtype, 2, 64, 16)
    mask = ir.input(dtype, 2, 1, 16)
    scores = ir.op("aten::div", ir.op("aten::bmm", q, k), ir.number(8.0, dtype))
    return ir.text(ir.add(scores, mask))


@PATTERNS.pattern(HALF, ("aten::addmm", "aten::relu"))
def addmm_relu_half(ir: Ir, dtype: torch.dtype) -> str:
    bias, a, b = ir.input(dtype, 32), ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    y = ir.op("aten::addmm", bias, a, b, ir.const(1), ir.const(1))
    return ir.text(ir.op("aten::relu", y))


@PATTERNS.pattern(FLOAT, ("aten::mm", "aten::sub", "aten::clamp_min"))
def mm_sub_clamp_min_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    y = ir.op("aten::sub", ir.op("aten::mm", a, b), ir.input(dtype, 8, 32), ir.const(1))
    return ir.text(ir.op("aten::clamp_min", y, ir.const(0.25)))


@PATTERNS.pattern(BF16, ("aten::linear", "aten::silu"))
def linear_silu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::silu", ir.linear(dtype, 8)))


@PATTERNS.pattern(HALF, ("aten::linear", "aten::relu", "aten::sum"))
def linear_relu_row_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.op("aten::relu", ir.linear(dtype, 8))
    return ir.text(ir.op("aten::sum", y, ir.const([-1]), ir.const(False), ir.const(None)))


@PATTERNS.pattern(BF16, ("aten::linear", "aten::amax"))
def linear_3d_row_max_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.linear(dtype, 2, 8)
    return ir.text(ir.op("aten::amax", y, ir.const([2]), ir.const(True)))


@PATTERNS.pattern(FLOAT, ("aten::matmul", "aten::mean"))
def matmul_row_mean_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 2, 8, 64), ir.input(dtype, 2, 64, 32)
    y = ir.op("aten::matmul", a, b)
    return ir.text(ir.op("aten::mean", y, ir.const([-1]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(HALF, ("aten::mul", "aten::add", "aten::relu", "aten::linear"))
def bn_relu_prologue_linear_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 8, 64)
    w, b = ir.input(dtype, 32, 64), ir.input(dtype, 32)
    return ir.text(ir.op("aten::linear", ir.bn_relu(x, dtype, 64), w, b))
