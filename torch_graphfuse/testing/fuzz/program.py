"""A case as an `nn.Module`: its seeded layers and constants, and its forward.

`Program` runs each op's rendered expression in order, so the same source is
what eager runs, what is traced for TorchScript and what a reproducer prints;
it grows and shrinks op by op for the generator.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
import torch.nn.functional as F
from torch import Tensor, nn

from torch_graphfuse.testing.fuzz.ops import render
from torch_graphfuse.testing.fuzz.spec import Case, Op, value_name


def _fill(module: nn.Module, seed: int, fan_in: int) -> None:
    """Seeded weights (the global RNG is left alone), scaled to keep magnitudes ~1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * fan_in ** -0.5)


def _batch_norm(a: dict[str, Any]) -> nn.Module:
    bn = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[a["rank"]]
    m = bn(a["channels"])
    g = torch.Generator().manual_seed(a["seed"])
    c = a["channels"]
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(c, generator=g))
        m.bias.copy_(0.3 * torch.randn(c, generator=g))
        m.running_mean.copy_(0.5 * torch.randn(c, generator=g))
        m.running_var.copy_(0.5 + torch.rand(c, generator=g))
    return m


class QuantizedWeight(nn.Module):
    """A conv or linear whose weight is per-output-channel symmetric s8 (scale
    amax / 127.5 floored at 2**-12, as torchao's x86 observer), dequantized in
    forward from module buffers: PT2E's converted form, which freezing folds."""

    def __init__(self, layer: nn.Conv1d | nn.Conv2d | nn.Conv3d | nn.Linear) -> None:
        super().__init__()
        w = layer.weight.detach()
        scales = (w.reshape(w.shape[0], -1).abs().amax(1) / 127.5).clamp(min=2.0 ** -12)
        zero_points = torch.zeros(w.shape[0], dtype=torch.int64)
        self.register_buffer("q", torch.ops.quantized_decomposed.quantize_per_channel(
            w, scales, zero_points, 0, -128, 127, torch.int8))
        self.register_buffer("scales", scales)
        self.register_buffer("zero_points", zero_points)
        layer.weight = None  # the float weight is the buffers' now
        self.layer = layer

    def weight(self) -> Tensor:
        return torch.ops.quantized_decomposed.dequantize_per_channel(
            self.q, self.scales, self.zero_points, 0, -128, 127, torch.int8)

    def forward(self, x: Tensor) -> Tensor:
        return layer_call(self.layer, x, self.weight(), self.layer.bias)


def layer_call(layer: nn.Module, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """A conv's or linear's function with another weight and bias."""
    if isinstance(layer, nn.Linear):
        return F.linear(x, weight, bias)
    return layer._conv_forward(x, weight, bias)  # type: ignore[operator]


def layer_weight(layer: nn.Module) -> Tensor:
    """The weight eager uses: a quantized one dequantized."""
    return layer.weight() if isinstance(layer, QuantizedWeight) else layer.weight


class RMSNormChain(nn.Module):
    """RMS normalization as Hugging Face writes it (passes/rms_norm folds it): T5's
    chain, or Llama's with its casts to float32 and back around it."""

    def __init__(self, dim: int, llama: bool, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.llama, self.eps = llama, eps

    def forward(self, x: Tensor) -> Tensor:
        dtype = x.dtype
        if self.llama:
            x = x.to(torch.float32)
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * (h.to(dtype) if self.llama else h)


def make_layer(op: Op) -> nn.Module | None:
    a = op.attrs
    if op.kind.startswith("conv"):
        conv = {"conv1d": nn.Conv1d, "conv2d": nn.Conv2d, "conv3d": nn.Conv3d}[op.kind]
        m = conv(a["cin"], a["cout"], a["kernel"], a["stride"], a["padding"], a["dilation"],
                 a["groups"], a["bias"])
        _fill(m, a["seed"], a["cin"] // a["groups"] * math.prod(a["kernel"]))
        return QuantizedWeight(m) if a.get("qweight") else m
    if op.kind == "linear":
        m = nn.Linear(a["fin"], a["fout"], a["bias"])
        _fill(m, a["seed"], a["fin"])
        return QuantizedWeight(m) if a.get("qweight") else m
    if op.kind == "batch_norm":
        return _batch_norm(a)
    if op.kind == "group_norm":
        m = nn.GroupNorm(a["groups"], a["channels"], affine=a["affine"])
        if a["affine"]:
            _fill(m, a["seed"], 1)
            with torch.no_grad():
                m.weight.add_(1.0)
        return m
    if op.kind == "rms_norm":
        m = RMSNormChain(a["dim"], a["llama"], a["eps"])
        _fill(m, a["seed"], 1)
        with torch.no_grad():
            m.weight.add_(1.0)
        return m
    if op.kind == "layer_norm":
        m = nn.LayerNorm(a["dim"], elementwise_affine=a["affine"], bias=a.get("bias", True))
        if a["affine"]:
            _fill(m, a["seed"], 1)
            with torch.no_grad():
                m.weight.add_(1.0)
        return m
    return None


def make_constant(op: Op) -> Tensor:
    """Away from zero (a divisor must be) with both signs."""
    g = torch.Generator().manual_seed(op.attrs["seed"])
    shape = op.attrs["shape"]
    sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
    return sign * (0.5 + torch.rand(shape, generator=g))


_GLOBALS = {"torch": torch, "F": F}


class Program(nn.Module):
    """The case as an nn.Module: forward runs each op's Python expression in order."""

    def __init__(self, n_inputs: int, ops: Sequence[Op] = (), outputs: Sequence[int] = ()) -> None:
        super().__init__()
        self.n_inputs = n_inputs
        self.lines: list[tuple[str, str, Any]] = []  # (name, source, code)
        self.outputs = list(outputs)
        for op in ops:
            self.add_op(op)

    def name(self, index: int) -> str:
        return value_name(self.n_inputs, index)

    def add_op(self, op: Op) -> str:
        index = self.n_inputs + len(self.lines)
        if op.kind == "const":
            self.register_buffer(f"c{index}", make_constant(op))
        elif "reuse" not in op.attrs and (layer := make_layer(op)) is not None:
            self.add_module(f"m{index}", layer)
        src = render(op, [self.name(i) for i in op.args], index)
        self.lines.append((self.name(index), src, compile(src, f"<{self.name(index)}>", "eval")))
        return src

    def pop_op(self) -> None:
        name = self.lines.pop()[0]
        for attr in (f"c{name[1:]}", f"m{name[1:]}"):
            if hasattr(self, attr):
                delattr(self, attr)

    def step(self, env: dict[str, Any], i: int) -> Tensor:
        name, _, code = self.lines[i]
        env[name] = eval(code, _GLOBALS, env)
        return env[name]

    def forward(self, *xs: Tensor) -> Tensor | tuple[Tensor, ...]:
        env: dict[str, Any] = {self.name(i): x for i, x in enumerate(xs)}
        env["self"] = self
        for i in range(len(self.lines)):
            self.step(env, i)
        outs = tuple(env[self.name(v)] for v in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def source(self) -> str:
        args = ", ".join(self.name(i) for i in range(self.n_inputs))
        lines = [f"def forward(self, {args}):"]
        for name, src, _ in self.lines:
            lines.append(f"    {name} = {src}")
        lines.append(f"    return {', '.join(self.name(v) for v in self.outputs)}")
        return "\n".join(lines)


def build_program(case: Case) -> Program:
    return Program(len(case.inputs), case.ops, case.outputs).eval()
