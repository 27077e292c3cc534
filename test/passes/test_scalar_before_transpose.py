"""Scalar ops move before the transposes they read: `x.transpose(a, b) / s` becomes
`(x / s).transpose(a, b)`, with eager's values and strides; other operands stay."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

from torch_graphfuse.passes import scalar_before_transpose
from torch_graphfuse.testing import runner


def _kinds_after_pass(source: str) -> list[str]:
    graph = torch._C.parse_ir(source)
    scalar_before_transpose.run(graph)
    return [n.kind() for n in graph.nodes() if n.kind() != "prim::Constant"]


@pytest.mark.parametrize("op", ["mul", "div", "add", "sub"])
def test_a_scalar_op_of_a_transpose_moves_before_it(op: str) -> None:
    alpha = ", %one" if op in ("add", "sub") else ""
    assert _kinds_after_pass(f"""
        graph(%x : Float(2, 3, 4, strides=[12, 4, 1]), %s : Float(requires_grad=0)):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %t : Float(2, 4, 3, strides=[12, 1, 4]) = aten::transpose(%x, %one, %two)
          %y : Float(2, 4, 3, strides=[12, 1, 4]) = aten::{op}(%t, %s{alpha})
          return (%y)""") == [f"aten::{op}", "aten::transpose"]


@pytest.mark.parametrize("case", ["a tensor operand", "a rounding mode", "a strided input"])
def test_other_ops_of_a_transpose_stay_after_it(case: str) -> None:
    operand = "Float(2, 4, 3, strides=[12, 3, 1])" if case == "a tensor operand" else "Float()"
    strides = "[24, 8, 1]" if case == "a strided input" else "[12, 4, 1]"
    rounding = ', %floor' if case == "a rounding mode" else ""
    assert _kinds_after_pass(f"""
        graph(%x : Float(2, 3, 4, strides={strides}), %s : {operand}):
          %one : int = prim::Constant[value=1]()
          %two : int = prim::Constant[value=2]()
          %floor : str = prim::Constant[value="floor"]()
          %t : Float(2, 4, 3) = aten::transpose(%x, %one, %two)
          %y : Float(2, 4, 3) = aten::div(%t, %s{rounding})
          return (%y)""") == ["aten::transpose", "aten::div"]


class ScaledKeys(nn.Module):
    """DeBERTa's scores: the keys scaled by sqrt(head size * 3) as they are transposed."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k = nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        q, k = self.q(h), self.k(h)
        scale = torch.sqrt(torch.tensor(k.size(-1), dtype=torch.float) * 3)
        return torch.bmm(q, k.transpose(-1, -2) / scale.to(dtype=q.dtype))


def test_keys_scaled_as_they_are_transposed_are_scaled_in_a_group() -> None:
    model, x = ScaledKeys().eval(), torch.randn(2, 8, 32)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert not {"aten::div", "aten::sqrt"} & set(runner.unfused_kinds(graph)), graph
    for other in (torch.randn(1, 5, 32), torch.randn(3, 8, 32).transpose(0, 1)):
        fused, reference = run(module, [other]), eager(model, [other])
        assert_matches(fused, reference, "fp32")
        assert fused.stride() == reference.stride()


class ScaledBySqueezed(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(x.transpose(1, 2) * y.squeeze() + 1)


def test_a_scale_a_squeeze_makes_stays_after_the_transpose() -> None:
    # y.squeeze() is 0-dim for y of shape (1,), and broadcasts over the transpose's last
    # dim for y of shape (3,).
    model, x = ScaledBySqueezed(), torch.randn(2, 3, 3)
    module, _, _ = fuse(model, [x, torch.randn(1)])
    y = torch.randn(3)
    assert_matches(run(module, [x, y]), eager(model, [x, y]), "fp32")
