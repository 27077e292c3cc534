"""Data movement: concatenation, transposes, reshapes, copies and casts."""

from __future__ import annotations

import torch

from . import normalization
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


@lowering("aten::reshape", "aten::view", "aten::flatten", "aten::squeeze", "aten::unsqueeze",
          static_shapes=True)
def reshape(lo: Lowering) -> None:
    # The target is the profiled output shape; the guard pins the input's, and those of
    # the tensors a shape computed at run time reads.
    for i in range(1, lo.n_inputs()):
        lo.shape(i)
    if lo.sizes(0) == lo.out_sizes() and lo.alias_input():
        return
    lo.emit("StaticReshape", [lo.input(0)], [lo.output()], shape=lo.out_sizes(),
            special_zero=False)


@lowering("aten::contiguous")
def contiguous(lo: Lowering) -> None:
    lo.emit("Reorder", [lo.input(0)], [lo.output()])


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
        # to(x, dtype, non_blocking, copy=False, memory_format=None) returns x itself.
        if (lo.n_inputs() == 5 and lo.const(3) is False and lo.is_none(4)
                and normalization.cast_before_gamma(lo) and lo.alias_input()):
            return
        raise Unsupported("a cast to the same dtype (an alias of its input)")
    if lo.graph.tensors[out].dtype == "f32" and lo.node.inputsAt(0).node().kind() in LOWERINGS:
        # oneDNN fuses an upcast into its producer, which then writes f32
        # without rounding to bf16 first as eager does.
        raise Unsupported("an upcast of a result a fused op may produce (keeps its rounding)")
    lo.emit("TypeCast", [x], [out])
