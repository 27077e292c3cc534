"""The public switch: torch.jit.enable_graphfuse, torch_graphfuse.enable/disable/fuser."""

from __future__ import annotations

import torch

import torch_graphfuse
from torch_graphfuse.testing import runner


def test_off_by_default_and_torch_jit_hooks() -> None:
    assert torch.jit.graphfuse_enabled() is False
    torch.jit.enable_graphfuse(True)
    assert torch.jit.graphfuse_enabled() is True
    assert torch_graphfuse.is_enabled()
    torch.jit.enable_graphfuse(False)
    assert not torch_graphfuse.is_enabled()


def test_enable_disable() -> None:
    torch_graphfuse.enable()
    assert torch.jit.graphfuse_enabled()
    torch_graphfuse.disable()
    assert not torch.jit.graphfuse_enabled()


def test_fuser_context_manager_restores_previous_state() -> None:
    with torch_graphfuse.fuser():
        assert torch_graphfuse.is_enabled()
        with torch_graphfuse.fuser(False):
            assert not torch_graphfuse.is_enabled()
        assert torch_graphfuse.is_enabled()
    assert not torch_graphfuse.is_enabled()


def test_fuser_context_manager_restores_state_on_error() -> None:
    torch_graphfuse.enable()
    try:
        with torch_graphfuse.fuser(False):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert torch_graphfuse.is_enabled()


class ConvRelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def test_disabled_fuser_leaves_graph_without_groups() -> None:
    x = torch.randn(1, 3, 16, 16)
    model = ConvRelu().eval()
    _, out, graph = runner.fused(model, [x], enabled=False)
    assert runner.fusion_groups(graph) == []
    assert "graphfuse::" not in str(graph)
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))


def test_enabled_fuser_rewrites_graph() -> None:
    x = torch.randn(1, 3, 16, 16)
    model = ConvRelu().eval()
    _, out, graph = runner.fused(model, [x])
    assert len(runner.fusion_groups(graph)) == 1
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
