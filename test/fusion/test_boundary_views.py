"""Views a model takes of a group's results join the group as its tail: the kernel gives
eager's views (sizes, strides, shared storage) with no ATen op, at the profiled sizes and at
others, and leaves them with ATen where an op writes through them."""

from __future__ import annotations

import warnings

import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.group_schema import ATTR
from torch_graphfuse.testing import runner


class Conv1DAttention(nn.Module):
    """GPT-2's attention input: a product over the flattened tokens, viewed back, split into
    query, key and value, and each split into heads, with sizes read at run time."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(32, 96) / 6)
        self.bias = nn.Parameter(torch.randn(96))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        batch, seq = x.size(0), x.size(1)
        flat = torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight)
        q, k, v = flat.view(batch, seq, 96).split(32, dim=2)
        return tuple(t.view(batch, seq, 4, -1).transpose(1, 2) for t in (q, k, v))


def _tail_groups(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [g for g in runner.fusion_groups(graph) if g.hasAttribute(ATTR.tail)]


def _assert_eagers_views(out: tuple[torch.Tensor, ...], ref: tuple[torch.Tensor, ...]) -> None:
    assert_matches(out, ref, "fp32")
    assert [t.stride() for t in out] == [t.stride() for t in ref]
    assert [t.storage_offset() for t in out] == [t.storage_offset() for t in ref]
    # One storage under the three, as split gives them in eager.
    assert len({t.untyped_storage().data_ptr() for t in out}) == 1


def test_split_heads_of_a_product_join_its_group() -> None:
    model, x = Conv1DAttention().eval(), torch.randn(2, 8, 32)
    _, out, graph = fuse(model, [x])
    _assert_eagers_views(out, eager(model, [x]))
    (group,) = _tail_groups(graph)
    kinds = [n.kind() for n in group.g(ATTR.subgraph).nodes()]
    assert {"aten::split", "aten::transpose", "aten::view"} <= set(kinds), graph
    assert not {"aten::split", "aten::transpose"} & set(runner.unfused_kinds(graph)), graph


def test_view_tail_at_other_sizes_runs_fused_with_eagers_views() -> None:
    model = Conv1DAttention().eval()
    module, _, _ = fuse(model, [torch.randn(2, 8, 32)])
    torch_graphfuse.reset_kernel_stats()
    for x in (torch.randn(3, 5, 32), torch.randn(1, 11, 32), torch.randn(2, 8, 32)):
        _assert_eagers_views(run(module, [x]), eager(model, [x]))
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_head_and_tail_run_in_the_interpreter_once_per_spec() -> None:
    """Later calls of a spec make the views from the strides the first one found: the
    flattened tokens (head) and the heads of query, key and value (tail)."""
    model, x = Conv1DAttention().eval(), torch.randn(2, 8, 32)
    module, _, _ = fuse(model, [x])
    torch_graphfuse.reset_kernel_stats()
    for _ in range(3):
        _assert_eagers_views(run(module, [x]), eager(model, [x]))
    other = torch.randn(3, 5, 32)
    for _ in range(2):
        _assert_eagers_views(run(module, [other]), eager(model, [other]))
    stats = torch_graphfuse.kernel_stats()
    assert stats["view_graph_runs"] == 2 and stats["fused_runs"] == 5, stats


def test_view_tail_report_lists_its_views_as_fused() -> None:
    model, x = Conv1DAttention().eval(), torch.randn(2, 8, 32)
    fuse(model, [x])
    report = torch_graphfuse.last_report()
    assert not [region for region, _ in report.rejected if "split" in region], str(report)
    assert "aten::split" not in [kind for kind, _ in report.unmapped], str(report)


class NormThenFlatTokens(nn.Module):
    """A layer norm's result with tokens first, flattened per token: the reshape views it
    where the batch has one row, and copies it otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x * 2)
        return y.transpose(0, 1).reshape(y.size(1), -1)


def test_view_tail_that_copies_at_other_sizes_gives_eagers_copy() -> None:
    """Profiled with one row the reshape is a view and joins the tail; with two it copies,
    and each such call runs the tail for eager's copy."""
    model = NormThenFlatTokens().eval()
    module, _, graph = fuse(model, [torch.randn(1, 8, 16)])
    (group,) = _tail_groups(graph)
    assert "aten::reshape" in [n.kind() for n in group.g(ATTR.tail).nodes()], graph
    torch_graphfuse.reset_kernel_stats()
    for x in (torch.randn(1, 8, 16), torch.randn(2, 8, 16), torch.randn(2, 8, 16)):
        out, ref = run(module, [x]), eager(model, [x])
        assert_matches(out, ref, "fp32")
        assert out.stride() == ref.stride()
    stats = torch_graphfuse.kernel_stats()
    assert stats["view_graph_runs"] == 2 and stats["fallbacks"] == 0, stats


def test_reshape_that_copies_as_profiled_stays_with_aten() -> None:
    model, x = NormThenFlatTokens().eval(), torch.randn(2, 8, 16)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert "aten::reshape" in runner.unfused_kinds(graph), graph


class WrittenThroughAView(nn.Module):
    """An op writes through a view of the product: eager's result shows it in both."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.fc(x).relu()
        heads = y.view(x.size(0), x.size(1), 4, -1)
        heads.select(2, 0).mul_(3)
        return y, heads


def test_view_written_in_place_stays_with_aten() -> None:
    model, x = WrittenThroughAView().eval(), torch.randn(2, 8, 16)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert out[1].untyped_storage().data_ptr() == out[0].untyped_storage().data_ptr()
    for group in _tail_groups(graph):
        assert "aten::view" not in [n.kind() for n in group.g(ATTR.tail).nodes()], graph


class MergedHeadsProjection(nn.Module):
    """Attention's heads merged for the output projection: transposed (an op ATen keeps
    stands in for attention), copied by contiguous, then reshaped to (batch, seq, width)
    with sizes read at run time: only the projection reads the reshape."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(32, 32)

    def forward(self, heads: torch.Tensor) -> torch.Tensor:
        merged = torch.cumsum(heads, 2).transpose(1, 2).contiguous()
        return self.out(merged.reshape(merged.size(0), merged.size(1), -1))


def _head_groups(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [g for g in runner.fusion_groups(graph) if g.hasAttribute(ATTR.head)]


def test_reshape_only_a_product_reads_joins_its_group_as_head() -> None:
    model, x = MergedHeadsProjection().eval(), torch.randn(2, 4, 8, 8)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    (group,) = _head_groups(graph)
    assert "aten::reshape" in [n.kind() for n in group.g(ATTR.head).nodes()], graph
    assert "aten::reshape" not in runner.unfused_kinds(graph), graph
    torch_graphfuse.reset_kernel_stats()
    for other in (torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8), x):
        assert_matches(run(module, [other]), eager(model, [other]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["view_graph_runs"] == 1 and stats["fallbacks"] == 0, stats


class ViewOfAnOffsetInput(nn.Module):
    """A linear reads a view of the graph's input, which the caller slices from a larger
    tensor (a storage offset the head's strides must keep)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.view(x.size(0), -1, 16)).relu()


def test_head_keeps_its_inputs_storage_offset() -> None:
    model = ViewOfAnOffsetInput().eval()
    big = torch.randn(5, 64)
    module, out, graph = fuse(model, [big[1:3]])
    assert _head_groups(graph), graph
    for x in (big[2:4], big[1:5], torch.randn(3, 32)):
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")


class ViewReadOutside(nn.Module):
    """The view the linear reads is also the model's output: it stays with ATen, so the
    caller gets eager's view of its input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        flat = x.view(-1, 16)
        return flat, self.fc(flat).relu()


def test_view_read_outside_the_group_stays_with_aten() -> None:
    model, x = ViewReadOutside().eval(), torch.randn(4, 32)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert not _head_groups(graph), graph
    assert out[0].data_ptr() == x.data_ptr()


class NoOpViewBetweenGroups(nn.Module):
    """A flatten that changes nothing between a product and a normalization: the mapping
    takes it as its input's tensor, which the product's group gives as the view."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8, bias=False)
        self.weight = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x).flatten(0, 0)
        variance = h.pow(2).mean(-1, keepdim=True)
        return self.weight * (h * torch.rsqrt(variance + 1e-5))


def test_group_reads_the_view_another_group_gives_of_its_tensor() -> None:
    """The normalization's group reads the flatten's result, not the product's tensor
    inside the other group (which the rewrite would find gone: the pass failed)."""
    model, x = NoOpViewBetweenGroups().eval(), torch.randn(2, 2, 16)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torch_graphfuse")
        module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert len(runner.fusion_groups(graph)) == 2, graph
    other = torch.randn(3, 2, 16)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")
