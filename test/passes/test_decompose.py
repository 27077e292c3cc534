"""decompose: addmm with alpha or beta becomes ops the backends fuse, with eager's result;
its out= form keeps its write."""

from __future__ import annotations

import torch
from fusion_check import eager, fuse, run

import torch_graphfuse


class ScaledAddmm(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, 8))
        self.bias = torch.nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(self.bias, x, self.weight, beta=2.0, alpha=0.5))


class AddmmOut(ScaledAddmm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.zeros(x.shape[0], 8)
        torch.addmm(self.bias, x, self.weight, beta=2.0, alpha=0.5, out=y)
        return y + 1


def test_scaled_addmm_fuses_with_eagers_result() -> None:
    model, x = ScaledAddmm().eval(), torch.randn(4, 8)
    module, _, _ = fuse(model, [x])
    assert "aten::mm" in [k for g in torch_graphfuse.last_report().groups for k in g]
    torch.testing.assert_close(run(module, [x]), eager(model, [x]), rtol=1e-6, atol=1e-6)


def test_addmm_into_an_out_tensor_keeps_the_write() -> None:
    model, x = AddmmOut().eval(), torch.randn(4, 8)
    module = torch.jit.freeze(torch.jit.script(model))
    with torch_graphfuse.fuser(), torch.no_grad():
        for _ in range(3):
            out = module(x)
        expected = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-6, atol=1e-6)
