"""Attention with a bias or mask of every form models use, against eager: ranks 1 to 4,
broadcast over batch, heads, queries or keys, bool and additive, constant (timm's learned
attention biases, frozen) or passed in, written out or through
F.scaled_dot_product_attention. oneDNN 3.12's attention kernel reads a mask of another
rank than the scores, and a bool mask broadcast over queries or keys, wrongly
(workarounds.attention_mask_operand): passes/attention_masks gives every such mask the
form the kernel reads right. The speed trial is skipped, so that the same groups form
on every CPU."""

from __future__ import annotations

import itertools

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.backends.onednn import speed_trial, workarounds
from torch_graphfuse.backends.onednn.graph_desc import BackendGraph, TensorSpec
from torch_graphfuse.testing import runner


@pytest.fixture(autouse=True)
def _no_speed_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(speed_trial.ENV, "fuse")


class Attention(nn.Module):
    """timm's attention with a bias (tiny_vit, efficientformerv2, LeViT): one qkv linear
    split into heads, `(q @ k^T) * scale + bias`, softmax, `@ v`, the heads merged and
    projected; or the same through F.scaled_dot_product_attention. The bias is a buffer
    (a constant once frozen) unless passed in."""

    def __init__(self, heads: int, dim: int, bias: torch.Tensor | None = None,
                 sdpa: bool = False, scale_first: bool = False, kv_heads: int | None = None
                 ) -> None:
        super().__init__()
        self.heads, self.dim, self.sdpa, self.scale_first = heads, dim, sdpa, scale_first
        self.kv_heads = kv_heads or heads
        width = heads * dim
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * self.kv_heads * dim)
        self.proj = nn.Linear(width, width)
        self.scale = dim ** -0.5
        self.register_buffer("bias", bias)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        batch, tokens, width = x.shape
        q = self.q(x).view(batch, tokens, self.heads, self.dim).transpose(1, 2)
        k, v = self.kv(x).view(batch, tokens, 2, self.kv_heads, self.dim).permute(
            2, 0, 3, 1, 4).unbind(0)
        if self.kv_heads != self.heads:  # grouped-query attention, as Llama repeats k and v
            repeat = self.heads // self.kv_heads
            k, v = (t[:, :, None].expand(batch, self.kv_heads, repeat, tokens, self.dim)
                    .reshape(batch, self.heads, tokens, self.dim) for t in (k, v))
        mask = self.bias if mask is None else mask
        if self.sdpa:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            if self.scale_first:
                scores = (q * self.scale) @ k.transpose(-2, -1)
            else:
                scores = (q @ k.transpose(-2, -1)) * self.scale
            if mask is not None:
                scores = scores + mask
            out = scores.softmax(-1) @ v
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, width))


def _attention_fused(graph: torch._C.Graph) -> bool:
    return any("SoftMax" in g.s("desc") for g in runner.fusion_groups(graph))


def _check(model: Attention, batch: int, tokens: int, mask: torch.Tensor | None = None
           ) -> torch._C.Graph:
    torch.manual_seed(1)
    x = torch.randn(batch, tokens, model.heads * model.dim)
    inputs = [x] if mask is None else [x, mask]
    _, out, graph = fuse(model.eval(), inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    return graph


def _shapes(batch: int, heads: int, tokens: int) -> dict[str, tuple[int, ...]]:
    """Every bias shape that broadcasts to (batch, heads, tokens, tokens), by name."""
    b, h, n = batch, heads, tokens
    return {"keys": (n,), "one-query": (1, n), "tokens": (n, n), "heads": (h, n, n),
            "heads-keys": (h, 1, n), "1-tokens": (1, n, n), "1-heads": (1, h, n, n),
            "full": (b, h, n, n), "batch": (b, 1, n, n), "batch-keys": (b, 1, 1, n),
            "1-1-tokens": (1, 1, n, n)}


SHAPES = sorted(_shapes(1, 1, 1))
# F.scaled_dot_product_attention refuses a mask of one dim.
SDPA_SHAPES = [shape for shape in SHAPES if shape != "keys"]
FORMS = [pytest.param(sdpa, shape, id=f"{'sdpa' if sdpa else 'written'}-{shape}")
         for sdpa in (False, True) for shape in (SDPA_SHAPES if sdpa else SHAPES)]

# Written out, attention over at most 112 tokens keeps its softmax with ATen
# (workarounds.short_attention_softmaxes): 120 tokens reach oneDNN's attention kernel.
WRITTEN = (2, 4, 120)
# Through F.scaled_dot_product_attention, any token count reaches it.
SDPA = (3, 16, 40)


@pytest.mark.parametrize(("sdpa", "shape"), FORMS)
def test_constant_bias_of_any_rank_fuses_and_matches_eager(sdpa: bool, shape: str) -> None:
    batch, heads, tokens = SDPA if sdpa else WRITTEN
    bias = torch.randn(_shapes(batch, heads, tokens)[shape])
    graph = _check(Attention(heads, 8, bias, sdpa=sdpa), batch, tokens)
    assert _attention_fused(graph), graph


@pytest.mark.parametrize(("sdpa", "shape"), FORMS)
def test_bias_passed_in_of_any_rank_fuses_and_matches_eager(sdpa: bool, shape: str) -> None:
    batch, heads, tokens = SDPA if sdpa else WRITTEN
    bias = torch.randn(_shapes(batch, heads, tokens)[shape])
    graph = _check(Attention(heads, 8, sdpa=sdpa), batch, tokens, bias)
    assert _attention_fused(graph), graph


@pytest.mark.parametrize("passed_in", [False, True], ids=["constant", "input"])
@pytest.mark.parametrize("shape", SDPA_SHAPES)
def test_bool_mask_of_any_form_fuses_and_matches_eager(passed_in: bool, shape: str) -> None:
    batch, heads, tokens = SDPA
    torch.manual_seed(2)
    mask = torch.rand(_shapes(batch, heads, tokens)[shape]) > 0.2
    mask[..., 0] = True  # every query sees a key: no row of NaN in eager's math kernel
    if passed_in:
        graph = _check(Attention(heads, 8, sdpa=True), batch, tokens, mask)
    else:
        graph = _check(Attention(heads, 8, mask, sdpa=True), batch, tokens)
    assert _attention_fused(graph), graph


class CrossAttention(nn.Module):
    """Queries of one length over keys of another, with a bool mask over the keys only."""

    def forward(self, q: torch.Tensor, kv: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, kv, kv, attn_mask=keys[:, None, None, :])


def test_bool_mask_over_the_keys_follows_the_query_length_of_each_call() -> None:
    """The mask is expanded to the token counts read at each call, not the profiled ones."""
    model = CrossAttention()

    def inputs(queries: int) -> list[torch.Tensor]:
        keys = torch.rand(2, 24) > 0.3
        keys[:, 0] = True
        return [torch.randn(2, 4, queries, 8), torch.randn(2, 4, 24, 8), keys]

    module, out, graph = fuse(model, inputs(16))
    assert _attention_fused(graph), graph
    for queries in (16, 5, 31):
        call = inputs(queries)
        with torch.no_grad(), torch_graphfuse.fuser():
            assert_matches(module(*call), eager(model, call), "fp32")


def test_a_mask_of_another_rank_left_in_the_partition_is_refused() -> None:
    """The backend's own check, for a form no pass gave the scores' rank."""
    backend = BackendGraph(100)
    for t, sizes in ((0, [2, 4, 9, 8]), (1, [2, 4, 9, 8]), (2, [4, 9, 9]),
                     (3, [2, 4, 9, 9]), (4, [2, 4, 9, 9]), (5, [2, 4, 9, 9]),
                     (6, [2, 4, 9, 8]), (7, [1])):
        backend.add_tensor(TensorSpec(t, "f32", False, sizes, None))
    ops = [backend.add_op("MatMul", [0, 1], [3], {"transpose_b": True}),
           backend.add_op("Add", [3, 2], [4]),
           backend.add_op("SoftMax", [4], [5], {"axis": -1}),
           backend.add_op("MatMul", [5, 1], [6])]
    assert workarounds.attention_mask_operand(ops, backend)
    backend.tensors[2].sizes = [1, 4, 9, 9]
    assert not workarounds.attention_mask_operand(ops, backend)
    ops[1].kind, ops[1].inputs = "Select", [2, 3, 7]
    backend.tensors[2].dtype, backend.tensors[2].sizes = "bool", [2, 1, 1, 9]
    assert workarounds.attention_mask_operand(ops, backend)


@pytest.mark.parametrize("heads", [1, 2, 3, 16])
@pytest.mark.parametrize("batch", [1, 4])
def test_rank_3_bias_over_any_heads_and_batch(heads: int, batch: int) -> None:
    tokens = 49
    graph = _check(Attention(heads, 8, torch.randn(heads, tokens, tokens), sdpa=True), batch,
                   tokens)
    assert _attention_fused(graph)


@pytest.mark.parametrize("tokens", [15, 16, 17, 63, 64, 65, 113, 128, 129, 197])
def test_rank_3_bias_at_token_counts_around_the_kernels_blocks(tokens: int) -> None:
    sdpa = tokens <= 112  # written out, fewer tokens keep the softmax with ATen
    graph = _check(Attention(4, 8, torch.randn(4, tokens, tokens), sdpa=sdpa), 2, tokens)
    assert _attention_fused(graph)


@pytest.mark.parametrize("scale_first", [False, True], ids=["scale-after", "scale-before"])
def test_scale_before_or_after_the_product_with_a_bias(scale_first: bool) -> None:
    batch, heads, tokens = WRITTEN
    _check(Attention(heads, 8, torch.randn(heads, tokens, tokens), scale_first=scale_first),
           batch, tokens)


@pytest.mark.parametrize("sdpa", [False, True], ids=["written", "sdpa"])
def test_grouped_query_attention_with_a_bias(sdpa: bool) -> None:
    batch, heads, tokens = WRITTEN
    _check(Attention(heads, 8, torch.randn(heads, tokens, tokens), sdpa=sdpa, kv_heads=2),
           batch, tokens)


class MergedHeads(nn.Module):
    """Attention over heads split from projections, returned with its heads' transpose and
    that transpose's reshape, as the fuzzer's graph did: the reshape copies where eager's
    attention result is contiguous and is a view where it keeps the query's layout."""

    def __init__(self, mask: torch.Tensor) -> None:
        super().__init__()
        self.q, self.k, self.v = (nn.Linear(8, 32) for _ in range(3))
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        b, n, _ = x.shape
        q, k, v = (p(x).view(b, n, 4, 8).transpose(1, 2) for p in (self.q, self.k, self.v))
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, scale=0.35)
        merged = out.transpose(1, 2)
        return out, merged, merged.reshape(b, n, 32)


def _layout(outputs: tuple[torch.Tensor, ...]) -> tuple[object, ...]:
    pointers = [t.untyped_storage().data_ptr() for t in outputs]
    return tuple(t.stride() for t in outputs), tuple(
        pointers.index(p) for p in pointers)


@pytest.mark.parametrize("shape", [(4, 6, 6), (1, 4, 6, 6), (6, 6)],
                         ids=["rank-3", "rank-4", "rank-2"])
@pytest.mark.parametrize("bool_mask", [False, True], ids=["additive", "bool"])
def test_attention_result_keeps_eagers_strides_after_the_mask_changes_rank(
        shape: tuple[int, ...], bool_mask: bool) -> None:
    """A rank-3 mask sends eager's attention to the math kernel (a contiguous result), a
    rank-4 one to the flash kernel (the query's layout): given rank 4, the attention's
    ATen fallback (here for a NaN in the input, as for a size seen once) must still return
    what eager's math kernel does."""
    torch.manual_seed(2)
    mask = torch.randn(shape)
    model = MergedHeads(mask > 0 if bool_mask else mask).eval()
    module, _, graph = fuse(model, [torch.randn(1, 6, 8)])
    assert _attention_fused(graph), graph
    for batch, nan in itertools.product((1, 2, 3), (False, True)):
        x = torch.randn(batch, 6, 8)
        x[-1, -1, -1] = float("nan") if nan else x[-1, -1, -1]
        with torch.no_grad(), torch_graphfuse.fuser():
            got = module(x)
        want = eager(model, [x])
        assert_matches(got, want, "fp32")
        assert _layout(got) == _layout(want), (batch, nan)


class KeyMaskFromInput(nn.Module):
    """Hugging Face's padding mask made from the input, (B, 1, 1, N), through SDPA."""

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v = (nn.Linear(16, heads * 2) for _ in range(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q, k, v = (p(x).view(b, n, self.heads, 2).transpose(1, 2) for p in (self.q, self.k, self.v))
        keys = (x.mean(-1) > 0.3)[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=keys, scale=0.35)


@pytest.mark.parametrize("heads", [1, 2])
def test_key_mask_profiled_at_one_token_is_expanded_at_longer_ones(heads: int) -> None:
    """Profiled at one token, the mask's query dim (1) equals the query's token count, yet
    broadcasts over the queries at any other length, which oneDNN's kernel reads wrongly
    (2.0 off at 7 tokens): it is expanded at every length."""
    model = KeyMaskFromInput(heads)
    torch.manual_seed(3)
    module, _, graph = fuse(model, [torch.randn(1, 1, 16)])
    assert _attention_fused(graph), graph
    for shape in ((6, 7, 16), (1, 10, 16), (2, 5, 16)):
        x = torch.randn(shape)
        assert_matches(run(module, [x]), eager(model, [x]), "fp32")
