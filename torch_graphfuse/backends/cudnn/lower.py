"""Lowering: one cuDNN fusion group's JIT nodes -> the plain-data IR (ir.py).

One translation in block order through the op table (op_table.py). Layout is
strides, never a node: every tensor is read in the group's frame, the anchor's
IR rank (4 for conv_fprop, 3 for matmul), a lower-rank value gaining leading
dims of 1 as numpy broadcasting aligns it (a (C,) conv bias and a linear's
weight are given their own views by their table entries). Strides are the
profiled ones; a dim of size 1 gets the stride a dense tensor in the anchor
result's layout would have (a channels-last bias is [1, C, 1, 1] with strides
[C, 1, C, C]), so equal groups give equal IR whatever strides the profile
recorded there. The profiled sizes are baked in: the group's guard pins them.

Tensor ids: the group inputs are 0.. in port order, then every other tensor in
the order the nodes first name it. Non-port tensors are virtual. Data types:
io is the group's one dtype; intermediate and compute are float, except that
a group with a prologue keeps intermediates in its io dtype (cuDNN refuses a
float-intermediate prologue), and so takes none in a float32 group. A
reduction's result is float whatever the io dtype (cuDNN writes no other):
the kernel rounds it to the JIT node's dtype.

The group-level rules of cuDNN's runtime fusion are checked here, so the
partitioner can try a candidate group by lowering it: one anchor; the
prologue (nodes before it) only on its X / A operand, of table entries marked
`prologue`, with operands that are per channel (conv) or per column (matmul
A); epilogue results of the anchor's result's shape, their other operands
broadcast into it; a reduction only as the last node, over the dims cuDNN
reduces for that anchor; a convolution's layout rules (_check_conv_layout:
breaking the one a final reduction lifts raises Unfinished, and the
partitioner grows on through it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from ...passes.graph_utils import constant_number
from . import ir
from .ir import IR_DTYPES, TORCH_DTYPES
from .op_table import TABLE, OpClass, Unfinished, Unsupported

# The IR op of an anchor, by its rank in the table.
_ANCHOR_OPS = {4: "conv_fprop", 3: "matmul"}
# Dims (in the frame) a reduction may reduce, per anchor op: a convolution's
# channels or its per-channel column, a matmul's rows.
REDUCIBLE = {"conv_fprop": ({1}, {0, 2, 3}), "matmul": ({2},)}
# The dim a prologue operand may vary along: the conv X's channels, the matmul A's columns.
PROLOGUE_DIM = {"conv_fprop": 1, "matmul": 2}
_DATA_PORT = {"conv_fprop": "X", "matmul": "A"}
_WEIGHT_PORT = {"conv_fprop": "W", "matmul": "B"}
# What cuDNN fuses with a convolution whose result is not channels_last.
NCHW_ACTIVATIONS = ("relu_fwd", "tanh_fwd", "sigmoid_fwd")
NCHW_EPILOGUE = ("a convolution that is not channels_last (cuDNN fuses only a per-channel "
                 "bias and one relu, tanh or sigmoid after it; more needs channels_last)")
NCHW_PROLOGUE = ("a prologue on a convolution that is not channels_last (cuDNN fuses "
                 "prologues in channels_last only)")
NCHW_FULL_SIZE_OPERAND = ("an operand of the result's size on a convolution that is not "
                          "channels_last (cuDNN fuses one in channels_last only)")
NOT_CHANNELS_LAST = ("a tensor that is not channels_last in a channels_last convolution "
                     "group (cuDNN needs every full-size tensor channels_last)")


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


class _Builder:
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

    def __init__(self, builder: _Builder, node: torch._C.Node) -> None:
        self._b = builder
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
        held = torch.tensor(value, dtype=TORCH_DTYPES[self._b.io_dtype]).item()
        if not math.isfinite(value) or held != value:
            raise Unsupported(f"the number {value!r} is not exact in {self._b.io_dtype}")
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
        b = self._b
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
        dims, framed = self._b.frame.view(sizes, strides)
        virtual = value.unique() not in self._b.outputs
        dtype = self._b.intermediate if virtual else output_dtype or self._b.io_dtype
        tid = self._b.add(dims, framed, dtype, virtual)
        self._b.env[value.unique()] = tid
        return tid

    def _output_layout(self) -> tuple[list[int], list[int]]:
        value = self.node.outputsAt(0)
        what = f"the result of {self.node.kind()}"
        dtype, sizes, strides = jit_layout(value, what)
        if IR_DTYPES[dtype] != self._b.io_dtype:
            raise Unsupported(f"{what} has dtype {dtype}, the group {self._b.io_dtype}")
        return sizes, strides

    def result(self) -> int:
        """The tensor of the node's (one) result."""
        sizes, strides = self._output_layout()
        return self._result_tensor(self.node.outputsAt(0), sizes, strides)

    def temp(self, like: int | None = None) -> int:
        """A virtual tensor for a step inside the node's lowering, shaped like
        the tensor `like` or else like the node's result."""
        if like is not None:
            t = self._b.tensors[like]
            return self._b.add(list(t.dims), list(t.strides), self._b.intermediate, True)
        dims, framed = self._b.frame.view(*self._output_layout())
        return self._b.add(dims, framed, self._b.intermediate, True)

    def reduced(self, dims: list[int], keepdim: bool) -> int:
        """The result of a reduction over `dims` (of input 0), with the reduced
        dims kept as 1 whether or not the JIT result drops them."""
        sizes, strides = self._output_layout()
        if not keepdim:
            for d in dims:
                sizes.insert(d, 1)
                strides.insert(d, 0)
        frame = self._b.frame
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
        self._b.nodes.append(ir.Node(op, dict(inputs), dict(outputs), dict(attrs)))


def anchor_of(nodes: list[torch._C.Node]) -> torch._C.Node:
    anchors = [n for n in nodes if TABLE[n.kind()].op_class is OpClass.ANCHOR]
    if len(anchors) != 1:
        raise Unsupported(f"a group needs one convolution or matmul, not {len(anchors)}")
    return anchors[0]


def _frame(anchor: torch._C.Node) -> Frame:
    rank = TABLE[anchor.kind()].rank
    _, sizes, strides = jit_layout(anchor.output(), f"the result of {anchor.kind()}")
    if len(sizes) > rank:
        raise Unsupported(f"a rank-{len(sizes)} result of {anchor.kind()}")
    pad = rank - len(sizes)
    # Leading dims the frame adds are outermost.
    padded = [math.inf] * pad + strides
    order = sorted(range(rank), key=lambda d: (padded[d], -d))
    return Frame(rank, order, _ANCHOR_OPS[rank])


def _check_prologue(b: _Builder, before: int, chain: list[int]) -> None:
    """The nodes emitted since `before` (one prologue node's lowering) read
    full-size data and per-channel operands only."""
    vary = PROLOGUE_DIM[b.frame.anchor]
    for node in b.nodes[before:]:
        full = 0
        for tid in node.inputs.values():
            dims = b.tensors[tid].dims
            if dims == chain:
                full += 1
            elif any(d != 1 for i, d in enumerate(dims) if i != vary):
                raise Unsupported("a prologue operand that is not per channel")
        if full != 1:
            raise Unsupported("a prologue op of two full-size operands")
        for tid in node.outputs.values():
            if b.tensors[tid].dims != chain:
                raise Unsupported("a prologue op whose result is not the anchor input's shape")


def _check_epilogue(b: _Builder, before: int, chain: list[int], last: bool,
                    op_class: OpClass) -> None:
    made = {tid for node in b.nodes for tid in node.outputs.values()}
    for node in b.nodes[before:]:
        if node.op == "reduction":
            if op_class is not OpClass.REDUCTION or not last:
                raise Unsupported("a reduction that is not the group's last op "
                                  "(cuDNN fuses one reduction, at the end)")
            if node.inputs["X"] not in made or b.tensors[node.inputs["X"]].dims != chain:
                raise Unsupported("a reduction of a value not of the anchor result's shape")
            continue
        for tid in node.inputs.values():
            dims = b.tensors[tid].dims
            if tid not in made and any(d not in (1, c) for d, c in zip(dims, chain, strict=True)):
                raise Unsupported("an operand that does not broadcast into the anchor's result")
        for tid in node.outputs.values():
            if b.tensors[tid].dims != chain:
                raise Unsupported("an epilogue op whose result is not the anchor result's shape")


def _check_anchor(b: _Builder, before: int) -> None:
    for node in b.nodes[before:]:
        if node.op in _WEIGHT_PORT and b.tensors[node.inputs[_WEIGHT_PORT[node.op]]].virtual:
            raise Unsupported("a prologue on the weight (cuDNN fuses one on the conv X / "
                              "matmul A operand only)")


def channels_last(t: ir.Tensor) -> bool:
    """Whether a 4-d tensor has NHWC strides (size-1 dims hold the frame's
    dense strides, so a tensor is never both by accident of its profile)."""
    if len(t.dims) != 4:
        return False
    _, c, h, w = t.dims
    return t.strides == [h * w * c, 1, w * c, c]


def _check_conv_layout(b: _Builder, anchor_at: int, prologue: bool) -> None:
    """cuDNN 9.24's layout rules for a convolution group (found by the
    deviceless tier, alike on H100, A100 and B200 and in every io type): its
    runtime fusion engines need a channels_last result, every full-size tensor
    channels_last as well; a result in any other layout goes to engines that
    fuse a per-channel bias and one activation, or an epilogue of broadcast
    operands that ends in a reduction, and no prologue."""
    conv = b.nodes[anchor_at]
    if conv.op != "conv_fprop":
        return
    x, y = b.tensors[conv.inputs["X"]], b.tensors[conv.outputs["Y"]]
    epilogue = b.nodes[anchor_at + 1:]

    def full_size(nodes: list[ir.Node], like: ir.Tensor) -> list[ir.Tensor]:
        """The tensors of `like`'s size the nodes read from outside the group."""
        return [b.tensors[tid] for node in nodes for tid in node.inputs.values()
                if not b.tensors[tid].virtual and b.tensors[tid].dims == like.dims]

    if channels_last(y):
        read = full_size(epilogue, y) + full_size(b.nodes[:anchor_at], x)
        if not all(map(channels_last, read)) or prologue and not channels_last(x):
            raise Unsupported(NOT_CHANNELS_LAST)
        return
    if prologue:
        raise Unsupported(NCHW_PROLOGUE)
    if full_size(epilogue, y):
        raise Unsupported(NCHW_FULL_SIZE_OPERAND)
    if not any(node.op == "reduction" for node in epilogue) \
            and not _is_bias_activation(b, epilogue, conv.outputs["Y"]):
        raise Unfinished(NCHW_EPILOGUE)


def _is_bias_activation(b: _Builder, epilogue: list[ir.Node], y: int) -> bool:
    """Whether the epilogue of result y is a per-channel bias add (or nothing)
    and then at most one relu, tanh or sigmoid."""
    if not epilogue:
        return True
    bias, *rest = epilogue
    operands = [b.tensors[tid] for tid in bias.inputs.values() if tid != y]
    channels = b.tensors[y].dims[1]
    if (bias.attrs != {"mode": "add"} or len(bias.inputs) != 2 or len(operands) != 1
            or operands[0].virtual or operands[0].dims != [1, channels, 1, 1]):
        return False
    return len(rest) <= 1 and all(n.attrs in [{"mode": m} for m in NCHW_ACTIVATIONS]
                                  for n in rest)


def _renumbered(b: _Builder, inputs: Iterable[int], outputs: list[int]) -> ir.Graph:
    """The IR with ids 0.. for the ports in order, then in order of first mention."""
    order = list(inputs)
    for node in b.nodes:
        for tid in (*node.inputs.values(), *node.outputs.values()):
            if tid not in order:
                order.append(tid)
    new = {old: i for i, old in enumerate(order)}
    tensors = [ir.Tensor(new[t], b.tensors[t].dims, b.tensors[t].strides, b.tensors[t].dtype,
                         b.tensors[t].virtual) for t in order]
    nodes = [ir.Node(n.op, {k: new[t] for k, t in n.inputs.items()},
                     {k: new[t] for k, t in n.outputs.items()}, n.attrs) for n in b.nodes]
    return ir.Graph(b.io_dtype, b.intermediate, "float", tensors, nodes,
                    [new[t] for t in inputs], [new[t] for t in outputs])


def lower(nodes: list[torch._C.Node], inputs: list[torch._C.Value],
          outputs: list[torch._C.Value]) -> ir.Graph:
    """The IR of a group: `nodes` in block order, `inputs`/`outputs` its JIT
    values in port order (the FusionGroup node's). Unsupported says why not."""
    anchor = anchor_of(nodes)
    frame = _frame(anchor)
    dtype = jit_layout(anchor.output(), f"the result of {anchor.kind()}")[0]
    io_dtype = IR_DTYPES[dtype]
    split = nodes.index(anchor)
    if split and io_dtype == "float":
        raise Unsupported("a prologue in a float32 group (cuDNN runs prologues with a "
                          "half or bfloat16 intermediate type)")
    b = _Builder(frame, io_dtype, io_dtype if split else "float", inputs, outputs)
    x_value = anchor.inputsAt(1 if anchor.kind() == "aten::addmm" else 0)
    chain_x = frame.view(*jit_layout(x_value, "the anchor's data input")[1:])[0]
    chain_y = frame.view(*jit_layout(anchor.output(), "the anchor's result")[1:])[0]
    for position, node in enumerate(nodes):
        entry = TABLE[node.kind()]
        before = len(b.nodes)
        entry.lower(Lowering(b, node))
        if position < split:
            if not entry.prologue:
                raise Unsupported(f"{node.kind()} in a prologue (cuDNN fuses per-channel "
                                  "scale, bias and relu there)")
            _check_prologue(b, before, chain_x)
        elif position == split:
            _check_anchor(b, before)
            anchor_at = before
            data = b.nodes[before].inputs[_DATA_PORT[b.nodes[before].op]]
            if split and not b.tensors[data].virtual:
                raise Unsupported("a prologue that does not feed the anchor's data input")
        else:
            _check_epilogue(b, before, chain_y, position == len(nodes) - 1, entry.op_class)
    missing = [v.debugName() for i, v in enumerate(inputs) if i not in b.port_tensor]
    if missing:
        raise Unsupported(f"group inputs {missing} are not read as tensors")
    # Last: Unfinished must mean that every other rule holds.
    _check_conv_layout(b, anchor_at, split > 0)
    unmade = [v.debugName() for v in outputs if v.unique() not in b.env]
    if unmade:
        raise ValueError(f"group outputs {unmade} are not made by its nodes")
    graph = _renumbered(b, [b.port_tensor[i] for i in range(len(inputs))],
                        [b.env[v.unique()] for v in outputs])
    ir.validate(graph)
    return graph
