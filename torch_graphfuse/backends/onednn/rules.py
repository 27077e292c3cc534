"""The plugin's policy over the partitions oneDNN offers: `RULES`, in the order they are tried.

A partition oneDNN offered is a `Candidate`; the first rule whose predicate holds refuses
it, and the report gives that rule's reason. The rules:

- this CPU: bf16 needs bf16 instructions, int8 products need VNNI (library.isa());
- structure: oneDNN supports the partition, has every backend op of each JIT node in
  it, its ports are JIT values, it reads no non-tensor value computed outside, and it
  exposes every value used outside it;
- eager's aliasing: no output is a view of an input or of another output (a group's
  outputs are new tensors);
- oneDNN's defects, each measured on oneDNN 3.12 and pinned by a regression test:
  wrong results, a crash, runaway allocation, reference kernels, transposes back and forth
  (workarounds.py, int8_workarounds.py, matmul_workarounds.py);
- worth it: two or more nodes, or one node whose table entry says oneDNN beats ATen
  on it alone (conv, linear, matmul, ...).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...aten_ops import VIEW_KINDS
from . import int8_workarounds, library, matmul_workarounds, workarounds
from .graph_desc import BackendGraph, BackendOp
from .op_mapping import MappedBlock
from .op_table import LOWERINGS
from .workarounds import SizeVerdict


@dataclass
class Candidate:
    """A partition oneDNN offered, as the rules see it."""

    supported: bool
    ops: list[BackendOp]
    nodes: list[torch._C.Node]  # the JIT nodes it covers, in block order
    in_ids: list[int]
    out_ids: list[int]  # the backend tensors it computes for outside
    exposed: list[int]  # the JIT values they stand for (partition.exposed_values)
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

    @functools.cached_property
    def read_as(self) -> dict[int, torch._C.Value]:
        """Per input tensor its nodes read only through one value that the mapping made an
        alias of it (`attention(...).reshape(...).contiguous()`, the contiguous computing
        nothing), that value, which the group then takes in: the tensor's own value may
        exist only inside the group that computes it (partition.exposed_values)."""
        made = {v.unique() for n in self.nodes for v in n.outputs()}
        inputs = set(self.in_ids)
        aliases: dict[int, dict[int, torch._C.Value]] = {}
        own = set()
        for node in self.nodes:
            for v in node.inputs():
                if v.unique() in made:
                    continue
                if v.unique() in inputs:
                    own.add(v.unique())
                elif (t := self.backend.resolve(v.unique())) in inputs:
                    aliases.setdefault(t, {})[v.unique()] = v
        return {t: next(iter(values.values())) for t, values in aliases.items()
                if len(values) == 1 and t not in own}


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


def _may_alias_its_input(node: torch._C.Node) -> bool:
    """A view, or a cast eager may return its input from (to the input's own dtype, or to
    a dtype not profiled). alias_casts.same_dtype_cast answers whether a cast surely
    returns its input; an aliasing check needs whether it may."""
    if node.kind() in VIEW_KINDS:
        return True
    if node.kind() not in ("aten::to", "aten::type_as"):
        return False
    x, out = node.inputsAt(0).type(), node.output().type()
    return not (isinstance(x, torch._C.TensorType) and isinstance(out, torch._C.TensorType)
                and x.dtype() is not None and x.dtype() != out.dtype())


def _aliased_output(nodes: list[torch._C.Node], out_ids: list[int]) -> bool:
    """Whether an output is, in eager, a view of an input or of another output."""
    inside = set(nodes)
    outputs = set(out_ids)
    for out in out_ids:
        value = next(v for n in nodes for v in n.outputs() if v.unique() == out)
        while value.node() in inside and _may_alias_its_input(value.node()):
            value = value.node().inputsAt(0)
            if value.node() not in inside or value.unique() in outputs:
                return True
    return False


def _split_node(c: Candidate) -> bool:
    per_node = Counter(op.node for op in c.ops)
    return any(per_node[n] != c.op_count[n] for n in c.op_count.keys() & c.nodes)


def _internal_port(c: Candidate) -> bool:
    return any(i not in c.mapped.values for i in (*c.in_ids, *c.out_ids))


def _bf16_without_kernels(c: Candidate) -> bool:
    isa = library.isa()
    return not (isa and isa.bf16) and _bf16_ports(c)


def _bf16_ports(c: Candidate) -> bool:
    return any(c.backend.tensors[t].dtype == "bf16" for t in (*c.in_ids, *c.out_ids))


def cpu_needs(c: Candidate) -> frozenset[str]:
    """The CPU features a candidate this CPU fuses relies on, which a process that loads it
    from a file must have too: VNNI for int8 products that saturate without it, bf16
    instructions for bf16 ports (the rules above refuse both where they are missing)."""
    needs = set()
    if int8_workarounds.saturating_int8_products(c.ops, c.backend):
        needs.add("vnni")
    if _bf16_ports(c):
        needs.add("bf16")
    return frozenset(needs)


def _scalar_arithmetic(node: torch._C.Node) -> bool:
    """A node computing a 0-dim tensor (a scale from sizes, which a mapping takes in as
    its value at the profiled sizes)."""
    return any(isinstance(t := v.type(), torch._C.TensorType) and t.dim() == 0
               for v in node.outputs())


def _lone_op(c: Candidate) -> bool:
    """One node computes, and the partition takes in no scale computed from sizes, which
    ATen would compute on every call (DeBERTa's `k / sqrt(tensor(k.size(-1)) * 3)`, 24
    divisions per call: as fast either way)."""
    entries = [LOWERINGS[op.node.kind()] for op in c.ops if op.node is not None]
    return (len({op.node for op in c.ops}) == 1 and not entries[0].worth_alone
            and not any(map(_scalar_arithmetic, c.nodes)))


_CHANNELS_LAST = {4: torch.channels_last, 5: torch.channels_last_3d}


def _copied_when_bound(sizes: list[int] | None, strides: list[int] | None) -> bool:
    """Whether the kernel copies an input of these profiled strides before binding it
    (csrc/onednn/onednn_kernel.cpp, bindable): all but contiguous and channels-last ones,
    by ATen's own test (a strided view: a slice, attention's heads)."""
    if not sizes or not strides:
        return False
    t = torch.empty_strided(sizes, strides, device="meta")
    return not (t.is_contiguous() or (t.dim() in _CHANNELS_LAST
                                      and t.is_contiguous(memory_format=_CHANNELS_LAST[t.dim()])))


# Ops that compute one value per element, or move elements: a partition of only these
# streams its data through memory once.
_STREAMING_OPS = workarounds.ELEMENTWISE_PARTITION_OPS | {"Concat"}
_MOVING_NOTHING = frozenset({"StaticReshape", "StaticTranspose"})


def _copies_for_little(c: Candidate) -> bool:
    """Streaming ops, at most two that compute, reading an input the kernel copies first: the
    copy is one more pass over that input, as much as fusing two ops saves, and ATen reads
    the strided input as it lies. ModernBERT's rotary embedding on the query's and key's
    head views (a concat, then a multiply and an add), 2 threads on a Zen 3 EPYC: the
    groups and their copies took 17 ms of a 250 ms call, ATen's ops 12."""
    if any(op.kind not in _STREAMING_OPS for op in c.ops):
        return False
    if sum(op.kind not in _MOVING_NOTHING for op in c.ops) > 2:
        return False
    produced = {t for op in c.ops for t in op.outputs}
    tensors = c.backend.tensors
    return any(not tensors[t].constant and _copied_when_bound(tensors[t].sizes, tensors[t].strides)
               for t in {t for op in c.ops for t in op.inputs} - produced)


# (predicate, reason) in the order they are tried; "{isa}" in a reason is this CPU's ISA.
RULES: list[tuple[Callable[[Candidate], bool], str]] = [
    (_bf16_without_kernels, "bf16 on a CPU without bf16 instructions ({isa}): oneDNN has no "
                            "bf16 kernels for it"),
    (lambda c: not c.supported, "oneDNN does not support this partition"),
    (_split_node, "oneDNN split a node's backend ops across partitions"),
    (_internal_port, "a port is internal to a node's mapping"),
    (lambda c: _computed_arguments(c.nodes, [*c.in_ids, *(v.unique() for v in c.read_as.values())],
                                   c.shape_inputs),
     "an argument is computed at run time"),
    (lambda c: not _used_outside(c.nodes, set(c.mapped.nodes)) <= set(c.exposed),
     "a value used outside is not a partition output"),
    (lambda c: _aliased_output(c.nodes, c.exposed),
     "an output is a view of an input or of another output"),
    (lambda c: workarounds.internal_diamond(c.ops),
     "a binary op of two results of one chain computed inside it (oneDNN's compile "
     "allocates without bound)"),
    (lambda c: int8_workarounds.residual_of_the_anchor_source(c.ops),
     "a dequantized residual of the tensor the convolution or matmul reads (oneDNN 3.12 "
     "computes it wrongly)"),
    (lambda c: int8_workarounds.int8_scaled_accumulator_overflows(c.ops, c.backend),
     "an int8 product whose scaled sum could pass float32's range (oneDNN 3.12 scales the "
     "integer sum in two steps, which overflow where eager's dequantized product does not)"),
    (lambda c: int8_workarounds.int8_depthwise_multiplier(c.ops, c.backend),
     "an int8 depthwise convolution with a channel multiplier (oneDNN 3.12 computes some "
     "wrongly)"),
    (lambda c: int8_workarounds.int8_single_channel_s8(c.ops, c.backend),
     "an int8 convolution of one s8 input channel (oneDNN 3.12 computes some wrongly)"),
    (lambda c: int8_workarounds.int8_padding_windows(c.ops, c.backend) is SizeVerdict.REFUSE,
     "an int8 convolution with a window entirely in the padding (oneDNN 3.12 computes it "
     "wrongly)"),
    (lambda c: int8_workarounds.residual_of_another_int_type(c.ops, c.backend),
     "a dequantized residual of another integer type than the result (oneDNN reads it as "
     "the result's type)"),
    (lambda c: workarounds.attention_reshaped_to_5d(c.ops, c.backend),
     "attention with a reshape to 5 dims (oneDNN 3.12's attention kernel crashes compiling "
     "it, taking it for a grouped-query reshape)"),
    (lambda c: workarounds.attention_mask_operand(c.ops, c.backend),
     "attention with a mask of another rank than the scores, or a bool mask broadcast "
     "over queries or keys (oneDNN 3.12's attention kernel reads it wrongly)"),
    (lambda c: workarounds.layer_norm_sum(c.ops, c.backend) is SizeVerdict.REFUSE,
     "a layer_norm's result added to a tensor of its shape (oneDNN 3.12's layer-norm kernel "
     "drops that sum)"),
    (lambda c: workarounds.elementwise_to_a_transposed_layout(c.ops, c.backend, c.out_ids),
     "elementwise ops from a transposed input to a transposed result (copied row-major, "
     "then reordered back, where ATen reads the data once)"),
    (lambda c: workarounds.eltwise_head_with_binary(c.ops),
     "an eltwise op on an input meets a binary op (oneDNN 3.12 runs that with its reference "
     "implementation)"),
    (lambda c: workarounds.binary_head_with_width_operand(c.ops, c.backend)
     is SizeVerdict.REFUSE,
     "a binary op's chain with an operand that varies along the last dim only (oneDNN 3.12 "
     "indexes it wrongly on channels-last data)"),
    (lambda c: workarounds.full_then_two_width_operands(c.ops, c.backend),
     "a binary op's chain with a full-size operand, then two that vary along the last dim "
     "only (oneDNN 3.12 applies them wrongly)"),
    (lambda c: matmul_workarounds.matmul_operand_layout(c.ops, c.backend) is SizeVerdict.REFUSE,
     "a matmul operand whose batch dims are not outer to inner in memory with a matrix dim "
     "of 1, a transposed first operand with a batch dim between its rows and columns, or "
     "a batch dim but the last stored inside the matrix where batch dims broadcast or are "
     "not outer to inner (oneDNN 3.12 computes them wrongly)"),
    (lambda c: int8_workarounds.int8_products_saturate(c.ops, c.backend),
     "int8 products on a CPU without VNNI ({isa}): oneDNN sums their pairs in int16, which "
     "saturates"),
    (lambda c: workarounds.pool_operand(c.ops, c.backend) is SizeVerdict.REFUSE,
     "a pool's result combined with a tensor that is not per channel (oneDNN reads it in "
     "the wrong layout)"),
    (lambda c: matmul_workarounds.flattened_matmul_broadcast(c.ops, c.backend)
     is SizeVerdict.REFUSE,
     "a linear's result broadcast with a tensor oneDNN indexes wrongly"),
    (_lone_op, "a lone op ATen runs as fast"),
    (_copies_for_little, "at most two streaming ops on an input copied first (ATen reads it "
                         "as it lies, as fast)"),
]


def refusal(c: Candidate) -> str | None:
    """The reason of the first rule that refuses the candidate, if any."""
    for refuses, reason in RULES:
        if refuses(c):
            isa = library.isa()
            return reason.format(isa=isa.name if isa else "unknown")
    return None
