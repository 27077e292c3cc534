"""torch_graphfuse.last_report(): what fused, and why the rest did not."""

from __future__ import annotations

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return torch.tanh(torch.erf(y) // 0.5)


def test_report_lists_groups_unmapped_ops_and_rejected_regions() -> None:
    runner.fused(Mixed(), [torch.randn(1, 3, 8, 8)])
    report = torch_graphfuse.last_report()
    assert report is not None
    assert report.groups == [["aten::_convolution", "aten::relu"]]
    assert ("aten::erf", "no mapping") in report.unmapped
    assert ("aten::floor_divide", "no mapping") in report.unmapped
    assert ("tanh", "a lone op ATen runs as fast") in report.rejected
    text = str(report)
    assert text.startswith("torch_graphfuse: 1 fusion groups, 2 of 5 aten ops fused")
    assert "group 1: _convolution, relu" in text
    assert "aten::erf: no mapping" in text
    assert "[tanh]: a lone op ATen runs as fast" in text
