"""Size reads move to the value their result is known from: through shape-preserving ops,
through a transpose or permute to the input's dimension, and through a view to the size its
shape gives. Then the heads' merge after attention joins the output projection's group."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from fusion_check import assert_matches, eager, fuse, group_kinds, run
from torch import nn

from torch_graphfuse import config
from torch_graphfuse.passes import defer_size_check
from torch_graphfuse.testing import runner


def _size_reads(source: str, weight_rows: int | None = None,
                weight: torch.Tensor | None = None) -> list[tuple[str, object]]:
    """(the read tensor's name, or its op where it is no input; the dim) of each size the
    graph returns, or ("value", the constant or the value's name) where it is no read.
    With `weight_rows`, the graph's second input becomes a constant (rows, 32) weight, as
    freezing makes it (or `weight` itself)."""
    graph = torch._C.parse_ir(source)
    if weight_rows is not None:
        weight = torch.zeros(weight_rows, 32)
    if weight is not None:
        with graph.insert_point_guard(next(graph.nodes())):
            constant = graph.insertConstant(weight)
        list(graph.inputs())[1].replaceAllUsesWith(constant)
        graph.eraseInput(1)
    defer_size_check.run(graph)
    reads = []
    for value in graph.return_node().inputs():
        node = value.node()
        if node.kind() == "aten::size":
            read = node.inputsAt(0)
            name = read.debugName() if read.node().kind() == "prim::Param" else read.node().kind()
            reads.append((name, node.inputsAt(1).toIValue()))
        else:
            reads.append(("value", value.toIValue() if node.kind() == "prim::Constant"
                          else value.debugName()))
    return reads


def test_size_of_a_transpose_reads_the_swapped_dim_of_its_input() -> None:
    assert _size_reads("""
        graph(%x : Float(2, 3, 4, 5)):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=-2]()
          %zero : int = prim::Constant[value=0]()
          %t : Tensor = aten::transpose(%x, %one, %two)
          %a : int = aten::size(%t, %one)
          %b : int = aten::size(%t, %two)
          %c : int = aten::size(%t, %zero)
          return (%a, %b, %c)""") == [("x", 2), ("x", 1), ("x", 0)]


def test_size_through_a_copy_and_a_permute() -> None:
    assert _size_reads("""
        graph(%x : Float(2, 3, 4)):
          %order : int[] = prim::Constant[value=[2, 0, 1]]()
          %format : int = prim::Constant[value=0]()
          %last : int = prim::Constant[value=-1]()
          %p : Float(4, 2, 3) = aten::permute(%x, %order)
          %c : Tensor = aten::contiguous(%p, %format)
          %a : int = aten::size(%c, %last)
          return (%a)""") == [("x", 1)]


def test_size_of_a_view_is_the_size_its_shape_gives() -> None:
    assert _size_reads("""
        graph(%x : Float(2, 12), %y : Float(7, 3)):
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %three : int = prim::Constant[value=3]()
          %b : int = aten::size(%y, %zero)
          %shape : int[] = prim::ListConstruct(%b, %three, %b)
          %v : Tensor = aten::view(%x, %shape)
          %p : int = aten::size(%v, %zero)
          %q : int = aten::size(%v, %one)
          return (%p, %q)""") == [("y", 0), ("value", 3)]


def test_size_an_inferred_view_dim_gives_stays_read_from_the_view_where_it_is_arithmetic(
        ) -> None:
    """(2, 12) viewed as (4, -1) infers 2 * 12 // 4: a read is cheaper than that."""
    assert _size_reads("""
        graph(%x : Float(2, 12)):
          %one : int = prim::Constant[value=1]()
          %infer : int = prim::Constant[value=-1]()
          %four : int = prim::Constant[value=4]()
          %shape : int[] = prim::ListConstruct(%four, %infer)
          %v : Tensor = aten::reshape(%x, %shape)
          %s : int = aten::size(%v, %one)
          return (%s)""") == [("aten::reshape", 1)]


def test_size_an_inferred_view_dim_gives_is_the_input_size_it_leaves() -> None:
    """(b, s, d) viewed as (b, -1, d) infers s."""
    assert _size_reads("""
        graph(%x : Float(2, 3, 4)):
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %infer : int = prim::Constant[value=-1]()
          %b : int = aten::size(%x, %zero)
          %d : int = aten::size(%x, %two)
          %shape : int[] = prim::ListConstruct(%b, %infer, %d)
          %v : Tensor = aten::view(%x, %shape)
          %s : int = aten::size(%v, %one)
          return (%s)""") == [("x", 1)]


def _heads(dim: int) -> str:
    """`linear(x, w).view(b, s, 4, -1).size(dim)`."""
    return f"""
        graph(%x : Float(2, 8, 32), %w : Float(64, 32)):
          %none : NoneType = prim::Constant()
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %four : int = prim::Constant[value=4]()
          %infer : int = prim::Constant[value=-1]()
          %dim : int = prim::Constant[value={dim}]()
          %y : Float(2, 8, 64) = aten::linear(%x, %w, %none)
          %b : int = aten::size(%y, %zero)
          %s : int = aten::size(%y, %one)
          %shape : int[] = prim::ListConstruct(%b, %s, %four, %infer)
          %v : Tensor = aten::view(%y, %shape)
          %r : int = aten::size(%v, %dim)
          return (%r)"""


def test_heads_split_off_a_linear_have_the_weight_rows_over_the_head_count() -> None:
    assert _size_reads(_heads(-1), 64) == [("value", 16)]
    assert _size_reads(_heads(1), 64) == [("x", 1)]  # a linear keeps its input's sizes


def test_an_inferred_dim_that_does_not_divide_stays_read_from_the_view() -> None:
    # 66 rows over 4 heads: eager's view raises, and the read stays after it.
    assert _size_reads(_heads(-1), 66) == [("aten::view", -1)]


def test_size_after_a_squeeze_stays_read_where_the_rank_may_change() -> None:
    # squeeze(0) drops the dim only where it is 1: at batch 4, dim 0 of the linear's result is
    # the batch, not the weight's rows.
    assert _size_reads("""
        graph(%x : Float(1, 32), %w : Float(1, 32)):
          %none : NoneType = prim::Constant()
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %s : Float(32) = aten::squeeze(%x, %zero)
          %y : Float(1) = aten::linear(%s, %w, %none)
          %t : Float(32, 1) = aten::unsqueeze(%s, %one)
          %u : Float(1, 32) = aten::transpose(%t, %zero, %one)
          %a : int = aten::size(%y, %zero)
          %b : int = aten::size(%u, %zero)
          return (%a, %b)""", 1) == [("aten::linear", 0), ("aten::transpose", 0)]


class SqueezeLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x.squeeze(0))
        return y.view(y.shape[0])


def test_a_linear_after_a_squeeze_runs_at_a_batch_the_squeeze_keeps() -> None:
    model = SqueezeLinear()
    module, _, _ = fuse(model, [torch.randn(1, 3)])
    x = torch.randn(4, 3)
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")


def test_size_of_a_dim_out_of_range_stays_where_eager_raises() -> None:
    assert _size_reads("""
        graph(%x : Float(2, 3)):
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %five : int = prim::Constant[value=5]()
          %t : Tensor = aten::transpose(%x, %zero, %one)
          %s : int = aten::size(%t, %five)
          return (%s)""") == [("aten::transpose", 5)]


class MergeHeads(nn.Module):
    """GPT-2's attention output: heads merged with the merged tensor's own sizes, then
    projected over the flattened tokens and viewed back with those sizes too (its Conv1D).
    `contiguous_query` copies the query as whisper does, so attention writes (batch, heads,
    tokens, dim) and the merge copies in eager too."""

    def __init__(self, contiguous_query: bool = False) -> None:
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.weight = nn.Parameter(torch.randn(32, 32) / 6)
        self.bias = nn.Parameter(torch.randn(32))
        self.contiguous_query = contiguous_query

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq = x.size(0), x.size(1)
        q, k, v = (t.view(batch, seq, 4, -1).transpose(1, 2)
                   for t in self.qkv(x).split(32, dim=2))
        if self.contiguous_query:
            q = q.contiguous()
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).contiguous()
        a = a.reshape(a.size(0), a.size(1), -1)
        flat = torch.addmm(self.bias, a.view(-1, a.size(-1)), self.weight)
        return flat.view(a.size(0), a.size(1), 32)


def _projection_group(graph: torch._C.Graph) -> list[str]:
    """The kinds of the group computing the projection (a product with no split)."""
    return next(kinds for kinds in group_kinds(graph)
                if "aten::mm" in kinds and "aten::split" not in kinds)


def test_merge_of_heads_joins_the_projection_as_its_head(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Attention left with ATen, whatever its speed trial would find on this CPU at 8 tokens
    # (where oneDNN wins, the merge joins the attention's group instead).
    monkeypatch.setenv(config.SPEED_TRIALS.env, "aten")
    model, x = MergeHeads().eval(), torch.randn(2, 8, 32)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert {"aten::contiguous", "aten::reshape"} <= set(_projection_group(graph)), graph
    unfused = runner.unfused_kinds(graph)
    assert not {"aten::transpose", "aten::contiguous", "aten::reshape"} & set(unfused), graph
    for other in (torch.randn(1, 5, 32), torch.randn(2, 8, 32)):
        assert_matches(run(module, [other]), eager(model, [other]), "fp32")


def test_merge_of_heads_that_copies_stays_with_aten(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.SPEED_TRIALS.env, "aten")  # as above
    model, x = MergeHeads(contiguous_query=True).eval(), torch.randn(2, 8, 32)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert "aten::contiguous" in runner.unfused_kinds(graph), graph
    other = torch.randn(3, 6, 32)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")


class SplitHeadsCopied(nn.Module):
    """DeBERTa's transpose_for_scores: heads split off the projection with `-1`, copied to
    (batch * heads, tokens, dim), and viewed with the split view's sizes (the inferred dim
    among them), then a bmm of two such."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(32, 32), nn.Linear(32, 32)

    @staticmethod
    def split(x: torch.Tensor) -> torch.Tensor:
        x = x.view(x.size()[:-1] + (4, -1))
        return x.permute(0, 2, 1, 3).contiguous().view(-1, x.size(1), x.size(-1))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return torch.bmm(self.split(self.q(h)), self.split(self.k(h)).transpose(1, 2))


def test_heads_split_with_an_inferred_dim_and_copied_join_the_projection() -> None:
    model, x = SplitHeadsCopied().eval(), torch.randn(2, 8, 32)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    # The projection writes the copy's layout: no copy or view is left to ATen.
    assert not {"aten::contiguous", "aten::view", "aten::permute"} & set(
        runner.unfused_kinds(graph)), graph
    for other in (torch.randn(1, 5, 32), torch.randn(3, 1, 32), torch.randn(2, 8, 32)):
        assert_matches(run(module, [other]), eager(model, [other]), "fp32")


def test_size_after_an_if_stays_read_where_the_branches_give_other_ranks() -> None:
    assert _size_reads("""
        graph(%x : Float(1, 32), %w : Float(1, 32), %c : bool):
          %none : NoneType = prim::Constant()
          %zero : int = prim::Constant[value=0]()
          %s : Tensor = prim::If(%c)
            block0():
              %q : Float(32) = aten::squeeze(%x, %zero)
              -> (%q)
            block1():
              -> (%x)
          %y : Float(1) = aten::linear(%s, %w, %none)
          %a : int = aten::size(%y, %zero)
          return (%a)""", 1) == [("aten::linear", 0)]


def test_size_of_a_product_reads_its_rows_columns_and_the_batch_both_operands_share() -> None:
    # q and k are pieces of one unbind (Swin's, timm's ViT's qkv): their batch sizes are
    # one value, so the product's is that value; rows are q's, columns k's.
    assert _size_reads("""
        graph(%x : Float(2, 28, 96), %other : Float(2, 4, 8, 7)):
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %three : int = prim::Constant[value=3]()
          %four : int = prim::Constant[value=4]()
          %seven : int = prim::Constant[value=7]()
          %eight : int = prim::Constant[value=8]()
          %minus1 : int = prim::Constant[value=-1]()
          %minus2 : int = prim::Constant[value=-2]()
          %b : int = aten::size(%x, %zero)
          %shape : int[] = prim::ListConstruct(%three, %b, %four, %seven, %eight)
          %qkv : Float(3, 2, 4, 7, 8) = aten::reshape(%x, %shape)
          %pieces : Tensor[] = aten::unbind(%qkv, %zero)
          %q : Float(2, 4, 7, 8), %k : Float(2, 4, 7, 8), %v : Tensor = prim::ListUnpack(%pieces)
          %kt : Float(2, 4, 8, 7) = aten::transpose(%k, %minus2, %minus1)
          %scores : Float(2, 4, 7, 7) = aten::matmul(%q, %kt)
          %apart : Float(2, 4, 7, 7) = aten::matmul(%q, %other)
          %a : int = aten::size(%scores, %zero)
          %c : int = aten::size(%scores, %two)
          %d : int = aten::size(%scores, %three)
          %e : int = aten::size(%apart, %zero)
          %f : int = aten::size(%apart, %three)
          return (%a, %c, %d, %e, %f)""") == [
        ("x", 0), ("value", 7), ("value", 7),
        # Operands read apart may broadcast one against the other, and a read of an operand
        # could pin a tensor inside a partition: the product's own read stays.
        ("aten::matmul", 0), ("aten::matmul", 3)]


def test_size_of_a_sum_with_a_constant_is_the_constants_where_it_is_not_1() -> None:
    assert _size_reads("""
        graph(%x : Float(5, 32), %w : Float(1, 32)):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %zero : int = prim::Constant[value=0]()
          %thirty_two : int = prim::Constant[value=32]()
          %n : int = aten::size(%x, %zero)
          %shape : int[] = prim::ListConstruct(%n, %one, %thirty_two)
          %x3 : Float(5, 1, 32) = aten::view(%x, %shape)
          %y : Float(5, 1, 32) = aten::add(%x3, %w, %one)
          %a : int = aten::size(%y, %zero)
          %b : int = aten::size(%y, %one)
          %c : int = aten::size(%y, %two)
          return (%a, %b, %c)""", weight_rows=1) == [("x", 0), ("value", 1), ("value", 32)]


def test_size_of_a_view_to_a_constant_shape_is_its_item() -> None:
    assert _size_reads("""
        graph(%x : Float(4, 49, 96)):
          %shape : int[] = prim::Constant[value=[-1, 49, 96]]()
          %one : int = prim::Constant[value=1]()
          %zero : int = prim::Constant[value=0]()
          %y : Float(4, 49, 96) = aten::view(%x, %shape)
          %a : int = aten::size(%y, %one)
          %b : int = aten::size(%y, %zero)
          return (%a, %b)""") == [
        # The inferred size is x's count over 49 * 96, which no single read of x gives.
        ("value", 49), ("aten::view", 0)]


def test_size_of_a_convolution_a_padding_and_a_roll() -> None:
    # Swin reads its patch embedding's channels for every window view, and its windows'
    # sizes after a roll and a padding to whole windows.
    assert _size_reads("""
        graph(%x : Float(1, 3, 8, 8), %w : Float(32, 3, 4, 4), %n : int):
          %none : NoneType = prim::Constant()
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %three : int = prim::Constant[value=3]()
          %strides : int[] = prim::Constant[value=[4, 4]]()
          %pads : int[] = prim::Constant[value=[0, 0]]()
          %dilations : int[] = prim::Constant[value=[1, 1]]()
          %y : Float(1, 32, 2, 2) = aten::conv2d(%x, %w, %none, %strides, %pads, %dilations, %one)
          %order : int[] = prim::Constant[value=[0, 2, 3, 1]]()
          %t : Float(1, 2, 2, 32) = aten::permute(%y, %order)
          %shifts : int[] = prim::Constant[value=[1, 1]]()
          %dims : int[] = prim::Constant[value=[1, 2]]()
          %r : Float(1, 2, 2, 32) = aten::roll(%t, %shifts, %dims)
          %amounts : int[] = prim::ListConstruct(%zero, %zero, %zero, %n, %zero, %n)
          %mode : str = prim::Constant[value="constant"]()
          %p : Float(1, 2, 2, 32) = aten::pad(%r, %amounts, %mode, %none)
          %c : int = aten::size(%p, %three)
          %h : int = aten::size(%p, %one)
          return (%c, %h)""", weight=torch.zeros(32, 3, 4, 4)) == [
        # The channels are the weight's; the height is padded by a size read at run time.
        ("value", 32), ("aten::pad", 1)]


def test_sizes_of_a_list_input_and_of_a_convolution_of_a_varying_rank_stay() -> None:
    # A piece of a list the graph is given has no unbind to read through; a squeeze may give
    # the convolution an unbatched input at another call, whose dim 1 is then a height.
    assert _size_reads("""
        graph(%xs : Tensor[], %w : Float(32, 3, 4, 4)):
          %none : NoneType = prim::Constant()
          %zero : int = prim::Constant[value=0]()
          %one : int = prim::Constant[value=1]()
          %a : Float(2, 3, 8, 8), %b : Float(2, 3, 8, 8) = prim::ListUnpack(%xs)
          %s : Float(2, 3, 8, 8) = aten::squeeze(%a, %zero)
          %strides : int[] = prim::Constant[value=[4, 4]]()
          %pads : int[] = prim::Constant[value=[0, 0]]()
          %dilations : int[] = prim::Constant[value=[1, 1]]()
          %y : Float(2, 32, 2, 2) = aten::conv2d(%s, %w, %none, %strides, %pads, %dilations, %one)
          %n : int = aten::size(%b, %zero)
          %c : int = aten::size(%y, %one)
          return (%n, %c)""", weight=torch.zeros(32, 3, 4, 4)) == [
        ("prim::ListUnpack", 0), ("aten::conv2d", 1)]
