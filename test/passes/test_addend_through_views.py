"""A constant added over a view of a tensor, viewed back, is added to the tensor itself:
`(x.view(-1, windows, heads, n, n) + mask).view(-1, heads, n, n)` becomes
`(x + mask.expand(...).reshape(x.shape)).reshape(-1, heads, n, n)`, eager's values at
every size."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

from torch_graphfuse.passes import addend_through_views

WINDOWS, HEADS, TOKENS = 4, 3, 7


def _graph(source: str, constants: dict[str, torch.Tensor]) -> torch._C.Graph:
    """The parsed graph, with the named inputs made constants (as freezing makes buffers)."""
    graph = torch._C.parse_ir(source)
    for index in reversed([i for i, v in enumerate(graph.inputs())
                           if v.debugName() in constants]):
        value = list(graph.inputs())[index]
        with graph.insert_point_guard(next(graph.nodes())):
            constant = graph.insertConstant(constants[value.debugName()])
        value.replaceAllUsesWith(constant)
        graph.eraseInput(index)
    return graph


def _mask() -> torch.Tensor:
    region = torch.arange(TOKENS) % 2
    mask = torch.where(region[:, None] == region[None, :], 0.0, -100.0)
    return mask.expand(WINDOWS, TOKENS, TOKENS).clone().unsqueeze(1).unsqueeze(0)


SPLIT_VIEW = """
    graph(%x : Float(8, 3, 7, 7, strides=[147, 49, 7, 1], device=cpu), %mask : Tensor):
      %one : int = prim::Constant[value=1]()
      %split : int[] = prim::Constant[value=[-1, 4, 3, 7, 7]]()
      %merged : int[] = prim::Constant[value=[-1, 3, 7, 7]]()
      %v : Float(2, 4, 3, 7, 7, strides=[588, 147, 49, 7, 1]) = aten::view(%x, %split)
      %s : Float(2, 4, 3, 7, 7, strides=[588, 147, 49, 7, 1]) = aten::add(%v, %mask, %one)
      %y : Float(8, 3, 7, 7, strides=[147, 49, 7, 1]) = aten::view(%s, %merged)
      return (%y)"""


def test_a_constant_added_over_a_split_view_is_added_to_the_tensor() -> None:
    graph = _graph(SPLIT_VIEW, {"mask": _mask()})
    addend_through_views.run(graph)
    adds = [n for n in graph.nodes() if n.kind() == "aten::add"]
    assert len(adds) == 1 and adds[0].inputsAt(0).debugName() == "x", graph
    assert not any(n.kind() == "aten::view" for n in graph.nodes()), graph


@pytest.mark.parametrize("case", ["a mask dim facing a size read", "a wider mask",
                                  "a view back to another shape", "a float64 mask"])
def test_an_addend_that_could_change_the_views_shape_or_dtype_stays(case: str) -> None:
    source, mask = SPLIT_VIEW, _mask()
    if case == "a mask dim facing a size read":
        # Where the read gives 1 at another call, the sum broadcasts up to the mask's size.
        source = source.replace(
            "%split : int[] = prim::Constant[value=[-1, 4, 3, 7, 7]]()",
            "%three : int = prim::Constant[value=3]()\n"
            "      %n : int = aten::size(%x, %three)\n"
            "      %minus : int = prim::Constant[value=-1]()\n"
            "      %four : int = prim::Constant[value=4]()\n"
            "      %split : int[] = prim::ListConstruct(%minus, %four, %three, %n, %n)")
    elif case == "a wider mask":
        mask = mask.expand(2, WINDOWS, HEADS, TOKENS, TOKENS).clone()
        source = source.replace("[-1, 4, 3, 7, 7]", "[2, 4, 1, 21, 7]").replace(
            "Float(2, 4, 3, 7, 7, strides=[588, 147, 49, 7, 1]) = aten::view",
            "Float(2, 4, 1, 21, 7, strides=[588, 147, 147, 7, 1]) = aten::view")
    elif case == "a view back to another shape":
        source = source.replace("[-1, 3, 7, 7]", "[-1, 7, 7]").replace(
            "%y : Float(8, 3, 7, 7, strides=[147, 49, 7, 1])", "%y : Float(24, 7, 7)")
    else:
        mask = mask.double()
    graph = _graph(source, {"mask": mask})
    addend_through_views.run(graph)
    assert sum(n.kind() == "aten::view" for n in graph.nodes()) == 2, graph


class ShiftedWindowScores(nn.Module):
    """timm's shifted-window scores: a position bias, then the window mask over a view that
    splits the windows off the batch, inferring the batch (-1)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", _mask()[0, :, 0])
        self.register_buffer("bias", torch.randn(1, HEADS, TOKENS, TOKENS))

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        attn = q @ k.transpose(-2, -1) + self.bias
        attn = attn.view(-1, WINDOWS, HEADS, TOKENS, TOKENS) + self.mask.unsqueeze(1).unsqueeze(0)
        return attn.view(-1, HEADS, TOKENS, TOKENS).softmax(-1)


def _qk(batch: int) -> list[torch.Tensor]:
    torch.manual_seed(batch)
    return [torch.randn(batch * WINDOWS, HEADS, TOKENS, 8) for _ in range(2)]


def test_the_moved_mask_gives_eagers_scores_at_the_profiled_batch_and_others() -> None:
    model = ShiftedWindowScores()
    module, _, graph = fuse(model, _qk(2))
    assert not any(n.kind() == "aten::view" and n.output().type().dim() == 5
                   for n in graph.nodes()), graph
    for batch in (2, 1, 3):
        assert_matches(run(module, _qk(batch)), eager(model, _qk(batch)), "fp32")
    # Windows that do not divide the batch raise, as eager's view does.
    odd = [torch.randn(WINDOWS + 1, HEADS, TOKENS, 8) for _ in range(2)]
    with pytest.raises(RuntimeError):
        eager(model, odd)
    with pytest.raises(RuntimeError):
        run(module, odd)
