"""Linear, matmul and addmm, and what fuses into them, in fp32 and bf16."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from fusion_check import DTYPES, check, check_nonfinite_call, fused_and_eager, group_kinds
from test_conv_fusion import ELTWISE, FINITE_ONLY_ELTWISE
from torch import nn
from torch.nn import functional as F


class Linear(nn.Module):
    def __init__(self, then: Callable[[torch.Tensor], torch.Tensor] = torch.relu,
                 bias: bool = True) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 24, bias=bias)
        self.then = then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.then(self.fc(x))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 16), (2, 3, 16), (2, 2, 3, 16)], ids=str)
def test_linear(dtype: str, bias: bool, shape: tuple[int, ...]) -> None:
    graph = check(Linear(lambda y: y, bias), [torch.randn(*shape)], dtype, groups=1, left=[])
    assert group_kinds(graph) == [["aten::linear"]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(set(ELTWISE) - {"round"}))
def test_linear_eltwise(dtype: str, name: str) -> None:
    graph = check(Linear(ELTWISE[name]), [torch.randn(4, 16)], dtype, groups=1, left=[])
    assert "aten::linear" in group_kinds(graph)[0]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FINITE_ONLY_ELTWISE))
def test_linear_finite_only_eltwise_fuses_and_runs_unfused_on_nan(dtype: str, name: str) -> None:
    fn, _ = FINITE_ONLY_ELTWISE[name]
    x = torch.randn(4, 16)
    graph = check(Linear(fn), [x], dtype, groups=1, left=[])
    assert "aten::linear" in group_kinds(graph)[0]
    x_nan = x.clone()
    x_nan[1, 3] = float("nan")
    check_nonfinite_call(Linear(fn), [x], [x_nan], dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_linear_silu_and_bias_add(dtype: str) -> None:
    model = Linear(lambda y: F.silu(y) + torch.ones(24, dtype=y.dtype))
    check(model, [torch.randn(4, 16)], dtype, groups=1, left=[])


class GatedMlp(nn.Module):
    """Llama's MLP: down(silu(gate(x)) * up(x))."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False)
        self.down = nn.Linear(32, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_gated_mlp_is_one_group_a_linear(dtype: str) -> None:
    # As one partition, oneDNN 3.12 reads its three weights unpacked (its general kernel):
    # 6.35 against 5.84 ms as three at 128 tokens of Llama's sizes.
    graph = check(GatedMlp(), [torch.randn(2, 5, 16)], dtype, groups=3, left=[])
    assert sorted(sorted(k for k in group if k != "aten::to") for group in group_kinds(graph)) \
        == [["aten::linear"], ["aten::linear", "aten::mul"], ["aten::linear", "aten::silu"]]


class Matmul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.matmul(a, b))


MATMUL_SHAPES = [
    ((4, 8), (8, 5)),            # 2-d x 2-d
    ((3, 4, 8), (3, 8, 5)),      # batched
    ((3, 4, 8), (8, 5)),         # batched x 2-d (broadcast)
    ((2, 3, 4, 8), (2, 3, 8, 5)),
    ((2, 1, 4, 8), (1, 3, 8, 5)),  # broadcast batch dims both ways
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul_ranks(dtype: str, shapes: tuple[tuple[int, ...], tuple[int, ...]]) -> None:
    a, b = (torch.randn(*s) for s in shapes)
    check(Matmul(), [a, b], dtype, groups=1, left=[])


class MatVec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.v = nn.Parameter(torch.randn(8))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, self.v) / (y + 4.0)


def test_matmul_with_a_1d_operand_stays_with_aten() -> None:
    # oneDNN computes the 1-d operand as a matrix, and the division that
    # follows then broadcasts against the wrong shape (found by the fuzzer).
    check(MatVec(), [torch.randn(3, 8), torch.rand(3)], groups=0,
          left=["aten::matmul", "aten::add", "aten::div"])


class MmBmm(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.tanh(torch.bmm(a, b)) + torch.mm(a[0], b[0])


@pytest.mark.parametrize("dtype", DTYPES)
def test_mm_and_bmm(dtype: str) -> None:
    # a[0] and b[0] are views only the mm reads: its group makes them (its head). Under
    # bf16 autocast a cast reads each, and they stay with ATen.
    selects = [] if dtype == "fp32" else ["aten::select", "aten::select"]
    graph = check(MmBmm(), [torch.randn(2, 4, 8), torch.randn(2, 8, 4)], dtype, left=selects)
    fused = [k for g in group_kinds(graph) for k in g]
    assert "aten::bmm" in fused and "aten::mm" in fused


class Addmm(nn.Module):
    def __init__(self, beta: float, alpha: float) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.randn(6))
        self.w = nn.Parameter(torch.randn(8, 6))
        self.beta, self.alpha = beta, alpha

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(torch.addmm(self.bias, x, self.w, beta=self.beta, alpha=self.alpha))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta", [1, 0.5])
def test_addmm(dtype: str, beta: float) -> None:
    check(Addmm(beta, 1), [torch.randn(4, 8)], dtype, groups=1, left=[])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("beta,alpha", [(1, 2.0), (0.25, -1.5)])
def test_addmm_with_alpha_and_relu(dtype: str, beta: float, alpha: float) -> None:
    # decompose makes it mm * alpha + beta * bias, then relu: one partition.
    check(Addmm(beta, alpha), [torch.randn(4, 8)], dtype, groups=1, left=[])


class FusedQkv(nn.Module):
    """One projection for query, key and value, viewed to its own shape with sizes read at
    run time, then split (GPT-NeoX and Phi write it so): oneDNN's partition takes the
    same-shape view as the product itself, and the split reads the view."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 96)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        q, k, v = self.qkv(x).view(x.size(0), x.size(1), 96).split(32, 2)
        return q.transpose(1, 2), k, v


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_shape_view_read_outside_keeps_the_linear_fused(dtype: str) -> None:
    graph = check(FusedQkv(), [torch.randn(2, 8, 16)], dtype, groups=1)
    assert "aten::linear" in [k for g in group_kinds(graph) for k in g], graph


class HeadsProjection(nn.Module):
    """A key projection split into heads and made contiguous, as whisper and BART write
    it; `reader` also reads the transposed heads (a view of them is kept)."""

    def __init__(self, reader: bool = False) -> None:
        super().__init__()
        self.k = nn.Linear(64, 64)
        self.reader = reader

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        heads = self.k(x).view(1, 12, 4, 16).transpose(1, 2)
        if self.reader:
            return heads.contiguous(), heads * 2
        return heads.contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
def test_contiguous_heads_are_the_projections_output_layout(dtype: str) -> None:
    # The projection's group writes the heads densely (oneDNN's reorder inside it) and
    # the copy joins it: no standalone contiguous, and the result is row-major as eager's.
    graph = check(HeadsProjection(), [torch.randn(1, 12, 64)], dtype, groups=1, left=[])
    assert "aten::contiguous" in group_kinds(graph)[0]
    out, ref, _ = fused_and_eager(HeadsProjection(), [torch.randn(1, 12, 64)], dtype)
    assert out.stride() == ref.stride() == (768, 192, 16, 1)


def test_contiguous_heads_read_elsewhere_stay_a_copy() -> None:
    model = HeadsProjection(reader=True)
    x = torch.randn(1, 12, 64)
    graph = check(model, [x], left=None)
    assert all("aten::contiguous" not in g for g in group_kinds(graph)), graph
