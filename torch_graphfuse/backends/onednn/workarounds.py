"""oneDNN 3.12's defects that a partition can meet, one predicate each.

Each predicate looks at the backend ops of a partition oneDNN offered and says whether
they meet a case oneDNN computes wrongly, crashes or allocates without bound on, or runs
with a reference kernel; its docstring says what was measured. rules.RULES refuses such
partitions. Where the case depends on sizes, the predicate gives a `SizeVerdict`: at
other sizes than the profiled ones it could be the case, so the group is pinned to them
(partition.py).
"""

from __future__ import annotations

import enum
import math

from ...passes import int8_as_float
from . import library
from .graph_desc import BackendGraph, BackendOp


class SizeVerdict(enum.Enum):
    """A verdict on sizes: what `flattened_matmul_broadcast`, `pool_operand`,
    `int8_padding_windows`, `layer_norm_sum`, `binary_head_with_width_operand` and
    `matmul_operand_layout` find."""
    SAFE = "safe"
    PIN = "pin"  # safe at the profiled sizes only
    REFUSE = "refuse"


_BINARY_OPS = frozenset({"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum"})


# Ops a post-op chain passes through: one data input, result of the same shape.
_CHAIN_OPS = frozenset({
    "ReLU", "Elu", "Abs", "Clamp", "GELU", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Square",
    "HardSwish", "HardSigmoid", "Mish", "LeakyReLU", "SoftPlus", "Pow", "Reciprocal", "Round",
    "BatchNormInference", "TypeCast", "Reorder",
})


# Ops oneDNN runs as its eltwise primitive.
_ELTWISE_OPS = _CHAIN_OPS - {"BatchNormInference", "TypeCast", "Reorder"}


CHANNEL_OPERAND_OVER_BATCH = "a (1, C, 1, ...) operand broadcast over the batch (oneDNN bug)"


def channel_operand_over_batch(operand: list[int], result: list[int]) -> SizeVerdict:
    """oneDNN (v3.2, and 3.12: off by up to 7 on 54 of 54 swept shapes) computes a wrong
    result for a (1, C, 1, ...) operand of a binary op broadcast over the batch of an
    (N > 1, C, 1, ...) result; as a convolution's or matmul's post-op it is right. Such an
    operand (given at the result's rank) could meet such a result at some batch or spatial
    size."""
    if not (len(operand) >= 3 and operand[0] == 1 and operand[1] > 1
            and all(d == 1 for d in operand[2:])):
        return SizeVerdict.SAFE
    if (len(result) == len(operand) and result[0] > 1 and result[1] == operand[1]
            and all(d == 1 for d in result[2:])):
        return SizeVerdict.REFUSE
    return SizeVerdict.PIN


def eltwise_head_with_binary(ops: list[BackendOp]) -> bool:
    """Whether an eltwise op on a partition input meets a binary op: oneDNN 3.12 runs
    an eltwise primitive with a binary post-op with its reference implementation
    (`tanh(x) * y`: 110 ms against ATen's 6.5, on 4x64x56x56), whatever the
    operand. x * sigmoid(x) is the exception: oneDNN takes it as one swish op."""
    produced = {t for op in ops for t in op.outputs}
    heads = {op.inputs[0] for op in ops if op.kind in _ELTWISE_OPS and op.inputs[0] not in produced}
    return bool(heads) and any(
        op.kind in _BINARY_OPS and any(t in produced for t in op.inputs)
        and any(t not in produced and t not in heads for t in op.inputs) for op in ops)


# Ops that move no data in an elementwise partition, or compute one value per element.
ELEMENTWISE_PARTITION_OPS = _CHAIN_OPS | _BINARY_OPS | {"Select", "StaticReshape",
                                                          "StaticTranspose"}


def _transposed(sizes: list[int], strides: list[int]) -> bool:
    """Whether the strides move the last dim (of those of more than one element) off the
    innermost place, other than channels-last (which the kernel binds as it comes)."""
    dims = [d for d, n in enumerate(sizes) if n != 1]
    if not dims or min(dims, key=lambda d: (strides[d], -d)) == dims[-1]:
        return False
    order = sorted(dims, key=lambda d: (-strides[d], d))
    rank = len(sizes)
    return rank not in (4, 5) or order != [d for d in (0, *range(2, rank), 1) if d in dims]


def elementwise_to_a_transposed_layout(ops: list[BackendOp], backend: BackendGraph,
                                     outputs: list[int]) -> bool:
    """Whether only elementwise ops read a transposed input (its last dim not innermost)
    and write a transposed result (eager's result keeps the input's memory order): the
    kernel copies the input row-major, and oneDNN 3.12 computes in that order and
    transposes its result back, where ATen streams through the memory once
    (`x.transpose(1, 2) * 0.5 + 1.0` on 12x512x512, 2 threads: 3.9 ms against ATen's
    1.1). Where the last dim stays innermost (attention heads' permutes: Llama's rotary
    embedding) the copies move whole rows, and the fused chain ran as fast."""
    if any(op.kind not in ELEMENTWISE_PARTITION_OPS for op in ops):
        return False
    produced = {t for op in ops for t in op.outputs}

    def transposed(t: int) -> bool:
        spec = backend.tensors[t]
        return bool(spec.sizes and spec.strides and _transposed(spec.sizes, spec.strides))

    return (any(transposed(t) for t in {t for op in ops for t in op.inputs} - produced)
            and any(transposed(t) for t in outputs))


def layer_norm_sum(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """Whether a LayerNorm's result is added to a tensor of the sum's shape: oneDNN 3.12
    makes the add a sum post-op, which its layer-norm kernel accepts and never applies
    (`layer_norm(a) + b` came out as `layer_norm(a)`, 1.7 to 4.3 off). Broadcast
    operands, other binary ops and other anchors were right, but a broadcast operand has
    the sum's shape where the dims it is broadcast over are 1 (a (5,) bias on a (1, 5)
    result, found by the fuzzer): such an operand, lower ranks aligned as numpy does, is
    refused at the profiled sizes, and otherwise pins the group to them. A cast of the
    result becomes the kernel's destination type, with the add still its sum
    (`layer_norm(a).to(bfloat16) + b`, fp32 a and bfloat16 b, came out 11-13 off on
    AVX-512 with bf16; fuzzer seed 2783)."""
    norms = {t for op in ops if op.kind == "LayerNorm" for t in op.outputs}
    while casts := {t for op in ops if op.kind == "TypeCast" and op.inputs[0] in norms
                    for t in op.outputs} - norms:
        norms |= casts
    produced = {t for op in ops for t in op.outputs}
    verdict = SizeVerdict.SAFE
    for op in ops:
        if op.kind != "Add" or not norms & set(op.inputs):
            continue
        result = backend.tensors[op.outputs[0]].sizes or []
        for t in op.inputs:
            if t in produced:
                continue
            sizes = backend.tensors[t].sizes or []
            if [1] * (len(result) - len(sizes)) + sizes == result:
                return SizeVerdict.REFUSE
            verdict = SizeVerdict.PIN
    return verdict


def attention_reshaped_to_5d(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an attention partition (a SoftMax between MatMuls) reshapes a tensor to 5 or
    more dims: oneDNN 3.12 compiles it with its attention kernel, whose grouped-query pass
    (fuse_reshape_for_gqa) then segfaults (found by the fuzzer: attention -> permute ->
    unsqueeze(-1) in bf16; a reshape to 3 dims compiles and is right)."""
    if not any(op.kind == "SoftMax" for op in ops) or not any(op.kind == "MatMul" for op in ops):
        return False
    return any(op.kind == "StaticReshape" and len(backend.tensors[op.outputs[0]].sizes or []) >= 5
               for op in ops)


def attention_mask_operand(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an attention partition (a SoftMax whose result a MatMul reads) adds to the
    scores, or selects them by, an operand that oneDNN 3.12's attention kernel reads
    wrongly. Swept on AVX2 (`sdp_decomp_kernel_t`) at 40-256 tokens, 1-16 heads, batch
    1-4, with more than one (batch x head) slice:
    - an operand of another rank than the scores, unless of one element: a (heads, N, N)
      bias as timm's attention biases are (tiny_vit, efficientformerv2, LeViT), or
      (heads, 1, N), 0.9-1.4 off relative to the result (ranks 1 and 2 came out right on
      that kernel; the same values at rank 4 are right on every one);
    - a bool mask that broadcasts over the queries or the keys ((B, 1, 1, N), (1, N),
      (B, 1, N, 1)): 2.5-8.6 off with every key visible, where (B, 1, N, N) is right.
    passes/attention_masks gives the masks it finds the form the kernel reads right: this
    finds any form left."""
    read_by_matmul = {t for op in ops if op.kind == "MatMul" for t in op.inputs}
    made_by = {t: op for op in ops for t in op.outputs}

    def sizes(t: int) -> list[int]:
        return backend.tensors[t].sizes or []

    for softmax in ops:
        if softmax.kind != "SoftMax" or softmax.outputs[0] not in read_by_matmul:
            continue
        t = softmax.inputs[0]
        while (op := made_by.get(t)) is not None and op.kind in _BINARY_OPS | {"Select"}:
            result = sizes(op.outputs[0])
            for i, operand in enumerate(op.inputs):
                if operand in made_by:
                    continue
                given = sizes(operand)
                if math.prod(given) > 1 and len(given) != len(result):
                    return True
                padded = [1] * (len(result) - len(given)) + given
                if op.kind == "Select" and i == 0 and padded[-2:] != result[-2:]:
                    return True
            internal = [i for i in op.inputs if i in made_by]
            if len(internal) != 1:
                break
            t = internal[0]
    return False


# The most tokens (rows and columns of the scores) at which oneDNN 3.12's attention kernel
# was measured slower than ATen running the same ops.
SHORT_ATTENTION_TOKENS = 112


def short_attention_softmaxes(ops: list[BackendOp], backend: BackendGraph) -> list[BackendOp]:
    """The written-out softmaxes (aten::softmax) of an attention partition (a SoftMax whose
    result a MatMul reads) over at most SHORT_ATTENTION_TOKENS tokens. oneDNN 3.12 runs such a
    partition with its decomposed kernel (`sdp_decomp_kernel_t`), a small matmul per batch
    and head. On 2 threads of an AVX-512 Xeon, with a bias added, against ATen running the
    same ops: 1.3-3.0x ATen's time at 32-64 tokens (fp32 and bf16; Swin's 49-token windows,
    64 x 3 to 1 x 24 heads, 1.25-1.7x), 1.07-1.16x at 96, 0.98-1.07x at 112, 0.92-1.02x at
    128, 0.90-0.98x at 144 and 0.80-0.95x at 197 (12 and 48 heads of 32 and 64). Without the
    softmax, the products and what they fuse with are partitions of their own, at ATen's
    time there (0.97-1.03x)."""
    read_by_matmul = {t for op in ops if op.kind == "MatMul" for t in op.inputs}
    found = []
    for op in ops:
        sizes = backend.tensors[op.inputs[0]].sizes if op.kind == "SoftMax" else None
        if (sizes is not None and len(sizes) >= 2 and op.node is not None
                and op.outputs[0] in read_by_matmul
                and op.node.kind() == "aten::softmax"
                and max(sizes[-2:]) <= SHORT_ATTENTION_TOKENS):
            found.append(op)
    return found


def products_of_weights(ops: list[BackendOp], backend: BackendGraph) -> list[BackendOp]:
    """The matmuls of a partition that read a constant 2-d weight (through a dequantize or
    a cast), where it holds two or more (a gated MLP's three linears). oneDNN 3.12 runs such
    a partition with its general kernel (`larger_partition_kernel_t`), whose matmuls read
    the weights as given, row-major, where a partition of one product packs them once
    (BA16a64b) and runs 15-20% faster. Convolutions pack theirs in both kernels."""
    made_by = {t: op for op in ops for t in op.outputs}
    found = []
    for op in ops:
        if op.kind != "MatMul" or len(op.inputs) < 2:
            continue
        weight = backend.tensors[_layout_source(op.inputs[1], made_by)]
        if weight.constant and len(weight.sizes or []) == 2:
            found.append(op)
    return found if len(found) >= 2 else []


def internal_diamond(ops: list[BackendOp]) -> bool:
    """Whether a binary op takes two results of one chain computed inside the
    partition (`bn(conv(x)) + conv(x)`: oneDNN 3.12's compile loops in fuse_post_ops,
    growing a deque until std::bad_alloc, as v3.2 did), other than x * sigmoid(x). A
    residual add joins the chains of two different ops and is not one."""
    producer = {t: op for op in ops for t in op.outputs}

    def root(t: int) -> int:
        """The tensor t's chain starts from: an anchor op's result (conv,
        matmul, pool, a join of two chains) or a partition input."""
        while t in producer:
            op = producer[t]
            internal = [i for i in op.inputs if i in producer]
            if op.kind in _CHAIN_OPS or (op.kind in _BINARY_OPS and len(internal) == 1):
                t = internal[0] if op.kind in _BINARY_OPS else op.inputs[0]
            else:
                break
        return t

    for op in ops:
        if op.kind not in _BINARY_OPS or not all(t in producer for t in op.inputs):
            continue
        a, b = op.inputs
        swish = op.kind == "Multiply" and any(
            producer[g].kind == "Sigmoid" and producer[g].inputs == [x]
            for x, g in ((a, b), (b, a)))
        if not swish and root(a) == root(b):
            return True
    return False


def pool_operand(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """REFUSE where a binary op combines a pool's result (or one computed from it) with a
    tensor that is not per channel: oneDNN 3.12's pooling post-op reads one with more than
    one element per channel in the wrong layout on NCHW data (all 12 swept cases garbage,
    up to 1.7e29), as v3.2 did, and one of (N, C, 1, 1) with N > 1 as garbage in bf16
    (found by the fuzzer, seed 40: off by 4.6e13). PIN where such an operand is computed at
    run time with a batch of 1: at another batch size it would be (N, C, 1, 1)."""
    # A pool's result and everything computed from it: its post-op chain.
    pooled: set[int] = set()
    for op in sorted(ops, key=lambda op: op.id):  # mapping order: producers first
        if op.kind in ("AvgPool", "MaxPool") or pooled & set(op.inputs):
            pooled |= set(op.outputs)
    verdict = SizeVerdict.SAFE
    for op in ops:
        if op.kind not in _BINARY_OPS or not pooled & set(op.inputs):
            continue
        rank = len(backend.tensors[op.outputs[0]].sizes or [])
        for t in op.inputs:
            spec = backend.tensors[t]
            if t in pooled:
                continue
            if spec.sizes is None:
                return SizeVerdict.REFUSE
            # numpy broadcasting: a lower-rank operand gains leading size-1 dims
            padded = [1] * (rank - len(spec.sizes)) + spec.sizes
            if any(d != 1 for i, d in enumerate(padded) if i != 1):
                return SizeVerdict.REFUSE
            if not spec.constant and len(spec.sizes) == rank:
                verdict = SizeVerdict.PIN
    return verdict


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
        for op in ops if op.kind in _BINARY_OPS for t in op.inputs)


def _varies_along_last_dim_only(sizes: list[int]) -> bool:
    return bool(sizes) and sizes[-1] > 1 and all(d == 1 for d in sizes[:-1])


def binary_head_with_width_operand(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """Whether a binary op heads the partition (oneDNN runs it as the binary
    primitive) with an operand of one element or of the result's shape, and a later
    binary op of the partition, on a result of rank >= 4, takes an operand that varies
    along the last dim only, whatever its own rank: on channels-last data oneDNN 3.12's
    binary kernel indexes that operand wrongly (`x * 0.5 + b`, b of shape (1, 1, 1, W) or
    (W,): off by up to 15), or crashes (`x + a + b`, a of x's shape). A sweep of every
    broadcast of both operands over 4-d and 5-d results found nothing else. Refused at the
    profiled sizes; pinned to them where a later op's operand is not a constant and does
    not follow the result's sizes: at other sizes it may vary along the last dim only (the fuzzer's
    `x - 3 + t.view(1, 1, 1, -1)`, t of x.size(3) elements, profiled at 1)."""
    produced = {t for op in ops for t in op.outputs}

    def sizes(t: int) -> list[int]:
        return backend.tensors[t].sizes or []

    def width_only(t: int, op: BackendOp) -> bool:
        # Of any rank: numpy broadcasting gives a (W,) operand the result's rank.
        return len(sizes(op.outputs[0])) >= 4 and _varies_along_last_dim_only(sizes(t))

    def may_become_width_only(t: int, op: BackendOp) -> bool:
        result = sizes(op.outputs[0])
        padded = [1] * (len(result) - len(sizes(t))) + sizes(t)
        # Equal to the result, it follows the result's sizes, unless both are 1 where a
        # width needs 1s (profiled at (1, 1, 1, 1), the operand may be (1, 1, 1, W) later).
        tracks = padded == result and not all(d == 1 for d in padded[:-1])
        return len(result) >= 4 and not backend.tensors[t].constant and not tracks

    binary_heads = [op for op in ops if op.kind in _BINARY_OPS
                    and not any(t in produced for t in op.inputs)]
    later = [(t, op) for op in ops if op.kind in _BINARY_OPS
             and any(t in produced for t in op.inputs)
             for t in op.inputs if t not in produced]
    heads = [op for op in binary_heads
             if any(math.prod(sizes(t)) == 1 or sizes(t) == sizes(op.outputs[0])
                    for t in op.inputs)]
    if heads and any(width_only(t, op) for t, op in later):
        return SizeVerdict.REFUSE
    if binary_heads and any(may_become_width_only(t, op) for t, op in later):
        return SizeVerdict.PIN
    return SizeVerdict.SAFE


def full_then_two_width_operands(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op heads the partition and, after it, a binary op with an operand
    of the result's shape comes before two binary ops with operands that vary along the
    last dim only: oneDNN 3.12's binary kernel applies those post-ops wrongly on tensors of
    rank >= 3 (MobileBERT's `(x + pos + tok) * w + b`: relative error 1.0; a sweep of
    two and three post-ops after `x + c` and `x * 2.0` found this order only)."""
    produced = {t for op in ops for t in op.outputs}

    def sizes(t: int) -> list[int]:
        return backend.tensors[t].sizes or []

    binaries = sorted((op for op in ops if op.kind in _BINARY_OPS), key=lambda op: op.id)
    if not binaries or any(t in produced for t in binaries[0].inputs):
        return False
    full_seen, widths = False, 0
    for op in binaries[1:]:
        operands = [t for t in op.inputs if t not in produced]
        result = sizes(op.outputs[0])
        if len(result) < 3 or not operands:
            continue
        s = sizes(operands[0])
        if s == result:
            full_seen = True
        elif full_seen and _varies_along_last_dim_only(s):
            widths += 1
    return widths >= 2


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
    return any(op.kind in _BINARY_OPS and any(source.get(t) in anchored for t in op.inputs)
               for op in ops)


# Ops a matmul's operand passes through unchanged in layout inside a partition.
_LAYOUT_KEEPING = frozenset({"Quantize", "Dequantize", "TypeCast"})


def matmul_operand_layout(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """A matmul operand, as given, that oneDNN 3.12 computed wrongly with (found by the
    fuzzer, seeds 2779 and 2812; sweeps of all 24 orders of a 4-d operand against batch
    shapes that broadcast or not, at matrix sizes 1-5):
    - batch dims (those before the last two, of size > 1) not outer to inner in memory,
      with a matrix dim of size 1: `v @ v.transpose(-1, -2)` of `x.permute(1, 0, 2, 3)`
      at K = 1, off by up to 16 (at K = 2 and 5 right: Swin's linears read their permuted
      windows so), pinned to the profiled sizes where no matrix dim is 1 yet;
    - a first operand stored transposed (its rows innermost) with a batch dim between its
      rows and columns: `v.transpose(3, 0)` of an int8 operand at K = 2;
    - a batch dim but the last stored inside the matrix (inner to a matrix dim of size
      > 1), in a product that broadcasts a batch dim or with batch dims not outer to
      inner: `x.permute(2, 0, 1, 3) @ x.transpose(-1, -2)`, x of (1, 2, 4, 5), read out
      of bounds (1e12 where eager gives 0.2) whenever a matrix dim's size equals a batch
      dim's; pinned where no batch dim broadcasts yet.
    Attention's `q @ k.transpose(-1, -2)`, its heads (the last batch dim) between rows and
    columns, is none of these. At each call, the kernel also copies row-major an operand in
    a layout outside those its matmul reads right (`matmul_reads_as_given` in
    csrc/onednn/layout.h: its batch test takes a packed qkv query at batch = 3 x tokens for
    contiguous batches, 2-9 off), which no profiled size can show."""
    made_by = {t: op for op in ops for t in op.outputs}
    verdict = SizeVerdict.SAFE
    for op in ops:
        if op.kind != "MatMul":
            continue
        for port, t in enumerate(_layout_source(t, made_by) for t in op.inputs[:2]):
            tensor = backend.tensors[t]
            if t in made_by or tensor.sizes is None or tensor.strides is None \
                    or len(tensor.sizes) < 3:
                continue
            dims = list(zip(tensor.sizes, tensor.strides, strict=True))
            batch = [st for size, st in dims[:-2] if size > 1]
            (rows, row_stride), (cols, col_stride) = dims[-2:]
            if port == 0 and rows > 1 and cols > 1 and row_stride < col_stride \
                    and any(row_stride < st < col_stride for st in batch):
                return SizeVerdict.REFUSE
            inverted = any(inner > outer for outer, inner in zip(batch, batch[1:], strict=False))
            if inverted and (rows == 1 or cols == 1):
                return SizeVerdict.REFUSE
            if _batch_inside_the_matrix(dims):
                if inverted or _broadcasts_a_batch_dim(op, backend):
                    return SizeVerdict.REFUSE
                verdict = SizeVerdict.PIN
            if inverted:
                verdict = SizeVerdict.PIN
    return verdict


def _layout_source(t: int, made_by: dict[int, BackendOp]) -> int:
    """The tensor a matmul operand reads, past ops that keep its layout."""
    while t in made_by and made_by[t].kind in _LAYOUT_KEEPING:
        t = made_by[t].inputs[0]
    return t


def _batch_inside_the_matrix(dims: list[tuple[int, int]]) -> bool:
    """Whether a batch dim of size > 1 but the last has a smaller stride than a matrix dim
    of size > 1 (the last batch dim there is attention's heads)."""
    matrix_strides = [st for size, st in dims[-2:] if size > 1]
    return any(size > 1 and any(st < m for m in matrix_strides)
               for size, st in dims[:-3])


def _broadcasts_a_batch_dim(op: BackendOp, backend: BackendGraph) -> bool:
    """Whether a batched matmul's operands differ in a batch dim (one of them 1 there, or
    missing where the other is batched too); a 2-d operand (a linear's weight) is not."""
    shapes = [backend.tensors[t].sizes for t in op.inputs[:2]]
    if any(s is None or len(s) < 3 for s in shapes):
        return False
    a, b = (list(s[:-2]) for s in shapes)
    rank = max(len(a), len(b))
    return [1] * (rank - len(a)) + a != [1] * (rank - len(b)) + b


def flattened_matmul_broadcast(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """After a matmul of a batched input with a 2-d weight (a linear), a binary operand
    broadcast over a dim but the last, unless per output feature: oneDNN v3.2 flattened
    the batch dims and indexed it wrongly; 3.12 picks its reference kernel for it. REFUSE
    where the profiled sizes are that case. Where only other sizes would be, the group
    stays open to them: the kernel's compile at such a size finds the reference kernel and
    runs it unfused (a sweep of ranks 3 and 4, every dim of the operand 1 or not when
    profiled and when called: all eager-exact, 48 of the 64 called specs unfused), and a
    residual of the result's batch and length (every transformer's) stays fused at any."""
    def rank(t: int) -> int:
        return len(backend.tensors[t].sizes or [])

    if not any(op.kind == "MatMul" and rank(op.inputs[0]) >= 3 and rank(op.inputs[1]) == 2
               for op in ops):
        return SizeVerdict.SAFE
    produced = {t for op in ops for t in op.outputs}
    for op in ops:
        if op.kind not in _BINARY_OPS:
            continue
        result = backend.tensors[op.outputs[0]].sizes or []
        for t in op.inputs:
            sizes = backend.tensors[t].sizes
            if t in produced or sizes is None:
                continue
            sizes = [1] * (len(result) - len(sizes)) + sizes
            if all(d == 1 for d in sizes[:-1]):
                continue  # per output feature, or one value
            if any(d == 1 and result[i] > 1 for i, d in enumerate(sizes[:-1])):
                return SizeVerdict.REFUSE
    return SizeVerdict.SAFE
