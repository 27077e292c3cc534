"""Lowering one JIT node: the context an op-table entry emits IR through.

An entry of the op table (op_table.py) sees its node through `Lowering`: the
node's constant arguments, its tensor inputs read in the group's frame, its
result, temporaries for the steps inside it, and `emit` for each IR node it
makes. It raises `Unsupported` with the reason the fusion report shows when the
node cannot be taken as it is.

Layout is strides, never a node: every tensor is read in the group's frame, the
anchor's IR rank (4 for conv_fprop, 3 for matmul), a lower-rank value gaining
leading dims of 1 as numpy broadcasting aligns it (a (C,) conv bias and a
linear's weight are given their own views by their table entries). Strides are
the profiled ones; a dim of size 1 gets the stride a dense tensor in the anchor
result's layout would have (a channels-last bias is [1, C, 1, 1] with strides
[C, 1, C, C]), so equal groups give equal IR whatever strides the profile
recorded there. The profiled sizes are baked in: the group's guard pins them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ...passes.graph_utils import constant_number
from ..base import Unsupported
from . import ir
from .ir import IR_DTYPES, TORCH_DTYPES


class Unfinished(Unsupported):
    """The group breaks a rule that a final reduction would lift: it cannot be
    lowered as it is, but a larger group ending in a reduction may be."""


# Dims (in the frame) a reduction may reduce, per anchor op: a convolution's
# channels or its per-channel column, a matmul's rows.
REDUCIBLE = {"conv_fprop": ({1}, {0, 2, 3}), "matmul": ({2},)}


def jit_layout(value: torch._C.Value, what: str) -> tuple[torch.dtype, list[int], list[int]]:
    """A tensor value's profiled dtype, sizes and strides, or Unsupported."""
    t = value.type()
    if not isinstance(t, torch._C.TensorType):
        raise Unsupported(f"{what} is not a tensor")
    if t.dtype() not in IR_DTYPES:
        raise Unsupported(f"{what} has dtype {t.dtype()}")
    sizes = t.sizes() if t.dim() is not None else None
    strides = t.strides() if sizes is not None else None
    if sizes is None or strides is None or None in sizes or None in strides:
        raise Unsupported(f"{what} has no profiled sizes and strides")
    return t.dtype(), list(sizes), list(strides)


def is_scalar_constant(value: torch._C.Value) -> bool:
    """A constant number operand: a Python number or a 0-dim tensor constant."""
    return constant_number(value) is not None


@dataclass
class Frame:
    rank: int
    order: list[int]  # dims innermost first: the anchor result's layout
    anchor: str  # "conv_fprop" or "matmul"

    def view(self, sizes: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
        if len(sizes) > self.rank:
            raise Unsupported(f"a rank-{len(sizes)} tensor in a rank-{self.rank} group")
        pad = self.rank - len(sizes)
        dims, given = [1] * pad + list(sizes), [0] * pad + list(strides)
        out, span = list(given), 1
        for d in self.order:
            if dims[d] == 1:
                out[d] = span
            else:
                span = max(span, given[d] * dims[d])
        return dims, out


class Draft:
    """The IR of one group while it is lowered; tensors carry provisional ids."""

    def __init__(self, frame: Frame, io_dtype: str, intermediate: str,
                 inputs: list[torch._C.Value], outputs: list[torch._C.Value]) -> None:
        self.frame = frame
        self.io_dtype, self.intermediate = io_dtype, intermediate
        self.ports = {v.unique(): i for i, v in enumerate(inputs)}
        self.port_tensor: dict[int, int] = {}  # port index -> tensor id
        self.outputs = {v.unique() for v in outputs}
        self.tensors: dict[int, ir.Tensor] = {}
        self.nodes: list[ir.Node] = []
        self.env: dict[int, int] = {}  # JIT value id -> tensor id, for values made in the group

    def add(self, dims: list[int], strides: list[int], dtype: str, virtual: bool) -> int:
        tid = len(self.tensors)
        self.tensors[tid] = ir.Tensor(tid, dims, strides, dtype, virtual)
        return tid


class Lowering:
    """What a table entry sees of one JIT node while lowering it."""

    def __init__(self, draft: Draft, node: torch._C.Node) -> None:
        self._draft = draft
        self.node = node

    # -- JIT arguments ------------------------------------------------------
    def n_inputs(self) -> int:
        return self.node.inputsSize()

    def const(self, i: int) -> Any:
        value = self.node.inputsAt(i)
        if value.node().kind() != "prim::Constant":
            raise Unsupported(f"argument {i} is not a constant")
        return value.toIValue()

    def is_none(self, i: int) -> bool:
        return self.node.inputsAt(i).node().mustBeNone()

    def is_tensor(self, i: int) -> bool:
        return isinstance(self.node.inputsAt(i).type(), torch._C.TensorType)

    def is_int_list(self, i: int) -> bool:
        t = self.node.inputsAt(i).type()
        return isinstance(t, torch._C.ListType) and isinstance(t.getElementType(),
                                                                torch._C.IntType)

    def sizes(self, i: int) -> list[int]:
        return jit_layout(self.node.inputsAt(i), f"input {i}")[1]

    def strides(self, i: int) -> list[int]:
        return jit_layout(self.node.inputsAt(i), f"input {i}")[2]

    def rank(self, i: int) -> int:
        return len(self.sizes(i))

    # -- numbers ------------------------------------------------------------
    def number(self, value: Any) -> float:
        """A constant number as the group's dtype holds it exactly, or Unsupported."""
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise Unsupported(f"operand {value!r} is not a number")
        held = torch.tensor(value, dtype=TORCH_DTYPES[self._draft.io_dtype]).item()
        if not math.isfinite(value) or held != value:
            raise Unsupported(f"the number {value!r} is not exact in {self._draft.io_dtype}")
        return float(held)

    @staticmethod
    def float32(value: float) -> float:
        """value rounded to float32, the compute type a scalar is bound in."""
        return torch.tensor(value, dtype=torch.float32).item()

    def scalar(self, i: int) -> float | None:
        """Input i as a constant number operand, or None when it is a tensor."""
        value = self.node.inputsAt(i)
        number = constant_number(value)
        if number is not None:
            return self.number(number)
        if not isinstance(value.type(), torch._C.TensorType):
            raise Unsupported(f"argument {i} is neither a tensor nor a constant number")
        return None

    # -- tensors ------------------------------------------------------------
    def input(self, i: int, sizes: list[int] | None = None,
              strides: list[int] | None = None) -> int:
        """The tensor input i is read as: in the group's frame, or through the
        view (sizes, strides before framing) a table entry gives it."""
        value = self.node.inputsAt(i)
        what = f"input {i} of {self.node.kind()}"
        dtype, jit_sizes, jit_strides = jit_layout(value, what)
        b = self._draft
        if IR_DTYPES[dtype] != b.io_dtype:
            raise Unsupported(f"{what} has dtype {dtype}, the group {b.io_dtype}")
        if value.unique() in b.env:
            if sizes is not None:
                raise Unsupported(f"{what} is computed in the group and read through a view")
            return b.env[value.unique()]
        if not jit_sizes and value.node().kind() == "prim::Constant":
            raise Unsupported(f"{what} is a number where cuDNN needs a tensor")
        if value.unique() not in b.ports:
            raise Unsupported(f"{what} is not an input of the group")
        dims, framed = b.frame.view(sizes if sizes is not None else jit_sizes,
                                    strides if strides is not None else jit_strides)
        port = b.ports[value.unique()]
        if port in b.port_tensor:
            seen = b.tensors[b.port_tensor[port]]
            if (seen.dims, seen.strides) != (dims, framed):
                raise Unsupported(f"{what} is read with two layouts")
            return seen.id
        tid = b.add(dims, framed, b.io_dtype, False)
        b.port_tensor[port] = tid
        return tid

    def _result_tensor(self, value: torch._C.Value, sizes: list[int],
                       strides: list[int], output_dtype: str | None = None) -> int:
        dims, framed = self._draft.frame.view(sizes, strides)
        virtual = value.unique() not in self._draft.outputs
        dtype = self._draft.intermediate if virtual else output_dtype or self._draft.io_dtype
        tid = self._draft.add(dims, framed, dtype, virtual)
        self._draft.env[value.unique()] = tid
        return tid

    def _output_layout(self) -> tuple[list[int], list[int]]:
        value = self.node.outputsAt(0)
        what = f"the result of {self.node.kind()}"
        dtype, sizes, strides = jit_layout(value, what)
        if IR_DTYPES[dtype] != self._draft.io_dtype:
            raise Unsupported(f"{what} has dtype {dtype}, the group {self._draft.io_dtype}")
        return sizes, strides

    def result(self) -> int:
        """The tensor of the node's (one) result."""
        sizes, strides = self._output_layout()
        return self._result_tensor(self.node.outputsAt(0), sizes, strides)

    def temp(self, like: int | None = None) -> int:
        """A virtual tensor for a step inside the node's lowering, shaped like
        the tensor `like` or else like the node's result."""
        if like is not None:
            t = self._draft.tensors[like]
            return self._draft.add(list(t.dims), list(t.strides), self._draft.intermediate, True)
        dims, framed = self._draft.frame.view(*self._output_layout())
        return self._draft.add(dims, framed, self._draft.intermediate, True)

    def reduced(self, dims: list[int], keepdim: bool) -> int:
        """The result of a reduction over `dims` (of input 0), with the reduced
        dims kept as 1 whether or not the JIT result drops them."""
        sizes, strides = self._output_layout()
        if not keepdim:
            for d in dims:
                sizes.insert(d, 1)
                strides.insert(d, 0)
        frame = self._draft.frame
        framed = {d + frame.rank - self.rank(0) for d in dims}
        if framed not in REDUCIBLE[frame.anchor]:
            raise Unsupported(f"a reduction over dims {sorted(framed)} of a {frame.anchor} "
                              "result (cuDNN reduces "
                              + " or ".join(str(sorted(s)) for s in REDUCIBLE[frame.anchor])
                              + ")")
        # cuDNN reductions write float only, whatever the io type (a half or
        # bfloat16 output is refused): the kernel rounds the result to the node's
        # dtype once, as eager's float accumulation does.
        return self._result_tensor(self.node.outputsAt(0), sizes, strides, "float")

    # -- emission -------------------------------------------------------------
    def emit(self, op: str, inputs: dict[str, int], outputs: dict[str, int],
             **attrs: Any) -> None:
        self._draft.nodes.append(ir.Node(op, dict(inputs), dict(outputs), dict(attrs)))
