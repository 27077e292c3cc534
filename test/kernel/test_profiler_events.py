"""Fusion groups are named events in torch.profiler, with their compile and
first run (weight reorder) as events of their own."""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.profiler_util import FunctionEvent

import torch_graphfuse
from torch_graphfuse.testing import runner


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).mean((2, 3))
        return nn.functional.gelu(self.fc(y))


def _profiled_calls(module: torch.jit.ScriptModule, x: torch.Tensor,
                    calls: int = 1) -> list[FunctionEvent]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof, \
            torch.no_grad(), torch_graphfuse.fuser():
        for _ in range(calls):
            with torch.profiler.record_function("forward"):
                module(x)
    return list(prof.events())


def _descendants(event: FunctionEvent) -> list[FunctionEvent]:
    found = []
    for child in event.cpu_children:
        found += [child, *_descendants(child)]
    return found


def test_profiled_fused_model_lists_its_groups_by_name() -> None:
    x = torch.randn(2, 3, 16, 16)
    module = runner.freeze(ConvLinear(), [x])
    # The profiling runs, then the optimized graph's first call compiles and
    # first runs each group.
    first = _profiled_calls(module, x, runner.PROFILING_RUNS + 1)
    labels = [g.s("label") for g in
              runner.fusion_groups(torch.jit.last_executed_optimized_graph())]
    assert "graphfuse::FusionGroup_1 [_convolution, relu]" in labels
    assert any(label.endswith("[linear, gelu]") for label in labels)
    for label in labels:
        inner = [{e.name for e in _descendants(event)} for event in first if event.name == label]
        assert any({"graphfuse::compile", "graphfuse::first_run"} <= names for names in inner)

    later = _profiled_calls(module, x)
    (forward,) = [e for e in later if e.name == "forward"]
    group_events = [e for e in _descendants(forward) if e.name in labels]
    assert sorted(e.name for e in group_events) == sorted(labels)
    assert not {"graphfuse::compile", "graphfuse::first_run"} & {e.name for e in later}
    # The groups' times are part of the forward's, which they mostly make up.
    group_us = sum(e.cpu_time_total for e in group_events)
    assert 0 < group_us <= forward.cpu_time_total


def test_group_running_unfused_shows_it() -> None:
    x = torch.randn(2, 3, 16, 16)
    module = runner.fused(ConvLinear(), [x])[0]
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")  # the groups assume x finite: they run unfused
    events = _profiled_calls(module, bad)
    assert "graphfuse::unfused" in {e.name for e in events}
