"""Swin's window partition and reversal around its projections: the copies of the permuted
windows fuse with the linears that read or write them (linear_leading_views), the padding to
whole windows by zero joins the norm's group (the pad lowering), and the results are eager's
at the profiled size and at others."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, group_kinds, run
from torch import nn
from torch.nn import functional as F

from torch_graphfuse.passes import linear_leading_views

WINDOW, DIM = 7, 32


class WindowBlock(nn.Module):
    """timm's Swin block around its attention, the attention itself left out: norm, pad to
    whole windows, partition, qkv projection; output projection, reversal, crop, residual.
    The channels are a constant, as defer_size_check reads timm's from the weights."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(DIM)
        self.qkv = nn.Linear(DIM, DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = (*x.shape[:3], DIM)
        pad_h = (WINDOW - h % WINDOW) % WINDOW
        pad_w = (WINDOW - w % WINDOW) % WINDOW
        y = F.pad(self.norm(x), (0, 0, 0, pad_w, 0, pad_h))
        _, hp, wp, _ = y.shape
        y = y.view(b, hp // WINDOW, WINDOW, wp // WINDOW, WINDOW, c)
        windows = y.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, WINDOW, WINDOW, c)
        a = self.qkv(windows.view(-1, WINDOW * WINDOW, c)).view(-1, WINDOW * WINDOW, c)
        a = self.proj(a).view(-1, WINDOW, WINDOW, c)
        a = a.view(b, hp // WINDOW, wp // WINDOW, WINDOW, WINDOW, c)
        a = a.permute(0, 1, 3, 2, 4, 5).contiguous().view(b, hp, wp, c)
        return x + a[:, :h, :w, :].contiguous()


def _image(size: int) -> list[torch.Tensor]:
    torch.manual_seed(size)
    return [torch.randn(1, size, size, DIM)]


def test_window_copies_and_padding_fuse_and_give_eagers_values_at_other_sizes() -> None:
    model = WindowBlock()
    module, _, graph = fuse(model, _image(14))
    left = [n.kind() for n in graph.nodes() if n.kind().startswith("aten::")]
    assert "aten::contiguous" not in left and "aten::pad" not in left, graph
    assert any("aten::pad" in kinds for kinds in group_kinds(graph)), group_kinds(graph)
    # 14: the profiled size; 21: more windows; 16: padded to 21, which stays with ATen.
    for size in (14, 21, 16):
        assert_matches(run(module, _image(size)), eager(model, _image(size)), "fp32")


def test_padding_by_more_than_zero_stays_with_aten() -> None:
    model = WindowBlock()
    module, _, graph = fuse(model, _image(16))
    assert "aten::pad" in [n.kind() for n in graph.nodes()], graph
    assert_matches(run(module, _image(16)), eager(model, _image(16)), "fp32")


def _linears_after_pass(source: str) -> list[list[str]]:
    """For each linear after the pass: the kind of the node making its input, and of the
    node making that one's input."""
    graph = torch._C.parse_ir(source)
    with graph.insert_point_guard(next(graph.nodes())):
        weight = graph.insertConstant(torch.zeros(8, 8))
    list(graph.inputs())[1].replaceAllUsesWith(weight)
    graph.eraseInput(1)
    linear_leading_views.run(graph)
    return [[n.inputsAt(0).node().kind(), n.inputsAt(0).node().inputsAt(0).node().kind()]
            for n in graph.nodes() if n.kind() == "aten::linear"]


PARTITIONED = """
    graph(%image : Float(1, 8, 8, 8, strides=[512, 64, 8, 1]), %w : Tensor):
      %none : NoneType = prim::Constant()
      %zero : int = prim::Constant[value=0]()
      %order : int[] = prim::Constant[value=[0, 1, 3, 2, 4, 5]]()
      %split : int[] = prim::Constant[value=[1, 4, 2, 4, 2, 8]]()
      %shape : int[] = prim::Constant[value=[-1, 4, 8]]()
      %x : Float(1, 4, 2, 4, 2, 8, strides=[512, 128, 64, 16, 8, 1]) = aten::view(%image, %split)
      %p : Float(1, 4, 4, 2, 2, 8, strides=[512, 128, 16, 64, 8, 1]) = aten::permute(%x, %order)
      %c : Float(1, 4, 4, 2, 2, 8, strides=[512, 128, 32, 16, 8, 1]) = aten::contiguous(%p, %zero)
      %v : Float(16, 4, 8, strides=[32, 8, 1]) = aten::view(%c, %shape)
      %y : Float(16, 4, 8, strides=[32, 8, 1], device=cpu) = aten::linear(%v, %w, %none)
      %flat : int[] = prim::Constant[value=[16, 32]]()
      %r : Float(16, 32, strides=[32, 1]) = aten::view(%y, %flat)
      return (%r)"""


VIEW_BEFORE_THE_COPY = PARTITIONED.replace(
    "%c : Float(1, 4, 4, 2, 2, 8, strides=[512, 128, 32, 16, 8, 1]) = "
    "aten::contiguous(%p, %zero)",
    "%rows : int[] = prim::Constant[value=[-1, 2, 8]]()\n"
    "      %pv : Float(32, 2, 8, strides=[16, 8, 1]) = aten::view(%p, %rows)\n"
    "      %c : Float(32, 2, 8, strides=[16, 8, 1]) = aten::contiguous(%pv, %zero)")


def test_a_linear_reads_the_permuted_windows_without_their_copy() -> None:
    assert _linears_after_pass(PARTITIONED) == [["aten::permute", "aten::view"]]
    # A view before the copy stays: eager's raises on the windows' strides at some sizes.
    assert _linears_after_pass(VIEW_BEFORE_THE_COPY) == [["aten::view", "aten::permute"]]


@pytest.mark.parametrize("case", ["a view regrouping the rows", "the copy read elsewhere",
                                  "a dropped view that could raise alone",
                                  "a dropped view of one element count"])
def test_views_that_change_the_rows_or_a_shared_copy_stay(case: str) -> None:
    source = PARTITIONED
    if case == "a dropped view of one element count":
        # [8, 8, 8] takes 512 elements only, where the linear's [-1, 4, 8] takes any 32nd.
        source = source.replace(
            "%v : Float(16, 4, 8, strides=[32, 8, 1]) = aten::view(%c, %shape)",
            "%fixed : int[] = prim::Constant[value=[8, 8, 8]]()\n"
            "      %e : Float(8, 8, 8) = aten::view(%c, %fixed)\n"
            "      %v : Float(16, 4, 8, strides=[32, 8, 1]) = aten::view(%e, %shape)")
    elif case == "a dropped view that could raise alone":
        # [-1, 8, 8] needs the rows to come in eights, which the linear's [-1, 4, 8] does not.
        source = source.replace(
            "%v : Float(16, 4, 8, strides=[32, 8, 1]) = aten::view(%c, %shape)",
            "%eights : int[] = prim::Constant[value=[-1, 8, 8]]()\n"
            "      %e : Float(8, 8, 8) = aten::view(%c, %eights)\n"
            "      %v : Float(16, 4, 8, strides=[32, 8, 1]) = aten::view(%e, %shape)")
    elif case == "a view regrouping the rows":
        # [-1, 4, 8] -> [-1, 2, 16]: rows of 16, which the weight's 8 columns do not take.
        source = source.replace("[-1, 4, 8]", "[-1, 2, 16]").replace(
            "%v : Float(16, 4, 8, strides=[32, 8, 1])", "%v : Float(16, 2, 16)")
    else:
        source = source.replace("return (%r)", "return (%r, %c)")
    dropped = case.startswith("a dropped view")
    assert _linears_after_pass(source) == [["aten::view",
                                            "aten::view" if dropped else "aten::contiguous"]]
