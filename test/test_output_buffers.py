"""Output buffers: reused from call to call once nothing holds them, never while
the caller (or anything else) still does."""

from __future__ import annotations

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv2(self.pool(torch.relu(self.conv1(x)))))


def test_outputs_the_caller_holds_are_not_overwritten() -> None:
    model = Chain().eval()
    module, _, _ = runner.fused(model, [torch.randn(1, 4, 16, 16)])
    xs = [torch.randn(1, 4, 16, 16) for _ in range(4)]
    with torch.no_grad(), torch_graphfuse.fuser():
        outs = [module(x) for x in xs]  # all held at once
        for x, out in zip(xs, outs, strict=True):
            torch.testing.assert_close(out, model(x))
        assert len({out.data_ptr() for out in outs}) == len(outs)


def test_intermediate_outputs_are_reused() -> None:
    # Three groups; the two outputs passed between them are released by the
    # next group within the call, so each later call writes into them again.
    model = Chain().eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 4, 16, 16)])
    assert len(runner.fusion_groups(graph)) == 3
    x = torch.randn(1, 4, 16, 16)
    with torch.no_grad(), torch_graphfuse.fuser():
        module(x)
        before = torch_graphfuse.kernel_stats()["reused_outputs"]
        for _ in range(5):
            torch.testing.assert_close(module(x), model(x))
    assert torch_graphfuse.kernel_stats()["reused_outputs"] - before == 2 * 5


def test_only_the_spec_in_use_keeps_recycled_buffers() -> None:
    # Alternating shapes: each switch releases the other spec's buffers, so
    # nothing is reused, and no cached spec pins a set of activations.
    model = Chain().eval()
    module, _, _ = runner.fused(model, [torch.randn(1, 4, 16, 16)])
    xs = [torch.randn(1, 4, 16, 16), torch.randn(2, 4, 12, 12)]
    with torch.no_grad(), torch_graphfuse.fuser():
        for x in xs:
            module(x)
        before = torch_graphfuse.kernel_stats()["reused_outputs"]
        for _ in range(3):
            for x in xs:
                torch.testing.assert_close(module(x), model(x))
    assert torch_graphfuse.kernel_stats()["reused_outputs"] == before
