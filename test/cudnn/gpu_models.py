"""The GPU tier's models, inputs and how they run through the plugin on a CUDA device.

Each model is traced and frozen on CUDA, run with torch_graphfuse on (two profiling
runs, then fused runs) and compared with eager in the same dtype. Convolution models
run channels_last (model and inputs), as users run convnets on a GPU.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from frontend_installed import have_cudnn
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.testing import runner

requires_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not have_cudnn(),
    reason="needs a CUDA GPU and the cuda extra (scripts/gpu_test.sh)")

# Eager and cuDNN round differently (accumulation order, fused intermediates):
# tolerances relative to the output's scale, per dtype.
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 1e-3}
DTYPES = (torch.float16, torch.bfloat16)


# -- patterns ---------------------------------------------------------------------------------


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "relu6": F.relu6,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.5),
}


class ConvAct(nn.Module):
    """conv2d + bias + activation."""

    def __init__(self, act: str, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class ConvResidual(nn.Module):
    """relu(conv(x) + x): one group of conv + bias + residual add + relu (a CPU
    simulation test in test_cudnn_gpu_numerics.py pins that partition). No scale on
    the conv: torch 2.11's freezing asserts (frozen_conv_folding.cpp) folding a
    scalar multiply into a CUDA half conv."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) + x)


class BnReluConv(nn.Module):
    """A frozen BatchNorm + ReLU before a conv: the relu is the conv's prologue
    (the frozen graph keeps aten::batch_norm, which has no cuDNN mapping and
    stays with ATen)."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.relu(self.bn(x)))


class ConvReduce(nn.Module):
    """conv + relu, then a final reduction to one value per channel. cuDNN
    reduces a convolution's result over its channels or over every dim but
    them (lowering.REDUCIBLE): a per-image pooling over (2, 3) is neither, and the
    partitioner would leave it out of the group."""

    def __init__(self, how: str, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if self.how == "sum":
            return y.sum(dim=(0, 2, 3), keepdim=True)
        if self.how == "mean":
            return y.mean(dim=(0, 2, 3), keepdim=True)
        return y.amax(dim=(0, 2, 3), keepdim=True)


class LinearAct(nn.Module):
    def __init__(self, act: str, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


class LinearResidual(nn.Module):
    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + x


class LinearRowSum(nn.Module):
    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)).sum(dim=-1, keepdim=True)


class ScaledReluMatmul(nn.Module):
    """A per-column scale + bias + relu prologue on matmul's A operand."""

    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.rand(features) + 0.5)
        self.shift = nn.Parameter(torch.rand(features) - 0.5)
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.relu(x * self.scale + self.shift), self.weight)


class BmmScaleSigmoid(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.bmm(a, b) * 0.125)


def images(batch: int = 4, channels: int = 64, size: int = 28) -> list[torch.Tensor]:
    return [torch.randn(batch, channels, size, size)]


def rows(batch: int = 4, seq: int = 32, features: int = 256) -> list[torch.Tensor]:
    return [torch.randn(batch, seq, features)]


def bmm_inputs() -> list[torch.Tensor]:
    return [torch.randn(8, 64, 128), torch.randn(8, 128, 96)]


Case = tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]]]
CASES: dict[str, Case] = {
    **{f"conv_{act}": ((lambda act=act: ConvAct(act)), images) for act in ACTIVATIONS},
    "conv_residual": (ConvResidual, images),
    "bn_relu_conv": (BnReluConv, images),
    **{f"conv_relu_{how}": ((lambda how=how: ConvReduce(how)), images)
       for how in ("sum", "mean", "max")},
    **{f"linear_{act}": ((lambda act=act: LinearAct(act)), rows)
       for act in ("relu", "gelu_erf", "gelu_tanh", "silu")},
    "linear_residual": (LinearResidual, rows),
    "linear_relu_row_sum": (LinearRowSum, rows),
    "scale_bias_relu_matmul": (ScaledReluMatmul, rows),
    "bmm_scale_sigmoid": (BmmScaleSigmoid, bmm_inputs),
}
# The convolution models: run channels_last, as users run convnets.
CONV_CASES = frozenset(name for name, (_, inputs) in CASES.items() if inputs is images)


# -- running through the plugin -----------------------------------------------------------------


def on_gpu(model: nn.Module, inputs: list[torch.Tensor], dtype: torch.dtype,
           channels_last: bool = False) -> tuple[nn.Module, list[torch.Tensor]]:
    model = model.eval().to("cuda", dtype)
    inputs = [x.to("cuda", dtype) for x in inputs]
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = [x.contiguous(memory_format=torch.channels_last) for x in inputs]
    return model, inputs


def fused_run(model: nn.Module, inputs: list[torch.Tensor], runs: int = 3
              ) -> tuple[torch.Tensor, torch._C.Graph]:
    """Trace, freeze, run `runs` times with torch_graphfuse on; the last output and graph."""
    module = runner.freeze(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(True):
        for _ in range(runs):
            out = module(*inputs)
        graph = torch.jit.last_executed_optimized_graph()
    torch.cuda.synchronize()
    return out, graph


def cudnn_groups(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [g for g in runner.fusion_groups(graph)
            if g.hasAttribute("backend") and g.s("backend") == "cudnn"]


def assert_close(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.shape == expected.shape and out.dtype == expected.dtype
    scale = expected.float().abs().max().item() + 1.0
    diff = (out.float() - expected.float()).abs().max().item()
    assert diff <= TOLERANCE[dtype] * scale, f"max abs diff {diff} at scale {scale}"


def check_pattern(make: Callable[[], nn.Module], make_inputs: Callable[[], list[torch.Tensor]],
                  dtype: torch.dtype, channels_last: bool) -> None:
    """The model fuses whole (nothing the partitioner considered is left out),
    runs its cuDNN groups without failure and gives eager's result."""
    torch.manual_seed(0)
    model, inputs = on_gpu(make(), make_inputs(), dtype, channels_last)
    with torch.no_grad():
        expected = model(*inputs)
    out, graph = fused_run(model, inputs)
    assert cudnn_groups(graph), f"no cuDNN fusion group in\n{graph}"
    report = torch_graphfuse.last_report()
    assert report is not None and report.rejected == [], report
    stats = runtime.stats()
    assert stats["executions"] >= 1 and stats["failures"] == 0, stats
    assert_close(out, expected, dtype)
