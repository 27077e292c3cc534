"""Partitioning: oneDNN chooses the fusible regions, the plugin's policy keeps some.

oneDNN Graph's `get_partitions` (fusion policy) runs on the whole backend graph
of a block. A supported partition becomes a fusion group when
- every JIT node in it is there with all of its backend ops,
- its ports are JIT values and it exposes every value used outside it, and
- it is worth it: two or more nodes, or one node whose table entry says oneDNN
  beats ATen on it alone (conv, linear, matmul, ...). A lone eltwise or
  batch_norm stays with ATen: a oneDNN call costs more than it saves there,
- no output is a view (reshape, permute, ...) of an input or of another
  output: the group's outputs are new tensors, so eager's aliasing would be lost,
- no binary op takes two results of one chain computed inside it (a diamond
  such as `bn(conv(x)) + conv(x)`), except x * sigmoid(x): oneDNN v3.2
  compiles such partitions into kernels that allocate without bound. A
  residual add of two convolutions' chains (ResNet's stages) is taken,
- no binary op takes a pool's result and a tensor that is not per channel:
  oneDNN v3.2 reads such an operand of a pooling post-op in the wrong layout,
- after a matmul of a batched input with a 2-d weight (a linear), no binary
  operand broadcasts over a dim but the last, unless it is per output feature:
  oneDNN v3.2 flattens the batch dims and indexes such operands wrongly.
  Operands that could become such at another size pin the group's sizes.
"""

from __future__ import annotations

import math
from collections import Counter

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


def _computed_arguments(nodes: list[torch._C.Node], in_ids: list[int]) -> bool:
    """Whether a node reads a non-tensor value computed outside the partition
    (the group's subgraph can only take tensors and copy constants)."""
    inside = {v.unique() for n in nodes for v in n.outputs()} | set(in_ids)
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


_QUANTIZATION = frozenset({"Quantize", "Dequantize"})
_DATA_MOVEMENT = frozenset({"Reorder", "StaticTranspose", "StaticReshape", "TypeCast"})


def _requantization(ops: list[BackendOp]) -> bool:
    """A Dequantize and a Quantize with only data movement between: found by the
    fuzzer's quantized mode (an execute error, and wrong values after a u8 -> s8
    requantization)."""
    kinds = {op.kind for op in ops}
    return _QUANTIZATION <= kinds and kinds <= _QUANTIZATION | _DATA_MOVEMENT


def _internal_diamond(ops: list[BackendOp]) -> bool:
    """Whether a binary op takes two results of one chain computed inside the
    partition (`bn(conv(x)) + conv(x)`: oneDNN v3.2 compiles such partitions
    into kernels that allocate without bound), other than x * sigmoid(x). A
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


def _pool_with_full_operand(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op combines a pool's result (or one computed from it)
    with a tensor that has more than one element per channel."""
    # A pool's result and everything computed from it: its post-op chain.
    pooled: set[int] = set()
    for op in sorted(ops, key=lambda op: op.id):  # mapping order: producers first
        if op.kind in ("AvgPool", "MaxPool") or pooled & set(op.inputs):
            pooled |= set(op.outputs)
    for op in ops:
        if op.kind in _BINARY_OPS and pooled & set(op.inputs):
            for t in op.inputs:
                sizes = backend.tensors[t].sizes
                if t not in pooled and (sizes is None or any(d != 1 for d in sizes[2:])):
                    return True
    return False


def _residual_of_another_int_type(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op adds a dequantized tensor whose integer type is not
    that of the partition's quantized result: oneDNN v3.2 makes it a sum
    post-op, which reads the operand as the result's type (a u8 residual
    under an s8 result; found by the fuzzer's quantized mode)."""
    results = {backend.tensors[t].dtype for op in ops if op.kind == "Quantize" for t in op.outputs}
    dequantized = {t: backend.tensors[op.inputs[0]].dtype for op in ops if op.kind == "Dequantize"
                   for t in op.outputs}
    return bool(results) and any(
        t in dequantized and dequantized[t] not in results
        for op in ops if op.kind in _BINARY_OPS for t in op.inputs)


def _binary_head_with_width_operand(ops: list[BackendOp], backend: BackendGraph) -> bool:
    """Whether a binary op heads the partition (oneDNN runs it as the binary
    primitive) with an operand of one element or of the result's shape, and a later
    binary op of the partition takes an operand of rank >= 4 that varies along the
    last dim only: on channels-last data oneDNN 3.12's binary kernel indexes that
    operand wrongly (`x * 0.5 + b`, b of shape (1, 1, 1, W): off by up to 7), or
    crashes (`x + a + b`, a of x's shape). A sweep of every broadcast of both
    operands over 4-d and 5-d results found nothing else."""
    produced = {t for op in ops for t in op.outputs}

    def sizes(t: int) -> list[int]:
        return backend.tensors[t].sizes or []

    def width_only(t: int) -> bool:
        s = sizes(t)
        return len(s) >= 4 and s[-1] > 1 and all(d == 1 for d in s[:-1])

    heads = [op for op in ops if op.kind in _BINARY_OPS
             and not any(t in produced for t in op.inputs)
             and any(math.prod(sizes(t)) == 1 or sizes(t) == sizes(op.outputs[0])
                     for t in op.inputs)]
    if not heads:
        return False
    return any(op.kind in _BINARY_OPS and any(t in produced for t in op.inputs)
               and any(t not in produced and width_only(t) for t in op.inputs) for op in ops)


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


def _flattened_matmul_broadcast(ops: list[BackendOp], backend: BackendGraph) -> str | None:
    """"refuse" when a binary operand broadcasts wrongly after a linear-like
    matmul at the profiled sizes, "pin" when it could at other sizes, else None."""
    def rank(t: int) -> int:
        return len(backend.tensors[t].sizes or [])

    if not any(op.kind == "MatMul" and rank(op.inputs[0]) >= 3 and rank(op.inputs[1]) == 2
               for op in ops):
        return None
    produced = {t for op in ops for t in op.outputs}
    verdict = None
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
                return "refuse"
            if ones:
                verdict = "pin"
    return verdict


def find_partitions(mapped: MappedBlock, report: FusionReport) -> list[Partition]:
    def _reject(nodes: list[torch._C.Node], why: str) -> None:
        report.add_rejected(describe(nodes), nodes, why)
        log.debug(NAME, f"partition [{describe(nodes)}] left unfused: {why}")

    backend = mapped.backend
    op_count = Counter(op.node for op in backend.ops if op.node is not None)
    order = {node: i for i, node in enumerate(mapped.nodes)}
    block_nodes = set(mapped.nodes)
    result = []
    partitions, refused = _C._partition(backend.to_text())
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
        if not (library.isa() and library.isa().bf16) and any(
                backend.tensors[t].dtype == "bf16" for t in (*in_ids, *out_ids)):
            _reject(nodes, f"bf16 on a CPU without bf16 instructions ({library.isa().name}): "
                           "oneDNN has no bf16 kernels for it")
            continue
        if not supported:
            _reject(nodes, "oneDNN does not support this partition")
            continue
        if any(Counter(op.node for op in ops)[n] != op_count[n] for n in op_count.keys() & nodes):
            _reject(nodes, "oneDNN split a node's backend ops across partitions")
            continue
        if any(i not in mapped.values for i in (*in_ids, *out_ids)):
            _reject(nodes, "a port is internal to a node's mapping")
            continue
        if _computed_arguments(nodes, in_ids):
            _reject(nodes, "an argument is computed at run time")
            continue
        if not _used_outside(nodes, block_nodes) <= set(out_ids):
            _reject(nodes, "a value used outside is not a partition output")
            continue
        if _aliased_output(nodes, out_ids):
            _reject(nodes, "an output is a view of an input or of another output")
            continue
        if _internal_diamond(ops):
            _reject(nodes, "a binary op of two results of one chain computed inside it")
            continue
        if _requantization(ops):
            _reject(nodes, "a requantization with nothing computed between (oneDNN v3.2 fails "
                           "to execute some and computes others wrongly)")
            continue
        if _residual_of_another_int_type(ops, backend):
            _reject(nodes, "a dequantized residual of another integer type than the result "
                           "(oneDNN v3.2 reads it as the result's type)")
            continue
        if _layer_norm_sum(ops, backend):
            _reject(nodes, "a layer_norm's result added to a tensor of its shape (oneDNN 3.12's "
                           "layer-norm kernel drops that sum)")
            continue
        if _eltwise_head_with_binary(ops):
            _reject(nodes, "an eltwise op on an input meets a binary op (oneDNN 3.12 runs that "
                           "with its reference implementation)")
            continue
        if _binary_head_with_width_operand(ops, backend):
            _reject(nodes, "a binary op's chain with an operand that varies along the last "
                           "dim only (oneDNN 3.12 indexes it wrongly on channels-last data)")
            continue
        if _int8_products_saturate(ops):
            _reject(nodes, f"int8 products on a CPU without VNNI ({library.isa().name}): oneDNN "
                           "sums their pairs in int16, which saturates")
            continue
        if _pool_with_full_operand(ops, backend):
            _reject(nodes, "a pool's result combined with a tensor that is not per channel")
            continue
        matmul_broadcast = _flattened_matmul_broadcast(ops, backend)
        if matmul_broadcast == "refuse":
            _reject(nodes, "a linear's result broadcast with a tensor oneDNN indexes wrongly")
            continue
        entries = [LOWERINGS[op.node.kind()] for op in ops if op.node is not None]
        if len({op.node for op in ops}) == 1 and not entries[0].worth_alone:
            _reject(nodes, "a lone op ATen runs as fast")
            continue
        text = backend.to_text(ops, in_ids, out_ids)
        result.append(Partition(nodes, [mapped.values[i] for i in in_ids],
                                [mapped.values[i] for i in out_ids], in_ids, out_ids, text,
                                matmul_broadcast == "pin"
                                or any(op.static_shapes for op in ops),
                                frozenset().union(*(op.assumes_finite for op in ops))))
        log.update(NAME, f"partition [{describe(nodes)}]: {len(in_ids)} inputs, "
                         f"{len(out_ids)} outputs")
    return result
