"""Partitioning: oneDNN chooses the fusible regions, the plugin's policy keeps some.

oneDNN Graph's `get_partitions` (fusion policy) runs on the whole backend graph of a
block. Each partition it offers is a `Candidate`, and becomes a fusion group unless a
rule of `RULES` refuses it; the report gives the rule's reason. The rules, in order:

- structure: oneDNN supports the partition, has every backend op of each JIT node in
  it, its ports are JIT values, it reads no non-tensor value computed outside, and it
  exposes every value used outside it;
- eager's aliasing: no output is a view of an input or of another output (a group's
  outputs are new tensors);
- this CPU: bf16 needs bf16 instructions, int8 products need VNNI (library.isa());
- oneDNN's defects, each measured on oneDNN 3.12 and pinned by a regression test:
  wrong results, a crash, runaway allocation, reference kernels (see each predicate);
- worth it: two or more nodes, or one node whose table entry says oneDNN beats ATen
  on it alone (conv, linear, matmul, ...).

A binary operand that could broadcast wrongly after a linear at another size pins the
group to its profiled sizes (`_flattened_matmul_broadcast`).
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ... import _C, log
from ...passes.graph_utils import VIEW_KINDS
from ...report import FusionReport
from .. import Partition, describe
from . import library
from .graph_desc import BackendGraph, BackendOp
from .op_mapping import MappedBlock
from .op_table import LOWERINGS

NAME = log.module_name(__file__)


@dataclass
class Candidate:
    """A partition oneDNN offered, as the rules see it."""

    supported: bool
    ops: list[BackendOp]
    nodes: list[torch._C.Node]  # the JIT nodes it covers, in block order
    in_ids: list[int]
    out_ids: list[int]
    mapped: MappedBlock
    op_count: Counter  # backend ops per JIT node in the whole block

    @property
    def backend(self) -> BackendGraph:
        return self.mapped.backend

    @property
    def shape_inputs(self) -> list[torch._C.Value]:
        """Tensors computed outside whose sizes its shape arithmetic reads: the group takes
        them as inputs after the description's."""
        made = {v.unique() for n in self.nodes for v in n.outputs()} | set(self.in_ids)
        found: dict[int, torch._C.Value] = {}
        for op in self.ops:
            for v in op.shape_sources:
                if v.unique() not in made:
                    found.setdefault(v.unique(), v)
        return list(found.values())


class SizeVerdict(enum.Enum):
    """A verdict on sizes: what `_flattened_matmul_broadcast`, `_pool_operand` and
    `_int8_padding_windows` find."""
    SAFE = "safe"
    PIN = "pin"  # safe at the profiled sizes only
    REFUSE = "refuse"


def _used_outside(nodes: list[torch._C.Node], block_nodes: set[torch._C.Node]) -> set[int]:
    """Ids of the values `nodes` produce that something else reads."""
    inside = set(nodes)
    used = set()
    for node in nodes:
        for v in node.outputs():
            for use in v.uses():
                user = use.user
                # A use in a nested block counts as a use by its enclosing node.
                while user not in block_nodes and user.owningBlock().owningNode() is not None:
                    user = user.owningBlock().owningNode()
                if user not in inside:
                    used.add(v.unique())
    return used


def _computed_arguments(nodes: list[torch._C.Node], in_ids: list[int],
                        shape_inputs: list[torch._C.Value]) -> bool:
    """Whether a node reads a non-tensor value computed outside the partition
    (the group's subgraph can only take tensors and copy constants)."""
    inside = ({v.unique() for n in nodes for v in n.outputs()} | set(in_ids)
              | {v.unique() for v in shape_inputs})
    return any(v.unique() not in inside and v.node().kind() != "prim::Constant"
               for n in nodes for v in n.inputs())


_BINARY_OPS = frozenset({"Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum"})


def _aliased_output(nodes: list[torch._C.Node], out_ids: list[int]) -> bool:
    """Whether an output is, in eager, a view of an input or of another output."""
    inside = set(nodes)
    outputs = set(out_ids)
    for out in out_ids:
        value = next(v for n in nodes for v in n.outputs() if v.unique() == out)
        while value.node() in inside and value.node().kind() in VIEW_KINDS:
            value = value.node().inputsAt(0)
            if value.node() not in inside or value.unique() in outputs:
                return True
    return False


# Ops a post-op chain passes through: one data input, result of the same shape.
_CHAIN_OPS = frozenset({
    "ReLU", "Elu", "Abs", "Clamp", "GELU", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Square",
    "HardSwish", "HardSigmoid", "Mish", "LeakyReLU", "SoftPlus", "Pow", "Reciprocal", "Round",
    "BatchNormInference", "TypeCast", "Reorder",
})


# Ops oneDNN runs as its eltwise primitive.
_ELTWISE_OPS = _CHAIN_OPS - {"BatchNormInference", "TypeCast", "Reorder"}


def _eltwise_head_with_binary(ops: list[BackendOp]) -> bool:
    """Whether an eltwise op on a partition input meets a binary op: oneDNN 3.12 runs
    an eltwise primitive with a binary post-op with its reference implementation
    (`tanh(x) * y`: 110 ms against ATen's 6.5, on 4x64x56x56), whatever the
    operand. x * sigmoid(x) is the exception: oneDNN takes it as one swish op."""
    produced = {t for op in ops for t in op.outputs}
    heads = {op.inputs[0] for op in ops if op.kind in _ELTWISE_OPS and op.inputs[0] not in produced}
    return bool(heads) and any(
        op.kind in _BINARY_OPS and any(t in produced for t in op.inputs)
        and any(t not in produced and t not in heads for t in op.inputs) for op in ops)


def _layer_norm_sum(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a LayerNorm's result is added to a tensor of the sum's shape: oneDNN 3.12
    makes the add a sum post-op, which its layer-norm kernel accepts and never applies
    (`layer_norm(a) + b` came out as `layer_norm(a)`, 1.7 to 4.3 off). Broadcast
    operands, other binary ops and other anchors were right."""
    norms = {t for op in ops if op.kind == "LayerNorm" for t in op.outputs}
    produced = {t for op in ops for t in op.outputs}
    return any(op.kind == "Add" and norms & set(op.inputs) and any(
        t not in produced and backend.tensors[t].sizes == backend.tensors[op.outputs[0]].sizes
        for t in op.inputs) for op in ops)


def _attention_reshaped_to_5d(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an attention partition (a SoftMax between MatMuls) reshapes a tensor to 5 or
    more dims: oneDNN 3.12 compiles it with its attention kernel, whose grouped-query pass
    (fuse_reshape_for_gqa) then segfaults (found by the fuzzer: attention -> permute ->
    unsqueeze(-1) in bf16; a reshape to 3 dims compiles and is right)."""
    if not any(op.kind == "SoftMax" for op in ops) or not any(op.kind == "MatMul" for op in ops):
        return False
    return any(op.kind == "StaticReshape" and len(backend.tensors[op.outputs[0]].sizes or []) >= 5
               for op in ops)


def _internal_diamond(ops: list[BackendOp]) -> bool:
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


def _pool_operand(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
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


def _residual_of_another_int_type(ops: list[BackendOp], backend: BackendGraph) -> bool:
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


def _binary_head_with_width_operand(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op heads the partition (oneDNN runs it as the binary
    primitive) with an operand of one element or of the result's shape, and a later
    binary op of the partition, on a result of rank >= 4, takes an operand that varies
    along the last dim only, whatever its own rank: on channels-last data oneDNN 3.12's
    binary kernel indexes that operand wrongly (`x * 0.5 + b`, b of shape (1, 1, 1, W) or
    (W,): off by up to 15), or crashes (`x + a + b`, a of x's shape). A sweep of every
    broadcast of both operands over 4-d and 5-d results found nothing else."""
    produced = {t for op in ops for t in op.outputs}

    def sizes(t: int) -> list[int]:
        return backend.tensors[t].sizes or []

    def width_only(t: int, op: BackendOp) -> bool:
        # Of any rank: numpy broadcasting gives a (W,) operand the result's rank.
        return len(sizes(op.outputs[0])) >= 4 and _varies_along_last_dim_only(sizes(t))

    heads = [op for op in ops if op.kind in _BINARY_OPS
             and not any(t in produced for t in op.inputs)
             and any(math.prod(sizes(t)) == 1 or sizes(t) == sizes(op.outputs[0])
                     for t in op.inputs)]
    if not heads:
        return False
    return any(op.kind in _BINARY_OPS and any(t in produced for t in op.inputs)
               and any(t not in produced and width_only(t, op) for t in op.inputs)
               for op in ops)


def _full_then_two_width_operands(ops: list[BackendOp], backend: BackendGraph) -> bool:
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


def _int8_products_saturate(ops: list[BackendOp]) -> bool:
    """Whether a convolution or matmul multiplies two int8 tensors on a CPU without
    VNNI: oneDNN then multiplies u8 x s8 pairs with vpmaddubsw, which saturates each
    pair's sum in int16 (its s8 data is shifted to u8 first), and 255 x 127 x 2 is
    twice what int16 holds. Results up to 17 quantization steps off were measured
    under emulated AVX2 and AVX-512 without VNNI."""
    isa = library.isa()
    if isa is None or isa.vnni:
        return False
    dequantized = {t for op in ops if op.kind == "Dequantize" for t in op.outputs}
    return any(op.kind in ("Convolution", "MatMul") and op.inputs[0] in dequantized
               and op.inputs[1] in dequantized for op in ops)


def _int8_depthwise_multiplier(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an int8 convolution is depthwise with a channel multiplier (one input
    channel per group, more output channels than groups): oneDNN 3.12 computes some
    wrongly at small widths (found by the fuzzer's quantized mode: off by 21 at an output
    width of 1), as its bf16 kernel does (op_table refuses that one); fp32 is right."""
    dequantized = {t for op in ops if op.kind == "Dequantize" for t in op.outputs}
    for op in ops:
        if op.kind != "Convolution" or op.inputs[0] not in dequantized:
            continue
        out_channels, per_group = (backend.tensors[op.inputs[1]].sizes or [0, 0])[:2]
        groups = op.attrs.get("groups", 1)
        if groups > 1 and per_group == 1 and out_channels != groups:
            return True
    return False


def _int8_single_channel_s8(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether an int8 convolution reads one input channel of s8 data: oneDNN 3.12
    computes some wrongly (found by the fuzzer's quantized mode, seed 7: padding (0, 1),
    up to 3.4 off where the bound was 7e-5); u8 data and more channels were right."""
    s8_sources = {t for op in ops if op.kind == "Dequantize"
                  and backend.tensors[op.inputs[0]].dtype == "s8" for t in op.outputs}
    return any(op.kind == "Convolution" and op.inputs[0] in s8_sources
               and op.attrs.get("groups", 1) == 1
               and (backend.tensors[op.inputs[1]].sizes or [0, 0])[1] == 1 for op in ops)


def _int8_padding_windows(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
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


def _residual_of_the_anchor_source(ops: list[BackendOp]) -> bool:
    """Whether one quantized tensor is dequantized both into a convolution's or matmul's
    source and into a binary op's operand (`linear(d) + d`, d dequantized): oneDNN 3.12
    computes that int8 partition up to 205 steps off (an independent residual of the same
    type is exact)."""
    source = {t: op.inputs[0] for op in ops if op.kind == "Dequantize" for t in op.outputs}
    anchored = {source[op.inputs[0]] for op in ops
                if op.kind in ("Convolution", "MatMul") and op.inputs[0] in source}
    return any(op.kind in _BINARY_OPS and any(source.get(t) in anchored for t in op.inputs)
               for op in ops)


def _flattened_matmul_broadcast(ops: list[BackendOp], backend: BackendGraph) -> SizeVerdict:
    """After a matmul of a batched input with a 2-d weight (a linear), a binary operand
    broadcast over a dim but the last, unless per output feature: oneDNN v3.2 flattened
    the batch dims and indexed it wrongly; 3.12 picks its reference kernel for it (which
    the kernel would refuse). REFUSE where the profiled sizes are that case, PIN where
    other sizes could be."""
    def rank(t: int) -> int:
        return len(backend.tensors[t].sizes or [])

    if not any(op.kind == "MatMul" and rank(op.inputs[0]) >= 3 and rank(op.inputs[1]) == 2
               for op in ops):
        return SizeVerdict.SAFE
    produced = {t for op in ops for t in op.outputs}
    verdict = SizeVerdict.SAFE
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
            ones = [i for i, d in enumerate(sizes[:-1]) if d == 1]
            if any(result[i] > 1 for i in ones):
                return SizeVerdict.REFUSE
            if ones:
                verdict = SizeVerdict.PIN
    return verdict



def _split_node(c: Candidate) -> bool:
    per_node = Counter(op.node for op in c.ops)
    return any(per_node[n] != c.op_count[n] for n in c.op_count.keys() & c.nodes)


def _internal_port(c: Candidate) -> bool:
    return any(i not in c.mapped.values for i in (*c.in_ids, *c.out_ids))


def _bf16_without_kernels(c: Candidate) -> bool:
    isa = library.isa()
    return not (isa and isa.bf16) and any(
        c.backend.tensors[t].dtype == "bf16" for t in (*c.in_ids, *c.out_ids))


def _lone_op(c: Candidate) -> bool:
    entries = [LOWERINGS[op.node.kind()] for op in c.ops if op.node is not None]
    return len({op.node for op in c.ops}) == 1 and not entries[0].worth_alone


# (predicate, reason) in the order they are tried; "{isa}" in a reason is this CPU's ISA.
RULES: list[tuple[Callable[[Candidate], bool], str]] = [
    (_bf16_without_kernels, "bf16 on a CPU without bf16 instructions ({isa}): oneDNN has no "
                            "bf16 kernels for it"),
    (lambda c: not c.supported, "oneDNN does not support this partition"),
    (_split_node, "oneDNN split a node's backend ops across partitions"),
    (_internal_port, "a port is internal to a node's mapping"),
    (lambda c: _computed_arguments(c.nodes, c.in_ids, c.shape_inputs),
     "an argument is computed at run time"),
    (lambda c: not _used_outside(c.nodes, set(c.mapped.nodes)) <= set(c.out_ids),
     "a value used outside is not a partition output"),
    (lambda c: _aliased_output(c.nodes, c.out_ids),
     "an output is a view of an input or of another output"),
    (lambda c: _internal_diamond(c.ops),
     "a binary op of two results of one chain computed inside it (oneDNN's compile "
     "allocates without bound)"),
    (lambda c: _residual_of_the_anchor_source(c.ops),
     "a dequantized residual of the tensor the convolution or matmul reads (oneDNN 3.12 "
     "computes it wrongly)"),
    (lambda c: _int8_depthwise_multiplier(c.ops, c.backend),
     "an int8 depthwise convolution with a channel multiplier (oneDNN 3.12 computes some "
     "wrongly)"),
    (lambda c: _int8_single_channel_s8(c.ops, c.backend),
     "an int8 convolution of one s8 input channel (oneDNN 3.12 computes some wrongly)"),
    (lambda c: _int8_padding_windows(c.ops, c.backend) is SizeVerdict.REFUSE,
     "an int8 convolution with a window entirely in the padding (oneDNN 3.12 computes it "
     "wrongly)"),
    (lambda c: _residual_of_another_int_type(c.ops, c.backend),
     "a dequantized residual of another integer type than the result (oneDNN reads it as "
     "the result's type)"),
    (lambda c: _attention_reshaped_to_5d(c.ops, c.backend),
     "attention with a reshape to 5 dims (oneDNN 3.12's attention kernel crashes compiling "
     "it, taking it for a grouped-query reshape)"),
    (lambda c: _layer_norm_sum(c.ops, c.backend),
     "a layer_norm's result added to a tensor of its shape (oneDNN 3.12's layer-norm kernel "
     "drops that sum)"),
    (lambda c: _eltwise_head_with_binary(c.ops),
     "an eltwise op on an input meets a binary op (oneDNN 3.12 runs that with its reference "
     "implementation)"),
    (lambda c: _binary_head_with_width_operand(c.ops, c.backend),
     "a binary op's chain with an operand that varies along the last dim only (oneDNN 3.12 "
     "indexes it wrongly on channels-last data)"),
    (lambda c: _full_then_two_width_operands(c.ops, c.backend),
     "a binary op's chain with a full-size operand, then two that vary along the last dim "
     "only (oneDNN 3.12 applies them wrongly)"),
    (lambda c: _int8_products_saturate(c.ops),
     "int8 products on a CPU without VNNI ({isa}): oneDNN sums their pairs in int16, which "
     "saturates"),
    (lambda c: _pool_operand(c.ops, c.backend) is SizeVerdict.REFUSE,
     "a pool's result combined with a tensor that is not per channel (oneDNN reads it in "
     "the wrong layout)"),
    (lambda c: _flattened_matmul_broadcast(c.ops, c.backend) is SizeVerdict.REFUSE,
     "a linear's result broadcast with a tensor oneDNN indexes wrongly"),
    (_lone_op, "a lone op ATen runs as fast"),
]


def refusal(c: Candidate) -> str | None:
    """The reason of the first rule that refuses the candidate, if any."""
    for refuses, reason in RULES:
        if refuses(c):
            isa = library.isa()
            return reason.format(isa=isa.name if isa else "unknown")
    return None


def _partition_in_pieces(backend: BackendGraph, ops: list[BackendOp]
                         ) -> tuple[list[tuple], list[tuple[int, str]]]:
    """oneDNN's partitions of `ops`, and the ops it refuses. Where get_partitions throws
    (3.12 throws std::out_of_range on some graphs, as it does under torch's LLGA on several
    Hugging Face models), the ops are split in two, in order, and each half is partitioned
    alone: partitions then cannot cross the cut, but the rest of the graph still fuses. A
    single op it throws on stays with ATen. A description the C++ side cannot read
    (ValueError) is the plugin's own error and is not split: the pass fails, with its
    warning."""
    try:
        return _C._partition(backend.to_text(ops))
    except (IndexError, RuntimeError) as error:  # std::out_of_range, dnnl::error
        if len(ops) == 1:
            return [], [(ops[0].id, f"oneDNN's partitioner fails on it: {error}")]
        log.debug(NAME, f"oneDNN's partitioner fails on {len(ops)} ops, splitting them: {error}")
        middle = len(ops) // 2
        first, first_refused = _partition_in_pieces(backend, ops[:middle])
        second, second_refused = _partition_in_pieces(backend, ops[middle:])
        return first + second, first_refused + second_refused


def find_partitions(mapped: MappedBlock, report: FusionReport) -> list[Partition]:
    backend = mapped.backend
    op_count = Counter(op.node for op in backend.ops if op.node is not None)
    order = {node: i for i, node in enumerate(mapped.nodes)}
    result = []
    partitions, refused = _partition_in_pieces(backend, backend.ops)
    for op_id, why in refused:
        op = backend.ops[op_id]
        name = op.node.kind() if op.node is not None else op.kind
        log.debug(NAME, f"oneDNN refused the {op.kind} op of {name}: {why}")
    for supported, op_ids, in_ids, out_ids in partitions:
        ops = [backend.ops[i] for i in op_ids]
        nodes = sorted({n for op in ops for n in (op.node, *op.absorbed) if n is not None},
                       key=order.__getitem__)
        if not nodes or any(op.kind in ("Wildcard", "End") for op in ops):
            continue
        candidate = Candidate(supported, ops, nodes, in_ids, out_ids, mapped, op_count)
        why = refusal(candidate)
        if why is not None:
            report.add_rejected(describe(nodes), nodes, why)
            log.debug(NAME, f"partition [{describe(nodes)}] left unfused: {why}")
            continue
        pinned = SizeVerdict.PIN in (_flattened_matmul_broadcast(ops, backend),
                                     _pool_operand(ops, backend),
                                     _int8_padding_windows(ops, backend))
        shape_inputs = candidate.shape_inputs
        result.append(Partition(nodes, [mapped.values[i] for i in in_ids] + shape_inputs,
                                [mapped.values[i] for i in out_ids],
                                in_ids + [v.unique() for v in shape_inputs], out_ids,
                                backend.to_text(ops, in_ids, out_ids),
                                pinned or any(op.static_shapes for op in ops),
                                frozenset().union(*(op.assumes_finite for op in ops)),
                                shape_inputs=len(shape_inputs)))
        log.update(NAME, f"partition [{describe(nodes)}]: {len(in_ids)} inputs, "
                         f"{len(out_ids)} outputs")
    return result
