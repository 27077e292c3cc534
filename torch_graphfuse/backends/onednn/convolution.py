"""Convolutions and matrix products: the ops oneDNN beats ATen on alone."""

from __future__ import annotations

from .lowering import Lowering, Unsupported, lowering


def _conv(lo: Lowering, stride: int, padding: int, dilation: int, groups: int,
          transposed: int | None = None) -> None:
    if transposed is not None and lo.const(transposed):
        raise Unsupported("transposed convolution")
    rank = lo.rank(0)
    if rank not in (3, 4, 5):
        raise Unsupported(f"{rank}-d convolution input")
    spatial = rank - 2
    pads = lo.const(padding)
    if not isinstance(pads, list):
        raise Unsupported(f"padding {pads!r}")
    strides, dilations = lo.const(stride), lo.const(dilation)
    lists = [(name, v if len(v) == spatial else v * spatial if len(v) == 1 else None)
             for name, v in (("strides", strides), ("pads", pads), ("dilations", dilations))]
    if any(v is None for _, v in lists):
        raise Unsupported("stride/padding/dilation rank mismatch")
    values = dict(lists)
    out_channels, per_group = lo.sizes(1)[:2]
    groups_n = lo.const(groups)
    if (lo.graph.tensors[lo.input(0)].dtype == "bf16" and groups_n > 1 and per_group == 1
            and out_channels != groups_n):
        # Found by the fuzzer: oneDNN's bf16 kernel for it returns garbage on
        # small inputs (3.12's brg_conv_fwd: off by 2 to 3.7 at widths 2-3 with
        # width stride 2, NCHW and channels-last).
        raise Unsupported("bf16 depthwise convolution with a channel multiplier")
    if _single_channel_wrong(lo, values, groups_n):
        raise Unsupported("a single-channel 3-d convolution, or 2-d to an output width of 1 "
                          "(oneDNN 3.12 computes those wrongly)")
    if not lo.finite(1):
        # Eager multiplies the padding's zeros by the weight (NaN where it is
        # NaN or infinite); oneDNN skips those taps.
        raise Unsupported("a weight not proven finite (oneDNN skips the padding taps)")
    inputs = [lo.input(0), lo.input(1)]
    if not lo.is_none(2):
        inputs.append(lo.input(2))
    lo.emit("Convolution", inputs, [lo.output()], strides=values["strides"],
            pads_begin=values["pads"], pads_end=values["pads"], dilations=values["dilations"],
            groups=lo.const(groups), data_format="NCX", weights_format="OIX")


def _single_channel_wrong(lo: Lowering, values: dict[str, list[int]], groups: int) -> bool:
    """oneDNN 3.12's convolutions of one input channel (no groups) are wrong in 3-d
    (605 of 7,000 swept 3-d shapes off, by up to 1e38, with no simpler pattern) and in
    2-d where a kernel wider than one tap meets an output width of 1 (every wrong 2-d
    result of 11,000 swept shapes); 1-d is right. The 2-d output width follows the
    input's: the group is pinned to its profiled sizes, and refused where they are the
    case."""
    sizes, kernel = lo.sizes(0), lo.sizes(1)[2:]
    if len(sizes) < 4 or sizes[1] != 1 or groups != 1:
        return False
    if len(sizes) == 5:
        return True
    if kernel[-1] == 1:
        return False
    lo.pin_shapes()
    strides, dilations, pads = values["strides"], values["dilations"], values["pads"]
    width = sizes[-1] + 2 * pads[-1] - dilations[-1] * (kernel[-1] - 1) - 1
    return width // strides[-1] + 1 == 1


@lowering("aten::_convolution", "aten::convolution", worth_alone=True)
def convolution(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    _conv(lo, stride=3, padding=4, dilation=5, groups=8, transposed=6)


@lowering("aten::conv1d", "aten::conv2d", "aten::conv3d", worth_alone=True)
def conv_nd(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, groups)
    _conv(lo, stride=3, padding=4, dilation=5, groups=6)


@lowering("aten::linear", worth_alone=True)
def linear(lo: Lowering) -> None:
    if lo.rank(1) != 2:
        raise Unsupported("linear weight is not 2-d")
    inputs = [lo.input(0), lo.input(1)]
    if not lo.is_none(2):
        inputs.append(lo.input(2))
    lo.emit("MatMul", inputs, [lo.output()], transpose_b=True)


@lowering("aten::matmul", "aten::mm", "aten::bmm", worth_alone=True)
def matmul(lo: Lowering) -> None:
    if 1 in (lo.rank(0), lo.rank(1)):
        # oneDNN computes a 1-d operand as a matrix, and an op that follows
        # then broadcasts against the wrong shape.
        raise Unsupported("matmul of a 1-d operand")
    lo.emit("MatMul", [lo.input(0), lo.input(1)], [lo.output()])


@lowering("aten::addmm", worth_alone=True)
def addmm(lo: Lowering) -> None:
    # (self, mat1, mat2, beta, alpha): beta*self + alpha*(mat1 @ mat2)
    if lo.const(3) != 1 or lo.const(4) != 1:
        raise Unsupported("addmm with alpha or beta != 1")
    out = lo.output()
    product = lo.temp(out)
    lo.emit("MatMul", [lo.input(1), lo.input(2)], [product])
    lo.emit("Add", [product, lo.input(0)], [out], auto_broadcast="numpy")
