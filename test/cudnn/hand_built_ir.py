"""IR graphs written by hand for the builder and cuDNN's deviceless tier: the shapes
of the groups the lowering makes, and variations of them cuDNN's rules exclude."""

from __future__ import annotations

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.ir_maker import Layout, Maker, contiguous, nhwc

CONV_ATTRS = {"padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]}


def conv_bias_relu6(io: str = "half", layout: Layout = nhwc) -> ir.Graph:
    m = Maker(io)
    x = m.input([8, 64, 28, 28], layout([8, 64, 28, 28]))
    w = m.input([32, 64, 3, 3], layout([32, 64, 3, 3]))
    bias = m.input([1, 32, 1, 1], [0, 1, 0, 0])
    shape = [8, 32, 28, 28]
    y = m.result("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), **CONV_ATTRS)
    b = m.result("pointwise", {"IN_0": y, "IN_1": bias}, shape, strides=layout(shape),
                 mode="add")
    m.result("pointwise", {"IN_0": b}, shape, strides=layout(shape), out=True, mode="relu_fwd",
             relu_upper_clip=6.0)
    return m.graph


def conv_residual_gelu_channel_sum(layout: Layout = nhwc, out_dtype: str = "float") -> ir.Graph:
    m = Maker("half")
    shape = [4, 16, 14, 14]
    x = m.input(shape, layout(shape))
    w = m.input([16, 16, 3, 3], layout([16, 16, 3, 3]))
    residual = m.input(shape, layout(shape))
    y = m.result("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), **CONV_ATTRS)
    r = m.result("pointwise", {"IN_0": y, "IN_1": residual}, shape, strides=layout(shape),
                 mode="add")
    g = m.result("pointwise", {"IN_0": r}, shape, strides=layout(shape), mode="gelu_fwd")
    m.result("reduction", {"X": g}, [4, 1, 14, 14], strides=layout([4, 1, 14, 14]), out=True,
             dtype=out_dtype, mode="add")
    return m.graph


def linear_bias_gelu_tanh(io: str = "bfloat16") -> ir.Graph:
    m = Maker(io)
    a = m.input([1, 128, 256])
    b = m.input([1, 256, 512], [0, 1, 256])  # a [512, 256] weight read transposed
    bias = m.input([1, 1, 512], [0, 0, 1])
    c = m.result("matmul", {"A": a, "B": b}, [1, 128, 512])
    d = m.result("pointwise", {"IN_0": c, "IN_1": bias}, [1, 128, 512], mode="add")
    m.result("pointwise", {"IN_0": d}, [1, 128, 512], out=True, mode="gelu_approx_tanh_fwd")
    return m.graph


def bmm_scaled_row_max(out_dtype: str = "float") -> ir.Graph:
    m = Maker("half")
    a = m.input([4, 64, 32])
    b = m.input([4, 32, 48])
    c = m.result("matmul", {"A": a, "B": b}, [4, 64, 48])
    s = m.result("pointwise", {"IN_0": c}, [4, 64, 48], mode="mul", scalar=0.125)
    m.result("reduction", {"X": s}, [4, 64, 1], out=True, dtype=out_dtype, mode="max")
    return m.graph


def prologue_conv(intermediate: str, layout: Layout = nhwc) -> ir.Graph:
    """A BN-ReLU before a conv: per-channel scale + bias + relu on X."""
    m = Maker("half", intermediate)
    shape = [8, 64, 28, 28]
    x = m.input(shape, layout(shape))
    scale = m.input([1, 64, 1, 1], [0, 1, 0, 0])
    shift = m.input([1, 64, 1, 1], [0, 1, 0, 0])
    w = m.input([32, 64, 3, 3], layout([32, 64, 3, 3]))
    s = m.result("pointwise", {"IN_0": x, "IN_1": scale}, shape, strides=layout(shape),
                 mode="mul")
    t = m.result("pointwise", {"IN_0": s, "IN_1": shift}, shape, strides=layout(shape),
                 mode="add")
    r = m.result("pointwise", {"IN_0": t}, shape, strides=layout(shape), mode="relu_fwd")
    out = [8, 32, 28, 28]
    m.result("conv_fprop", {"X": r, "W": w}, out, strides=layout(out), out=True, **CONV_ATTRS)
    return m.graph


def conv_epilogue(steps: tuple[str, ...], layout: Layout = contiguous,
                  residual: Layout | None = None) -> ir.Graph:
    """A half conv [2, 16, 8, 8] -> [2, 32, 8, 8] in `layout`, then `steps`: "bias"
    (a per-channel add), "residual" (an add of a full-size tensor, in `residual`
    layout, `layout` by default) or a unary pointwise mode."""
    m = Maker("half")
    x, w = m.input([2, 16, 8, 8], layout([2, 16, 8, 8])), m.input([32, 16, 3, 3],
                                                                   layout([32, 16, 3, 3]))
    shape = [2, 32, 8, 8]
    y = m.result("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), out=not steps,
                 **CONV_ATTRS)
    for i, step in enumerate(steps):
        if step == "bias":
            inputs = {"IN_0": y, "IN_1": m.input([1, 32, 1, 1], layout([1, 32, 1, 1]))}
        elif step == "residual":
            inputs = {"IN_0": y, "IN_1": m.input(shape, (residual or layout)(shape))}
        else:
            inputs = {"IN_0": y}
        mode = "add" if step in ("bias", "residual") else step
        y = m.result("pointwise", inputs, shape, strides=layout(shape),
                     out=i == len(steps) - 1, mode=mode)
    return m.graph


# Graphs cuDNN plans on every GPU described.
HAND_BUILT = {
    "conv_bias_relu6_nhwc_fp16": conv_bias_relu6,
    "conv_bias_relu6_nchw_fp16": lambda: conv_bias_relu6("half", contiguous),
    "conv_bias_relu6_nchw_fp32": lambda: conv_bias_relu6("float", contiguous),
    "conv_residual_gelu_channel_sum_fp16": conv_residual_gelu_channel_sum,
    "linear_bias_gelu_tanh_bf16": linear_bias_gelu_tanh,
    "bmm_scaled_row_max_fp16": bmm_scaled_row_max,
    "prologue_conv_half_intermediate": lambda: prologue_conv("half"),
    "conv_nchw_bias_tanh_fp16": lambda: conv_epilogue(("bias", "tanh_fwd")),
    "conv_nhwc_bias_residual_relu_fp16": lambda: conv_epilogue(("bias", "residual", "relu_fwd"),
                                                               nhwc),
}
