"""How the cuDNN catalog's patterns are written (the catalog: patterns.py).

Each pattern is IR text (parsed with torch._C.parse_ir) of a graph as the
pipeline hands it to the partitioner: profiled sizes, strides and device on
every tensor, number operands as 0-dim CPU constants of the result's dtype
(prepare_binary's form). Result types are what torch computes on meta tensors
(a convolution of a channels-last input is channels-last, as on CUDA).
Weights are graph inputs: a CPU build of torch cannot make CUDA constants.

A catalog module registers each pattern with `@PATTERNS.pattern(dtype, *groups,
refusal=...)` on a function that writes it with an `Ir`. `groups` lists, per
expected group in block order, its node kinds in block order; a refusal pattern
names in `refusal` a fragment of the reason `FusionReport.rejected` must give for
the ops left out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

DEVICE = "cuda:0"
CONV = "aten::_convolution"
HALF, BF16, FLOAT = torch.float16, torch.bfloat16, torch.float32
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
    if kind == CONV:
        # torch 2.11 sends a meta _convolution to convolution_overrideable, which has no
        # meta kernel; convolution, which takes _convolution's first nine arguments, has.
        kind, args = "aten::convolution", args[:9]
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

    # -- building blocks ---------------------------------------------------------

    def conv(self, x: str, w: str, b: str | None, kind: str = CONV, padding: int = 1,
             groups: int = 1, channels_last: bool = False) -> str:
        pair = [1, 1]
        bias = b if b is not None else self.const(None)
        if kind == "aten::conv2d":
            args = [x, w, bias, self.const(pair), self.const([padding] * 2), self.const(pair),
                    self.const(groups)]
        else:
            args = [x, w, bias, self.const(pair), self.const([padding] * 2), self.const(pair),
                    self.const(False), self.const([0, 0]), self.const(groups),
                    self.const(False), self.const(False), self.const(True), self.const(True)]
        return self.op(kind, *args, channels_last=channels_last)

    def conv_inputs(self, dtype: torch.dtype, channels_last: bool = False,
                    bias: bool = True) -> tuple[str, str, str | None]:
        """x [2, 16, 8, 8], weight [32, 16, 3, 3], bias [32]."""
        x = self.input(dtype, 2, 16, 8, 8, channels_last=channels_last)
        w = self.input(dtype, 32, 16, 3, 3, channels_last=channels_last)
        return x, w, self.input(dtype, 32) if bias else None

    def add(self, a: str, b: str) -> str:
        return self.op("aten::add", a, b, self.const(1))

    def linear(self, dtype: torch.dtype, *batch: int, bias: bool = True) -> str:
        """linear of x [*batch, 64] by weight [32, 64] (+ bias [32])."""
        x = self.input(dtype, *batch, 64)
        w = self.input(dtype, 32, 64)
        b = self.input(dtype, 32) if bias else self.const(None)
        return self.op("aten::linear", x, w, b)

    def bn_relu(self, x: str, dtype: torch.dtype, *channel_shape: int) -> str:
        """x * scale + shift, relu: an inference batch norm and relu, per channel."""
        scale, shift = self.input(dtype, *channel_shape), self.input(dtype, *channel_shape)
        return self.op("aten::relu", self.add(self.op("aten::mul", x, scale), shift))


Build = Callable[[Ir, torch.dtype], str]


class Catalog(dict[str, Pattern]):
    """Patterns by name."""

    def pattern(self, dtype: torch.dtype, *groups: tuple[str, ...], refusal: str = "",
                name: str | None = None) -> Callable[[Build], None]:
        """Register the IR a function writes (given a fresh Ir and the dtype) under its
        name, with the groups expected and the refusal the report gives."""
        def register(build: Build) -> None:
            key = name or build.__name__
            self[key] = Pattern(key, build(Ir(), dtype), dtype, tuple(groups), refusal)
        return register
