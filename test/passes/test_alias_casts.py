"""A cast to its input's own dtype returns the input itself; tracing then records every later
read of the input as a read of the cast (T5's normalization). Each reader gets its own copy
of the cast, which joins the reader's group, and the result stays eager's."""

from __future__ import annotations

import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

from torch_graphfuse.passes import alias_casts
from torch_graphfuse.testing import runner

_SHARED_CAST = """
    graph(%x : Float(2, 3), %y : Float(2, 3)):
      %dtype : int = prim::Constant[value=6]()
      %false : bool = prim::Constant[value=0]()
      %none : NoneType = prim::Constant()
      %one : int = prim::Constant[value=1]()
      %c : Float(2, 3) = aten::to(%x, %dtype, %false, %false, %none)
      %a : Tensor = aten::add(%c, %y, %one)
      %m : Tensor = aten::mul(%c, %y)
      {write}
      return (%a, %m)"""


def _casts_read(source: str) -> list[int]:
    """How many nodes read each cast of the graph, after the pass."""
    graph = torch._C.parse_ir(source)
    alias_casts.run(graph)
    return [len(n.output().uses()) for n in graph.nodes() if n.kind() == "aten::to"]


def test_each_reader_of_a_same_dtype_cast_gets_its_own() -> None:
    assert _casts_read(_SHARED_CAST.format(write="")) == [1, 1]


def test_a_cast_of_a_tensor_written_in_place_stays_shared() -> None:
    write = "%w : Tensor = aten::add_(%x, %y, %one)"
    assert _casts_read(_SHARED_CAST.format(write=write)) == [2]


def test_a_cast_of_a_cast_is_copied_too() -> None:
    """The second cast reads a copy of the first once that is copied: the pass failed when
    it asked the alias analysis about a node made after it (fuzzer seed 9393, bf16:2049)."""
    chained = _SHARED_CAST.format(write="").replace(
        "%a : Tensor = aten::add(%c, %y, %one)",
        "%a : Tensor = aten::add(%c, %y, %one)\n"
        "      %d : Float(2, 3) = aten::to(%c, %dtype, %false, %false, %none)\n"
        "      %e : Tensor = aten::add(%d, %y, %one)\n"
        "      %f : Tensor = aten::mul(%d, %c)\n"
        "      %t : Tensor = aten::mul(%y, %y)\n"
        "      %w : Tensor = aten::add_(%t, %y, %one)").replace("return (%a, %m)",
                                                   "return (%a, %m, %e, %f)")
    graph = torch._C.parse_ir(chained)
    alias_casts.run(graph)
    of_casts = [n for n in graph.nodes()
                if n.kind() == "aten::to" and n.inputsAt(0).node().kind() == "aten::to"]
    assert len(of_casts) == 2 and all(len(n.output().uses()) == 1 for n in of_casts), graph


def test_a_cast_that_converts_stays_shared() -> None:
    converting = _SHARED_CAST.format(write="").replace("value=6", "value=15").replace(
        "%c : Float(2, 3)", "%c : BFloat16(2, 3)")
    assert _casts_read(converting) == [2]


class T5Block(nn.Module):
    """T5's normalization (the variance of a float32 cast of the input, which is the input
    itself in float32) and its residual add, which tracing records as reading the cast."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(32) + 0.5)
        self.fc = nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
        normed = self.weight * (x * torch.rsqrt(variance + 1e-6))
        return x + self.fc(normed)


def test_cast_of_a_normalization_and_its_residual_joins_their_groups() -> None:
    model, x = T5Block().eval(), torch.randn(2, 8, 32)
    module, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert "aten::to" not in runner.unfused_kinds(graph), graph
    other = torch.randn(3, 5, 32)
    assert_matches(run(module, [other]), eager(model, [other]), "fp32")


def test_cast_joined_at_another_dtype_converts_as_eager() -> None:
    """A bfloat16 input: the cast converts, the guard refuses the float32 groups, and the
    result is eager's, dtype included."""
    model = T5Block().eval()
    module, _, _ = fuse(model, [torch.randn(2, 8, 32)])
    x = torch.randn(2, 8, 32).to(torch.bfloat16)
    with torch.no_grad():
        expected = model(x)
    out = run(module, [x])
    assert out.dtype == expected.dtype
    torch.testing.assert_close(out, expected)
