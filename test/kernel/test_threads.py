"""A fused module called from several threads at once gives each caller its result."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return torch.tanh(self.fc(y.mean((2, 3))))


def test_concurrent_calls() -> None:
    model = Block().eval()
    module, _, _ = runner.fused(model, [torch.randn(2, 4, 12, 12)])
    inputs = [torch.randn(batch, 4, 12, 12) for batch in (1, 2, 3, 2) * 4]

    def call(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), torch_graphfuse.fuser():
            return module(x)

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(call, inputs))
    with torch.no_grad():
        for x, out in zip(inputs, outs, strict=True):
            torch.testing.assert_close(out, model(x))
