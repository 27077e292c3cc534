"""The int8 tests' modules: PT2E's quantized form written by hand (quantize/dequantize
ops on plain u8/s8 tensors, per-channel s8 weights), and the check against eager
within one quantization step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.ao.quantization.fx._decomposed  # noqa: F401 (registers quantized_decomposed)
from fusion_check import eager, fuse
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.testing import runner

qd = torch.ops.quantized_decomposed

# Without VNNI, oneDNN's u8 x s8 products saturate in int16: int8 convolutions and
# linears then stay with ATen (exact).
VNNI = torch_graphfuse.onednn_info()["vnni"]


def fused_where_vnni(groups: int) -> int:
    """How many int8 compute groups form on this CPU, where `groups` form with VNNI."""
    return groups if VNNI else 0

DEQUANTIZE = "quantized_decomposed::dequantize_per_tensor"
QUANTIZE = "quantized_decomposed::quantize_per_tensor"
WEIGHT = "quantized_decomposed::dequantize_per_channel"


@dataclass(frozen=True)
class Act:
    """Per-tensor quantization of an activation."""

    scale: float
    zero_point: int
    dtype: torch.dtype = torch.uint8
    quant_max: int | None = None  # a u8 range narrower than the dtype's (PT2E's reduce_range)

    @property
    def bounds(self) -> tuple[int, int]:
        if self.dtype == torch.uint8:
            return 0, 255 if self.quant_max is None else self.quant_max
        return -128, 127

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        return qd.quantize_per_tensor(x, self.scale, self.zero_point, *self.bounds, self.dtype)

    def dequantize(self, q: torch.Tensor) -> torch.Tensor:
        return qd.dequantize_per_tensor(q, self.scale, self.zero_point, *self.bounds, self.dtype)

    def qdq(self, x: torch.Tensor) -> torch.Tensor:
        return self.dequantize(self.quantize(x))


U8_IN = Act(0.03, 128)
U8_OUT = Act(0.02, 0)
S8_IN = Act(0.03, 0, torch.int8)
S8_OUT = Act(0.025, -3, torch.int8)
U7_IN = Act(0.06, 64, quant_max=127)  # 7-bit activations: X86InductorQuantizer's reduce_range


class QWeight(nn.Module):
    """A per-output-channel symmetric s8 weight, dequantized in forward as
    PT2E's converted model does (freezing folds it; the plugin restores it)."""

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        flat = weight.reshape(weight.shape[0], -1)
        scales = (flat.abs().amax(1) / 127.5).clamp(min=2.0 ** -12)
        zero_points = torch.zeros(weight.shape[0], dtype=torch.int64)
        self.register_buffer("q", qd.quantize_per_channel(
            weight, scales, zero_points, 0, -128, 127, torch.int8))
        self.register_buffer("scales", scales)
        self.register_buffer("zero_points", zero_points)

    def forward(self) -> torch.Tensor:
        return qd.dequantize_per_channel(self.q, self.scales, self.zero_points, 0, -128, 127,
                                         torch.int8)


class QConv(nn.Module):
    """dequant -> conv (+bias) [-> relu] [+ residual] -> quant [-> dequant]."""

    def __init__(self, act_in: Act = U8_IN, act_out: Act | None = U8_OUT, relu: bool = True,
                 residual: str | None = None, channels: int = 8) -> None:
        super().__init__()
        conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.weight, self.bias = QWeight(conv.weight.detach()), conv.bias.detach()
        self.act_in, self.act_out, self.relu, self.residual = act_in, act_out, relu, residual

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = self.act_in.quantize(x)
        y = F.conv2d(self.act_in.dequantize(q), self.weight(), self.bias, padding=1)
        if self.residual == "dequantized":  # the same quantized input, dequantized again
            y = y + self.act_in.dequantize(q)
        elif self.residual == "float":
            y = y + x
        if self.relu:
            y = torch.relu(y)
        return y if self.act_out is None else self.act_out.qdq(y)


class QLinear(nn.Module):
    def __init__(self, act_in: Act = U8_IN, act_out: Act | None = U8_OUT,
                 then: str = "relu") -> None:
        super().__init__()
        fc = nn.Linear(16, 24)
        self.weight, self.bias = QWeight(fc.weight.detach()), fc.bias.detach()
        self.act_in, self.act_out, self.then = act_in, act_out, then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(self.act_in.qdq(x), self.weight(), self.bias)
        y = {"relu": torch.relu, "gelu": F.gelu, "none": lambda t: t}[self.then](y)
        return y if self.act_out is None else self.act_out.qdq(y)


class QMatmul(nn.Module):
    """Two dequantized activations multiplied (attention's scores)."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(U8_IN.qdq(a), S8_IN.qdq(b)) / 4.0


class SharedDequantize(nn.Module):
    """One dequantized value read by a conv and by the add after it."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = QConv(act_out=None, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = U8_IN.qdq(x)
        y = F.conv2d(d, self.conv.weight(), self.conv.bias, padding=1)
        return U8_OUT.qdq(torch.relu(y + d))


class QBlock(nn.Module):
    """A ResNet basic block in PT2E form: conv-relu-conv, + identity, relu."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = QConv(U8_IN, Act(0.02, 0), relu=True)
        self.conv2 = QConv(Act(0.02, 0), None, relu=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = U8_IN.qdq(x)
        y = self.conv2(self.conv1(x)) + identity
        return U8_OUT.qdq(torch.relu(y))


def _step(act: Act | None) -> float:
    return 0.0 if act is None else act.scale


def check_int8(model: nn.Module, inputs: Sequence[torch.Tensor], step: float,
               int8_groups: int = 1, without_vnni: int = 0) -> torch._C.Graph:
    """Fuse; the result matches eager's reference quantized model within one
    quantization step (`step`: the output's scale), and `int8_groups` groups
    compute a conv or linear on int8 data (a dequantized input and weight) where
    the CPU has VNNI, `without_vnni` elsewhere."""
    _, out, graph = fuse(model, inputs)
    ref = eager(model, inputs)
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert (out - ref).abs().max().item() <= step * 1.001 + 1e-6, (out - ref).abs().max()
    groups = [k for k in kinds(graph) if DEQUANTIZE in k and WEIGHT in k]
    assert len(groups) == (int8_groups if VNNI else without_vnni), graph
    return graph


def kinds(graph: torch._C.Graph) -> list[list[str]]:
    return sorted(runner.group_kinds(g) for g in runner.fusion_groups(graph))


def images(channels: int = 8) -> list[torch.Tensor]:
    return [torch.randn(2, channels, 10, 10)]
