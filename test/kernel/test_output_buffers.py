"""Output buffers: a freed output's memory serves the next output of its size
(the buffer pool); an input oneDNN may overwrite becomes the output when
nothing else holds it (in-place ports). Never while the caller, or anything
else, still holds the tensor."""

from __future__ import annotations

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class Chain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(4, 8, 3, padding=1)
        self.pool = nn.AvgPool2d(2)
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


def test_freed_outputs_are_reused() -> None:
    # Three groups: the two outputs passed between them are freed within the
    # call, and the result once the caller drops it, so every later output
    # takes a freed buffer.
    model = Chain().eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 4, 16, 16)])
    assert len(runner.fusion_groups(graph)) == 3
    x = torch.randn(1, 4, 16, 16)
    with torch.no_grad(), torch_graphfuse.fuser():
        module(x)
        before = torch_graphfuse.kernel_stats()["reused_outputs"]
        for _ in range(5):
            torch.testing.assert_close(module(x), model(x))
    assert torch_graphfuse.kernel_stats()["reused_outputs"] - before == 3 * 5


def test_each_shape_reuses_buffers_of_its_size() -> None:
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
    assert torch_graphfuse.kernel_stats()["reused_outputs"] - before == 3 * 3 * len(xs)


def test_idle_buffers_are_released_on_request() -> None:
    model = Chain().eval()
    module, _, _ = runner.fused(model, [torch.randn(1, 4, 16, 16)])
    with torch.no_grad(), torch_graphfuse.fuser():
        module(torch.randn(1, 4, 16, 16))
    idle = torch_graphfuse.kernel_stats()["idle_buffer_bytes"]
    assert idle >= 8 * 16 * 16 * 4  # at least conv1's freed output
    assert torch_graphfuse.release_buffers() == idle
    assert torch_graphfuse.kernel_stats()["idle_buffer_bytes"] == 0


class Residual(nn.Module):
    """layer_norm -> linear + residual: oneDNN may write the linear's result
    over the residual input (a sum post-op)."""

    def __init__(self, hidden: int = 32, keep_normed: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.dense = nn.Linear(hidden, hidden)
        self.keep_normed = keep_normed

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x)
        out = self.dense(torch.relu(h)) + h
        return (out, h) if self.keep_normed else out


class ResidualReadLater(Residual):
    """The residual is read again after the group, by ops left with ATen."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        out = self.dense(torch.relu(h)) + h
        return torch.erf(out) * h


class ResidualViewed(Residual):
    """A view of the residual outlives the group: the storage is shared."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm(x)
        first = h[0]
        return self.dense(torch.relu(h)) + h, first


def _inplace_outputs(model: nn.Module, x: torch.Tensor, calls: int = 3) -> int:
    module, _, graph = runner.fused(model, [x])
    assert len(runner.fusion_groups(graph)) == 2, graph
    before = torch_graphfuse.kernel_stats()["inplace_outputs"]
    with torch.no_grad(), torch_graphfuse.fuser():
        for _ in range(calls):
            fused = module(x)
            eager = model(x)
            torch.testing.assert_close(fused, eager)
    return torch_graphfuse.kernel_stats()["inplace_outputs"] - before


def test_dead_residual_input_is_written_in_place() -> None:
    assert _inplace_outputs(Residual().eval(), torch.randn(4, 8, 32)) == 3


def test_residual_the_caller_gets_is_not_overwritten() -> None:
    # h is also returned: it is held past the group, so a new buffer is used
    # and the h the caller gets is the layer_norm's, unchanged.
    assert _inplace_outputs(Residual(keep_normed=True).eval(), torch.randn(4, 8, 32)) == 0


def test_caller_input_is_not_overwritten() -> None:
    # The residual is the model's input: the caller holds it.
    class InputResidual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Linear(32, 32)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.dense(torch.relu(x)) + x

    model = InputResidual().eval()
    x = torch.randn(4, 32)
    copy = x.clone()
    module, _, _ = runner.fused(model, [x])
    with torch.no_grad(), torch_graphfuse.fuser():
        out = module(x)
    torch.testing.assert_close(x, copy)
    torch.testing.assert_close(out, model(x))


def test_residual_read_by_a_later_op_is_not_overwritten() -> None:
    assert _inplace_outputs(ResidualReadLater().eval(), torch.randn(4, 8, 32)) == 0


def test_residual_with_a_live_view_is_not_overwritten() -> None:
    assert _inplace_outputs(ResidualViewed().eval(), torch.randn(4, 8, 32)) == 0


class ReadTwice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c = torch.randn(3, 1, 1, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # A third op: two alone over an input copied first stay with ATen.
        return (x + self.c) / x * 2.0


def test_input_read_by_two_ops_is_not_overwritten_in_place() -> None:
    # Found by the fuzzer: a strided input is bound as a fresh contiguous copy,
    # which nothing else holds; oneDNN pairs it with the result in place, and
    # the division then read the sum written over it (every element gave 1).
    model = ReadTwice().eval()
    x = torch.randn(3, 1, 2, 14)[..., ::2]
    module, _, graph = runner.fused(model, [x])
    assert len(runner.fusion_groups(graph)) == 1
    torch_graphfuse.reset_kernel_stats()
    with torch.no_grad(), torch_graphfuse.fuser():
        torch.testing.assert_close(module(x), model(x))
    assert torch_graphfuse.kernel_stats()["inplace_outputs"] == 0
