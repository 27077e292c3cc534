"""A pass that fails costs one warning and the graph's fusion, never the model."""

from __future__ import annotations

import warnings

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


class ConvCatAndLinearOfOneInput(nn.Module):
    """A graph oneDNN 3.12's get_partitions throws std::out_of_range on as a whole (found by
    the fuzzer, seed 45): a grouped conv concatenated with itself, beside a linear and a
    subtraction of the same input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, (5, 2), stride=(1, 2), padding=(2, 1), groups=3)
        self.linear = nn.Linear(1, 16)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.conv(x)
        return torch.cat([y, y, y], 2) + 1.0, (x - self.linear(x)) * 2.0


def test_graph_onednn_cannot_partition_whole_is_partitioned_in_pieces() -> None:
    model = ConvCatAndLinearOfOneInput().eval()
    x = torch.randn(1, 3, 1, 1)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*fusion skipped for a graph")
        _, out, graph = runner.fused(model, [x])
    fused = {kind for group in torch_graphfuse.last_report().groups for kind in group}
    assert {"aten::_convolution", "aten::linear"} <= fused
    with torch.no_grad():
        for got, want in zip(out, model(x), strict=True):
            torch.testing.assert_close(got, want)
