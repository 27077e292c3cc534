"""What runs when inputs differ from the profiled ones: the kernel recompiles for
new shapes and strides; what the guard refuses (other dtypes and ranks, the sizes a
mapping baked in) runs the group's subgraph, which torch's executor profiles and the
pipeline fuses again for that spec; a spec oneDNN cannot take runs unfused with one
warning."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from fusion_check import assert_matches, eager, fuse
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner


class ConvRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x)) * 2.0


class Eltwise(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x * 2.0 + 1.0)


def run(module: torch.jit.ScriptModule, *xs: torch.Tensor) -> torch.Tensor:
    with torch.no_grad(), torch_graphfuse.fuser():
        return module(*xs)


def _assert_eagers(module: torch.jit.ScriptModule, model: nn.Module, *xs: torch.Tensor) -> None:
    """The fused module's result is eager's, strides included."""
    with torch.no_grad():
        out, ref = run(module, *xs), model(*xs)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert out.stride() == ref.stride()


def test_new_batch_size_compiles_a_new_partition() -> None:
    model = ConvRelu().eval()
    module, _, _ = runner.fused(model, [torch.randn(2, 3, 16, 16)])
    before = torch_graphfuse.kernel_stats()
    for batch in (1, 5, 2):
        x = torch.randn(batch, 3, 16, 16)
        with torch.no_grad():
            torch.testing.assert_close(run(module, x), model(x))
    after = torch_graphfuse.kernel_stats()
    assert after["compiles"] - before["compiles"] == 2  # batch 1 and 5; 2 is cached
    assert after["fallbacks"] == before["fallbacks"]
    assert after["fused_runs"] - before["fused_runs"] == 3


def test_new_spatial_size_stays_fused() -> None:
    model = ConvRelu().eval()
    module, _, _ = runner.fused(model, [torch.randn(1, 3, 16, 16)])
    for x in (torch.randn(1, 3, 9, 23), torch.randn(2, 3, 32, 32),
              torch.randn(1, 3, 32, 32)[:, :, ::2, ::2]):  # a slice keeps the dim order
        with torch.no_grad():
            torch.testing.assert_close(run(module, x), model(x), rtol=1e-4, atol=1e-5)
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_input_layout_other_than_profiled_runs_unfused() -> None:
    # Eager lays its results out after its inputs: a group fed another layout
    # than in the profiling runs could not give eager's strides (and the
    # aliasing of a `.contiguous()` after it), so that spec runs unfused.
    model = ConvRelu().eval()
    module, _, _ = runner.fused(model, [torch.randn(1, 3, 16, 16)])
    layouts = (torch.randn(1, 3, 16, 16).transpose(2, 3),
               torch.randn(1, 3, 16, 16).to(memory_format=torch.channels_last))
    for x in layouts:
        _assert_eagers(module, model, x)
    assert torch_graphfuse.kernel_stats()["fallbacks"] == len(layouts)
    assert torch_graphfuse.kernel_stats()["unfused_specs"] == len(layouts)
    (group, why), = torch_graphfuse.last_report().unfused_specs()
    assert "laid out otherwise than in the profiling runs" in why


class Scores(torch.nn.Module):
    """Attention scores: the key read transposed (a layout neither row-major nor
    channels-last)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return torch.matmul(q, k.transpose(-1, -2)) / 4.0


def _fused_scores() -> tuple[torch.jit.ScriptModule, nn.Module]:
    model = Scores().eval()
    module, _, _ = runner.fused(model, [torch.randn(2, 4, 8, 16), torch.randn(2, 4, 8, 16)])
    torch_graphfuse.reset_kernel_stats()
    return module, model


def test_transposed_input_at_new_sizes_stays_fused() -> None:
    """Dense in the profiled dim order at other token counts: eager lays the result out
    alike, so the spec runs fused."""
    module, model = _fused_scores()
    for tokens in (5, 12):
        _assert_eagers(module, model, torch.randn(2, 4, tokens, 16), torch.randn(2, 4, tokens, 16))
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_key_with_gaps_at_new_sizes_stays_fused() -> None:
    """Not dense: the order alone would not say eager's layout of an elementwise result, but
    only the product reads the key, and a product's result is row-major whatever its
    operands' strides, so the spec runs fused with eager's strides."""
    module, model = _fused_scores()
    _assert_eagers(module, model, torch.randn(2, 4, 5, 16), torch.randn(2, 4, 10, 16)[:, :, ::2])
    assert torch_graphfuse.kernel_stats()["unfused_specs"] == 0


def test_heads_of_a_single_sequence_at_new_lengths_stay_fused() -> None:
    """(1, heads, tokens, dim) views of a (1, tokens, heads, dim) tensor: dense in the
    profiled dim order, the size-1 batch's stride the one that order gives, so eager lays
    the result out alike at other lengths."""
    _assert_fused_at_other_lengths(lambda tokens: torch.randn(1, tokens, 4, 8).transpose(1, 2))


def _assert_fused_at_other_lengths(input_at: Callable[[int], torch.Tensor]) -> None:
    """Fused at 16 tokens, the group runs fused at 5 and 12, with eager's results."""
    model = Eltwise()
    module, _, _ = runner.fused(model, [input_at(16)])
    torch_graphfuse.reset_kernel_stats()
    for tokens in (5, 12):
        _assert_eagers(module, model, input_at(tokens))
    stats = torch_graphfuse.kernel_stats()
    assert stats["fallbacks"] == 0 and stats["unfused_specs"] == 0 and stats["fused_runs"] == 2


def _half_of_the_heads(tokens: int, width: int = 32) -> torch.Tensor:
    """The second half of each head's features, as a rotary embedding reads it: not
    dense, dims in the heads' order."""
    return torch.randn(1, tokens, 4, width).transpose(1, 2)[..., width - 16:]


def test_half_of_the_heads_at_new_lengths_stays_fused() -> None:
    """Copied row-major for oneDNN, the slice needs only eager's layout to be alike at
    other lengths: the same stride order, and not dense at either."""
    _assert_fused_at_other_lengths(_half_of_the_heads)


def test_dense_input_where_the_profiled_one_was_not_runs_unfused() -> None:
    """The same stride order, but dense: empty_like (a type cast's result) keeps a dense
    tensor's strides and lays a sliced one out row-major, so that spec runs unfused."""
    model = Eltwise()
    module, _, _ = runner.fused(model, [_half_of_the_heads(16)])
    torch_graphfuse.reset_kernel_stats()
    _assert_eagers(module, model, _half_of_the_heads(12, width=16))
    assert torch_graphfuse.kernel_stats()["unfused_specs"] == 1


def test_cached_spec_is_reused() -> None:
    module, _, _ = runner.fused(ConvRelu().eval(), [torch.randn(1, 3, 16, 16)])
    before = torch_graphfuse.kernel_stats()
    for _ in range(5):
        run(module, torch.randn(1, 3, 16, 16))
    after = torch_graphfuse.kernel_stats()
    assert after["compiles"] == before["compiles"]
    assert after["cache_hits"] - before["cache_hits"] == 5


def test_new_dtype_takes_the_unfused_branch() -> None:
    model = Eltwise()
    module, _, graph = runner.fused(model, [torch.randn(4, 8)])
    assert len(runner.fusion_groups(graph)) == 1
    before = torch_graphfuse.kernel_stats()["fused_runs"]
    x = torch.randn(4, 8, dtype=torch.float64)
    out = run(module, x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, model(x))
    assert torch_graphfuse.kernel_stats()["fused_runs"] == before


def test_new_rank_takes_the_unfused_branch() -> None:
    model = Eltwise()
    module, _, _ = runner.fused(model, [torch.randn(4, 8)])
    before = torch_graphfuse.kernel_stats()["fused_runs"]
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(run(module, x), model(x))
    assert torch_graphfuse.kernel_stats()["fused_runs"] == before


def test_spec_onednn_cannot_take_runs_unfused_with_a_report_entry() -> None:
    # No warning (a CPU whose oneDNN kernels cannot run a dtype would warn for
    # every group): a log line, a count and one report entry per group.
    model = ConvRelu().eval()
    module, _, _ = runner.fused(model, [torch.randn(2, 3, 16, 16)])
    empty = torch.randn(0, 3, 16, 16)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run(module, empty)
        run(module, empty)  # the same spec again: compiled once
    assert out.shape == (0, 8, 16, 16)
    stats = torch_graphfuse.kernel_stats()
    assert stats["fallbacks"] == 2 and stats["unfused_specs"] == 1
    (group, why), = torch_graphfuse.last_report().unfused_specs()
    assert group.startswith("graphfuse::FusionGroup_1 [") and "cannot be bound" in why
    assert "groups that ran an input spec unfused" in str(torch_graphfuse.last_report())
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        torch.testing.assert_close(run(module, x), model(x))


def test_requires_grad_input_under_grad_mode_runs_unfused() -> None:
    model = Eltwise()
    module, _, _ = runner.fused(model, [torch.randn(4, 8)])
    x = torch.randn(4, 8, requires_grad=True)
    with torch_graphfuse.fuser():
        out = module(x)
    out.sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(out, model(x))


class ConvPool(nn.Module):
    """An adaptive pool maps to a pool whose kernel comes from the profiled
    input size: the group guards exact sizes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(torch.relu(self.conv(x)))


def test_shape_pinned_group_is_fused_again_for_a_new_shape() -> None:
    # Its first call at the new shape profiles the subgraph unfused; the second hands it to
    # the pipeline again, which fuses it for that shape. The model's report stays.
    model = ConvPool().eval()
    module, _, graph = runner.fused(model, [torch.randn(1, 3, 8, 8)])
    groups = runner.fusion_groups(graph)
    pinned = [g for g in groups if g.i("static_shapes")]
    assert pinned, graph
    report = torch_graphfuse.last_report()
    torch_graphfuse.reset_kernel_stats()
    x = torch.randn(1, 3, 12, 12)
    for call in range(3):
        with torch.no_grad():
            torch.testing.assert_close(run(module, x), model(x))
        stats = torch_graphfuse.kernel_stats()
        assert stats["respecialized_runs"] == (call + 1) * len(pinned)
        assert stats["fused_runs"] == (call + 1) * (len(groups) - len(pinned)) + call * len(pinned)
    assert stats["fallbacks"] == 0
    assert torch_graphfuse.last_report() is report
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(run(module, x), model(x))


class SizeAfterBroadcast(nn.Module):
    """x.size() read after a binary op whose one-element operand has a higher
    rank: the result's size is not x's."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(x * torch.ones(1, 1) + 1.0)
        return y.reshape(y.size(0), -1) * 2.0


def test_size_is_not_read_across_a_rank_raising_broadcast() -> None:
    model = SizeAfterBroadcast()
    x = torch.randn(6)
    _, out, _ = runner.fused(model, [x])
    torch.testing.assert_close(out, model(x))


class PermutedHeads(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        q = x.view(1, 16, 4, 8).permute(0, 2, 1, 3)
        k = y.view(1, 16, 4, 8).permute(0, 2, 3, 1)
        return torch.matmul(q, k) / 4.0


def test_input_in_the_profiled_permuted_layout_stays_fused() -> None:
    # Attention heads come as permuted views: a layout neither row-major nor
    # channels-last, matched by its exact strides (the bound copy's do not count).
    model = PermutedHeads()
    module, _, _ = runner.fused(model, [torch.randn(16, 32), torch.randn(16, 32)])
    before = torch_graphfuse.kernel_stats()
    for _ in range(3):
        x, y = torch.randn(16, 32), torch.randn(16, 32)
        torch.testing.assert_close(run(module, x, y), model(x, y), rtol=1e-4, atol=1e-5)
    after = torch_graphfuse.kernel_stats()
    assert after["fallbacks"] == before["fallbacks"]
    assert after["fused_runs"] - before["fused_runs"] == 3


class ScaledConv(nn.Module):
    """A channels-last input scaled along its height, then a grouped convolution: the
    scale's group runs unfused at the second size (oneDNN would use its reference binary),
    and ATen lays that result out row-major, where the profiling runs saw channels-last."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.randn(1, 1, 3, 1)
        self.conv = nn.Conv2d(4, 8, (3, 5), stride=(2, 1), padding=(0, 1), groups=2,
                              bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv((x + 1.5) * self.scale)


def test_output_follows_the_layout_an_unfused_producer_gave() -> None:
    # Differential fuzzer, seed 68: the convolution's kernel took the row-major result for
    # another group's oneDNN layout and gave its output the profiled channels-last order.
    model = ScaledConv().eval()
    module, _, _ = fuse(model, [torch.randn(2, 4, 3, 3).contiguous(
        memory_format=torch.channels_last)])
    x = torch.randn(3, 4, 1, 4).contiguous(memory_format=torch.channels_last)
    out, ref = run(module, x), eager(model, [x])
    assert_matches(out, ref, "fp32")
    assert out.stride() == ref.stride()
