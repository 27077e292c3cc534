"""The aten -> oneDNN Graph op table.

Adding an op is one entry: a row in UNARY / BINARY for ops that map one to one,
or a function decorated with `@lowering(...)` for ops with attributes or
conditions. A lowering emits backend ops through its `Lowering` context and
raises `Unsupported` (with the reason `torch_graphfuse.last_report()` shows)
when the node cannot be taken as it is; the node then stays in the graph as a
wildcard.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...passes import shape_arguments
from ...passes.finiteness import Facts
from .graph_desc import BACKEND_DTYPES, QUANTIZED_DTYPES, BackendGraph, BackendOp, TensorSpec


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
    elif dtype in QUANTIZED_DTYPES:
        spec.dtype = QUANTIZED_DTYPES[dtype]
    elif dtype == torch.bool:
        spec.dtype = "bool"
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

    def __init__(self, graph: BackendGraph, jit_graph: torch._C.Graph, node: torch._C.Node,
                 facts: Facts, quantized: bool = False) -> None:
        self.graph = graph
        self.jit_graph = jit_graph
        self.node = node
        self.facts = facts
        self.quantized = quantized  # the op takes u8/s8 tensors (Entry.quantized)
        self.absorbed: list[torch._C.Node] = []  # list nodes taken in by the mapping
        self.constants: list[torch._C.Value] = []  # constant tensors the mapping added
        # Tensors whose profiled sizes an absorbed shape computation reads.
        self.shape_sources: list[torch._C.Value] = []
        self.pinned = False  # the mapping used profiled sizes: guard exact sizes
        self.joins: BackendOp | None = None  # the op whose partition takes the node (alias)
        # Graph inputs the mapping assumes finite: the group checks them per call.
        self.assumes_finite: frozenset[int] = frozenset()

    # -- tensors ---------------------------------------------------------
    def _tensor(self, value: torch._C.Value, what: str, mask: bool = False) -> int:
        t = value.type()
        if not isinstance(t, torch._C.TensorType):
            raise Unsupported(f"{what} is not a tensor")
        if t.device() is not None and t.device().type != "cpu":
            raise Unsupported(f"{what} is on {t.device()}")
        if t.dtype() not in BACKEND_DTYPES and not (
                self.quantized and t.dtype() in QUANTIZED_DTYPES) and not (
                mask and t.dtype() == torch.bool):
            raise Unsupported(f"{what} has dtype {t.dtype()}")
        spec = tensor_spec(value)
        if spec.sizes is None:
            raise Unsupported(f"{what} has no profiled shape")
        if len(spec.sizes) == 0:
            raise Unsupported(f"{what} is a 0-dim tensor computed at run time")
        return self.graph.add_tensor(spec)

    def input(self, i: int) -> int:
        return self._tensor(self.node.inputsAt(i), f"input {i}")

    def mask_input(self, i: int) -> int:
        """A tensor input that may also be bool (an attention mask, which Select reads)."""
        return self._tensor(self.node.inputsAt(i), f"input {i}", mask=True)

    def output(self, i: int = 0) -> int:
        return self._tensor(self.node.outputsAt(i), f"output {i}")

    def rank(self, i: int) -> int:
        return len(self.sizes(i))

    def sizes(self, i: int) -> list[int]:
        spec = self.graph.tensors.get(self.graph.resolve(self.node.inputsAt(i).unique()))
        if spec is None or spec.sizes is None:
            spec = self.graph.tensors[self.input(i)]
        assert spec.sizes is not None
        return spec.sizes

    def temp(self, like: int, sizes: list[int] | None = None, dtype: str | None = None) -> int:
        """A fresh tensor internal to this node's mapping, of `like`'s dtype and sizes unless
        given."""
        base = self.graph.tensors[like]
        return self.graph.add_tensor(TensorSpec(self.graph.fresh_id(), dtype or base.dtype,
                                                False, base.sizes if sizes is None else sizes,
                                                None))

    def constant(self, value: torch.Tensor) -> int:
        """A constant tensor input: a prim::Constant inserted before the node (dead code,
        removed at the end, if the node stays unfused)."""
        with self.jit_graph.insert_point_guard(self.node):
            const = self.jit_graph.insertConstant(value)
        const.setType(torch._C.TensorType.create_from_tensor(value))
        self.constants.append(const)
        return self._tensor(const, "a constant")

    def pin_shapes(self) -> None:
        """This mapping is right for the profiled sizes only."""
        self.pinned = True

    def out_sizes(self, i: int = 0) -> list[int]:
        sizes = self.graph.tensors[self.output(i)].sizes
        assert sizes is not None
        return sizes

    def list_inputs(self, i: int) -> list[int]:
        """The tensors of a Tensor[] argument built by prim::ListConstruct."""
        producer = self.node.inputsAt(i).node()
        if producer.kind() != "prim::ListConstruct":
            raise Unsupported(f"argument {i} is not a list built in the graph")
        self.absorbed.append(producer)
        return [self._tensor(v, f"list element {j}") for j, v in enumerate(producer.inputs())]

    # -- non-tensor arguments ---------------------------------------------
    def is_none(self, i: int) -> bool:
        return self.node.inputsAt(i).node().mustBeNone()

    def const(self, i: int) -> Any:
        value = self.node.inputsAt(i)
        if value.node().kind() != "prim::Constant":
            raise Unsupported(f"argument {i} is not a constant")
        return value.toIValue()

    def shape(self, i: int) -> Any:
        """Argument i, a constant or a shape computed from sizes (passes/shape_arguments):
        its value at the profiled sizes. The computation joins the node's partition, and
        the group's guard pins the sizes it reads."""
        value = self.node.inputsAt(i)
        if value.node().kind() == "prim::Constant":
            return value.toIValue()
        found = shape_arguments.chain(value)
        if found is None:
            raise Unsupported(f"argument {i} is computed from other than sizes")
        if not shape_arguments.private(found, self.node):
            raise Unsupported(f"argument {i} is shape arithmetic other nodes read")
        self.absorbed += found.nodes
        self.shape_sources += found.sources
        self.pin_shapes()
        return found.value

    def alias_input(self) -> bool:
        """Map the node's result as its input's tensor, computing nothing (a reshape to the
        same shape at the pinned sizes), where a backend op computes that input: the node
        joins that op's partition, exact sizes guarded. oneDNN's attention pattern takes a
        transpose after it, not such a reshape between."""
        x = self.input(0)
        producer = self.graph.producer(x)
        if producer is None:
            return False
        self.graph.aliases[self.node.output().unique()] = x
        self.joins = producer
        return True

    def n_inputs(self) -> int:
        return self.node.inputsSize()

    def finite(self, i: int) -> bool:
        """Whether input i holds only finite numbers when the graph inputs
        that passes/finiteness assumed do; a True answer makes the group
        check those inputs per call (passes/finite_guard)."""
        assumed = self.facts.get(self.node.inputsAt(i).unique())
        if assumed is None:
            return False
        self.assumes_finite |= assumed
        return True

    # -- emission -----------------------------------------------------------
    def emit(self, kind: str, inputs: list[int], outputs: list[int], **attrs: Any) -> None:
        self.graph.add_op(kind, inputs, outputs, attrs, self.node)


@dataclass(frozen=True)
class Entry:
    lower: Callable[[Lowering], None]
    # Kept as a partition of its own: oneDNN beats ATen even with nothing fused.
    worth_alone: bool = False
    # The mapping bakes in profiled sizes (a reshape's target, a pool kernel
    # derived from the input): the group's guard checks exact sizes.
    static_shapes: bool = False
    # Index of a Tensor[] argument built by prim::ListConstruct, which the
    # mapping takes in (the list node joins the node's partition).
    list_input: int | None = None
    # Where oneDNN differs from eager on NaN or infinity: mapped only
    # when its input is proven finite (passes/finiteness), else left with
    # ATen for this reason.
    finite_only: str | None = None
    # Takes or makes quantized data (u8/s8 tensors); other entries refuse them.
    quantized: bool = False


LOWERINGS: dict[str, Entry] = {}

# Ops left with ATen on purpose, and why (the fusion report gives the reason).
NOT_MAPPED: dict[str, str] = {
    **dict.fromkeys(
        ["aten::log_softmax", "aten::_log_softmax"],
        # oneDNN 3.12 gives NaN at the NaN or +inf of a row and -inf elsewhere in it;
        # eager makes the whole row NaN. Rare in inference graphs: not worth a guard.
        "oneDNN's log_softmax keeps a row holding NaN or +inf finite where it is not"),
    **dict.fromkeys(
        ["aten::softplus", "aten::mish"],
        # Measured on oneDNN 3.12: softplus(-10, beta=2) = -9.5e-7 against ATen's
        # 1.0e-9, so softplus(x) / softplus(x) was NaN; beta * x overflows past 1.7e38.
        "oneDNN's SoftPlus (and Mish, built on it) is 1e-6 off in absolute terms: 0 or "
        "negative where ATen's result is tiny and positive"),
}

# Why oneDNN's op for an aten op is right on finite inputs only (each measured again on
# oneDNN 3.12, in every kernel it picks: conv, matmul and binary post-ops, NCHW and NHWC).
CLAMP_LOSES_NAN = "oneDNN's clamp returns a bound for NaN"
EXP_LOSES_NAN = "oneDNN's exp returns +inf for NaN"
LOGISTIC_LOSES_NAN = "oneDNN's logistic returns 0 for NaN in some of its kernels"
MAX_POOL_LOSES_NAN = "oneDNN's max pooling skips NaN and gives -FLT_MAX for -inf"
QUANTIZE_OF_NAN = "oneDNN and ATen turn NaN into different integers (s8: -128 against 0)"
SOFTMAX_OF_NONFINITE = ("oneDNN's softmax gives NaN only at a row's NaN or +inf and 0 elsewhere, "
                        "where eager makes the whole row NaN")
GELU_OF_INF = ("ATen's gelu gives NaN for +-inf in its AVX-512 kernel, oneDNN's GELU NaN or "
               "+inf by kernel")


def lowering(*kinds: str, worth_alone: bool = False, static_shapes: bool = False,
             list_input: int | None = None, finite_only: str | None = None,
             quantized: bool = False) -> Callable:
    def register(fn: Callable[[Lowering], None]) -> Callable[[Lowering], None]:
        for kind in kinds:
            LOWERINGS[kind] = Entry(fn, worth_alone, static_shapes, list_input, finite_only,
                                    quantized)
        return fn
    return register


# ---------------------------------------------------------------------------
# One-to-one ops: aten kind -> backend kind (plus fixed attributes).

UNARY: dict[str, tuple[str, dict[str, Any]]] = {
    "aten::tanh": ("Tanh", {}),
    "aten::log": ("Log", {}),
    "aten::sqrt": ("Sqrt", {}),
    "aten::abs": ("Abs", {}),
    "aten::square": ("Square", {}),
    "aten::hardswish": ("HardSwish", {}),
    "aten::reciprocal": ("Reciprocal", {}),
    "aten::round": ("Round", {}),
}

BINARY: dict[str, str] = {
    "aten::add": "Add",
    "aten::sub": "Subtract",
    "aten::mul": "Multiply",
    "aten::div": "Divide",
}


def _unary(kind: str, attrs: dict[str, Any]) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        x, out = lo.input(0), lo.output()
        if lo.graph.tensors[x].dtype != lo.graph.tensors[out].dtype:
            raise Unsupported("output dtype differs from input dtype")
        lo.emit(kind, [x], [out], **attrs)
    return lower


def _binary(kind: str) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        # Scalar operands were turned into tensors by prepare_binary; an
        # `alpha` other than 1 was split off there too.
        # prepare_binary cast tensor operands to the result dtype already.
        a, b, out = lo.input(0), lo.input(1), lo.output()
        if len({lo.graph.tensors[t].dtype for t in (a, b, out)}) != 1:
            raise Unsupported("operands of another dtype than the result")
        if lo.node.kind() in ("aten::add", "aten::sub") and lo.n_inputs() > 2 and lo.const(2) != 1:
            raise Unsupported("alpha != 1")
        if lo.node.kind() == "aten::div" and lo.n_inputs() > 2 and lo.const(2) is not None:
            raise Unsupported("div with a rounding mode")
        if _channel_broadcast_hazard(lo, a, b, out):
            lo.pin_shapes()
        lo.emit(kind, [a, b], [out], auto_broadcast="numpy")
    return lower


def _channel_broadcast_hazard(lo: Lowering, a: int, b: int, out: int) -> bool:
    """oneDNN (v3.2, and 3.12: off by up to 7 on 54 of 54 swept shapes) computes a wrong
    result for a (1, C, 1, ...) operand
    broadcast over the batch of an (N > 1, C, 1, ...) result. An operand of
    that shape could meet such a result at some batch or spatial size: the
    group is pinned to its profiled sizes, and refused if they are the case."""
    def risky(sizes: list[int]) -> bool:
        return (len(sizes) >= 3 and sizes[0] == 1 and sizes[1] > 1
                and all(d == 1 for d in sizes[2:]))

    result = lo.graph.tensors[out].sizes or []
    # numpy broadcasting: a lower-rank operand gains leading size-1 dims.
    operands = [[1] * (len(result) - len(sizes)) + sizes
                for sizes in (lo.graph.tensors[t].sizes or [] for t in (a, b))]
    # A batch of constants fixes the result's batch: an input operand meeting
    # it may be the (1, C, 1, ...) case at a call with batch 1 (found by the fuzzer).
    fixed = [_constant_derived(lo.node.inputsAt(i)) for i in (0, 1)]
    if any(fix and not other and len(sizes) >= 3 and sizes[0] > 1 and sizes[1] > 1
           and all(d == 1 for d in sizes[2:])
           for fix, other, sizes in zip(fixed, fixed[::-1], operands, strict=True)):
        return True
    if not any(risky(sizes) for sizes in operands):
        return False
    if result and result[0] > 1 and all(d == 1 for d in result[2:]) and any(
            risky(sizes) and len(sizes) == len(result) and sizes[1] == result[1] > 1
            for sizes in operands):
        raise Unsupported("a (1, C, 1, ...) operand broadcast over the batch (oneDNN bug)")
    return True


# One-to-one ops right on finite inputs only: aten kind -> (backend kind, attributes, why).
UNARY_FINITE_ONLY: dict[str, tuple[str, dict[str, Any], str]] = {
    "aten::exp": ("Exp", {}, EXP_LOSES_NAN),
    "aten::sigmoid": ("Sigmoid", {}, LOGISTIC_LOSES_NAN),
    "aten::relu6": ("Clamp", {"min": 0.0, "max": 6.0}, CLAMP_LOSES_NAN),
    "aten::hardsigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}, CLAMP_LOSES_NAN),
}

def _constant_derived(value: torch._C.Value, depth: int = 4) -> bool:
    """Whether a value is computed from constants only (within a few ops)."""
    node = value.node()
    if node.kind() == "prim::Constant":
        return True
    if depth == 0 or node.kind() == "prim::Param" or list(node.blocks()):
        return False
    return all(_constant_derived(v, depth - 1) for v in node.inputs())


for _kind, (_backend, _attrs) in UNARY.items():
    LOWERINGS[_kind] = Entry(_unary(_backend, _attrs))
for _kind, (_backend, _attrs, _why) in UNARY_FINITE_ONLY.items():
    LOWERINGS[_kind] = Entry(_unary(_backend, _attrs), finite_only=_why)
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
    out_channels, per_group = lo.sizes(1)[:2]
    groups_n = lo.const(groups)
    if (lo.graph.tensors[lo.input(0)].dtype == "bf16" and groups_n > 1 and per_group == 1
            and out_channels != groups_n):
        # Found by the fuzzer: oneDNN's bf16 kernel for it returns garbage on
        # small inputs (3.12's brg_conv_fwd: off by 2 to 3.7 at widths 2-3 with
        # width stride 2, NCHW and channels-last).
        raise Unsupported("bf16 depthwise convolution with a channel multiplier")
    if _single_channel_wrong(lo, values, groups_n):
        raise Unsupported("a single-channel 3-d convolution, or 2-d to an output width of 1 "
                          "(oneDNN 3.12 computes those wrongly)")
    if not lo.finite(1):
        # Eager multiplies the padding's zeros by the weight (NaN where it is
        # NaN or infinite); oneDNN skips those taps.
        raise Unsupported("a weight not proven finite (oneDNN skips the padding taps)")
    inputs = [lo.input(0), lo.input(1)]
    if not lo.is_none(2):
        inputs.append(lo.input(2))
    lo.emit("Convolution", inputs, [lo.output()], strides=values["strides"],
            pads_begin=values["pads"], pads_end=values["pads"], dilations=values["dilations"],
            groups=lo.const(groups), data_format="NCX", weights_format="OIX")


def _single_channel_wrong(lo: Lowering, values: dict[str, list[int]], groups: int) -> bool:
    """oneDNN 3.12's convolutions of one input channel (no groups) are wrong in 3-d
    (605 of 7,000 swept 3-d shapes off, by up to 1e38, with no simpler pattern) and in
    2-d where a kernel wider than one tap meets an output width of 1 (every wrong 2-d
    result of 11,000 swept shapes); 1-d is right. The 2-d output width follows the
    input's: the group is pinned to its profiled sizes, and refused where they are the
    case."""
    sizes, kernel = lo.sizes(0), lo.sizes(1)[2:]
    if len(sizes) < 4 or sizes[1] != 1 or groups != 1:
        return False
    if len(sizes) == 5:
        return True
    if kernel[-1] == 1:
        return False
    lo.pin_shapes()
    strides, dilations, pads = values["strides"], values["dilations"], values["pads"]
    width = sizes[-1] + 2 * pads[-1] - dilations[-1] * (kernel[-1] - 1) - 1
    return width // strides[-1] + 1 == 1


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
    if 1 in (lo.rank(0), lo.rank(1)):
        # oneDNN computes a 1-d operand as a matrix, and an op that follows
        # then broadcasts against the wrong shape.
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
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approximate!r}")
    # The tanh form gives eager's NaN, +inf and NaN for NaN, +inf and -inf in every
    # kernel oneDNN 3.12 picks; the erf form does not.
    if approximate == "none" and not lo.finite(0):
        raise Unsupported(f"{GELU_OF_INF}, and its input is not proven finite")
    lo.emit("GELU", [lo.input(0)], [lo.output()],
            mode="gelu_erf" if approximate == "none" else "gelu_tanh")


@lowering("aten::silu")
def silu(lo: Lowering) -> None:
    # x * sigmoid(x): oneDNN fuses the pair as a swish post-op.
    x, out = lo.input(0), lo.output()
    gate = lo.temp(out)
    lo.emit("Sigmoid", [x], [gate])
    lo.emit("Multiply", [x, gate], [out], auto_broadcast="numpy")


@lowering("aten::relu")
def relu(lo: Lowering) -> None:
    x, out = lo.input(0), lo.output()
    if lo.finite(0):
        lo.emit("ReLU", [x], [out])
        return
    # oneDNN's ReLU (and Clamp) take max(x, 0) with an instruction that
    # returns 0 for NaN. Elu with alpha 0 keeps NaN and gives x for x > 0 and
    # 0 * (exp(x) - 1) = -0.0 below; Abs turns that into eager's +0.0. Both
    # fuse as post-ops, but oneDNN matches none of its residual-block
    # patterns (conv + bn + add + relu) with them.
    gated = lo.temp(out)
    lo.emit("Elu", [x], [gated], alpha=0.0)
    lo.emit("Abs", [gated], [out])


def _clamp(lo: Lowering, low: Any, high: Any) -> None:
    bounds = [b for b in (low, high) if b is not None]
    if any(not isinstance(b, (int, float)) or isinstance(b, bool) for b in bounds):
        raise Unsupported("clamp bounds that are not numbers")
    if any(not math.isfinite(b) for b in bounds):
        raise Unsupported("a clamp bound that is not finite")
    lo.emit("Clamp", [lo.input(0)], [lo.output()],
            min=float("-inf") if low is None else float(low),
            max=float("inf") if high is None else float(high))


@lowering("aten::clamp", "aten::hardtanh", finite_only=CLAMP_LOSES_NAN)
def clamp(lo: Lowering) -> None:
    # clamp(self, min?, max?) / hardtanh(self, min_val, max_val)
    _clamp(lo, lo.const(1), lo.const(2))


@lowering("aten::clamp_min", finite_only=CLAMP_LOSES_NAN)
def clamp_min(lo: Lowering) -> None:
    _clamp(lo, lo.const(1), None)


@lowering("aten::clamp_max", finite_only=CLAMP_LOSES_NAN)
def clamp_max(lo: Lowering) -> None:
    _clamp(lo, None, lo.const(1))


@lowering("aten::leaky_relu")
def leaky_relu(lo: Lowering) -> None:
    lo.emit("LeakyReLU", [lo.input(0)], [lo.output()], alpha=float(lo.const(1)))


@lowering("aten::elu")
def elu(lo: Lowering) -> None:
    # (self, alpha, scale, input_scale)
    if lo.n_inputs() > 2 and (lo.const(2) != 1 or lo.const(3) != 1):
        raise Unsupported("elu with scale or input_scale != 1")
    lo.emit("Elu", [lo.input(0)], [lo.output()], alpha=float(lo.const(1)))


@lowering("aten::pow")
def pow_scalar(lo: Lowering) -> None:
    exponent = lo.const(1)
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise Unsupported("pow with a tensor exponent")
    x, out = lo.input(0), lo.output()
    if exponent == 2:
        lo.emit("Square", [x], [out])
    elif exponent == 0.5:
        lo.emit("Sqrt", [x], [out])
    else:
        lo.emit("Pow", [x], [out], beta=float(exponent))


@lowering("aten::layer_norm", worth_alone=True)
def layer_norm(lo: Lowering) -> None:
    # (input, normalized_shape, weight?, bias?, eps, cudnn_enable)
    normalized = lo.const(1)
    if len(normalized) != 1:
        # oneDNN 3.12 takes one normalized dim only (v3.2 normalized the last
        # whatever begin_norm_axis said): the reason, rather than "not supported".
        raise Unsupported("layer_norm over more than one dim")
    if lo.is_none(2) != lo.is_none(3):
        raise Unsupported("layer_norm with only one of weight and bias")
    inputs = [lo.input(0)]
    if not lo.is_none(2):
        inputs += [lo.input(2), lo.input(3)]
    lo.emit("LayerNorm", inputs, [lo.output()], begin_norm_axis=-len(normalized),
            epsilon=float(lo.const(4)), keep_stats=False, use_affine=len(inputs) == 3)


def _channels_last(sizes: list[int], strides: list[int]) -> bool:
    """A 4-d or 5-d tensor dense with its channels innermost."""
    if len(sizes) not in (4, 5) or len(strides) != len(sizes):
        return False
    order = [0, *range(2, len(sizes)), 1]
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


@lowering("aten::softmax", "aten::_softmax", finite_only=SOFTMAX_OF_NONFINITE)
def softmax(lo: Lowering) -> None:
    # softmax(self, dim, dtype?) / _softmax(self, dim, half_to_float)
    if lo.n_inputs() > 2 and not lo.is_none(2) and lo.const(2) not in (False, None):
        raise Unsupported("softmax with a dtype")
    lo.emit("SoftMax", [lo.input(0)], [lo.output()], axis=int(lo.const(1)))


@lowering("aten::scaled_dot_product_attention", worth_alone=True)
def scaled_dot_product_attention(lo: Lowering) -> None:
    """MatMul -> Multiply (scale) -> Add or Select (mask) -> SoftMax -> MatMul, the pattern
    oneDNN compiles as one attention kernel. The softmax zeroes a row that the mask hides
    whole (`inf_as_zero`), as eager's attention does where a plain softmax gives NaN."""
    # (query, key, value, attn_mask?, dropout_p, is_causal, scale?, enable_gqa)
    if lo.const(4) != 0:
        raise Unsupported("attention with dropout")
    if lo.const(5):
        raise Unsupported("causal attention (is_causal=True)")
    if lo.n_inputs() > 7 and lo.const(7):
        raise Unsupported("grouped-query attention (enable_gqa=True)")
    q, k, v, out = lo.input(0), lo.input(1), lo.input(2), lo.output()
    qs, ks, vs = lo.sizes(0), lo.sizes(1), lo.sizes(2)
    if not (len(qs) == len(ks) == len(vs) == 4 and qs[:2] == ks[:2] == vs[:2]
            and qs[3] == ks[3] and ks[2] == vs[2]):
        raise Unsupported("attention over other than [batch, heads, sequence, dim] of one "
                          "batch and head count")
    dtype = lo.graph.tensors[q].dtype
    if any(lo.graph.tensors[t].dtype != dtype for t in (k, v, out)):
        raise Unsupported("query, key, value and result of different dtypes")
    if dtype == "f32":
        # Measured alone, 12 heads of 64, 2 threads of an AVX-512 EPYC: ATen's flash
        # attention took 0.60-0.92x oneDNN's time in fp32 from 64 to 1500 tokens; in bf16
        # oneDNN's took 1.00x (128 tokens) to 0.90x (1500) of ATen's.
        raise Unsupported("fp32 attention, which ATen's flash kernel runs faster than oneDNN's")
    if not all(lo.finite(i) for i in (0, 1, 2)):
        raise Unsupported(f"{SOFTMAX_OF_NONFINITE}, and its inputs are not proven finite")
    scale = None if lo.n_inputs() < 7 or lo.is_none(6) else float(lo.const(6))
    if scale is None:
        scale = 1.0 / math.sqrt(qs[3])
        lo.pin_shapes()  # the scale of the profiled head size
    # Eager keeps the scores in float32 for bf16 inputs.
    scores = [lo.temp(q, qs[:3] + [ks[2]], "f32") for _ in range(3)]
    lo.emit("MatMul", [q, k], [scores[0]], transpose_b=True)
    lo.emit("Multiply", [scores[0], lo.constant(torch.tensor([scale]))], [scores[1]],
            auto_broadcast="numpy")
    masked = scores[1]
    if not lo.is_none(3):
        mask = lo.mask_input(3)
        if lo.rank(3) > 4:
            raise Unsupported("a mask of rank above 4")
        masked = scores[2]
        if lo.graph.tensors[mask].dtype == "bool":
            hidden = lo.constant(torch.tensor([-math.inf]))
            lo.emit("Select", [mask, scores[1], hidden], [masked], auto_broadcast="numpy")
        else:
            if lo.graph.tensors[mask].dtype != dtype:
                raise Unsupported("a mask of another dtype than the query")
            if not lo.finite(3):
                # -inf is fine (the softmax's zero rows); NaN or +inf is not proven absent.
                raise Unsupported("a float mask not proven finite")
            lo.emit("Add", [scores[1], mask], [masked], auto_broadcast="numpy")
    weights = lo.temp(q, qs[:3] + [ks[2]])
    lo.emit("SoftMax", [masked], [weights], axis=-1, mode="inf_as_zero")
    lo.emit("MatMul", [weights, v], [out])


@lowering("aten::group_norm", worth_alone=True)
def group_norm(lo: Lowering) -> None:
    # (input, num_groups, weight?, bias?, eps, cudnn_enable)
    if lo.is_none(2) != lo.is_none(3):
        raise Unsupported("group_norm with only one of weight and bias")
    x = lo.graph.tensors[lo.input(0)]
    if not _channels_last(x.sizes or [], x.strides or []):
        # Measured on oneDNN 3.12: its group normalization is ref:any on plain layouts.
        raise Unsupported("group_norm of a tensor not in channels-last layout (oneDNN runs "
                          "that with its reference implementation)")
    inputs = [lo.input(0)]
    if not lo.is_none(2):
        inputs += [lo.input(2), lo.input(3)]
    lo.emit("GroupNorm", inputs, [lo.output()], groups=int(lo.const(1)),
            epsilon=float(lo.const(4)), keep_stats=False, use_affine=len(inputs) == 3,
            data_format="NCX")


def _pool_lists(lo: Lowering, kernel: int, stride: int, padding: int) -> dict[str, list[int]]:
    spatial = lo.rank(0) - 2
    if spatial != 2:
        raise Unsupported(f"{spatial + 2}-d pooling input")

    def expand(values: list[int], name: str) -> list[int]:
        values = list(values) if isinstance(values, (list, tuple)) else [values]
        if len(values) == 1:
            values = values * spatial
        if len(values) != spatial:
            raise Unsupported(f"pool {name} rank mismatch")
        return values

    k = expand(lo.const(kernel), "kernel")
    s = lo.const(stride)
    s = k if not s else expand(s, "stride")
    p = expand(lo.const(padding), "padding")
    return {"kernel": k, "strides": s, "pads_begin": p, "pads_end": p}


def _pin_ceil_mode(lo: Lowering, lists: dict[str, list[int]], dilations: list[int]) -> None:
    """oneDNN sizes a ceil_mode pool without ATen's rule that the last window
    starts inside the input or its left padding: take it only where the two
    agree, and only at the profiled sizes."""
    ours = [-(-(n + 2 * p - (k - 1) * d - 1) // s) + 1 for n, k, s, p, d in zip(
        lo.sizes(0)[2:], lists["kernel"], lists["strides"], lists["pads_begin"], dilations,
        strict=True)]
    if ours != lo.out_sizes()[2:]:
        raise Unsupported("ceil_mode pool whose last window starts in the padding")
    lo.pin_shapes()


@lowering("aten::max_pool2d", worth_alone=True, finite_only=MAX_POOL_LOSES_NAN)
def max_pool(lo: Lowering) -> None:
    # (self, kernel_size, stride, padding, dilation, ceil_mode)
    lists = _pool_lists(lo, 1, 2, 3)
    dilation = lo.const(4)
    dilations = list(dilation) if isinstance(dilation, (list, tuple)) else [dilation]
    if len(dilations) == 1:
        dilations = dilations * len(lists["kernel"])
    if any(d != 1 for d in dilations):
        # A dilated window may miss the input wholly: eager's -inf, oneDNN's -FLT_MAX.
        raise Unsupported("dilated max pooling (a window may hold no input element)")
    ceil = bool(lo.const(5))
    if ceil:
        _pin_ceil_mode(lo, lists, dilations)
    lo.emit("MaxPool", [lo.input(0)], [lo.output()], **lists, dilations=dilations,
            rounding_type="ceil" if ceil else "floor", data_format="NCX")


@lowering("aten::avg_pool2d", worth_alone=True)
def avg_pool(lo: Lowering) -> None:
    # (self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
    if lo.n_inputs() > 6 and not lo.is_none(6):
        raise Unsupported("avg_pool with divisor_override")
    lists = _pool_lists(lo, 1, 2, 3)
    ceil, count_pad = bool(lo.const(4)), bool(lo.const(5))
    if ceil and count_pad:
        # torch's divisor for a window past the padded input differs from
        # oneDNN's; take it only where ceil and floor agree on the size.
        floor_sizes = [(n + 2 * p - k) // s + 1 for n, k, s, p in zip(
            lo.sizes(0)[2:], lists["kernel"], lists["strides"], lists["pads_begin"], strict=True)]
        if floor_sizes != lo.out_sizes()[2:]:
            raise Unsupported("avg_pool ceil_mode window past the padded input")
        lo.pin_shapes()
        ceil = False
    if ceil:
        _pin_ceil_mode(lo, lists, [1, 1])
    lo.emit("AvgPool", [lo.input(0)], [lo.output()], **lists, exclude_pad=not count_pad,
            rounding_type="ceil" if ceil else "floor", data_format="NCX")


@lowering("aten::adaptive_avg_pool2d", worth_alone=True, static_shapes=True)
def adaptive_avg_pool2d(lo: Lowering) -> None:
    # A plain pool when the output size divides the input size.
    size = lo.sizes(0)
    if len(size) != 4:
        raise Unsupported("adaptive_avg_pool2d of a non-4-d input")
    out = lo.out_sizes()
    if any(i % o for i, o in zip(size[2:], out[2:], strict=True)):
        raise Unsupported("adaptive pool whose output size does not divide the input")
    kernel = [i // o for i, o in zip(size[2:], out[2:], strict=True)]
    lo.emit("AvgPool", [lo.input(0)], [lo.output()], kernel=kernel, strides=kernel,
            pads_begin=[0, 0], pads_end=[0, 0], exclude_pad=False, rounding_type="floor",
            data_format="NCX")


def _innermost(sizes: list[int], strides: list[int], dims: list[int]) -> bool:
    """Whether `dims` lie inside the others in memory (size-1 dims aside)."""
    rank = len(sizes)
    reduced = {d % rank for d in dims if sizes[d % rank] != 1}
    kept = [d for d in range(rank) if sizes[d] != 1 and d not in reduced]
    return all(strides[r] < strides[k] for r in reduced for k in kept)


@lowering("aten::mean")
def mean(lo: Lowering) -> None:
    # mean.dim(self, dim, keepdim, dtype?). Not worth a group alone: ATen's mean is as
    # fast, and a SE block's spatial mean on its own cost a group call.
    if lo.n_inputs() < 3:
        raise Unsupported("mean over all elements")
    if lo.n_inputs() > 3 and not lo.is_none(3):
        raise Unsupported("mean with a dtype")
    dims = lo.const(1)
    if not dims:
        raise Unsupported("mean over all elements")
    x = lo.graph.tensors[lo.input(0)]
    if not x.sizes or not x.strides or not _innermost(x.sizes, x.strides, list(dims)):
        # Measured on oneDNN 3.12: ref:any for a mean over the spatial dims of a
        # channels-last tensor, or over any dim but the innermost.
        raise Unsupported("mean over dims that are not the innermost in memory (oneDNN "
                          "runs that with its reference implementation)")
    lo.emit("ReduceMean", [lo.input(0)], [lo.output()], axes=list(dims),
            keep_dims=bool(lo.const(2)))


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
        raise Unsupported("a cast to the same dtype (an alias of its input)")
    if lo.graph.tensors[out].dtype == "f32" and lo.node.inputsAt(0).node().kind() in LOWERINGS:
        # oneDNN fuses an upcast into its producer, which then writes f32
        # without rounding to bf16 first as eager does.
        raise Unsupported("an upcast of a result a fused op may produce (keeps its rounding)")
    lo.emit("TypeCast", [x], [out])


# ---------------------------------------------------------------------------
# Quantization (PT2E's quantized_decomposed ops on plain u8/s8 tensors).

# TorchScript passes a dtype as its c10::ScalarType code.
_QUANTIZED_CODES = {0: torch.uint8, 1: torch.int8}
_FULL_RANGE = {torch.uint8: (0, 255), torch.int8: (-128, 127)}


def _quantized_dtype(lo: Lowering, qmin: int, qmax: int, dtype: int) -> torch.dtype:
    """The integer dtype of a quantize/dequantize; oneDNN saturates to the
    dtype's own range, so a narrower quant_min/quant_max is not mapped."""
    torch_dtype = _QUANTIZED_CODES.get(lo.const(dtype))
    if torch_dtype is None:
        raise Unsupported("quantized dtype other than uint8/int8")
    if (lo.const(qmin), lo.const(qmax)) != _FULL_RANGE[torch_dtype]:
        raise Unsupported("quant_min/quant_max narrower than the dtype")
    return torch_dtype


def _float_out(lo: Lowering, out_dtype: int | None) -> None:
    if out_dtype is not None and not lo.is_none(out_dtype) and lo.const(out_dtype) != 6:
        raise Unsupported("dequantize to another dtype than float32")


# Alone too: ATen's decomposed quantize is five passes over the tensor
# (mul, round, add, clamp, cast), oneDNN's one.
@lowering("quantized_decomposed::quantize_per_tensor", quantized=True, worth_alone=True,
          finite_only=QUANTIZE_OF_NAN)
def quantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype): round(x / scale) + zp, saturated
    _quantized_dtype(lo, 3, 4, 5)
    lo.emit("Quantize", [lo.input(0)], [lo.output()], qtype="per_tensor",
            scales=[float(lo.const(1))], zps=[int(lo.const(2))], axis=0)


@lowering("quantized_decomposed::dequantize_per_tensor", quantized=True, worth_alone=True)
def dequantize_per_tensor(lo: Lowering) -> None:
    # (input, scale, zero_point, quant_min, quant_max, dtype, out_dtype=None): (q - zp) * scale
    _quantized_dtype(lo, 3, 4, 5)
    _float_out(lo, 6 if lo.n_inputs() > 6 else None)
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_tensor",
            scales=[float(lo.const(1))], zps=[int(lo.const(2))], axis=0)


@lowering("quantized_decomposed::dequantize_per_channel", quantized=True)
def dequantize_per_channel(lo: Lowering) -> None:
    # (input, scales, zero_points, axis, quant_min, quant_max, dtype, out_dtype=None)
    _quantized_dtype(lo, 4, 5, 6)
    _float_out(lo, 7 if lo.n_inputs() > 7 else None)
    scales, zero_points = lo.const(1), lo.const(2)
    if not isinstance(scales, torch.Tensor) or not isinstance(zero_points, torch.Tensor):
        raise Unsupported("scales or zero points are not constant tensors")
    if scales.dim() != 1 or not bool(torch.isfinite(scales).all()):
        raise Unsupported("scales are not a finite vector")
    lo.emit("Dequantize", [lo.input(0)], [lo.output()], qtype="per_channel",
            scales=[float(s) for s in scales.float().tolist()],
            zps=[int(z) for z in zero_points.tolist()], axis=int(lo.const(3)))
