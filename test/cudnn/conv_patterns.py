"""The catalog's groups with a convolution anchor: NCHW and channels-last, `_convolution`
and `conv2d`, epilogues, a final reduction and the scale + bias + relu prologue."""

from __future__ import annotations

import torch
from pattern_ir import BF16, CONV, FLOAT, HALF, Catalog, Ir

PATTERNS = Catalog()


for _dtype, _suffix in ((HALF, "half"), (BF16, "bf16"), (FLOAT, "float")):
    @PATTERNS.pattern(_dtype, (CONV, "aten::relu"), name=f"conv_bias_relu_{_suffix}")
    def _conv_bias_relu(ir: Ir, dtype: torch.dtype) -> str:
        return ir.text(ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype))))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"))
def conv_bias_relu_channels_last_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::relu", y))


# Epilogues beyond a bias and one relu / tanh / sigmoid are channels_last: cuDNN
# fuses them with no other convolution layout (the refuse_nchw_* patterns).

@PATTERNS.pattern(BF16, ("aten::conv2d", "aten::add", "aten::relu"))
def conv2d_residual_add_relu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype, channels_last=True)
    residual = ir.input(dtype, 2, 32, 8, 8, channels_last=True)
    y = ir.conv(x, w, b, kind="aten::conv2d", channels_last=True)
    return ir.text(ir.op("aten::relu", ir.add(y, residual)))


@PATTERNS.pattern(HALF, (CONV, "aten::mul", "aten::tanh"))
def conv_scale_tanh_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True, bias=False), channels_last=True)
    return ir.text(ir.op("aten::tanh", ir.op("aten::mul", y, ir.number(0.5, dtype))))


@PATTERNS.pattern(BF16, (CONV, "aten::mul", "aten::sigmoid"))
def conv_mul_channel_scale_sigmoid_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype, channels_last=True)
    scale = ir.input(dtype, 32, 1, 1)
    y = ir.conv(x, w, b, channels_last=True)
    return ir.text(ir.op("aten::sigmoid", ir.op("aten::mul", y, scale)))


for _approx in ("none", "tanh"):
    @PATTERNS.pattern(HALF, (CONV, "aten::gelu"), name=f"conv_gelu_{_approx}_half")
    def _conv_gelu(ir: Ir, dtype: torch.dtype, approximate: str = _approx) -> str:
        y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
        return ir.text(ir.op("aten::gelu", y, ir.const(approximate)))


@PATTERNS.pattern(FLOAT, (CONV, "aten::sigmoid"))
def conv_sigmoid_float(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::sigmoid", ir.conv(*ir.conv_inputs(dtype))))


@PATTERNS.pattern(HALF, (CONV, "aten::silu"))
def conv_silu_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::silu", y))


@PATTERNS.pattern(HALF, (CONV, "aten::sigmoid", "aten::mul"))
def conv_swish_diamond_half(ir: Ir, dtype: torch.dtype) -> str:
    # y * sigmoid(y): two paths from the conv meet at the mul, its post-dominator.
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::mul", y, ir.op("aten::sigmoid", y)))


@PATTERNS.pattern(HALF, (CONV, "aten::hardtanh"))
def conv_relu6_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::hardtanh", y, ir.const(0.0), ir.const(6.0)))


@PATTERNS.pattern(BF16, (CONV, "aten::clamp"))
def conv_clamp_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::clamp", y, ir.const(-1.0), ir.const(1.5)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu", "aten::sum"))
def conv_relu_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(FLOAT, (CONV, "aten::mean"))
def conv_channel_mean_float(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype))
    return ir.text(ir.op("aten::mean", y, ir.const([1]), ir.const(False), ir.const(None)))


@PATTERNS.pattern(HALF, (CONV, "aten::amax"))
def conv_channel_max_channels_last_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::amax", y, ir.const([1]), ir.const(False)))


@PATTERNS.pattern(BF16, (CONV, "aten::sum"))
def conv_per_channel_sum_bf16(ir: Ir, dtype: torch.dtype) -> str:
    # The column reduction: every (n, h, w) summed into one value per channel.
    y = ir.conv(*ir.conv_inputs(dtype))
    return ir.text(ir.op("aten::sum", y, ir.const([0, 2, 3]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(HALF, ("aten::mul", "aten::add", "aten::relu", CONV, "aten::relu"))
def bn_relu_prologue_conv_relu_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype, channels_last=True)
    y = ir.conv(ir.bn_relu(x, dtype, 1, 16, 1, 1), w, b, channels_last=True)
    return ir.text(ir.op("aten::relu", y))


@PATTERNS.pattern(BF16, ("aten::mul", "aten::add", "aten::relu", CONV))
def bn_relu_prologue_conv_channels_last_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype, channels_last=True)
    return ir.text(ir.conv(ir.bn_relu(x, dtype, 16, 1, 1), w, b, channels_last=True))


# NCHW convolutions: a bias and one relu, tanh or sigmoid, or broadcast operands
# before a final reduction.

@PATTERNS.pattern(HALF, (CONV, "aten::relu", "aten::mul", "aten::sum"))
def nchw_conv_relu_scale_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    # Broadcast operands before a final reduction fuse in NCHW.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    y = ir.op("aten::mul", y, ir.input(dtype, 32, 1, 1))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(BF16, (CONV, "aten::sigmoid", "aten::mul", "aten::amax"))
def nchw_conv_swish_channel_max_bf16(ir: Ir, dtype: torch.dtype) -> str:
    # Two paths that meet again, before a final reduction, fuse in NCHW too.
    y = ir.conv(*ir.conv_inputs(dtype))
    y = ir.op("aten::mul", y, ir.op("aten::sigmoid", y))
    return ir.text(ir.op("aten::amax", y, ir.const([1]), ir.const(True)))
