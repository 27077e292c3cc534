"""oneDNN 3.12's defects that a partition can meet, one predicate each: those of
elementwise chains, normalizations, attention and pools here; those of int8 partitions in
int8_workarounds.py, of matmul operands in matmul_workarounds.py.

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

from .graph_desc import BackendGraph, BackendOp


class SizeVerdict(enum.Enum):
    """A verdict on sizes: what `flattened_matmul_broadcast`, `pool_operand`,
    `int8_padding_windows`, `layer_norm_sum`, `binary_head_with_width_operand` and
    `matmul_operand_layout` find."""
    SAFE = "safe"
    PIN = "pin"  # safe at the profiled sizes only
    REFUSE = "refuse"


BINARY_OPS = frozenset({"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum"})


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
        op.kind in BINARY_OPS and any(t in produced for t in op.inputs)
        and any(t not in produced and t not in heads for t in op.inputs) for op in ops)


# Ops that move no data in an elementwise partition, or compute one value per element.
ELEMENTWISE_PARTITION_OPS = _CHAIN_OPS | BINARY_OPS | {"Select", "StaticReshape",
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
        while (op := made_by.get(t)) is not None and op.kind in BINARY_OPS | {"Select"}:
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
            if op.kind in _CHAIN_OPS or (op.kind in BINARY_OPS and len(internal) == 1):
                t = internal[0] if op.kind in BINARY_OPS else op.inputs[0]
            else:
                break
        return t

    for op in ops:
        if op.kind not in BINARY_OPS or not all(t in producer for t in op.inputs):
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
        if op.kind not in BINARY_OPS or not pooled & set(op.inputs):
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

    binary_heads = [op for op in ops if op.kind in BINARY_OPS
                    and not any(t in produced for t in op.inputs)]
    later = [(t, op) for op in ops if op.kind in BINARY_OPS
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

    binaries = sorted((op for op in ops if op.kind in BINARY_OPS), key=lambda op: op.id)
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
