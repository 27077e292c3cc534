"""Lowering a cuDNN fusion group: its JIT nodes -> the plain-data IR (ir.py),
under the group-level rules of cuDNN's runtime fusion.

One translation in block order, each node through its op-table entry
(op_table.py) and the Lowering context (lowering.py). Tensor ids: the group
inputs are 0.. in port order, then every other tensor in the order the nodes
first name it. Non-port tensors are virtual. Data types: io is the group's one
dtype; intermediate and compute are float, except that a group with a prologue
keeps intermediates in its io dtype (cuDNN refuses a float-intermediate
prologue), and so takes none in a float32 group. A reduction's result is float
whatever the io dtype (cuDNN writes no other): the kernel rounds it to the JIT
node's dtype.

The rules are checked here, so the partitioner can try a candidate group by
lowering it: one anchor; the prologue (nodes before it) only on its X / A
operand, of table entries marked `prologue`, with operands that are per channel
(conv) or per column (matmul A); epilogue results of the anchor's result's
shape, their other operands broadcast into it; a reduction only as the last
node, over the dims cuDNN reduces for that anchor (lowering.REDUCIBLE); a
convolution's layout rules (_check_conv_layout: breaking the one a final
reduction lifts raises Unfinished, and the partitioner grows on through it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from . import ir
from .ir import IR_DTYPES
from .lowering import Draft, Frame, Lowering, Unfinished, Unsupported, jit_layout
from .op_table import LOWERINGS, OpClass

# The IR op of an anchor, by its rank in the table.
_ANCHOR_OPS = {4: "conv_fprop", 3: "matmul"}
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


def anchor_of(nodes: list[torch._C.Node]) -> torch._C.Node:
    anchors = [n for n in nodes if LOWERINGS[n.kind()].op_class is OpClass.ANCHOR]
    if len(anchors) != 1:
        raise Unsupported(f"a group needs one convolution or matmul, not {len(anchors)}")
    return anchors[0]


def _frame(anchor: torch._C.Node) -> Frame:
    rank = LOWERINGS[anchor.kind()].rank
    _, sizes, strides = jit_layout(anchor.output(), f"the result of {anchor.kind()}")
    if len(sizes) > rank:
        raise Unsupported(f"a rank-{len(sizes)} result of {anchor.kind()}")
    pad = rank - len(sizes)
    # Leading dims the frame adds are outermost.
    padded = [math.inf] * pad + strides
    order = sorted(range(rank), key=lambda d: (padded[d], -d))
    return Frame(rank, order, _ANCHOR_OPS[rank])


def _check_prologue(b: Draft, before: int, chain: list[int]) -> None:
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


def _check_epilogue(b: Draft, before: int, chain: list[int], last: bool,
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


def _check_anchor(b: Draft, before: int) -> None:
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


def _check_conv_layout(b: Draft, anchor_at: int, prologue: bool) -> None:
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


def _is_bias_activation(b: Draft, epilogue: list[ir.Node], y: int) -> bool:
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


def _renumbered(b: Draft, inputs: Iterable[int], outputs: list[int]) -> ir.Graph:
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
    b = Draft(frame, io_dtype, io_dtype if split else "float", inputs, outputs)
    x_value = anchor.inputsAt(1 if anchor.kind() == "aten::addmm" else 0)
    chain_x = frame.view(*jit_layout(x_value, "the anchor's data input")[1:])[0]
    chain_y = frame.view(*jit_layout(anchor.output(), "the anchor's result")[1:])[0]
    for position, node in enumerate(nodes):
        entry = LOWERINGS[node.kind()]
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
