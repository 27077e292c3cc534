"""rms_norm: the RMS normalization Hugging Face writes as six ops folds into one
aten::rms_norm, which gives eager's result bit for bit in fp32 (non-finite values and
overflow included); chains that something else reads into, or that an in-place write
interrupts, stay as they are. Where the folded node runs unfused the chain comes back,
so a call with another layout of x gets eager's layout too."""

from __future__ import annotations

import pytest
import torch
from fusion_check import eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.group_schema import KIND, subgraph
from torch_graphfuse.passes import rms_norm


def chain(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class Norm(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * chain(x)


class Chain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return chain(x) + 1.0


class VarianceReadElsewhere(Norm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6)) + variance


class WrittenBetween(Norm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        variance = x.pow(2).mean(-1, keepdim=True)
        x.add_(1.0)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))


class OtherExponent(Norm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(3).mean(-1, keepdim=True) + 1e-6))


def folded_graph(model: nn.Module, x: torch.Tensor) -> torch._C.Graph:
    """The traced graph (the weight a constant, profiled types), folded."""
    model = model.eval().requires_grad_(False)
    graph = torch.jit.trace(lambda t: model(t), x).graph
    torch._C._jit_pass_constant_propagation(graph)
    rms_norm.run(graph)
    return graph


def kinds(graph: torch._C.Graph) -> list[str]:
    return [n.kind() for n in graph.nodes() if n.kind().startswith("aten::")]


def test_the_chain_folds_into_rms_norm_and_the_weight_stays_a_multiply() -> None:
    with torch.no_grad():
        graph = folded_graph(Norm(), torch.randn(2, 5, 16))
    assert kinds(graph) == ["aten::size", "aten::rms_norm", "aten::mul"], graph


@pytest.mark.parametrize("model", [VarianceReadElsewhere(), WrittenBetween(), OtherExponent()],
                         ids=["variance_read_elsewhere", "written_between", "other_exponent"])
def test_a_chain_that_is_not_only_the_norm_stays(model: nn.Module) -> None:
    with torch.no_grad():
        graph = folded_graph(model, torch.randn(2, 5, 16))
    assert "aten::rms_norm" not in kinds(graph), graph


def test_a_chain_over_a_transposed_input_stays() -> None:
    """Eager's chain lays its result out as x is; aten::rms_norm writes row-major, so a
    later contiguous() would copy in one and not the other (fuzzer seed 9292, bf16:1157)."""
    with torch.no_grad():
        graph = folded_graph(Norm(16), torch.randn(16, 5).t())
    assert "aten::rms_norm" not in kinds(graph), graph


@pytest.mark.parametrize("values", [
    [1e20, 1.0, 2.0, -3.0],            # x * x overflows: eager's result is 0
    [float("inf"), 1.0, 2.0, -3.0],    # NaN at the infinity, 0 elsewhere
    [float("nan"), 1.0, 2.0, -3.0],
    [0.0, 0.0, 0.0, 0.0],
    [1e-30, 1e-30, 1e-30, 1e-30],      # x * x underflows: eps decides
], ids=["overflow", "inf", "nan", "zeros", "underflow"])
def test_aten_rms_norm_is_the_chain_bit_for_bit(values: list[float]) -> None:
    # The folded graph runs aten::rms_norm wherever its group runs unfused.
    x = torch.tensor([values, [0.5, -1.5, 2.5, 3.5]])
    torch.testing.assert_close(torch.rms_norm(x, [4], None, 1e-6), chain(x), rtol=0, atol=0,
                               equal_nan=True)


def test_the_folded_graph_gives_eagers_result_at_other_sizes() -> None:
    model = Norm(16).eval()
    with torch.no_grad():
        graph = folded_graph(model, torch.randn(2, 5, 16))
    assert "aten::rms_norm" in kinds(graph)
    fn = torch._C._create_function_from_graph("folded", graph)
    for shape in [(2, 5, 16), (1, 7, 16), (3, 16)]:
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(fn(x), model(x), rtol=0, atol=0)


def test_a_folded_norm_running_unfused_keeps_eagers_layout() -> None:
    """Profiled row-major, called with a transposed x: the group runs its fallback, where
    aten::rms_norm would have written row-major and eager's chain keeps x's layout."""
    model = Chain().eval()
    module, _, graph = fuse(model, [torch.randn(2, 12, 64)])
    groups = [n for n in graph.nodes() if n.kind() == KIND]
    assert groups and "RMSNorm" in groups[0].s("desc"), graph
    fallback = [n.kind() for n in subgraph(groups[0]).nodes()]
    assert "aten::rsqrt" in fallback and "aten::rms_norm" not in fallback, fallback
    x = torch.randn(2, 64, 12).transpose(1, 2)
    torch_graphfuse.reset_kernel_stats()
    out, ref = run(module, [x]), eager(model, [x])
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 1
    assert out.stride() == ref.stride() == x.stride()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_the_graphs_own_rms_norm_is_never_unfolded() -> None:
    model = nn.Sequential(nn.RMSNorm(64, elementwise_affine=False)).eval()
    _, _, graph = fuse(model, [torch.randn(2, 64)])
    kinds = [n.kind() for n in graph.nodes()]
    kinds += [k.kind() for g in graph.nodes() if g.kind() == KIND for k in subgraph(g).nodes()]
    assert "aten::rms_norm" in kinds and "aten::rsqrt" not in kinds, graph
