"""Scaled dot-product attention as one oneDNN partition: masks (bool, or additive with -inf),
rows the mask hides whole, the heads' merge, and the cases that stay with ATen. Whether
oneDNN's kernel or ATen's is faster depends on the CPU, which a speed trial decides
(test_speed_trial.py); these tests skip the trial, so that the same groups form on every
CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from fusion_check import (
    DTYPES,
    assert_matches,
    check_nonfinite_call,
    eager,
    fuse,
    group_kinds,
    run,
)
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.backends.onednn import speed_trial

BATCH, HEADS, SEQ, DIM = 2, 4, 64, 32
WIDTH = HEADS * DIM
SDPA = "aten::scaled_dot_product_attention"
FUSED = "bf16"  # the dtype of the tests that need no other
needs_bf16 = pytest.mark.skipif(not torch_graphfuse.onednn_info()["bf16"],
                                reason="no oneDNN bf16 kernels on this CPU")


@pytest.fixture(autouse=True)
def _no_speed_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(speed_trial.ENV, "fuse")


class Attention(nn.Module):
    """Self-attention as Hugging Face writes it: projections viewed as heads, then
    F.scaled_dot_product_attention and the heads merged back."""

    def __init__(self, **options: object) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.options = options

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(BATCH, SEQ, HEADS, DIM).transpose(1, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **self.options)
        return out.transpose(1, 2).reshape(BATCH, SEQ, WIDTH)


def _bool_mask() -> torch.Tensor:
    mask = torch.rand(BATCH, 1, SEQ, SEQ) > 0.3
    mask[0, 0, 5] = False  # a query that sees no key: eager gives it zeros
    return mask


def _additive_mask(hidden: float = torch.finfo(torch.float32).min) -> torch.Tensor:
    mask = torch.zeros(BATCH, 1, 1, SEQ)
    mask[..., -8:] = -1e4
    mask[1] = hidden  # every key hidden from the second sequence
    return mask


MASKS = {"none": lambda: None, "bool": _bool_mask, "additive": _additive_mask}


def _attention_groups(graph: torch._C.Graph) -> list[list[str]]:
    return [kinds for kinds in group_kinds(graph) if SDPA in kinds]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", sorted(MASKS))
def test_attention_is_one_partition_run_fused(dtype: str, mask: str) -> None:
    model, x, m = Attention().eval(), torch.randn(BATCH, SEQ, WIDTH), MASKS[mask]()
    inputs = [x] if m is None else [x, m]
    torch_graphfuse.reset_kernel_stats()
    _, out, graph = fuse(model, inputs, dtype)
    assert_matches(out, eager(model, inputs, dtype), dtype)
    if dtype == "bf16" and not torch_graphfuse.onednn_info()["bf16"]:
        assert not _attention_groups(graph), graph
        return
    # The heads' merge (transpose, reshape) is the partition's output layout.
    assert _attention_groups(graph) == [sorted([SDPA, "aten::reshape", "aten::transpose"])], graph
    stats = torch_graphfuse.kernel_stats()
    assert stats["fallbacks"] == 0 and stats["unfused_specs"] == 0, stats


@needs_bf16
def test_rows_a_bool_mask_hides_whole_are_zero_as_in_eager() -> None:
    model, x = Attention().eval(), torch.randn(BATCH, SEQ, WIDTH)
    torch_graphfuse.reset_kernel_stats()
    _, out, _ = fuse(model, [x, _bool_mask()], FUSED)
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0
    assert not out.isnan().any()
    assert torch.equal(out[0, 5], torch.zeros_like(out[0, 5]))


@needs_bf16
def test_additive_mask_of_minus_inf_runs_unfused() -> None:
    """-inf in a float mask is not told from +inf or NaN (which eager spreads over the
    row) by the finite guard: the attention runs unfused, zero rows included."""
    model, x = Attention().eval(), torch.randn(BATCH, SEQ, WIDTH)
    check_nonfinite_call(model, [x, _additive_mask()], [x, _additive_mask(float("-inf"))],
                         FUSED)


@needs_bf16
def test_attention_with_scale_and_no_mask() -> None:
    model, x = Attention(scale=0.3).eval(), torch.randn(BATCH, SEQ, WIDTH)
    _, out, graph = fuse(model, [x], FUSED)
    assert_matches(out, eager(model, [x], FUSED), FUSED)
    assert len(_attention_groups(graph)) == 1


@needs_bf16
def test_attention_on_nan_runs_unfused_with_eagers_nan() -> None:
    x = torch.randn(BATCH, SEQ, WIDTH)
    x_nan = x.clone()
    x_nan[0, 3, 7] = float("nan")
    check_nonfinite_call(Attention(), [x, _bool_mask()], [x_nan, _bool_mask()], FUSED)


@pytest.mark.parametrize(("options", "why"), [
    (dict(is_causal=True), "causal attention"),
    (dict(enable_gqa=True), "grouped-query attention"),
], ids=["causal", "gqa"])
def test_attention_left_with_aten(options: dict[str, object], why: str) -> None:
    model, x = Attention(**options).eval(), torch.randn(BATCH, SEQ, WIDTH)
    _, out, graph = fuse(model, [x])
    assert_matches(out, eager(model, [x]), "fp32")
    assert not _attention_groups(graph)
    report = torch_graphfuse.last_report()
    assert any(kind == SDPA and why in reason for kind, reason in report.unmapped), report


def test_additive_mask_not_proven_finite_left_with_aten() -> None:
    """A float mask computed from a graph input by log may hold NaN or +inf, which eager
    spreads over the row: the attention stays with ATen."""
    class LogMask(Attention):
        def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
            return super().forward(x, torch.log(keep))

    keep = torch.ones(BATCH, 1, 1, SEQ)
    keep[..., -4:] = 0  # log(0) = -inf
    model, x = LogMask().eval(), torch.randn(BATCH, SEQ, WIDTH)
    _, out, graph = fuse(model, [x, keep], FUSED)
    assert_matches(out, eager(model, [x, keep], FUSED), FUSED)
    assert not _attention_groups(graph)
    assert (SDPA, "a float mask not proven finite") in torch_graphfuse.last_report().unmapped


class MaskFromSizes(nn.Module):
    """A float causal mask built from the sequence length, as T5's decoder builds its bias:
    a group of size constants computes it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(q.size(2))
        mask = torch.zeros(q.size(2), q.size(2)).masked_fill(
            positions[None, :] > positions[:, None], -1e4)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_mask_of_size_constants_is_known_finite_so_the_attention_fuses() -> None:
    """The size constants' group replaces the mask's value: it keeps the mask's proof of
    finiteness (it had stayed with ATen: "a float mask not proven finite")."""
    model, inputs = MaskFromSizes(), [torch.randn(BATCH, HEADS, SEQ, DIM) for _ in range(3)]
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    assert len(_attention_groups(graph)) == 1, graph


class HuggingFaceMerge(Attention):
    """The heads merged as Hugging Face writes it: a reshape to the same shape first, then
    transpose, contiguous, reshape, with sizes read at run time."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out = out.reshape(out.size(0), -1, q.size(2), v.size(3)).transpose(1, 2).contiguous()
        return out.reshape(x.size(0), x.size(1), -1).contiguous()


@needs_bf16
def test_heads_merged_after_a_same_shape_reshape_join_the_attention() -> None:
    model, x, mask = HuggingFaceMerge().eval(), torch.randn(BATCH, SEQ, WIDTH), _bool_mask()
    torch_graphfuse.reset_kernel_stats()
    module, out, graph = fuse(model, [x, mask], FUSED)
    assert_matches(out, eager(model, [x, mask], FUSED), FUSED)
    [kinds] = _attention_groups(graph)
    assert {"aten::reshape", "aten::transpose", "aten::contiguous"} <= set(kinds), graph
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


class MergedThenProjected(HuggingFaceMerge):
    """Hugging Face's attention block: the heads merged, then the output projection and the
    residual."""

    def __init__(self) -> None:
        super().__init__()
        self.o = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.o(super().forward(x, mask)) + x


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_projection_after_the_heads_merge_fuses(dtype: str) -> None:
    """The attention's group gives its merged heads as the last `contiguous` (which computes
    nothing, an alias of the reshape before it); the projection's group takes that value in
    (it had stayed with ATen: "an argument is computed at run time")."""
    _assert_fused_with_the_projections(MergedThenProjected(), dtype)


def _assert_fused_with_the_projections(model: nn.Module, dtype: str) -> None:
    """One attention group, and the four linears in groups, with eager's result."""
    if dtype == "bf16" and not torch_graphfuse.onednn_info()["bf16"]:
        pytest.skip("no oneDNN bf16 kernels on this CPU")
    x, mask = torch.randn(BATCH, SEQ, WIDTH), _bool_mask()
    torch_graphfuse.reset_kernel_stats()
    _, out, graph = fuse(model.eval(), [x, mask], dtype)
    assert_matches(out, eager(model, [x, mask], dtype), dtype)
    assert len(_attention_groups(graph)) == 1, graph
    assert sum("aten::linear" in kinds for kinds in group_kinds(graph)) == 4, graph
    assert torch_graphfuse.kernel_stats()["fallbacks"] == 0


class SizesOfTheResult(Attention):
    """GPT-2's attention block: the result's sizes read for the heads' merge, and the result
    read through a reshape to its own shape."""

    def __init__(self) -> None:
        super().__init__()
        self.o = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        b, h, s, d = out.size()
        out = out.reshape(b, h, s, d).transpose(1, 2).contiguous()
        return self.o(out.reshape(b, s, h * d)) + x


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_read_by_size_ops_and_through_a_same_shape_reshape_fuses(dtype: str) -> None:
    """The reshape, which computes nothing, leaves the attention's partition, which then
    gives its one result to both (the attention had stayed with ATen: "a value used outside
    is not a partition output")."""
    _assert_fused_with_the_projections(SizesOfTheResult(), dtype)


class ReturnsTheSameShapeReshape(Attention):
    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        out = F.scaled_dot_product_attention(q, k, v).reshape(BATCH, HEADS, SEQ, DIM)
        return out, out.transpose(1, 2).contiguous()


@pytest.mark.parametrize("dtype", DTYPES)
def test_same_shape_reshape_returned_keeps_eagers_result(dtype: str) -> None:
    model, x = ReturnsTheSameShapeReshape().eval(), torch.randn(BATCH, SEQ, WIDTH)
    _, out, _ = fuse(model, [x], dtype)
    assert_matches(out, eager(model, [x], dtype), dtype)


class HeadSizeOf(nn.Module):
    """Attention over inputs whose head size varies between calls: the default scale is
    1 / sqrt(head size)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v) * 2.0


@needs_bf16
def test_default_scale_follows_the_head_size() -> None:
    model = HeadSizeOf()
    module, _, graph = fuse(model, [torch.randn(BATCH, HEADS, SEQ, DIM) for _ in range(3)],
                            FUSED)
    assert _attention_groups(graph), graph
    other = [torch.randn(BATCH, HEADS, SEQ, 2 * DIM) for _ in range(3)]
    assert_matches(run(module, other, FUSED), eager(model, other, FUSED), FUSED)


UNSQUEEZED_ATTENTION = """
import torch
import torch.nn.functional as F
import torch_graphfuse
from torch_graphfuse.testing import runner

class M(torch.nn.Module):
    def forward(self, q, k, v):
        a = F.scaled_dot_product_attention(q, k, v, scale=0.5)
        return a.permute(0, 3, 2, 1).unsqueeze(-1)

q, k, v = (torch.randn(3, 2, 4, 4, dtype=torch.bfloat16) for _ in range(3))
mod, _, graph = runner.fused(M().eval(), [q, k, v])
with torch.no_grad(), torch_graphfuse.fuser():
    out = mod(q, k, v)
torch.testing.assert_close(out, M()(q, k, v), rtol=0, atol=0)
print(torch_graphfuse.last_report().rejected)
"""


@needs_bf16
def test_attention_reshaped_to_5d_stays_with_aten_instead_of_crashing_onednn() -> None:
    # Found by the fuzzer (seed 45): oneDNN 3.12's attention kernel segfaults compiling an
    # attention partition that ends in a reshape to 5 dims. In a subprocess, so that a
    # regression fails this test rather than ending the run.
    done = subprocess.run([sys.executable, "-c", UNSQUEEZED_ATTENTION], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "attention with a reshape to 5 dims" in done.stdout


class ShiftedWindowAttention(nn.Module):
    """timm's Swin attention over shifted windows, from the qkv projection: a relative
    position bias, then the window mask (0 or -100) over a view that splits the windows
    off the batch."""

    def __init__(self, window: int, windows: int = 4, heads: int = 2, dim: int = 16) -> None:
        super().__init__()
        self.tokens, self.windows, self.heads, self.width = window * window, windows, heads, \
            heads * dim
        self.qkv = nn.Linear(self.width, 3 * self.width)
        self.register_buffer("bias", torch.randn(1, heads, self.tokens, self.tokens) * 0.1)
        region = torch.arange(self.tokens) % 3
        mask = torch.where(region[:, None] == region[None, :], 0.0, -100.0)
        self.register_buffer("mask", mask.expand(windows, -1, -1).clone())
        self.scale = dim ** -0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.view(-1, self.tokens, self.width)
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, -1).permute(2, 0, 3, 1, 4).unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1) + self.bias
        attn = attn.view(-1, self.windows, self.heads, n, n) + self.mask.unsqueeze(1).unsqueeze(0)
        attn = attn.view(-1, self.heads, n, n).softmax(-1)
        return (attn @ v).transpose(1, 2).reshape(b, n, -1)


def _windows(model: ShiftedWindowAttention, batch: int) -> list[torch.Tensor]:
    torch.manual_seed(batch)
    return [torch.randn(batch * model.windows, model.tokens, model.width)]


def test_shifted_window_attention_is_one_partition_and_eagers_at_other_batches() -> None:
    # 256 tokens (SwinV2's 16 x 16 windows): the bias and the mask moved off its view fold
    # into one addend, which oneDNN's attention pattern takes.
    model = ShiftedWindowAttention(window=16)
    module, _, graph = fuse(model, _windows(model, 1))
    assert any({"aten::softmax", "aten::matmul"} <= set(kinds) for kinds in group_kinds(graph))
    assert not any(n.kind() == "aten::softmax" for n in graph.nodes()), graph
    for batch in (1, 2):
        assert_matches(run(module, _windows(model, batch)), eager(model, _windows(model, batch)),
                       "fp32")


def test_attention_over_few_tokens_fuses_its_products_and_leaves_the_softmax_to_aten() -> None:
    # Swin's 7 x 7 windows: oneDNN's attention kernel took 1.25-1.7x ATen's time there.
    model = ShiftedWindowAttention(window=7)
    module, _, graph = fuse(model, _windows(model, 1))
    kinds = group_kinds(graph)
    assert not any("aten::softmax" in k for k in kinds) and sum(
        "aten::matmul" in k for k in kinds) == 2, kinds
    assert "slower than ATen at this many tokens" in str(torch_graphfuse.last_report())
    assert_matches(run(module, _windows(model, 1)), eager(model, _windows(model, 1)), "fp32")
