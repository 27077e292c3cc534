"""Data movement: concatenation, transposes, reshapes, copies and casts."""

from __future__ import annotations

import torch

from ...aten_ops import RESHAPES
from ...passes import shape_arguments
from .lowering import LOWERINGS, Lowering, Unsupported, lowering


@lowering("aten::cat", "aten::concat", worth_alone=True, list_input=0)
def cat(lo: Lowering) -> None:
    tensors = lo.list_inputs(0)
    out = lo.output()
    dtype = lo.graph.tensors[out].dtype
    if any(lo.graph.tensors[t].dtype != dtype for t in tensors):
        raise Unsupported("cat of mixed dtypes")
    lo.emit("Concat", tensors, [out], axis=int(lo.const(1)))


@lowering("aten::permute")
def permute(lo: Lowering) -> None:
    lo.emit("StaticTranspose", [lo.input(0)], [lo.output()], order=list(lo.const(1)))


@lowering("aten::transpose")
def transpose(lo: Lowering) -> None:
    rank = lo.rank(0)
    order = list(range(rank))
    a, b = (d % rank for d in (lo.const(1), lo.const(2)))
    order[a], order[b] = order[b], order[a]
    lo.emit("StaticTranspose", [lo.input(0)], [lo.output()], order=order)


@lowering("aten::t")
def t(lo: Lowering) -> None:
    if lo.rank(0) != 2:
        raise Unsupported("t() of a non-2-d tensor")
    lo.emit("StaticTranspose", [lo.input(0)], [lo.output()], order=[1, 0])


@lowering("aten::reshape", "aten::view", "aten::flatten", "aten::squeeze", "aten::unsqueeze")
def reshape(lo: Lowering) -> None:
    # A view whose target oneDNN can infer at any sizes (`generic_target`: the input's own
    # sizes and constants) leaves the sizes open, so a new length or batch compiles the
    # group's partition again instead of fusing it again. Any other target is the profiled
    # output shape; the guard pins the input's, and those of the tensors a shape computed at
    # run time reads.
    generic = shape_arguments.generic_target(lo.node) if lo.node.kind() in RESHAPES else None
    for i in range(1, lo.n_inputs()):
        lo.shape(i, pin=False)
    if generic is None or (lo.sizes(0) == lo.out_sizes()
                           and not shape_arguments.generic_identity(lo.node, generic)):
        lo.pin_shapes()
    if lo.sizes(0) == lo.out_sizes() and lo.alias_input():
        return
    if generic is None:
        lo.emit("StaticReshape", [lo.input(0)], [lo.output()], shape=lo.out_sizes(),
                special_zero=False)
    else:
        lo.emit("StaticReshape", [lo.input(0)], [lo.output()], shape=generic, special_zero=True)


@lowering("aten::pad", static_shapes=True)
def pad(lo: Lowering) -> None:
    """A constant padding by zero at the profiled sizes (Swin pads to whole windows, by
    amounts computed from sizes, zero where they divide): eager returns a copy of its input
    in its strides, which the op computing that input gives (the node joins its partition).
    oneDNN has no pad: other amounts stay with ATen, as other sizes do (the guard)."""
    # aten::pad(Tensor self, SymInt[] pad, str mode="constant", float? value=None)
    if lo.const(2) != "constant":
        raise Unsupported(f"a {lo.const(2)} padding")
    if any(lo.shape(1)):
        raise Unsupported("padding by other than zero")
    if not lo.alias_input():
        raise Unsupported("a padding by zero of a tensor no fused op computes (a copy)")


@lowering("aten::contiguous")
def contiguous(lo: Lowering) -> None:
    x, out = lo.input(0), lo.output()
    if _producer_writes_copy(lo, x, out):
        return
    lo.emit("Reorder", [x], [out])


def _producer_writes_copy(lo: Lowering, x: int, out: int) -> bool:
    """A contiguous copy of a result a backend op computes for it alone (Hugging Face's
    `.transpose(1, 2).contiguous()` after a projection): that op writes its result in the
    copy's strides, and the node joins its partition (oneDNN partitions a Reorder after a
    transpose alone, which would copy again)."""
    spec, copy = lo.graph.tensors[x], lo.graph.tensors[out]
    value = lo.node.inputsAt(0)
    if (len(value.uses()) != 1 or lo.graph.resolve(value.unique()) != x
            or copy.strides is None or spec.sizes != copy.sizes or not _computed(lo, x)
            or not lo.alias_input()):
        return False
    spec.strides = list(copy.strides)
    return True


def _computed(lo: Lowering, tensor: int) -> bool:
    """Whether a MatMul computes the tensor, through reshapes and transposes: oneDNN takes
    that chain as one partition (a view of a tensor the partition takes, or of a copy,
    would leave the contiguous node in a partition of views, which the policy refuses)."""
    op = lo.graph.producer(tensor)
    while op is not None and op.kind in ("StaticReshape", "StaticTranspose"):
        op = lo.graph.producer(op.inputs[0])
    return op is not None and op.kind == "MatMul"


@lowering("aten::to")
def to(lo: Lowering) -> None:
    # A dtype cast between supported dtypes, on the CPU; every other argument
    # (non_blocking, copy, memory_format) is a constant the output type reflects.
    x, out = lo.input(0), lo.output()
    for i in range(1, lo.n_inputs()):
        if isinstance(lo.node.inputsAt(i).type(), torch._C.TensorType):
            raise Unsupported("to() another tensor's dtype and device")
        lo.const(i)
    if lo.graph.tensors[x].dtype == lo.graph.tensors[out].dtype:
        # Where eager returns x itself and one node reads it, op_mapping maps that node
        # with x in its place; elsewhere a group would return an alias of its input.
        raise Unsupported("a cast to the same dtype (an alias of its input)")
    if lo.graph.tensors[out].dtype == "f32" and lo.node.inputsAt(0).node().kind() in LOWERINGS:
        # oneDNN fuses an upcast into its producer, which then writes f32
        # without rounding to bf16 first as eager does.
        raise Unsupported("an upcast of a result a fused op may produce (keeps its rounding)")
    lo.emit("TypeCast", [x], [out])
