"""A pass that fails costs one warning and the graph's fusion, never the model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn import op_mapping
from torch_graphfuse.testing import runner


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def test_failing_pass_leaves_the_graph_unfused_and_correct(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object) -> None:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(op_mapping, "map_block", broken)
    model = ConvRelu().eval()
    x = torch.randn(1, 3, 8, 8)
    module = runner.freeze(model, [x])
    with torch.no_grad(), torch_graphfuse.fuser(), \
            pytest.warns(UserWarning, match="fusion skipped for a graph.*injected failure"):
        for _ in range(runner.PROFILING_RUNS + 1):
            out = module(x)
        graph = torch.jit.last_executed_optimized_graph()
    assert runner.fusion_groups(graph) == []
    assert "graphfuse::" not in str(graph)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
