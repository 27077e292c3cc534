"""oneDNN 3.12's defects that an int8 partition can meet, one predicate each (see
workarounds.py): products that saturate without VNNI, scaled accumulators that overflow,
residuals oneDNN reads in the wrong type, and padded windows it fills wrongly."""

from __future__ import annotations

import math

from ...passes import int8_as_float
from . import library
from .graph_desc import BackendGraph, BackendOp
from .workarounds import BINARY_OPS, SizeVerdict


def residual_of_another_int_type(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op adds a dequantized tensor whose integer type is not
    that of the partition's quantized result: oneDNN makes it a sum post-op, which
    reads the operand as the result's type (a u8 residual under an s8 result; found
    by the fuzzer's quantized mode on v3.2, still 42 to 92 steps off on 3.12)."""
    results = {backend.tensors[t].dtype for op in ops if op.kind == "Quantize" for t in op.outputs}
    dequantized = {t: backend.tensors[op.inputs[0]].dtype for op in ops if op.kind == "Dequantize"
                   for t in op.outputs}
    return bool(results) and any(
        t in dequantized and dequantized[t] not in results
        for op in ops if op.kind in BINARY_OPS for t in op.inputs)


def _exact_in_int8(dequantize: BackendOp) -> bool:
    """Whether the u8 data a Dequantize reads comes from a quantize_per_tensor of a range
    whose products with s8 data cannot saturate (int8_as_float.exact_in_int8): a quantize
    of a range narrower than the dtype's clamps to it; False where not proven."""
    node = dequantize.node
    return (node is not None and node.kind() == int8_as_float.DEQUANTIZE
            and int8_as_float.exact_in_int8(node.inputsAt(0).node()))


def int8_products_saturate(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a convolution or matmul multiplies two int8 tensors on a CPU without
    VNNI where the products can saturate: oneDNN then multiplies u8 x s8 pairs with
    vpmaddubsw, which saturates each pair's sum in int16 (its s8 data is shifted to u8
    first), and 255 x 127 x 2 is twice what int16 holds. Results up to 17 quantization
    steps off were measured under emulated AVX2 and AVX-512 without VNNI. A u8 input
    quantized to at most 128 (7-bit activations: PT2E's reduce_range) times s8 data
    cannot saturate, and is computed exactly."""
    isa = library.isa()
    return isa is not None and not isa.vnni and saturating_int8_products(ops, backend)


def saturating_int8_products(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether the ops multiply two int8 tensors whose pair sums may pass int16 (see
    int8_products_saturate): exact with VNNI only, whatever CPU maps them."""
    made_by = {t: op for op in ops for t in op.outputs}
    for op in ops:
        if op.kind not in ("Convolution", "MatMul"):
            continue
        src, other = (made_by.get(t) for t in op.inputs[:2])
        if not (src and other and src.kind == other.kind == "Dequantize"):
            continue
        if not _exact_in_int8(src) or backend.tensors[other.inputs[0]].dtype != "s8":
            return True
    return False


# The largest magnitude an int8 product's scaled accumulator may reach: float32 holds up
# to 2^128, and the bias and post-ops add to it after the scales.
_SCALED_ACCUMULATOR_LIMIT = 2.0 ** 120


# How much larger a reduction over a dim computed at run time may grow than profiled.
_RUN_TIME_REDUCTION_GROWTH = 2.0 ** 20


def _quantized_span(op: BackendOp, backend: BackendGraph) -> tuple[float, float]:
    """A Dequantize's largest |q - zero point| over its integer dtype, and largest scale."""
    low, high = (0, 255) if backend.tensors[op.inputs[0]].dtype == "u8" else (-128, 127)
    zero_points = op.attrs.get("zps") or [0]
    span = max(max(high - z, z - low) for z in zero_points)
    return float(span), max(abs(s) for s in op.attrs.get("scales") or [1.0])


def _reduced_length(op: BackendOp, backend: BackendGraph) -> int:
    """The number of products each result of a Convolution or MatMul sums, from the sizes
    of its second operand (the weight)."""
    sizes = backend.tensors[op.inputs[1]].sizes or [1]
    if op.kind == "Convolution":
        return max(math.prod(sizes[1:]), 1)
    if op.attrs.get("transpose_b") or len(sizes) == 1:
        return max(sizes[-1], 1)
    return max(sizes[-2], 1)


def int8_scaled_accumulator_overflows(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an int8 convolution or matmul could overflow float32 where eager does not:
    oneDNN 3.12 multiplies the int32 sum of products by the source's scale and then by
    the weight's, so with a source scale of 2e34 a sum of 22479 gives inf (and 255 once
    quantized) where eager, dequantizing first, gives 128; a convolution was 223 steps off
    (found by the fuzzer's quantized mode: scales 1.3e35 and 8.7e34). The bound takes the
    largest sum the dtypes allow, times every scale above 1 and the inverse of every result
    scale below 1: models' scales are far inside it."""
    dequantizes = {t: op for op in ops if op.kind == "Dequantize" for t in op.outputs}
    result_scales = [s for op in ops if op.kind == "Quantize" for s in op.attrs["scales"]]
    result_growth = 1.0 / min([1.0, *(s for s in result_scales if s > 0)])
    for op in ops:
        if op.kind not in ("Convolution", "MatMul") or not all(
                t in dequantizes for t in op.inputs[:2]):
            continue
        (a_span, a_scale), (w_span, w_scale) = (_quantized_span(dequantizes[t], backend)
                                                for t in op.inputs[:2])
        bound = (_reduced_length(op, backend) * a_span * w_span * max(1.0, a_scale)
                 * max(1.0, w_scale) * result_growth)
        if not backend.tensors[dequantizes[op.inputs[1]].inputs[0]].constant:
            bound *= _RUN_TIME_REDUCTION_GROWTH  # a second operand whose sizes may vary
        if not bound < _SCALED_ACCUMULATOR_LIMIT:
            return True
    return False


def int8_depthwise_multiplier(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an int8 convolution is depthwise with a channel multiplier (one input
    channel per group, more output channels than groups): oneDNN 3.12 computes some
    wrongly at small widths (found by the fuzzer's quantized mode: off by 21 at an output
    width of 1), as its bf16 kernel does (convolution.py refuses that one); fp32 is right."""
    dequantized = {t for op in ops if op.kind == "Dequantize" for t in op.outputs}
    for op in ops:
        if op.kind != "Convolution" or op.inputs[0] not in dequantized:
            continue
        out_channels, per_group = (backend.tensors[op.inputs[1]].sizes or [0, 0])[:2]
        groups = op.attrs.get("groups", 1)
        if groups > 1 and per_group == 1 and out_channels != groups:
            return True
    return False


def int8_single_channel_s8(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an int8 convolution reads one input channel of s8 data: oneDNN 3.12
    computes some wrongly (found by the fuzzer's quantized mode, seed 7: padding (0, 1),
    up to 3.4 off where the bound was 7e-5); u8 data and more channels were right."""
    s8_sources = {t for op in ops if op.kind == "Dequantize"
                  and backend.tensors[op.inputs[0]].dtype == "s8" for t in op.outputs}
    return any(op.kind == "Convolution" and op.inputs[0] in s8_sources
               and op.attrs.get("groups", 1) == 1
               and (backend.tensors[op.inputs[1]].sizes or [0, 0])[1] == 1 for op in ops)


def int8_padding_windows(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """An int8 convolution with a window that lies entirely in the padding (a dilated
    kernel on a narrow input): oneDNN 3.12 computes such outputs wrongly (2.2 where
    eager gives 0; found by the fuzzer's quantized mode), fp32 and bf16 right. REFUSE at
    the profiled sizes, PIN where a dilated, padded kernel could meet such a size."""
    dequantized = {t for op in ops if op.kind == "Dequantize" for t in op.outputs}
    verdict = SizeVerdict.SAFE
    for op in ops:
        if op.kind != "Convolution" or op.inputs[0] not in dequantized:
            continue
        sizes = backend.tensors[op.inputs[0]].sizes or []
        kernel = (backend.tensors[op.inputs[1]].sizes or [])[2:]
        a = op.attrs
        for n, k, s, p, d in zip(sizes[2:], kernel, a["strides"], a["pads_begin"],
                                 a["dilations"], strict=False):
            if d == 1 and p < k:
                continue
            verdict = SizeVerdict.PIN
            out = (n + 2 * p - d * (k - 1) - 1) // s + 1
            if any(all(not 0 <= o * s - p + j * d < n for j in range(k)) for o in range(out)):
                return SizeVerdict.REFUSE
    return verdict


def residual_of_the_anchor_source(ops: list[BackendOp]) -> bool:
    """Whether one quantized tensor is dequantized both into a convolution's or matmul's
    source and into a binary op's operand (`linear(d) + d`, d dequantized): oneDNN 3.12
    computes that int8 partition up to 205 steps off (an independent residual of the same
    type is exact)."""
    source = {t: op.inputs[0] for op in ops if op.kind == "Dequantize" for t in op.outputs}
    anchored = {source[op.inputs[0]] for op in ops
                if op.kind in ("Convolution", "MatMul") and op.inputs[0] in source}
    return any(op.kind in BINARY_OPS and any(source.get(t) in anchored for t in op.inputs)
               for op in ops)
