"""Which regions fuse: group counts and the aten ops left outside, checked on the
optimized graph, and every fused result against eager."""

from __future__ import annotations

import pytest
import torch
from fusion_check import check, group_kinds
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import models, runner


class ConvRelu(nn.Module):
    def __init__(self, **conv: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, **conv)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def test_conv2d_relu_is_one_group() -> None:
    graph = check(ConvRelu(), [torch.randn(2, 4, 17, 17)], groups=1)
    assert sorted(runner.fused_kinds(graph)) == ["aten::_convolution", "aten::relu"]


@pytest.mark.parametrize("conv", [
    dict(stride=2), dict(padding=1), dict(dilation=2), dict(groups=2), dict(bias=False),
    dict(stride=2, padding=2, dilation=2, groups=4),
])
def test_conv2d_attributes(conv: dict[str, int]) -> None:
    check(ConvRelu(**conv), [torch.randn(2, 4, 17, 17)], groups=1)


class ConvBnRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-1, 1)
            self.bn.running_var.uniform_(0.5, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv(x)))


def test_conv2d_bn_relu_is_one_group() -> None:
    # freeze folds the batch norm into the convolution; what is left fuses whole.
    check(ConvBnRelu(), [torch.randn(2, 4, 16, 16)], groups=1)


def test_residual_stage_is_one_group() -> None:
    # Three bottleneck blocks (oneDNN's stage pattern wants three): each
    # residual add joins two chains (conv3 with the downsample conv, then with
    # the previous block's output), so the stage is taken whole.
    torch.manual_seed(0)
    stage = nn.Sequential(models.Bottleneck(16, 8, stride=2), models.Bottleneck(32, 8),
                          models.Bottleneck(32, 8)).eval()
    graph = check(stage, [torch.randn(1, 16, 14, 14)], groups=1, left=[])
    assert group_kinds(graph)[0].count("aten::add") == 3


def test_sum_of_one_chain_stays_refused() -> None:
    # bn(y) + y of one convolution's y: oneDNN's compile allocates without bound
    # (3.12 as v3.2: std::bad_alloc).
    conv, bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4).eval()

    class SameChain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = conv, bn

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            return torch.relu(self.bn(y) + y)

    check(SameChain(), [torch.randn(1, 3, 10, 10)], left=None)
    rejected = dict(torch_graphfuse.last_report().rejected)
    assert any("two results of one chain" in why for why in rejected.values())


class LinearGelu(nn.Module):
    def __init__(self, bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 64, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.fc(x))


@pytest.mark.parametrize("bias", [True, False])
def test_linear_gelu_is_one_group(bias: bool) -> None:
    graph = check(LinearGelu(bias), [torch.randn(4, 32)], groups=1)
    assert sorted(runner.fused_kinds(graph)) == ["aten::gelu", "aten::linear"]


def test_linear_gelu_on_3d_input() -> None:
    check(LinearGelu(), [torch.randn(2, 5, 32)], groups=1)


class Residual(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(8, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(torch.relu(self.conv1(x))) + x)


def test_conv_add_relu_residual() -> None:
    # oneDNN's patterns: conv+relu, then conv+add+relu with the block input.
    graph = check(Residual(), [torch.randn(1, 8, 16, 16)], groups=2)
    assert group_kinds(graph) == [["aten::_convolution", "aten::add", "aten::relu"],
                                  ["aten::_convolution", "aten::relu"]]


class ScalarOps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * 0.5 + 3) - 1 / (x * x + 2.0)


def test_mul_add_with_scalars_fuse() -> None:
    # `1 / t` traces as reciprocal(t) * 1; the * 1 goes, and oneDNN leaves the
    # reciprocal a partition of its own, which ATen keeps.
    graph = check(ScalarOps(), [torch.randn(4, 16)], groups=2, left=["aten::reciprocal"])
    assert sorted(runner.fused_kinds(graph)) == sorted(
        ["aten::mul", "aten::add", "aten::mul", "aten::add", "aten::tanh", "aten::sub"])


class Identities(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.tanh(x) * 1 / 1 - 0)


def test_identity_binary_ops_between_ops_are_removed() -> None:
    graph = check(Identities(), [torch.randn(4, 16)], groups=0,
                  left=["aten::tanh", "aten::sigmoid"])
    assert "aten::mul" not in str(graph)


class AddAlpha(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.add(x, y, alpha=2.5))


def test_add_with_alpha_is_split_and_fused() -> None:
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    graph = check(AddAlpha(), [x, y], groups=1)
    assert sorted(runner.fused_kinds(graph)) == ["aten::add", "aten::mul", "aten::relu"]


class MatmulChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 16))
        self.b = nn.Parameter(torch.randn(16))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = torch.tanh(torch.matmul(x, y))
        b = torch.addmm(self.b, a.reshape(-1, 16), self.w)
        return torch.bmm(a, y) + b.reshape(2, 16, 16)


def test_matmul_addmm_bmm() -> None:
    x, y = torch.randn(2, 16, 16), torch.randn(2, 16, 16)
    # Each reshape is a view of a group's result, which that group outputs (its tail).
    graph = check(MatmulChain(), [x, y], groups=3, left=[])
    kinds = runner.fused_kinds(graph)
    # freeze decomposes addmm into mm + add; both map.
    assert {"aten::matmul", "aten::bmm", "aten::mm"} <= set(kinds)


class InplaceEltwise(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        y.relu_()
        y.mul_(2.0)
        y.abs_()
        return y.tanh_()


def test_inplace_eltwise_ops_are_made_functional_and_fused() -> None:
    graph = check(InplaceEltwise(), [torch.randn(1, 4, 8, 8)], groups=1, left=[])
    assert sorted(runner.fused_kinds(graph)) == sorted(
        ["aten::_convolution", "aten::relu", "aten::mul", "aten::abs", "aten::tanh"])


def test_channels_last_input() -> None:
    x = torch.randn(2, 4, 16, 16).to(memory_format=torch.channels_last)
    model = ConvBnRelu().eval().to(memory_format=torch.channels_last)
    _, out, graph = runner.fused(model, [x])
    assert len(runner.fusion_groups(graph)) == 1
    assert out.is_contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x), rtol=1e-4, atol=1e-5)
