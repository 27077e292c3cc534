"""A matmul's operands in any strides give eager's result. Attention's heads (a transpose
of a projection, or a slice of a packed qkv projection) are bound as they come; other
layouts, which oneDNN 3.12's matmul reads at wrong offsets (size-1 batch dims among the
matrix dims, batches interleaved with them, and padded heads whose batch strides its
batch test takes for contiguous: a packed qkv projection's query at batch = 3 x tokens),
are copied row-major first."""

from __future__ import annotations

import random

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

from torch_graphfuse.backends.onednn import speed_trial
from torch_graphfuse.testing import runner


@pytest.fixture(autouse=True)
def _no_speed_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(speed_trial.ENV, "fuse")


class PackedScores(nn.Module):
    """timm's attention scores: one qkv linear viewed as (B, N, 3, H, D), permuted to
    (3, B, H, N, D), q and k selected from it."""

    def __init__(self, heads: int = 3, dim: int = 4) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.qkv = nn.Linear(8, 3 * heads * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        qkv = self.qkv(x).view(b, n, 3, self.heads, self.dim).permute(2, 0, 3, 1, 4)
        return qkv.select(0, 0) @ qkv.select(0, 1).transpose(-2, -1)


@pytest.mark.parametrize(("batch", "tokens"), [(6, 2), (3, 1), (9, 3), (2, 5), (4, 4)])
def test_scores_of_a_packed_projection_at_any_batch_and_tokens(batch: int, tokens: int) -> None:
    """(6, 2) and (9, 3) are batch = 3 x tokens, which oneDNN read wrongly (every batch
    after the first, 2-9 off); the others it reads right as they come."""
    model = PackedScores()
    module, _, graph = fuse(model, [torch.randn(1, 7, 8)])
    assert "MatMul" in "".join(g.s("desc") for g in runner.fusion_groups(graph)), graph
    for _ in range(2):
        x = torch.randn(batch, tokens, 8)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")


class MatMul(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def _strided(sizes: tuple[int, ...], order: list[int], pads: list[int]) -> torch.Tensor:
    """A tensor of `sizes` laid out in dim `order` (outermost first), each dim's extent
    padded by its factor in `pads`."""
    strides, step = [0] * len(sizes), 1
    for d in reversed(order):
        strides[d] = step
        step *= sizes[d] * pads[d]
    return torch.randn(step).as_strided(sizes, strides)


def _operand(rng: random.Random, batch: tuple[int, ...], rows: int, cols: int) -> torch.Tensor:
    sizes = (*batch, rows, cols)
    order = list(range(len(sizes)))
    rng.shuffle(order)
    t = _strided(sizes, order, [rng.choice([1, 1, 2, 3]) for _ in sizes])
    if rng.random() < 0.3 and len(batch) == 2:  # the batch strides oneDNN takes as contiguous
        strides = list(t.stride())
        inner, outer = sorted((0, 1), key=lambda d: strides[d])
        strides[outer] = batch[0] * batch[1] * strides[inner]
        t = torch.randn(sum((n - 1) * st for n, st in zip(sizes, strides, strict=True)) + 1
                        ).as_strided(sizes, strides)
    return t


def test_matmul_operands_of_random_strides_match_eager() -> None:
    """Operands of ranks 3 to 5 in random dim orders and paddings, some with the batch
    strides oneDNN takes as contiguous, each a new spec of one fused matmul."""
    rng = random.Random(0)
    for rank in (3, 4, 5):
        _random_strides(rng, rank, 100)


def _random_strides(rng: random.Random, rank: int, cases: int) -> None:
    first = [torch.randn(*[2, 3, 2][: rank - 2], *shape) for shape in ((5, 4), (4, 5))]
    module, _, graph = fuse(MatMul(), first)
    assert runner.fusion_groups(graph), graph
    for _ in range(cases):
        batch = tuple(rng.randint(1, 4) for _ in range(rank - 2))
        m, k, n = rng.randint(1, 4), rng.choice([4, 8]), rng.randint(1, 5)
        a, b = _operand(rng, batch, m, k), _operand(rng, batch, k, n)
        assert_matches(run(module, [a, b]), a @ b, "fp32")
