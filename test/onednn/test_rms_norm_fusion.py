"""RMS normalization runs as oneDNN's one RMSNorm kernel: Hugging Face's six-op chain
(folded by passes/rms_norm) with its weight's multiply as gamma, through a same-dtype
cast as Llama writes it, with eager's result at any size, on non-finite values too.
A group whose RMSNorm has a gamma, or normalizes a size named as a constant, guards its
input's last size (oneDNN checks neither), where eager broadcasts or checks it."""

from __future__ import annotations

import pytest
import torch
from fusion_check import DTYPES, assert_matches, check, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.fusion import rewrite
from torch_graphfuse.group_schema import KIND


class T5Norm(nn.Module):
    """T5LayerNorm: the weight times the normalized input."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(width) + 0.5)
        self.proj = nn.Linear(width, width)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.normalize(x)
        return self.proj(h) + h  # read twice: the weighted result is the group's output


class LlamaNorm(T5Norm):
    """LlamaRMSNorm: to float32, normalize, back to the input dtype, times the weight."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + 1e-6)).to(dtype)


class ComputedWeight(T5Norm):
    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return x[0, 0] * (x * torch.rsqrt(variance + 1e-6))


class LlamaNormAlone(LlamaNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)


class ComputedWeightAlone(ComputedWeight):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.normalize(x)


def norm_groups(graph: torch._C.Graph) -> list[list[str]]:
    """The ops of the groups oneDNN runs as an RMSNorm (a folded chain's fallback holds
    the chain again)."""
    return [rewrite.group_kinds(n) for n in graph.nodes()
            if n.kind() == KIND and "RMSNorm" in n.s("desc")]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", [T5Norm, LlamaNorm], ids=["t5", "llama"])
def test_the_norm_and_its_weight_are_one_group(model_type: type[nn.Module], dtype: str) -> None:
    graph = check(model_type(), [torch.randn(2, 12, 64)], dtype, left=None)
    groups = norm_groups(graph)
    assert len(groups) == 1 and groups[0].count("aten::mul") == 2, graph


def test_a_weight_computed_at_run_time_stays_a_multiply_of_its_own() -> None:
    graph = check(ComputedWeight(), [torch.randn(2, 12, 64)], left=None)
    assert norm_groups(graph) and all(g.count("aten::mul") == 1 for g in norm_groups(graph)), graph


def test_without_gamma_other_sequence_lengths_run_fused() -> None:
    model = ComputedWeightAlone()
    module, _, _ = fuse(model, [torch.randn(1, 12, 64)])
    torch_graphfuse.reset_kernel_stats()
    for length in (5, 31):
        x = torch.randn(1, length, 64)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["fallbacks"] == 0 and stats["fused_runs"] > 0, stats


def test_with_gamma_other_lengths_run_fused_and_another_width_unfused() -> None:
    model = LlamaNormAlone()
    module, _, _ = fuse(model, [torch.randn(1, 12, 64)])
    torch_graphfuse.reset_kernel_stats()
    for shape in [(1, 31, 64), (3, 5, 64)]:
        x = torch.randn(shape)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["fallbacks"] == 0 and stats["fused_runs"] == 2, stats
    x = torch.randn(2, 12, 1)  # eager broadcasts the weight over a last dim of 1
    out, ref = run(module, [x]), eager(model, [x])
    assert out.shape == ref.shape == (2, 12, 64)
    assert_matches(out, ref, "fp32")
    assert torch_graphfuse.kernel_stats()["respecialized_runs"] == 1


@pytest.mark.parametrize("special", [float("nan"), float("inf"), 1e20],
                         ids=["nan", "inf", "overflow"])
def test_non_finite_and_overflowing_rows_give_eagers_result(special: float) -> None:
    model = T5Norm()
    module, _, _ = fuse(model, [torch.randn(2, 12, 64)])
    x = torch.randn(2, 12, 64)
    x[0, 3, 5] = special
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, [x]), eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["fused_runs"] > 0


def test_a_weightless_rms_norm_checks_its_size_as_eager_does() -> None:
    model = nn.Sequential(nn.RMSNorm(64, elementwise_affine=False), nn.Linear(64, 64))
    module, _, graph = fuse(model, [torch.randn(2, 64)])
    assert norm_groups(graph), graph
    x = torch.randn(2, 32)
    with pytest.raises(RuntimeError):
        eager(model, [x])
    with pytest.raises(RuntimeError):
        run(module, [x])
