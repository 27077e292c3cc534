"""The aten -> cuDNN graph op table.

Every op cuDNN's runtime fusion engines can take has one entry: its class and
a lowering that emits IR nodes (ir.py) through a `Lowering` context
(lowering.py). Adding an op is one entry: a row in UNARY / BINARY, or a function
decorated with `@lowering(...)`. A lowering raises `Unsupported` with the reason
the fusion report shows when a node cannot be taken as it is.

Op classes (one-to-one, one-to-many and complicated ops, as TVM's fuse_ops splits them):
- ANCHOR: a convolution or matmul, the one compute op of a group,
- POINTWISE: one-to-one; joins an epilogue, and a prologue where `prologue`,
- REDUCTION: one-to-many; joins an epilogue only as its last op,
- anything not in LOWERINGS is complicated and stays with ATen.

Eager's semantics are the contract. Tensor operands must all have the
group's dtype (no type promotion inside a group). A constant number operand
(a Python number, or the 0-dim tensor prepare_binary makes of it) must be
exactly representable in that dtype: eager then computes with the same value
whether it rounds the number to the tensor's dtype (clamp) or not (mul on
CUDA). It is written as the node's attribute `scalar`, the node keeping IN_0
only: the builder binds it as a pass-by-value IN_1, the interpreter as a
number. Ops whose NaN behaviour in cuDNN differs from ATen's, or is not known on every
engine, are `finite_only`: they map only where passes/finiteness proves their first input
finite. special_values.py measures it per engine on a GPU.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from .lowering import Lowering, Unsupported


class OpClass(enum.Enum):
    ANCHOR = "anchor"
    POINTWISE = "pointwise"
    REDUCTION = "reduction"


@dataclass(frozen=True)
class Entry:
    op_class: OpClass
    lower: Callable[[Lowering], None]
    # Why cuDNN's op may differ from eager on NaN or infinity: mapped only on
    # an input proven finite.
    finite_only: str | None = None
    # May join a prologue on the conv X / matmul A operand (cuDNN's prologue
    # fusion: per-channel scale, bias and relu).
    prologue: bool = False
    # An anchor's IR rank: 4 for conv_fprop, 3 for matmul (batch, rows, cols).
    rank: int = 0


LOWERINGS: dict[str, Entry] = {}

# Measured on an H100 with cuDNN 9.19 (special_values.py): relu kept NaN on every engine
# offered for the shapes swept, which are not every engine; max/min and the max
# reduction turned NaN into numbers on every engine.
RELU_LOSES_NAN = "cuDNN's relu_fwd is known to keep NaN only on the engines measured"
MIN_MAX_LOSE_NAN = "cuDNN's max/min return the other operand for NaN (every engine measured)"
MAX_REDUCTION_LOSES_NAN = "cuDNN's max reduction skips NaN (every engine measured)"


def lowering(*kinds: str, op_class: OpClass = OpClass.POINTWISE, finite_only: str | None = None,
          prologue: bool = False, rank: int = 0) -> Callable:
    def register(fn: Callable[[Lowering], None]) -> Callable[[Lowering], None]:
        for kind in kinds:
            LOWERINGS[kind] = Entry(op_class, fn, finite_only, prologue, rank)
        return fn
    return register


def pointwise(lo: Lowering, mode: str, inputs: list[int], out: int, **attrs: object) -> None:
    lo.emit("pointwise", {f"IN_{i}": t for i, t in enumerate(inputs)}, {"OUT_0": out},
            mode=mode, **attrs)


# ---------------------------------------------------------------------------
# One-to-one ops.

# aten kind -> (cuDNN pointwise mode, may join a prologue, finite_only reason)
UNARY: dict[str, tuple[str, bool, str | None]] = {
    "aten::relu": ("relu_fwd", True, RELU_LOSES_NAN),
    "aten::sigmoid": ("sigmoid_fwd", False, None),
    "aten::tanh": ("tanh_fwd", False, None),
    "aten::silu": ("swish_fwd", False, None),
}

# aten kind -> (cuDNN pointwise mode, may join a prologue)
BINARY: dict[str, tuple[str, bool]] = {
    "aten::add": ("add", True),
    "aten::sub": ("sub", False),
    "aten::mul": ("mul", True),
    "aten::div": ("div", False),
}
_COMMUTATIVE = ("add", "mul")


def _unary(mode: str) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        pointwise(lo, mode, [lo.input(0)], lo.result())
    return lower


def _binary(mode: str) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        kind = lo.node.kind()
        if kind in ("aten::add", "aten::sub") and lo.n_inputs() > 2 and lo.const(2) != 1:
            raise Unsupported("alpha != 1")
        if kind == "aten::div" and lo.n_inputs() > 2 and not lo.is_none(2):
            raise Unsupported("div with a rounding mode")
        first, second = lo.scalar(0), lo.scalar(1)
        if first is not None and second is not None:
            raise Unsupported("two number operands")
        if first is not None:
            if mode not in _COMMUTATIVE:
                raise Unsupported(f"{mode} of a number by a tensor")
            pointwise(lo, mode, [lo.input(1)], lo.result(), scalar=first)
        elif second is not None:
            pointwise(lo, mode, [lo.input(0)], lo.result(), scalar=second)
        else:
            pointwise(lo, mode, [lo.input(0), lo.input(1)], lo.result())
    return lower


for _kind, (_mode, _prologue, _why) in UNARY.items():
    LOWERINGS[_kind] = Entry(OpClass.POINTWISE, _unary(_mode), _why, _prologue)
for _kind, (_mode, _prologue) in BINARY.items():
    LOWERINGS[_kind] = Entry(OpClass.POINTWISE, _binary(_mode), None, _prologue)


@lowering("aten::gelu")
def gelu(lo: Lowering) -> None:
    approximate = lo.const(1) if lo.n_inputs() > 1 else "none"
    modes = {"none": "gelu_fwd", "tanh": "gelu_approx_tanh_fwd"}
    if approximate not in modes:
        raise Unsupported(f"gelu approximate={approximate!r}")
    pointwise(lo, modes[approximate], [lo.input(0)], lo.result())


def _clamp(lo: Lowering, low: object, high: object) -> None:
    """clamp(x, low, high) = min(max(x, low), high), as ATen computes it (a
    low above high gives high)."""
    bounds = [b for b in (low, high) if b is not None]
    if not bounds:
        raise Unsupported("clamp without bounds")
    for b in bounds:
        if not isinstance(b, (int, float)) or isinstance(b, bool):
            raise Unsupported("clamp bounds that are not numbers")
        if not math.isfinite(b):
            raise Unsupported("a clamp bound that is not finite")
    x = lo.input(0)
    if low is not None and high is not None:
        floor = lo.temp()
        pointwise(lo, "max", [x], floor, scalar=lo.number(low))
        pointwise(lo, "min", [floor], lo.result(), scalar=lo.number(high))
    elif low is not None:
        pointwise(lo, "max", [x], lo.result(), scalar=lo.number(low))
    else:
        pointwise(lo, "min", [x], lo.result(), scalar=lo.number(high))


@lowering("aten::clamp", "aten::hardtanh", finite_only=MIN_MAX_LOSE_NAN)
def clamp(lo: Lowering) -> None:
    # clamp(self, min?, max?) / hardtanh(self, min_val, max_val)
    for i in (1, 2):
        if lo.is_tensor(i):
            raise Unsupported("clamp with tensor bounds")
    _clamp(lo, lo.const(1), lo.const(2))


@lowering("aten::relu6", finite_only=MIN_MAX_LOSE_NAN)
def relu6(lo: Lowering) -> None:
    _clamp(lo, 0.0, 6.0)


@lowering("aten::clamp_min", finite_only=MIN_MAX_LOSE_NAN)
def clamp_min(lo: Lowering) -> None:
    if lo.is_tensor(1):
        raise Unsupported("clamp with a tensor bound")
    _clamp(lo, lo.const(1), None)


@lowering("aten::clamp_max", finite_only=MIN_MAX_LOSE_NAN)
def clamp_max(lo: Lowering) -> None:
    if lo.is_tensor(1):
        raise Unsupported("clamp with a tensor bound")
    _clamp(lo, None, lo.const(1))


# ---------------------------------------------------------------------------
# Anchors: a convolution or a matmul, with the bias of conv/linear/addmm as an
# epilogue add.

def _pair(value: object, what: str) -> list[int]:
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        values *= 2
    if len(values) != 2 or not all(isinstance(v, int) for v in values):
        raise Unsupported(f"{what} {value!r} of a 2-d convolution")
    return values


def _conv(lo: Lowering, stride: int, padding: int, dilation: int, groups: int) -> None:
    if lo.rank(0) != 4 or lo.rank(1) != 4:
        raise Unsupported("not a 2-d convolution")
    if lo.const(groups) != 1:
        # cuDNN's graph API takes groups from the weight's dims; unverified here.
        raise Unsupported("grouped convolution")
    attrs = {"padding": _pair(lo.const(padding), "padding"),
             "stride": _pair(lo.const(stride), "stride"),
             "dilation": _pair(lo.const(dilation), "dilation")}
    if lo.is_none(2):
        lo.emit("conv_fprop", {"X": lo.input(0), "W": lo.input(1)}, {"Y": lo.result()}, **attrs)
        return
    y = lo.temp()
    lo.emit("conv_fprop", {"X": lo.input(0), "W": lo.input(1)}, {"Y": y}, **attrs)
    channels = lo.sizes(2)
    if len(channels) != 1:
        raise Unsupported("a convolution bias that is not 1-d")
    # The bias (C,) is read as (1, C, 1, 1): broadcast over batch and space.
    bias = lo.input(2, [1, channels[0], 1, 1], [0, lo.strides(2)[0], 0, 0])
    pointwise(lo, "add", [y, bias], lo.result())


@lowering("aten::_convolution", "aten::convolution", op_class=OpClass.ANCHOR, rank=4)
def convolution(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    if lo.const(6):
        raise Unsupported("transposed convolution")
    _conv(lo, stride=3, padding=4, dilation=5, groups=8)


@lowering("aten::conv2d", op_class=OpClass.ANCHOR, rank=4)
def conv2d(lo: Lowering) -> None:
    # (input, weight, bias, stride, padding, dilation, groups)
    _conv(lo, stride=3, padding=4, dilation=5, groups=6)


def _no_vectors(lo: Lowering, *inputs: int) -> None:
    if any(lo.rank(i) < 2 for i in inputs):
        raise Unsupported("matmul of a 1-d operand")


@lowering("aten::matmul", "aten::mm", "aten::bmm", op_class=OpClass.ANCHOR, rank=3)
def matmul(lo: Lowering) -> None:
    # Operands of rank 2 are read as a batch of one; batch dims broadcast.
    _no_vectors(lo, 0, 1)
    lo.emit("matmul", {"A": lo.input(0), "B": lo.input(1)}, {"C": lo.result()})


@lowering("aten::linear", op_class=OpClass.ANCHOR, rank=3)
def linear(lo: Lowering) -> None:
    # (input, weight, bias?): input @ weight.T + bias
    _no_vectors(lo, 0)
    if lo.rank(1) != 2:
        raise Unsupported("linear weight is not 2-d")
    (n, k), (stride_n, stride_k) = lo.sizes(1), lo.strides(1)
    # The weight [N, K] is B = weight.T, [1, K, N], by strides: no copy.
    b = lo.input(1, [1, k, n], [0, stride_k, stride_n])
    if lo.is_none(2):
        lo.emit("matmul", {"A": lo.input(0), "B": b}, {"C": lo.result()})
        return
    c = lo.temp()
    lo.emit("matmul", {"A": lo.input(0), "B": b}, {"C": c})
    pointwise(lo, "add", [c, lo.input(2)], lo.result())


@lowering("aten::addmm", op_class=OpClass.ANCHOR, rank=3)
def addmm(lo: Lowering) -> None:
    # (self, mat1, mat2, beta, alpha): self + mat1 @ mat2 (decompose splits other beta/alpha)
    if lo.const(3) != 1 or lo.const(4) != 1:
        raise Unsupported("addmm with alpha or beta != 1")
    _no_vectors(lo, 1, 2)
    c = lo.temp()
    lo.emit("matmul", {"A": lo.input(1), "B": lo.input(2)}, {"C": c})
    pointwise(lo, "add", [c, lo.input(0)], lo.result())


# ---------------------------------------------------------------------------
# Reductions: the epilogue's last op. cuDNN reduces the dims where the output
# has size 1: a convolution's channels ([N, 1, H, W]) or its per-channel
# column ([1, C, 1, 1]), a matmul's rows ([B, M, 1]).

def _reduction(mode: str, mean: bool = False) -> Callable[[Lowering], None]:
    def lower(lo: Lowering) -> None:
        # sum.dim_IntList / mean.dim(self, dim, keepdim, dtype?) / amax(self, dim, keepdim)
        if lo.n_inputs() < 3 or not lo.is_int_list(1):
            raise Unsupported("a reduction over all elements")
        if lo.n_inputs() > 3 and not lo.is_none(3):
            raise Unsupported("a reduction with a dtype")
        rank = lo.rank(0)
        dims = sorted({d % rank for d in lo.const(1)}) if rank else []
        if not dims:
            raise Unsupported("a reduction over all elements")
        x = lo.input(0)
        if mean:
            # The mean's division goes before the sum: cuDNN fuses nothing after it.
            count = math.prod(lo.sizes(0)[d] for d in dims)
            scaled = lo.temp(like=x)
            pointwise(lo, "mul", [x], scaled, scalar=lo.float32(1.0 / count))
            x = scaled
        lo.emit("reduction", {"X": x}, {"Y": lo.reduced(dims, bool(lo.const(2)))}, mode=mode)
    return lower


LOWERINGS["aten::sum"] = Entry(OpClass.REDUCTION, _reduction("add"))
LOWERINGS["aten::mean"] = Entry(OpClass.REDUCTION, _reduction("add", mean=True))
LOWERINGS["aten::amax"] = Entry(OpClass.REDUCTION, _reduction("max"), MAX_REDUCTION_LOSES_NAN)
