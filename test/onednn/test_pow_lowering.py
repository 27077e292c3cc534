"""pow: x ** 3 of float32 is oneDNN's two products, ATen's own computation for that
exponent, so it fuses into the elementwise chain around it with eager's result to the bit;
other exponents and bf16 keep pow."""

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


class PowOut(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros_like(x)
        z = torch.pow(x * 2, 3, out=y)
        return y + z * 0


class Power(torch.nn.Module):
    def __init__(self, exponent: object) -> None:
        super().__init__()
        self.exponent = exponent

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.pow(x * 2, self.exponent) + 1


def _kinds() -> list[str]:
    return [k for group in torch_graphfuse.last_report().groups for k in group]


def test_cube_of_a_float32_tensor_joins_the_elementwise_chain() -> None:
    x = torch.randn(4, 16)
    model = TanhGelu().eval()
    module, _, _ = fuse(model, [x])
    assert "aten::pow" in _kinds()
    assert not torch_graphfuse.last_report().rejected
    torch.testing.assert_close(run(module, [x]), eager(model, [x]), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("values", ["normal", "large", "nonfinite"])
def test_cube_is_eagers_pow_to_the_bit(values: str) -> None:
    x = {"normal": torch.randn(64, 33), "large": torch.randn(64, 33) * 1e13,
         "nonfinite": torch.tensor([[float("nan"), float("inf"), -float("inf"), 0.0, -0.0,
                                     1e-30, 3.0, -2.5]])}[values]
    module, _, _ = fuse(Power(3.0), [x])
    assert torch.equal(run(module, [x]).nan_to_num(), eager(Power(3.0), [x]).nan_to_num())


@pytest.mark.parametrize("exponent", [2.5, 3.5, 4])
def test_other_exponents_stay_oneDNNs_pow(exponent: float) -> None:
    """oneDNN's Pow, which 3.12 fuses into no partition: the pow stays with ATen."""
    x = torch.rand(8, 8) + 0.5
    module, _, _ = fuse(Power(exponent), [x])
    assert "aten::pow" not in _kinds()
    assert torch.equal(run(module, [x]), eager(Power(exponent), [x]))


def test_bfloat16_cube_stays_with_aten() -> None:
    """ATen rounds a bf16 cube once; two bf16 products would round twice."""
    x = torch.randn(8, 8, dtype=torch.bfloat16)
    module, _, _ = fuse(Power(3.0), [x])
    assert "aten::pow" not in _kinds()
    assert torch.equal(run(module, [x]), eager(Power(3.0), [x]))


def test_pow_into_an_out_tensor_keeps_the_write() -> None:
    x = torch.randn(4, 8)
    module = torch.jit.freeze(torch.jit.script(PowOut().eval()))
    with torch_graphfuse.fuser(), torch.no_grad():
        for _ in range(3):
            out = module(x)
    assert torch.equal(out, PowOut()(x))
