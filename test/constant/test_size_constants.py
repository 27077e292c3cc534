"""Tensors a graph computes from sizes and constants alone (positions, masks, position
tables) become groups that return their values at the profiled sizes, computed once; at
other sizes their nodes run, and what the graph returns or writes in place stays as it is."""

from __future__ import annotations

import warnings

import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.constant import partition
from torch_graphfuse.group_schema import ATTR, CONSTANT, subgraph
from torch_graphfuse.testing import runner


def _constant_groups(graph: torch._C.Graph) -> list[list[str]]:
    return [sorted(n.kind() for n in subgraph(g).nodes() if n.kind() != "prim::Constant")
            for g in runner.fusion_groups(graph) if g.s(ATTR.backend) == CONSTANT]


class Positions(nn.Module):
    """A position table looked up at arange(tokens) and a causal mask, as Hugging Face
    builds them on each call."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(64, 16)
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1))
        causal = positions[None, :] <= positions[:, None]
        h = self.fc(x + self.table(positions))
        scores = h @ h.transpose(1, 2)
        return scores.masked_fill(~causal, float("-inf")).softmax(-1)


def test_positions_and_mask_are_computed_once_at_the_profiled_sizes() -> None:
    model, x = Positions().eval(), torch.randn(2, 8, 16)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    groups = _constant_groups(graph)
    assert any({"aten::arange", "aten::embedding"} <= set(g) for g in groups), graph
    assert "aten::arange" not in runner.unfused_kinds(graph), graph
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


def test_positions_at_other_sizes_are_computed_as_eager() -> None:
    model = Positions().eval()
    module, _, _ = fuse(model, [torch.randn(2, 8, 16)])
    for x in (torch.randn(2, 5, 16), torch.randn(1, 8, 16), torch.randn(2, 8, 16)):
        out = run(module, [x])
        ref = eager(model, [x])
        assert out.shape == ref.shape
        assert_matches(out, ref, "fp32")


def _fallbacks_at(module: torch.jit.ScriptModule, model: nn.Module, tokens: int) -> int:
    """The unfused runs of a call at `tokens` (every oneDNN group compiles at first sight
    under the suite's TORCH_GRAPHFUSE_COMPILE_AT=1, so these are the size-constant group's)."""
    x = torch.randn(2, tokens, 16)
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    return torch_graphfuse.kernel_stats()["fallbacks"]


def test_values_at_other_sizes_are_kept_for_as_many_sizes_as_a_group_keeps_compiled() -> None:
    """A stream of new lengths must not grow the process: the values of the sizes used
    least recently go once a group keeps as many sizes as it keeps compiled specs."""
    model = Positions().eval()
    module, _, _ = fuse(model, [torch.randn(2, 8, 16)])
    kept = torch_graphfuse.memory_budget()["specs_per_group"]
    lengths = list(range(10, 10 + kept + 2))
    assert [_fallbacks_at(module, model, n) for n in lengths] == [1] * len(lengths)
    assert _fallbacks_at(module, model, lengths[-1]) == 0  # kept
    assert _fallbacks_at(module, model, lengths[0]) == 1  # the least recently used went


class Bias(nn.Module):
    """A float causal bias of tokens x tokens, made from sizes alone on each call."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1))
        bias = (positions[None, :] - positions[:, None]).float().clamp(max=0)
        return (x @ x.transpose(1, 2)) + bias


def test_values_of_more_than_8_mb_at_another_size_are_computed_on_each_call() -> None:
    model = Bias().eval()
    module, _, _ = fuse(model, [torch.randn(1, 8, 4)])
    for tokens, kept in ((1400, True), (1500, False)):  # 7.5 MB and 8.6 MB of float32
        x = torch.randn(1, tokens, 4)
        run(module, [x])
        torch_graphfuse.reset_kernel_stats()
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")
        assert (torch_graphfuse.kernel_stats()["fallbacks"] == 0) == kept, tokens


class ReturnsPositions(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.size(1)) * 2
        return positions, x * positions


def test_a_tensor_the_graph_returns_is_computed_on_each_call() -> None:
    """The caller owns what the graph returns (and may write it): never a kept constant."""
    model, x = ReturnsPositions().eval(), torch.randn(3, 4)
    module, (first, _), _ = fuse(model, [x])
    first.fill_(7)
    positions, product = run(module, [x])
    assert positions.tolist() == [0, 2, 4, 6]
    assert_matches(product, eager(model, [x])[1], "fp32")


class ReturnsAView(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        positions = torch.arange(x.size(1)) * 2
        return positions.view(2, -1), x * positions


def test_a_view_the_graph_returns_of_a_tensor_is_computed_on_each_call() -> None:
    model, x = ReturnsAView().eval(), torch.randn(3, 4)
    module, (first, _), _ = fuse(model, [x])
    first.fill_(7)
    positions, _ = run(module, [x])
    assert positions.flatten().tolist() == [0, 2, 4, 6]


_WRITTEN = """
    graph(%x : Float(2, 5, strides=[5, 1], requires_grad=0, device=cpu)):
      %one : int = prim::Constant[value=1]()
      %none : NoneType = prim::Constant()
      %n : int = aten::size(%x, %one)
      %r : Tensor = aten::arange(%n, %none, %none, %none, %none)
      {write}
      %y : Tensor = aten::mul(%x, %r)
      return (%y)"""


def _partitions(source: str) -> tuple[torch._C.Graph, list]:
    """The graph (which owns the partitions' nodes) and its partitions."""
    graph = torch._C.parse_ir(source)
    return graph, partition.find_partitions(graph, graph.block(), partition.Budget())


def test_the_values_are_those_at_the_profiled_sizes() -> None:
    _graph, (found,) = _partitions(_WRITTEN.format(write=""))
    assert [n.kind() for n in found.nodes] == ["aten::size", "aten::arange"]
    assert found.text == "1"  # one tensor whose sizes it reads, then its values
    held = found.inputs[1].toIValue()
    assert torch.equal(held, torch.arange(5))


def test_a_write_to_memory_the_region_made_is_part_of_its_value() -> None:
    write = "%w : Tensor = aten::add_(%r, %one, %one)"
    _graph, (found,) = _partitions(_WRITTEN.format(write=write))
    assert [n.kind() for n in found.nodes] == ["aten::size", "aten::arange", "aten::add_"]
    assert torch.equal(found.inputs[1].toIValue(), torch.arange(5) + 1)


def test_a_write_after_another_op_read_the_memory_stays() -> None:
    """mul reads arange's memory before add_ writes it: one constant cannot be both."""
    source = _WRITTEN.replace("{write}", """%early : Tensor = aten::mul(%x, %r)
      %w : Tensor = aten::add_(%r, %one, %one)""").replace("aten::mul(%x, %r)\n      return",
                                                            "aten::mul(%early, %r)\n      return")
    graph, found = _partitions(source)
    assert found == [], graph


_WRITES_A_VIEW_OF_AN_INPUT = """
    graph(%x : Float(2, 5, strides=[5, 1], requires_grad=0, device=cpu)):
      %zero : int = prim::Constant[value=0]()
      %one : int = prim::Constant[value=1]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %n : int = aten::size(%x, %one)
      %r : Tensor = aten::arange(%n, %none, %none, %none, %none)
      %v : Tensor = aten::select(%x, %zero, %zero)
      %w : Tensor = aten::copy_(%v, %r, %false)
      %y : Tensor = aten::mul(%x, %r)
      return (%y)"""


def test_a_write_to_memory_the_graph_was_given_stays() -> None:
    graph, found = _partitions(_WRITES_A_VIEW_OF_AN_INPUT)
    assert all("aten::copy_" not in [n.kind() for n in p.nodes] for p in found), graph


class ReadBeforeWrite(nn.Module):
    """A sum of positions taken before they are written in place: the sum is a 0-dim
    tensor, yet it reads memory the write changes, so it must see the values before."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1))
        total = positions.sum()
        positions.add_(1)
        return x * positions + total


class WrittenScalar(nn.Module):
    """A 0-dim tensor written in place and read through a view by two tables and by the
    graph: one memory, whoever reads it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(1)
        scale = torch.zeros(())
        seen = scale.view(())
        scale.add_(n)
        first, second = torch.arange(n) * seen, torch.ones(n) * seen
        return x * seen + first + second


class WriteAfterALayer(nn.Module):
    """Positions written in place with a size that only a later tensor has: the region
    would have to be cut around the layer, and a piece whose guard fails would write the
    positions another piece keeps."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1)).float()
        h = x + positions * 2
        joined = torch.cat([h.flatten(), y])
        positions.add_(joined.size(0))
        return h * positions + joined.sum()


def test_a_reader_before_a_write_sees_the_memory_before_it() -> None:
    model, x = ReadBeforeWrite().eval(), torch.randn(2, 5)
    module, out, _ = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_a_written_0_dim_tensor_is_one_memory_for_all_its_readers() -> None:
    model, x = WrittenScalar().eval(), torch.randn(2, 5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torch_graphfuse")
        module, out, _ = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    for other in (x, torch.randn(2, 3)):
        assert_matches(run(module, [other]), eager(model, [other]), "fp32")


def test_a_region_that_writes_is_never_cut() -> None:
    model, x, y = WriteAfterALayer().eval(), torch.randn(2, 5), torch.randn(3)
    module, out, _ = fuse(model, [x, y])
    assert_matches(out, eager(model, [x, y]), "fp32")
    # Another y fails the guards of what depends on it; the profiled one again after it.
    for other in (torch.randn(4), torch.randn(4), y):
        assert_matches(run(module, [x, other]), eager(model, [x, other]), "fp32")


class RelativePositions(nn.Module):
    """A relative-position index filled in with slice assignments from the input's sizes,
    looked up in a table and added to attention scores, as BEiT builds it on each call."""

    def __init__(self, tokens: int = 9) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(4 * tokens, 1))
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.size(1) - 1
        coords = torch.arange(n)
        relative = coords[:, None] - coords[None, :]
        relative += n - 1
        index = torch.zeros(n + 1, n + 1, dtype=relative.dtype)
        index[1:, 1:] = relative
        index[0, 0:] = 2 * n - 1
        index[0:, 0] = 2 * n
        index[0, 0] = 2 * n + 1
        bias = self.table[index.view(-1)].view(n + 1, n + 1, 1).permute(2, 0, 1).contiguous()
        h = self.fc(x)
        scores = h[:, None, :, :2] @ h[:, None, :, 2:4].transpose(-1, -2)
        return (scores + bias).softmax(-1)


def test_an_index_filled_in_place_is_computed_once_with_its_writes() -> None:
    model, x = RelativePositions().eval(), torch.randn(2, 9, 8)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    groups = _constant_groups(graph)
    assert any({"aten::copy_", "aten::fill_", "aten::index"} <= set(g) for g in groups), graph
    assert not {"aten::copy_", "aten::fill_", "aten::add_"} & set(runner.unfused_kinds(graph))
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0
    for other in (torch.randn(2, 7, 8), torch.randn(1, 9, 8)):
        assert_matches(run(module, [other]), eager(model, [other]), "fp32")


class LateSizes(nn.Module):
    """A table used before a layer and scaled by that layer's result's size after it: one
    group would have to run both before and after the layer, so the table and its scaled
    copy are two."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        table = torch.arange(x.size(1)).float()[:, None]
        h = self.fc(x + table)
        return h * (table * h.size(1))


def test_a_region_that_reads_sizes_of_later_tensors_is_cut() -> None:
    model, x = LateSizes().eval(), torch.randn(2, 6, 16)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert len(_constant_groups(graph)) == 2, graph
    torch_graphfuse.reset_kernel_stats()
    other = torch.randn(2, 3, 16)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")


class SizeOfAPosition(nn.Module):
    """Positions read by the group's product and, for their size, by a reshape of the
    input: the group gives them too."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(x.size(1) * 2)
        return x.reshape(positions.size(0)) + positions * 2


def test_a_tensor_whose_size_another_node_reads_is_given_by_the_group() -> None:
    model, x = SizeOfAPosition().eval(), torch.randn(2, 5)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert _constant_groups(graph), graph
    other = torch.randn(2, 3)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")
