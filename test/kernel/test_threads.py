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


def test_eight_callers_of_one_module_get_bit_identical_results() -> None:
    # Servers share one module between callers of one intra-op thread each: results equal,
    # to the bit, those of the same calls made one after another.
    model = Block().eval()
    module, _, _ = runner.fused(model, [torch.randn(2, 4, 12, 12)])
    inputs = [torch.randn(batch, 4, 12, 12) for batch in (2, 2, 1, 2) * 16]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad(), torch_graphfuse.fuser():
            alone = [module(x) for x in inputs]

        def call(x: torch.Tensor) -> torch.Tensor:
            with torch.no_grad(), torch_graphfuse.fuser():
                return module(x)

        with ThreadPoolExecutor(8) as pool:
            together = list(pool.map(call, inputs))
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(alone, together, strict=True):
        assert torch.equal(a, b)
