"""Convolutions and matrix products: the ops oneDNN beats ATen on alone."""

from __future__ import annotations

import torch

from .lowering import Lowering, Unsupported, lowering

CONVOLUTIONS = ("aten::_convolution", "aten::convolution", "aten::conv1d", "aten::conv2d",
                "aten::conv3d")
_PADS = ("aten::pad", "aten::constant_pad_nd")


def zero_padding(node: torch._C.Node) -> list[int] | None:
    """A constant zero padding of the spatial dims only, by constant amounts at least 0
    (`F.pad`'s order: the last dim's before and after first), or None. A convolution takes
    it into its own padding (op_mapping): Hugging Face's EfficientNet pads (0, 1, 0, 1)
    before each stride-2 convolution, an uneven padding no aten convolution has."""
    # pad(self, pad, mode="constant", value=None); constant_pad_nd(self, pad, value=0)
    if node.kind() not in _PADS or any(node.inputsAt(i).node().kind() != "prim::Constant"
                                       for i in range(1, node.inputsSize())):
        return None
    amounts = node.inputsAt(1).toIValue()
    mode, value = (node.inputsAt(2).toIValue(), node.inputsAt(3).toIValue()) \
        if node.kind() == "aten::pad" else ("constant", node.inputsAt(2).toIValue())
    if mode != "constant":
        return None
    rank = node.inputsAt(0).type().dim() if isinstance(
        node.inputsAt(0).type(), torch._C.TensorType) else None
    if (not isinstance(amounts, list) or value not in (None, 0) or rank is None or rank < 3
            or len(amounts) % 2 or len(amounts) > 2 * (rank - 2)
            or any(not isinstance(a, int) or a < 0 for a in amounts)):
        return None
    return amounts


def takes_padding(pad: torch._C.Node) -> bool:
    """Whether a zero padding is taken into the convolution that alone reads it: where on
    every side its amount plus the convolution's own padding stays within the kernel's
    reach, dilation * (kernel - 1), as a convolution's own padding does in the models
    seen. oneDNN 3.12 crashed on more (a width of 1 padded by (1, 2) before a 1-d
    convolution of kernel 2 and stride 2: found by the fuzzer)."""
    amounts = zero_padding(pad)
    if amounts is None or len(pad.output().uses()) != 1:
        return False
    use = pad.output().uses()[0]
    conv = use.user
    if use.offset != 0 or conv.kind() not in CONVOLUTIONS:
        return False
    weight, own, dilation = (conv.inputsAt(i) for i in (1, 4, 5))
    if any(v.node().kind() != "prim::Constant" for v in (weight, own, dilation)) \
            or not isinstance(weight.toIValue(), torch.Tensor):
        return False
    kernel, own, dilation = weight.toIValue().shape[2:], own.toIValue(), dilation.toIValue()
    if not isinstance(own, list) or not isinstance(dilation, list):
        return False
    spatial = len(kernel)
    own, dilation = (v * spatial if len(v) == 1 else v for v in (own, dilation))
    for pair in range(0, len(amounts), 2):
        dim = spatial - 1 - pair // 2
        reach = dilation[dim] * (kernel[dim] - 1)
        if max(amounts[pair], amounts[pair + 1]) + own[dim] > reach:
            return False
    return True


def _taken_padding(lo: Lowering, spatial: int) -> tuple[list[int], list[int]]:
    """The (before, after) amounts of a zero padding the convolution takes in, per
    spatial dim (zeros where it takes none)."""
    before, after = [0] * spatial, [0] * spatial
    value = lo.node.inputsAt(0)
    amounts = zero_padding(value.node()) if value.unique() in lo.graph.aliases else None
    for pair in range(0, len(amounts or []), 2):
        dim = spatial - 1 - pair // 2
        before[dim], after[dim] = amounts[pair], amounts[pair + 1]
    return before, after


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
    before, after = _taken_padding(lo, spatial)
    values["pads_begin"] = [p + b for p, b in zip(values["pads"], before, strict=True)]
    values["pads_end"] = [p + a for p, a in zip(values["pads"], after, strict=True)]
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
            pads_begin=values["pads_begin"], pads_end=values["pads_end"],
            dilations=values["dilations"],
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
    strides, dilations = values["strides"], values["dilations"]
    padded = values["pads_begin"][-1] + values["pads_end"][-1]
    width = sizes[-1] + padded - dilations[-1] * (kernel[-1] - 1) - 1
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
