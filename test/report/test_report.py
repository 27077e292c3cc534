"""torch_graphfuse.last_report(): what fused, and why the rest did not."""

from __future__ import annotations

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.report import FusionReport
from torch_graphfuse.testing import cudnn_on_cpu, runner


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
    assert "regions oneDNN offered, left unfused:\n  [tanh]: a lone op ATen runs as fast" in text


def test_a_cudnn_refusal_is_not_put_down_to_onednn() -> None:
    with cudnn_on_cpu.on_cpu():
        runner.fused(Mixed(), [torch.randn(1, 3, 8, 8)])
    report = torch_graphfuse.last_report()
    assert report is not None and report.graph is not None
    assert [(r.region, r.by) for r in report.rejections] == [("tanh", "the cuDNN partitioner")]
    text = str(report)
    assert "regions the cuDNN partitioner offered, left unfused:\n  [tanh]: " in text
    assert "oneDNN" not in text
    [tanh] = [op for op in report.graph.ops if op.kind == "aten::tanh"]
    assert tanh.why is not None
    assert tanh.why.startswith("offered by the cuDNN partitioner, left unfused: ")


def test_regions_left_unfused_are_listed_under_the_backend_offered() -> None:
    report = FusionReport()
    report.add_rejected("tanh", [], "a lone op ATen runs as fast", by="oneDNN")
    report.add_rejected("add", [], "not convex in the JIT graph", by="the cuDNN partitioner")
    report.add_rejected("tanh", [], "a lone op ATen runs as fast", by="oneDNN")
    assert str(report).splitlines()[1:] == [
        "regions oneDNN offered, left unfused:",
        "  [tanh] x2: a lone op ATen runs as fast",
        "regions the cuDNN partitioner offered, left unfused:",
        "  [add]: not convex in the JIT graph",
    ]
