"""Two constant addends in a row fold into one: `(x + a) + b` becomes `x + (a + b)` where
both are finite and far from overflow, so the regrouping changes rounding only; NaN and
infinities in x come out where eager's are."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, group_kinds, run
from test_addend_through_views import _graph
from torch import nn

from torch_graphfuse.passes import fold_constant_addends

TWO_ADDS = """
    graph(%x : Float(2, 3, 4, device=cpu), %a : Tensor, %b : Tensor):
      %one : int = prim::Constant[value=1]()
      %y : Float(2, 3, 4, device=cpu) = aten::add(%x, %a, %one)
      %z : Float(2, 3, 4, device=cpu) = aten::add(%y, %b, %one)
      return (%z)"""


def _adds_after_pass(source: str, a: torch.Tensor, b: torch.Tensor) -> list[list[str]]:
    """Each add's inputs, by name or as `const`, after the pass."""
    graph = _graph(source, {"a": a, "b": b})
    fold_constant_addends.run(graph)
    return [[v.debugName() if v.node().kind() != "prim::Constant" else "const"
             for v in list(n.inputs())[:2]]
            for n in graph.nodes() if n.kind() == "aten::add"]


def test_two_constant_addends_fold_into_one() -> None:
    adds = _adds_after_pass(TWO_ADDS, torch.randn(3, 4), torch.randn(2, 1, 4))
    assert len(adds) == 2 and adds[0] == ["const", "const"] and adds[1][0] == "x", adds


@pytest.mark.parametrize("case", ["an infinite addend", "an addend near overflow",
                                  "a float64 addend", "the first sum read elsewhere",
                                  "an alpha of 2", "x written between the sums"])
def test_addends_that_could_change_more_than_rounding_stay_apart(case: str) -> None:
    source, a, b = TWO_ADDS, torch.randn(3, 4), torch.randn(3, 4)
    if case == "an infinite addend":
        a[0, 0] = -torch.inf
    elif case == "an addend near overflow":
        b[1, 2] = 1e32
    elif case == "a float64 addend":
        b = b.double()
    elif case == "x written between the sums":
        # Folded, x would be read at the second sum, after the write.
        source = source.replace("      %z : Float(2, 3, 4, device=cpu) = aten::add(%y, %b, %one)",
                                "      %two : int = prim::Constant[value=2]()\n"
                                "      %w : Float(2, 3, 4) = aten::mul_(%x, %two)\n"
                                "      %z : Float(2, 3, 4, device=cpu) = aten::add(%y, %b, %one)")
    elif case == "the first sum read elsewhere":
        source = source.replace("return (%z)", "return (%z, %y)")
    else:
        source = source.replace("%z : Float(2, 3, 4, device=cpu) = aten::add(%y, %b, %one)",
                                "%two : int = prim::Constant[value=2]()\n"
                                "      %z : Float(2, 3, 4, device=cpu) = aten::add(%y, %b, %two)")
    # Folded, the first add would sum the two constants.
    assert _adds_after_pass(source, a, b)[0][0] == "x"


class BiasThenMask(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.randn(1, 3, 5, 5))
        self.register_buffer("mask", torch.where(torch.rand(4, 1, 5, 5) > 0.5, 0.0, -100.0))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        return ((scores + self.bias) + self.mask).relu()


def test_folded_addends_keep_eagers_nan_and_infinities() -> None:
    model = BiasThenMask()
    x = torch.randn(4, 3, 5, 5)
    module, _, graph = fuse(model, [x])
    # The constants' sum is a size-constant group; the scores take it in one add.
    assert sorted(group_kinds(graph)) == [["aten::add"], ["aten::add", "aten::relu"]]
    x[0, 0, 0, :3] = torch.tensor([torch.nan, torch.inf, -torch.inf])
    x[1, 2, 3, 4] = torch.finfo(torch.float32).max
    out, ref = run(module, [x]), eager(model, [x])
    assert_matches(out, ref, "fp32")
    assert torch.equal(out.isnan(), ref.isnan()) and torch.equal(out.isinf(), ref.isinf())
