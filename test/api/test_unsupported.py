"""Ops, dtypes and arguments oneDNN cannot take stay unfused and still give eager's results."""

from __future__ import annotations

import torch
from torch import nn

from torch_graphfuse.testing import runner


class IntFloorDiv(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x // 3) * 2 + 1


def test_integer_floor_divide_is_not_fused() -> None:
    x = torch.randint(-50, 50, (4, 8))
    _, out, graph = runner.fused(IntFloorDiv(), [x])
    assert runner.fusion_groups(graph) == []
    assert torch.equal(out, IntFloorDiv()(x))


class FloatFloorDiv(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.div(x * 4.0, 3.0, rounding_mode="floor"))


def test_div_with_rounding_mode_is_not_fused() -> None:
    x = torch.randn(4, 8)
    _, out, graph = runner.fused(FloatFloorDiv(), [x])
    assert "aten::div" in runner.unfused_kinds(graph)
    torch.testing.assert_close(out, FloatFloorDiv()(x))


class Float64Conv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3).double()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def test_float64_is_not_fused() -> None:
    x = torch.randn(1, 3, 8, 8, dtype=torch.float64)
    model = Float64Conv().eval()
    _, out, graph = runner.fused(model, [x])
    assert runner.fusion_groups(graph) == []
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


class TanhGelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(self.fc(x), approximate="tanh") + 1.0


def test_unmapped_variant_splits_the_region_correctly() -> None:
    x = torch.randn(2, 8)
    model = TanhGelu().eval()
    _, out, graph = runner.fused(model, [x])
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
