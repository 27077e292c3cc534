"""The catalog's refusals: what stays with ATen, each with a fragment of the reason
the report gives."""

from __future__ import annotations

import torch
from pattern_ir import BF16, CONV, FLOAT, HALF, Catalog, Ir

PATTERNS = Catalog()


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="prologue on the weight")
def refuse_prologue_on_weight_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype)
    w = ir.op("aten::mul", w, ir.input(dtype, 32, 1, 1, 1))
    return ir.text(ir.op("aten::relu", ir.conv(x, w, b)))


@PATTERNS.pattern(HALF, (CONV, "aten::sum"), refusal="one reduction, as the last op")
def refuse_second_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype))
    total = ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::amax", total, ir.const([2]), ir.const(True)))


@PATTERNS.pattern(HALF, (CONV, "aten::sum"), refusal="one reduction, as the last op")
def refuse_op_after_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype))
    total = ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::relu", total))


@PATTERNS.pattern(HALF, refusal="reduction that is not the group's last op")
def refuse_reduction_mid_dag_half(ir: Ir, dtype: torch.dtype) -> str:
    # y - mean(y): the reduction sits on one of two paths that meet again.
    y = ir.conv(*ir.conv_inputs(dtype))
    mean = ir.op("aten::mean", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::sub", y, mean, ir.const(1)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="cycle")
def refuse_cycle_half(ir: Ir, dtype: torch.dtype) -> str:
    # relu(conv) + softmax(relu(conv)): the add would close a loop through softmax.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    soft = ir.op("aten::softmax", y, ir.const(1), ir.const(None))
    return ir.text(ir.add(y, soft))


@PATTERNS.pattern(HALF, refusal="pointwise-only")
def refuse_pointwise_only_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 2, 16, 8, 8)
    return ir.text(ir.op("aten::mul", ir.op("aten::tanh", x), ir.op("aten::sigmoid", x)))


@PATTERNS.pattern(HALF, refusal="lone convolution or matmul")
def refuse_lone_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.conv(*ir.conv_inputs(dtype)))


@PATTERNS.pattern(HALF, (CONV, "aten::div"), refusal="not proven finite")
def refuse_relu_not_proven_finite_half(ir: Ir, dtype: torch.dtype) -> str:
    # Division by a tensor can make inf or NaN: the relu after it stays with ATen.
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    y = ir.op("aten::div", y, ir.input(dtype, 2, 32, 8, 8, channels_last=True))
    return ir.text(ir.op("aten::relu", y))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="read outside the group")
def refuse_prologue_value_used_outside_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype)
    act = ir.bn_relu(x, dtype, 1, 16, 1, 1)
    return ir.text(ir.op("aten::relu", ir.conv(act, w, b)), act)


@PATTERNS.pattern(FLOAT, (CONV, "aten::relu"), refusal="a prologue in a float32 group")
def refuse_prologue_float(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype)
    x = ir.op("aten::relu", ir.op("aten::mul", x, ir.input(dtype, 1, 16, 1, 1)))
    return ir.text(ir.op("aten::relu", ir.conv(x, w, b)))


@PATTERNS.pattern(HALF, ("aten::linear", "aten::relu"), refusal="two full-size operands")
def refuse_prologue_full_operand_half(ir: Ir, dtype: torch.dtype) -> str:
    # x * y of two activations is not a per-column scale of A.
    x, y = ir.input(dtype, 8, 64), ir.input(dtype, 8, 64)
    w, b = ir.input(dtype, 32, 64), ir.input(dtype, 32)
    a = ir.op("aten::mul", x, y)
    return ir.text(ir.op("aten::relu", ir.op("aten::linear", a, w, b)))


@PATTERNS.pattern(HALF, refusal="grouped convolution")
def refuse_grouped_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 2, 16, 8, 8)
    w, b = ir.input(dtype, 32, 8, 3, 3), ir.input(dtype, 32)
    return ir.text(ir.op("aten::relu", ir.conv(x, w, b, groups=2)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="second output")
def refuse_fork_half(ir: Ir, dtype: torch.dtype) -> str:
    # relu's result is returned and also read by a tanh: the tanh would be a second output.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(y, ir.op("aten::tanh", y))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="cuDNN reduces")
def refuse_spatial_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    # A sum over (h, w) is neither a channel nor a per-channel reduction.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.op("aten::sum", y, ir.const([2, 3]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="has dtype torch.float32")
def refuse_type_promotion_half(ir: Ir, dtype: torch.dtype) -> str:
    # half + float32 is float32 in eager: no group computes in two dtypes.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.add(y, ir.input(FLOAT, 2, 32, 8, 8)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="not exact in half")
def refuse_inexact_number_half(ir: Ir, dtype: torch.dtype) -> str:
    # 0.1 has no float16: eager's value for it differs between kernels.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.op("aten::mul", y, ir.const(0.1)))


# -- convolutions that are not channels_last: cuDNN fuses a bias and one relu, tanh
# or sigmoid, or broadcast operands before a final reduction, and no prologue.

@PATTERNS.pattern(HALF, (CONV, "aten::relu"),
                  refusal="an operand of the result's size on a convolution")
def refuse_nchw_conv_relu_residual_add_half(ir: Ir, dtype: torch.dtype) -> str:
    # The group grows as far as cuDNN fuses: bias + relu; the add stays with ATen.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.add(y, ir.input(dtype, 2, 32, 8, 8)))


@PATTERNS.pattern(BF16, refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_gelu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype))
    return ir.text(ir.op("aten::gelu", y, ir.const("none")))


@PATTERNS.pattern(FLOAT, refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_relu_without_bias_float(ir: Ir, dtype: torch.dtype) -> str:
    # cuDNN's NCHW engines fuse an activation only after a bias.
    return ir.text(ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype, bias=False))))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="a prologue on a convolution that is not")
def refuse_nchw_prologue_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = ir.conv_inputs(dtype)
    y = ir.conv(ir.bn_relu(x, dtype, 1, 16, 1, 1), w, b)
    return ir.text(ir.op("aten::relu", y))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_relu_scale_tanh_half(ir: Ir, dtype: torch.dtype) -> str:
    # As above with no reduction to end it: the group keeps the longest part
    # cuDNN fuses, bias + relu.
    y = ir.op("aten::relu", ir.conv(*ir.conv_inputs(dtype)))
    return ir.text(ir.op("aten::tanh", ir.op("aten::mul", y, ir.input(dtype, 32, 1, 1))))


@PATTERNS.pattern(HALF, refusal="an operand of the result's size on a convolution")
def refuse_nchw_residual_add_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.add(ir.conv(*ir.conv_inputs(dtype)), ir.input(dtype, 2, 32, 8, 8))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@PATTERNS.pattern(HALF, (CONV, "aten::relu"), refusal="not channels_last in a channels_last")
def refuse_nchw_residual_on_channels_last_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.conv(*ir.conv_inputs(dtype, channels_last=True), channels_last=True)
    return ir.text(ir.add(ir.op("aten::relu", y), ir.input(dtype, 2, 32, 8, 8)))
