"""A catalog of CUDA-typed TorchScript graphs for the cuDNN backend's tests.

    import patterns                          # test/cudnn is on sys.path under pytest
    for name, pattern in patterns.PATTERNS.items():
        g = patterns.graph(pattern)          # typed on cuda:0: what a GPU profile gives
        g_cpu = patterns.cpu_graph(pattern)  # the same graph typed on cpu
        xs = patterns.example_inputs(g_cpu)  # random CPU tensors of the inputs' types
        pattern.groups                       # the cuDNN groups expected, as node kinds
        pattern.refusal                      # a reason the report must give, or ""

Each pattern is IR text (parsed with torch._C.parse_ir) of a graph as the
pipeline hands it to the partitioner: profiled sizes, strides and device on
every tensor, number operands as 0-dim CPU constants of the result's dtype
(prepare_binary's form). Result types are what torch computes on meta tensors
(a convolution of a channels-last input is channels-last, as on CUDA).
Weights are graph inputs: a CPU build of torch cannot make CUDA constants.

`groups` lists, per expected group in block order, its node kinds in block
order; a refusal pattern names in `refusal` a fragment of the reason
`FusionReport.rejected` must give for the ops left out. PATTERNS covers every
pattern the cuDNN backend fuses: conv2d (NCHW and channels-last, `_convolution` and
`conv2d`) and matmul / bmm / linear / addmm anchors; epilogues bias, residual
add, scale, relu, gelu (erf and tanh), sigmoid, tanh, silu, clamp / relu6 and
a final channel / row reduction (sum, mean, max); the scale + bias + relu
prologue on the conv X / matmul A; float16, bfloat16 and float32; and the
refusals (prologue on the weight, two reductions, a reduction mid-DAG, a
cycle, pointwise only, a convolution that is not channels_last with more than
cuDNN fuses there, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DEVICE = "cuda:0"
_TYPE_NAMES = {torch.float16: "Half", torch.bfloat16: "BFloat16", torch.float32: "Float"}


@dataclass(frozen=True)
class Pattern:
    name: str
    ir: str  # IR text, tensors typed on cuda:0
    dtype: torch.dtype
    groups: tuple[tuple[str, ...], ...]  # per expected group: its node kinds, block order
    refusal: str = ""  # a fragment of the reason the report gives for what stays out


def graph(pattern: Pattern) -> torch._C.Graph:
    """The pattern's graph, typed on cuda:0."""
    return torch._C.parse_ir(pattern.ir, parse_tensor_constants=True)


def cpu_graph(pattern: Pattern) -> torch._C.Graph:
    """The same graph with every tensor typed on the CPU."""
    return torch._C.parse_ir(pattern.ir.replace(f"device={DEVICE}", "device=cpu"),
                             parse_tensor_constants=True)


def example_inputs(g: torch._C.Graph, seed: int = 0) -> list[torch.Tensor]:
    """Random CPU tensors with the sizes, strides and dtypes of g's inputs."""
    gen = torch.Generator().manual_seed(seed)
    inputs = []
    for v in g.inputs():
        t = v.type()
        base = torch.randn(t.sizes(), generator=gen).to(t.dtype())
        out = torch.empty_strided(t.sizes(), t.strides(), dtype=t.dtype())
        inputs.append(out.copy_(base))
    return inputs


def _type(t: torch.Tensor, device: str = DEVICE) -> str:
    name = _TYPE_NAMES[t.dtype]
    if t.dim() == 0:
        return f"{name}(requires_grad=0, device={device})"
    sizes = ", ".join(map(str, t.shape))
    return (f"{name}({sizes}, strides={list(t.stride())}, requires_grad=0, "
            f"device={device})")


def _meta_call(kind: str, args: list[Any]) -> torch.Tensor:
    """Run an aten op on meta tensors, binding keyword-only arguments by schema."""
    packet = getattr(torch.ops.aten, kind.split("::")[1])
    errors = []
    for name in packet.overloads():
        op = getattr(packet, name)
        params = op._schema.arguments
        positional = [p for p in params if not p.kwarg_only]
        keyword = {p.name: a for p, a in zip(params[len(positional):],
                                             args[len(positional):], strict=False)}
        try:
            return op(*args[:len(positional)], **keyword)
        except (RuntimeError, TypeError) as e:
            errors.append(f"{name}: {e}")
    raise ValueError(f"no overload of {kind} takes these arguments: {errors}")


class Ir:
    """Writes one graph's IR text; op results are typed as meta tensors say."""

    def __init__(self) -> None:
        self._params: list[str] = []
        self._lines: list[str] = []
        self._values: dict[str, Any] = {}

    def _name(self, value: Any) -> str:
        name = f"%v{len(self._values)}"
        self._values[name] = value
        return name

    def input(self, dtype: torch.dtype, *sizes: int, channels_last: bool = False) -> str:
        t = torch.empty(sizes, dtype=dtype, device="meta")
        if channels_last:
            t = t.contiguous(memory_format=torch.channels_last)
        name = self._name(t)
        self._params.append(f"{name} : {_type(t)}")
        return name

    def const(self, value: Any) -> str:
        """A constant argument: None, bool, int, float, str or an int list."""
        name = self._name(value)
        if value is None:
            self._lines.append(f"{name} : NoneType = prim::Constant()")
            return name
        if isinstance(value, bool):
            kind, text = "bool", str(int(value))
        elif isinstance(value, int):
            kind, text = "int", str(value)
        elif isinstance(value, float):
            kind, text = "float", repr(value)
        elif isinstance(value, str):
            kind, text = "str", f'"{value}"'
        else:
            kind, text = "int[]", str(list(value))
        self._lines.append(f"{name} : {kind} = prim::Constant[value={text}]()")
        return name

    def number(self, value: float, dtype: torch.dtype) -> str:
        """A number operand as prepare_binary leaves it: a 0-dim CPU tensor constant."""
        t = torch.tensor(value, dtype=dtype)
        name = self._name(t)
        self._lines.append(f"{name} : {_type(t, 'cpu')} = prim::Constant[value={{{value}}}]()")
        return name

    def op(self, kind: str, *args: str, channels_last: bool = False) -> str:
        result = _meta_call(kind, [self._values[a] for a in args])
        if channels_last:
            result = result.contiguous(memory_format=torch.channels_last)
        name = self._name(result)
        self._lines.append(f"{name} : {_type(result)} = {kind}({', '.join(args)})")
        return name

    def text(self, *outputs: str) -> str:
        body = "".join(f"  {line}\n" for line in self._lines)
        return (f"graph({', '.join(self._params)}):\n{body}"
                f"  return ({', '.join(outputs)})\n")


PATTERNS: dict[str, Pattern] = {}

CONV = "aten::_convolution"
HALF, BF16, FLOAT = torch.float16, torch.bfloat16, torch.float32


def pattern(dtype: torch.dtype, *groups: tuple[str, ...], refusal: str = "",
            name: str | None = None) -> Callable[[Callable[[Ir, torch.dtype], str]], None]:
    """Register the IR a function writes (given a fresh Ir and the dtype) under its name."""
    def register(build: Callable[[Ir, torch.dtype], str]) -> None:
        key = name or build.__name__
        PATTERNS[key] = Pattern(key, build(Ir(), dtype), dtype, tuple(groups), refusal)
    return register


# -- building blocks ------------------------------------------------------------

def conv(ir: Ir, x: str, w: str, b: str | None, kind: str = CONV, padding: int = 1,
         groups: int = 1, channels_last: bool = False) -> str:
    pair = [1, 1]
    bias = b if b is not None else ir.const(None)
    if kind == "aten::conv2d":
        args = [x, w, bias, ir.const(pair), ir.const([padding] * 2), ir.const(pair),
                ir.const(groups)]
    else:
        args = [x, w, bias, ir.const(pair), ir.const([padding] * 2), ir.const(pair),
                ir.const(False), ir.const([0, 0]), ir.const(groups), ir.const(False),
                ir.const(False), ir.const(True), ir.const(True)]
    return ir.op(kind, *args, channels_last=channels_last)


def conv_inputs(ir: Ir, dtype: torch.dtype, channels_last: bool = False,
                bias: bool = True) -> tuple[str, str, str | None]:
    """x [2, 16, 8, 8], weight [32, 16, 3, 3], bias [32]."""
    x = ir.input(dtype, 2, 16, 8, 8, channels_last=channels_last)
    w = ir.input(dtype, 32, 16, 3, 3, channels_last=channels_last)
    return x, w, ir.input(dtype, 32) if bias else None


def add(ir: Ir, a: str, b: str) -> str:
    return ir.op("aten::add", a, b, ir.const(1))


def linear(ir: Ir, dtype: torch.dtype, *batch: int, bias: bool = True) -> str:
    """linear of x [*batch, 64] by weight [32, 64] (+ bias [32])."""
    x = ir.input(dtype, *batch, 64)
    w = ir.input(dtype, 32, 64)
    b = ir.input(dtype, 32) if bias else ir.const(None)
    return ir.op("aten::linear", x, w, b)


# -- convolution anchors ----------------------------------------------------------

for _dtype, _suffix in ((HALF, "half"), (BF16, "bf16"), (FLOAT, "float")):
    @pattern(_dtype, (CONV, "aten::relu"), name=f"conv_bias_relu_{_suffix}")
    def _conv_bias_relu(ir: Ir, dtype: torch.dtype) -> str:
        return ir.text(ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype))))


@pattern(HALF, (CONV, "aten::relu"))
def conv_bias_relu_channels_last_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::relu", y))


# Epilogues beyond a bias and one relu / tanh / sigmoid are channels_last: cuDNN
# fuses them with no other convolution layout (the refuse_nchw_* patterns).

@pattern(BF16, ("aten::conv2d", "aten::add", "aten::relu"))
def conv2d_residual_add_relu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype, channels_last=True)
    residual = ir.input(dtype, 2, 32, 8, 8, channels_last=True)
    y = conv(ir, x, w, b, kind="aten::conv2d", channels_last=True)
    return ir.text(ir.op("aten::relu", add(ir, y, residual)))


@pattern(HALF, (CONV, "aten::mul", "aten::tanh"))
def conv_scale_tanh_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True, bias=False), channels_last=True)
    return ir.text(ir.op("aten::tanh", ir.op("aten::mul", y, ir.number(0.5, dtype))))


@pattern(BF16, (CONV, "aten::mul", "aten::sigmoid"))
def conv_mul_channel_scale_sigmoid_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype, channels_last=True)
    scale = ir.input(dtype, 32, 1, 1)
    y = conv(ir, x, w, b, channels_last=True)
    return ir.text(ir.op("aten::sigmoid", ir.op("aten::mul", y, scale)))


for _approx in ("none", "tanh"):
    @pattern(HALF, (CONV, "aten::gelu"), name=f"conv_gelu_{_approx}_half")
    def _conv_gelu(ir: Ir, dtype: torch.dtype, approximate: str = _approx) -> str:
        y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
        return ir.text(ir.op("aten::gelu", y, ir.const(approximate)))


@pattern(FLOAT, (CONV, "aten::sigmoid"))
def conv_sigmoid_float(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::sigmoid", conv(ir, *conv_inputs(ir, dtype))))


@pattern(HALF, (CONV, "aten::silu"))
def conv_silu_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::silu", y))


@pattern(HALF, (CONV, "aten::sigmoid", "aten::mul"))
def conv_swish_diamond_half(ir: Ir, dtype: torch.dtype) -> str:
    # y * sigmoid(y): two paths from the conv meet at the mul, its post-dominator.
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::mul", y, ir.op("aten::sigmoid", y)))


@pattern(HALF, (CONV, "aten::hardtanh"))
def conv_relu6_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::hardtanh", y, ir.const(0.0), ir.const(6.0)))


@pattern(BF16, (CONV, "aten::clamp"))
def conv_clamp_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::clamp", y, ir.const(-1.0), ir.const(1.5)))


@pattern(HALF, (CONV, "aten::relu", "aten::sum"))
def conv_relu_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@pattern(FLOAT, (CONV, "aten::mean"))
def conv_channel_mean_float(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype))
    return ir.text(ir.op("aten::mean", y, ir.const([1]), ir.const(False), ir.const(None)))


@pattern(HALF, (CONV, "aten::amax"))
def conv_channel_max_channels_last_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(ir.op("aten::amax", y, ir.const([1]), ir.const(False)))


@pattern(BF16, (CONV, "aten::sum"))
def conv_per_channel_sum_bf16(ir: Ir, dtype: torch.dtype) -> str:
    # The column reduction: every (n, h, w) summed into one value per channel.
    y = conv(ir, *conv_inputs(ir, dtype))
    return ir.text(ir.op("aten::sum", y, ir.const([0, 2, 3]), ir.const(True), ir.const(None)))


def _bn_relu(ir: Ir, x: str, dtype: torch.dtype, *channel_shape: int) -> str:
    """x * scale + shift, relu: an inference batch norm and relu, per channel."""
    scale, shift = ir.input(dtype, *channel_shape), ir.input(dtype, *channel_shape)
    return ir.op("aten::relu", add(ir, ir.op("aten::mul", x, scale), shift))


@pattern(HALF, ("aten::mul", "aten::add", "aten::relu", CONV, "aten::relu"))
def bn_relu_prologue_conv_relu_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype, channels_last=True)
    y = conv(ir, _bn_relu(ir, x, dtype, 1, 16, 1, 1), w, b, channels_last=True)
    return ir.text(ir.op("aten::relu", y))


@pattern(BF16, ("aten::mul", "aten::add", "aten::relu", CONV))
def bn_relu_prologue_conv_channels_last_bf16(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype, channels_last=True)
    return ir.text(conv(ir, _bn_relu(ir, x, dtype, 16, 1, 1), w, b, channels_last=True))


# -- matmul anchors ----------------------------------------------------------------

@pattern(HALF, ("aten::linear", "aten::gelu"))
def linear_bias_gelu_half(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::gelu", linear(ir, dtype, 8), ir.const("none")))


@pattern(BF16, ("aten::linear", "aten::gelu"))
def linear_3d_gelu_tanh_bf16(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::gelu", linear(ir, dtype, 2, 8), ir.const("tanh")))


@pattern(BF16, ("aten::linear", "aten::add"))
def linear_3d_residual_add_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = linear(ir, dtype, 2, 8)
    return ir.text(add(ir, y, ir.input(dtype, 2, 8, 32)))


@pattern(FLOAT, ("aten::matmul", "aten::tanh"))
def matmul_tanh_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    return ir.text(ir.op("aten::tanh", ir.op("aten::matmul", a, b)))


@pattern(HALF, ("aten::bmm", "aten::div", "aten::add"))
def bmm_scale_mask_half(ir: Ir, dtype: torch.dtype) -> str:
    # Attention scores: q @ k.T / 8 + a mask broadcast over the rows.
    q, k = ir.input(dtype, 2, 8, 64), ir.input(dtype, 2, 64, 16)
    mask = ir.input(dtype, 2, 1, 16)
    scores = ir.op("aten::div", ir.op("aten::bmm", q, k), ir.number(8.0, dtype))
    return ir.text(add(ir, scores, mask))


@pattern(HALF, ("aten::addmm", "aten::relu"))
def addmm_relu_half(ir: Ir, dtype: torch.dtype) -> str:
    bias, a, b = ir.input(dtype, 32), ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    y = ir.op("aten::addmm", bias, a, b, ir.const(1), ir.const(1))
    return ir.text(ir.op("aten::relu", y))


@pattern(FLOAT, ("aten::mm", "aten::sub", "aten::clamp_min"))
def mm_sub_clamp_min_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 8, 64), ir.input(dtype, 64, 32)
    y = ir.op("aten::sub", ir.op("aten::mm", a, b), ir.input(dtype, 8, 32), ir.const(1))
    return ir.text(ir.op("aten::clamp_min", y, ir.const(0.25)))


@pattern(BF16, ("aten::linear", "aten::silu"))
def linear_silu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(ir.op("aten::silu", linear(ir, dtype, 8)))


@pattern(HALF, ("aten::linear", "aten::relu", "aten::sum"))
def linear_relu_row_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = ir.op("aten::relu", linear(ir, dtype, 8))
    return ir.text(ir.op("aten::sum", y, ir.const([-1]), ir.const(False), ir.const(None)))


@pattern(BF16, ("aten::linear", "aten::amax"))
def linear_3d_row_max_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = linear(ir, dtype, 2, 8)
    return ir.text(ir.op("aten::amax", y, ir.const([2]), ir.const(True)))


@pattern(FLOAT, ("aten::matmul", "aten::mean"))
def matmul_row_mean_float(ir: Ir, dtype: torch.dtype) -> str:
    a, b = ir.input(dtype, 2, 8, 64), ir.input(dtype, 2, 64, 32)
    y = ir.op("aten::matmul", a, b)
    return ir.text(ir.op("aten::mean", y, ir.const([-1]), ir.const(True), ir.const(None)))


@pattern(HALF, ("aten::mul", "aten::add", "aten::relu", "aten::linear"))
def bn_relu_prologue_linear_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 8, 64)
    w, b = ir.input(dtype, 32, 64), ir.input(dtype, 32)
    return ir.text(ir.op("aten::linear", _bn_relu(ir, x, dtype, 64), w, b))


# -- refusals ----------------------------------------------------------------------

@pattern(HALF, (CONV, "aten::relu"), refusal="prologue on the weight")
def refuse_prologue_on_weight_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype)
    w = ir.op("aten::mul", w, ir.input(dtype, 32, 1, 1, 1))
    return ir.text(ir.op("aten::relu", conv(ir, x, w, b)))


@pattern(HALF, (CONV, "aten::sum"), refusal="one reduction, as the last op")
def refuse_second_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype))
    total = ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::amax", total, ir.const([2]), ir.const(True)))


@pattern(HALF, (CONV, "aten::sum"), refusal="one reduction, as the last op")
def refuse_op_after_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype))
    total = ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::relu", total))


@pattern(HALF, refusal="reduction that is not the group's last op")
def refuse_reduction_mid_dag_half(ir: Ir, dtype: torch.dtype) -> str:
    # y - mean(y): the reduction sits on one of two paths that meet again.
    y = conv(ir, *conv_inputs(ir, dtype))
    mean = ir.op("aten::mean", y, ir.const([1]), ir.const(True), ir.const(None))
    return ir.text(ir.op("aten::sub", y, mean, ir.const(1)))


@pattern(HALF, (CONV, "aten::relu"), refusal="cycle")
def refuse_cycle_half(ir: Ir, dtype: torch.dtype) -> str:
    # relu(conv) + softmax(relu(conv)): the add would close a loop through softmax.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    soft = ir.op("aten::softmax", y, ir.const(1), ir.const(None))
    return ir.text(add(ir, y, soft))


@pattern(HALF, refusal="pointwise-only")
def refuse_pointwise_only_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 2, 16, 8, 8)
    return ir.text(ir.op("aten::mul", ir.op("aten::tanh", x), ir.op("aten::sigmoid", x)))


@pattern(HALF, refusal="lone convolution or matmul")
def refuse_lone_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    return ir.text(conv(ir, *conv_inputs(ir, dtype)))


@pattern(HALF, (CONV, "aten::div"), refusal="not proven finite")
def refuse_relu_not_proven_finite_half(ir: Ir, dtype: torch.dtype) -> str:
    # Division by a tensor can make inf or NaN: the relu after it stays with ATen.
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    y = ir.op("aten::div", y, ir.input(dtype, 2, 32, 8, 8, channels_last=True))
    return ir.text(ir.op("aten::relu", y))


@pattern(HALF, (CONV, "aten::relu"), refusal="read outside the group")
def refuse_prologue_value_used_outside_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype)
    act = _bn_relu(ir, x, dtype, 1, 16, 1, 1)
    return ir.text(ir.op("aten::relu", conv(ir, act, w, b)), act)


@pattern(FLOAT, (CONV, "aten::relu"), refusal="a prologue in a float32 group")
def refuse_prologue_float(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype)
    x = ir.op("aten::relu", ir.op("aten::mul", x, ir.input(dtype, 1, 16, 1, 1)))
    return ir.text(ir.op("aten::relu", conv(ir, x, w, b)))


@pattern(HALF, ("aten::linear", "aten::relu"), refusal="two full-size operands")
def refuse_prologue_full_operand_half(ir: Ir, dtype: torch.dtype) -> str:
    # x * y of two activations is not a per-column scale of A.
    x, y = ir.input(dtype, 8, 64), ir.input(dtype, 8, 64)
    w, b = ir.input(dtype, 32, 64), ir.input(dtype, 32)
    a = ir.op("aten::mul", x, y)
    return ir.text(ir.op("aten::relu", ir.op("aten::linear", a, w, b)))


@pattern(HALF, refusal="grouped convolution")
def refuse_grouped_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    x = ir.input(dtype, 2, 16, 8, 8)
    w, b = ir.input(dtype, 32, 8, 3, 3), ir.input(dtype, 32)
    return ir.text(ir.op("aten::relu", conv(ir, x, w, b, groups=2)))


@pattern(HALF, (CONV, "aten::relu"), refusal="second output")
def refuse_fork_half(ir: Ir, dtype: torch.dtype) -> str:
    # relu's result is returned and also read by a tanh: the tanh would be a second output.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(y, ir.op("aten::tanh", y))


@pattern(HALF, (CONV, "aten::relu"), refusal="cuDNN reduces")
def refuse_spatial_reduction_half(ir: Ir, dtype: torch.dtype) -> str:
    # A sum over (h, w) is neither a channel nor a per-channel reduction.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(ir.op("aten::sum", y, ir.const([2, 3]), ir.const(True), ir.const(None)))


@pattern(HALF, (CONV, "aten::relu"), refusal="has dtype torch.float32")
def refuse_type_promotion_half(ir: Ir, dtype: torch.dtype) -> str:
    # half + float32 is float32 in eager: no group computes in two dtypes.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(add(ir, y, ir.input(FLOAT, 2, 32, 8, 8)))


@pattern(HALF, (CONV, "aten::relu"), refusal="not exact in half")
def refuse_inexact_number_half(ir: Ir, dtype: torch.dtype) -> str:
    # 0.1 has no float16: eager's value for it differs between kernels.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(ir.op("aten::mul", y, ir.const(0.1)))


# -- convolutions that are not channels_last: cuDNN fuses a bias and one relu, tanh
# or sigmoid, or broadcast operands before a final reduction, and no prologue.

@pattern(HALF, (CONV, "aten::relu"), refusal="an operand of the result's size on a convolution")
def refuse_nchw_conv_relu_residual_add_half(ir: Ir, dtype: torch.dtype) -> str:
    # The group grows as far as cuDNN fuses: bias + relu; the add stays with ATen.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(add(ir, y, ir.input(dtype, 2, 32, 8, 8)))


@pattern(BF16, refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_gelu_bf16(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype))
    return ir.text(ir.op("aten::gelu", y, ir.const("none")))


@pattern(FLOAT, refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_relu_without_bias_float(ir: Ir, dtype: torch.dtype) -> str:
    # cuDNN's NCHW engines fuse an activation only after a bias.
    return ir.text(ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype, bias=False))))


@pattern(HALF, (CONV, "aten::relu"), refusal="a prologue on a convolution that is not")
def refuse_nchw_prologue_half(ir: Ir, dtype: torch.dtype) -> str:
    x, w, b = conv_inputs(ir, dtype)
    y = conv(ir, _bn_relu(ir, x, dtype, 1, 16, 1, 1), w, b)
    return ir.text(ir.op("aten::relu", y))


@pattern(HALF, (CONV, "aten::relu", "aten::mul", "aten::sum"))
def nchw_conv_relu_scale_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    # Broadcast operands before a final reduction fuse in NCHW.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    y = ir.op("aten::mul", y, ir.input(dtype, 32, 1, 1))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@pattern(BF16, (CONV, "aten::sigmoid", "aten::mul", "aten::amax"))
def nchw_conv_swish_channel_max_bf16(ir: Ir, dtype: torch.dtype) -> str:
    # Two paths that meet again, before a final reduction, fuse in NCHW too.
    y = conv(ir, *conv_inputs(ir, dtype))
    y = ir.op("aten::mul", y, ir.op("aten::sigmoid", y))
    return ir.text(ir.op("aten::amax", y, ir.const([1]), ir.const(True)))


@pattern(HALF, (CONV, "aten::relu"), refusal="not channels_last (cuDNN fuses only")
def refuse_nchw_conv_relu_scale_tanh_half(ir: Ir, dtype: torch.dtype) -> str:
    # As above with no reduction to end it: the group keeps the longest part
    # cuDNN fuses, bias + relu.
    y = ir.op("aten::relu", conv(ir, *conv_inputs(ir, dtype)))
    return ir.text(ir.op("aten::tanh", ir.op("aten::mul", y, ir.input(dtype, 32, 1, 1))))


@pattern(HALF, refusal="an operand of the result's size on a convolution")
def refuse_nchw_residual_add_channel_sum_half(ir: Ir, dtype: torch.dtype) -> str:
    y = add(ir, conv(ir, *conv_inputs(ir, dtype)), ir.input(dtype, 2, 32, 8, 8))
    return ir.text(ir.op("aten::sum", y, ir.const([1]), ir.const(True), ir.const(None)))


@pattern(HALF, (CONV, "aten::relu"), refusal="not channels_last in a channels_last")
def refuse_nchw_residual_on_channels_last_conv_half(ir: Ir, dtype: torch.dtype) -> str:
    y = conv(ir, *conv_inputs(ir, dtype, channels_last=True), channels_last=True)
    return ir.text(add(ir, ir.op("aten::relu", y), ir.input(dtype, 2, 32, 8, 8)))
