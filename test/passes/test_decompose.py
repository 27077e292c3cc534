"""decompose: ops rewritten into ones the backends fuse, with eager's results."""

from __future__ import annotations

import math

import pytest
import torch
from fusion_check import eager, fuse, run

import torch_graphfuse


class TanhGelu(torch.nn.Module):
    """GPT-2's GELU, written out as ops after a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))


class Power(torch.nn.Module):
    def __init__(self, exponent: object) -> None:
        super().__init__()
        self.exponent = exponent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.pow(x * 2, self.exponent) + 1


def _kinds() -> list[str]:
    return [k for group in torch_graphfuse.last_report().groups for k in group]


def _pow_kept() -> bool:
    """Whether pow stays a node of its own: fused as oneDNN's Pow, or left with ATen."""
    report = torch_graphfuse.last_report()
    return "aten::pow" in _kinds() or any("pow" in region.split(", ")
                                          for region, _ in report.rejected)


def test_cube_of_a_float32_tensor_joins_the_elementwise_chain() -> None:
    x = torch.randn(4, 16)
    module, _, _ = fuse(TanhGelu(), [x])
    assert "aten::pow" not in _kinds()
    assert not torch_graphfuse.last_report().rejected
    assert _kinds().count("aten::mul") >= 2


@pytest.mark.parametrize("values", ["normal", "large", "nonfinite"])
def test_cube_is_eagers_pow_to_the_bit(values: str) -> None:
    x = {"normal": torch.randn(64, 33), "large": torch.randn(64, 33) * 1e13,
         "nonfinite": torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
                                     1e-30, 3.0, -2.5]])}[values]
    module, _, _ = fuse(Power(3.0), [x])
    assert torch.equal(run(module, [x]).nan_to_num(), eager(Power(3.0), [x]).nan_to_num())


@pytest.mark.parametrize("exponent", [2.5, 3.5, 4])
def test_other_exponents_are_not_decomposed(exponent: float) -> None:
    x = torch.rand(8, 8) + 0.5
    fuse(Power(exponent), [x])
    assert _pow_kept()


def test_bfloat16_keeps_pow() -> None:
    """ATen rounds a bf16 cube once; two bf16 products would round twice."""
    x = torch.randn(8, 8, dtype=torch.bfloat16)
    module, _, _ = fuse(Power(3.0), [x])
    assert _pow_kept()
    assert torch.equal(run(module, [x]), eager(Power(3.0), [x]))
