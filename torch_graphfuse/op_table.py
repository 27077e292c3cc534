"""The aten -> oneDNN Graph op table.

Adding an op is one entry: a row in UNARY / BINARY for ops that map one to one,
or a function decorated with `@lowering(...)` for ops with attributes or
conditions. A lowering emits backend ops through its `Lowering` context and
raises `Unsupported` (with the reason the fusion report shows) when the node
cannot be taken as it is; the node then stays in the graph as a wildcard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .backend_desc import BACKEND_DTYPES, BackendGraph, TensorSpec


class Unsupported(Exception):
    """The node cannot be mapped as it is; the message says why."""


def tensor_spec(value: torch._C.Value) -> TensorSpec:
    """The logical tensor of a JIT value, from its profiled type."""
    t = value.type()
    spec = TensorSpec(value.unique())
    if not isinstance(t, torch._C.TensorType):
        return spec
    dtype = t.dtype()
    if dtype in BACKEND_DTYPES:
        spec.dtype = BACKEND_DTYPES[dtype]
    sizes = t.sizes() if t.dim() is not None else None
    if sizes is not None and all(s is not None for s in sizes):
        spec.sizes = list(sizes)
        strides = t.strides()
        if strides is not None and all(s is not None for s in strides):
            spec.strides = list(strides)
    spec.constant = value.node().kind() == "prim::Constant"
    if spec.constant and spec.sizes == []:
        # A 0-dim constant (a scalar operand) broadcasts like shape [1]; the
        # kernel binds it so.
        spec.sizes, spec.strides = [1], [1]
    return spec


class Lowering:
    """What a table entry sees of one JIT node while mapping it."""

    def __init__(self, graph: BackendGraph, node: torch._C.Node) -> None:
        self.graph = graph
        self.node = node

    # -- tensors ---------------------------------------------------------
    def _tensor(self, value: torch._C.Value, what: str) -> int:
        t = value.type()
        if not isinstance(t, torch._C.TensorType):
            raise Unsupported(f"{what} is not a tensor")
        if t.device() is not None and t.device().type != "cpu":
            raise Unsupported(f"{what} is on {t.device()}")
        if t.dtype() not in BACKEND_DTYPES:
            raise Unsupported(f"{what} has dtype {t.dtype()}")
        spec = tensor_spec(value)
        if spec.sizes is None:
            raise Unsupported(f"{what} has no profiled shape")
        if len(spec.sizes) == 0:
            raise Unsupported(f"{what} is a 0-dim tensor computed at run time")
        return self.graph.add_tensor(spec)

    def input(self, i: int) -> int:
        return self._tensor(self.node.inputsAt(i), f"input {i}")

    def output(self, i: int = 0) -> int:
        return self._tensor(self.node.outputsAt(i), f"output {i}")

    def rank(self, i: int) -> int:
        return len(self.sizes(i))

    def sizes(self, i: int) -> list[int]:
        spec = self.graph.tensors.get(self.node.inputsAt(i).unique())
        if spec is None or spec.sizes is None:
            self.input(i)
            spec = self.graph.tensors[self.node.inputsAt(i).unique()]
        assert spec.sizes is not None
        return spec.sizes

    def dtype(self, i: int) -> str:
        self.input(i)
        return self.graph.tensors[self.node.inputsAt(i).unique()].dtype

    def temp(self, like: int) -> int:
        """A fresh tensor internal to this node's mapping, shaped like `like`."""
        base = self.graph.tensors[like]
        return self.graph.add_tensor(TensorSpec(self.graph.fresh_id(), base.dtype, False,
                                                base.sizes, None))

    # -- non-tensor arguments ---------------------------------------------
    def is_none(self, i: int) -> bool:
        return self.node.inputsAt(i).node().mustBeNone()

    def const(self, i: int) -> Any:
        value = self.node.inputsAt(i)
        if value.node().kind() != "prim::Constant":
            raise Unsupported(f"argument {i} is not a constant")
        return value.toIValue()

    def n_inputs(self) -> int:
        return self.node.inputsSize()

    # -- emission -----------------------------------------------------------
    def emit(self, kind: str, inputs: list[int], outputs: list[int], **attrs: Any) -> None:
        self.graph.add_op(kind, inputs, outputs, attrs, self.node)


@dataclass(frozen=True)
class Entry:
    lower: Callable[[Lowering], None]
    # Kept as a partition of its own: oneDNN beats ATen even with nothing fused.
    worth_alone: bool = False


LOWERINGS: dict[str, Entry] = {}


def lowering(*kinds: str, worth_alone: bool = False) -> Callable:
    def register(fn: Callable[[Lowering], None]) -> Callable[[Lowering], None]:
        for kind in kinds:
            LOWERINGS[kind] = Entry(fn, worth_alone)
        return fn
    return register


# ---------------------------------------------------------------------------
# One-to-one ops: aten kind -> backend kind (plus fixed attributes).

UNARY: dict[str, tuple[str, dict[str, Any]]] = {
    "aten::relu": ("ReLU", {}),
    "aten::sigmoid": ("Sigmoid", {}),
    "aten::tanh": ("Tanh", {}),
    "aten::exp": ("Exp", {}),
    "aten::log": ("Log", {}),
    "aten::sqrt": ("Sqrt", {}),
    "aten::abs": ("Abs", {}),
    "aten::square": ("Square", {}),
    "aten::hardswish": ("HardSwish", {}),
    "aten::mish": ("Mish", {}),
    "aten::reciprocal": ("Reciprocal", {}),
    "aten::relu6": ("Clamp", {"min": 0.0, "max": 6.0}),
}

BINARY: dict[str, str] = {
    "aten::add": "Add",
    "aten::sub": "Subtract",
    "aten::mul": "Multiply",
    "aten::div": "Divide",
}


def _unary(kind: str, attrs: dict[str, Any]) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        lo.emit(kind, [lo.input(0)], [lo.output()], **attrs)
    return lower


def _binary(kind: str) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        # Scalar operands were turned into tensors by prepare_binary; an
        # `alpha` other than 1 was split off there too.
        a, b, out = lo.input(0), lo.input(1), lo.output()
        dtypes = {lo.graph.tensors[t].dtype for t in (a, b, out)}
        if len(dtypes) != 1:
            raise Unsupported(f"mixed dtypes {sorted(dtypes)}")
        if lo.node.kind() in ("aten::add", "aten::sub") and lo.n_inputs() > 2 and lo.const(2) != 1:
            raise Unsupported("alpha != 1")
        if lo.node.kind() == "aten::div" and lo.n_inputs() > 2 and lo.const(2) is not None:
            raise Unsupported("div with a rounding mode")
        lo.emit(kind, [a, b], [out], auto_broadcast="numpy")
    return lower


for _kind, (_backend, _attrs) in UNARY.items():
    LOWERINGS[_kind] = Entry(_unary(_backend, _attrs))
for _kind, _backend in BINARY.items():
    LOWERINGS[_kind] = Entry(_binary(_backend))


# ---------------------------------------------------------------------------
# Ops with attributes.

def _conv(lo: Lowering, stride: int, padding: int, dilation: int, groups: int,
          transposed: int | None = None) -> None:
    if transposed is not None and lo.const(transposed):
        raise Unsupported("transposed convolution")
    rank = lo.rank(0)
    if rank not in (3, 4, 5):
        raise Unsupported(f"{rank}-d convolution input")
    spatial = rank - 2
    pads = lo.const(padding)
    if not isinstance(pads, list):
        raise Unsupported(f"padding {pads!r}")
    strides, dilations = lo.const(stride), lo.const(dilation)
    lists = [(name, v if len(v) == spatial else v * spatial if len(v) == 1 else None)
             for name, v in (("strides", strides), ("pads", pads), ("dilations", dilations))]
    if any(v is None for _, v in lists):
        raise Unsupported("stride/padding/dilation rank mismatch")
    values = dict(lists)
    inputs = [lo.input(0), lo.input(1)]
    if not lo.is_none(2):
        inputs.append(lo.input(2))
    lo.emit("Convolution", inputs, [lo.output()], strides=values["strides"],
            pads_begin=values["pads"], pads_end=values["pads"], dilations=values["dilations"],
            groups=lo.const(groups), data_format="NCX", weights_format="OIX")


@lowering("aten::_convolution", "aten::convolution", worth_alone=True)
def convolution(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    _conv(lo, stride=3, padding=4, dilation=5, groups=8, transposed=6)


@lowering("aten::conv1d", "aten::conv2d", "aten::conv3d", worth_alone=True)
def conv_nd(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, groups)
    _conv(lo, stride=3, padding=4, dilation=5, groups=6)


@lowering("aten::linear", worth_alone=True)
def linear(lo: Lowering) -> None:
    if lo.rank(1) != 2:
        raise Unsupported("linear weight is not 2-d")
    inputs = [lo.input(0), lo.input(1)]
    if not lo.is_none(2):
        inputs.append(lo.input(2))
    lo.emit("MatMul", inputs, [lo.output()], transpose_b=True)


@lowering("aten::matmul", "aten::mm", "aten::bmm", worth_alone=True)
def matmul(lo: Lowering) -> None:
    if lo.rank(0) < 2 or lo.rank(1) < 2:
        raise Unsupported("matmul of a 1-d operand")
    lo.emit("MatMul", [lo.input(0), lo.input(1)], [lo.output()])


@lowering("aten::addmm", worth_alone=True)
def addmm(lo: Lowering) -> None:
    # (self, mat1, mat2, beta, alpha): beta*self + alpha*(mat1 @ mat2)
    if lo.const(3) != 1 or lo.const(4) != 1:
        raise Unsupported("addmm with alpha or beta != 1")
    out = lo.output()
    product = lo.temp(out)
    lo.emit("MatMul", [lo.input(1), lo.input(2)], [product])
    lo.emit("Add", [product, lo.input(0)], [out], auto_broadcast="numpy")


@lowering("aten::batch_norm")
def batch_norm(lo: Lowering) -> None:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    if lo.const(5):
        raise Unsupported("batch_norm in training mode")
    if any(lo.is_none(i) for i in (1, 2, 3, 4)):
        raise Unsupported("batch_norm without affine parameters or running stats")
    inputs = [lo.input(i) for i in range(5)]
    lo.emit("BatchNormInference", inputs, [lo.output()], epsilon=float(lo.const(7)),
            data_format="NCX")


@lowering("aten::gelu")
def gelu(lo: Lowering) -> None:
    approximate = lo.const(1) if lo.n_inputs() > 1 else "none"
    if approximate != "none":
        raise Unsupported(f"gelu approximate={approximate!r}")
    lo.emit("GELU", [lo.input(0)], [lo.output()])
