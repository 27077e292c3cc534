"""Attention under a large negative mask (Swin's -100) gives probabilities such as
exp(-100) = 3.7e-44, denormal floats that cost x86 cores a microcode assist each: the
groups that multiply them by the values run with denormals flushed to zero, on every
intra-op thread, and put the threads' mode back before returning; so does ATen's softmax
where only those groups read its result. Probabilities the model returns, or an unfused op
reads, keep IEEE gradual underflow."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn import flush_denormals
from torch_graphfuse.testing import runner

WINDOWS, HEADS, TOKENS, DIM = 4, 3, 49, 32
MODES = ["mask", "bias_and_mask", "split_view"]


def shift_mask() -> torch.Tensor:
    """Swin's shifted-window mask: 0 within a region, -100 across regions."""
    region = torch.arange(TOKENS) % 3
    return torch.where(region[:, None] == region[None, :], 0.0, -100.0).expand(
        WINDOWS, TOKENS, TOKENS).clone()


class WindowAttention(nn.Module):
    """timm's WindowAttention after its qkv projection: the mask added over a view that
    splits windows from batch ("split_view"), added directly after the position bias
    ("bias_and_mask"), or one window's mask added alone ("mask")."""

    def __init__(self, mode: str, return_probabilities: bool = False) -> None:
        super().__init__()
        self.mode = mode
        self.return_probabilities = return_probabilities
        self.register_buffer("mask", shift_mask())
        self.register_buffer("head_mask",
                             self.mask[:1, None].expand(1, HEADS, TOKENS, TOKENS).clone())
        self.register_buffer("bias", torch.randn(1, HEADS, TOKENS, TOKENS) * 0.1)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):  # noqa: ANN201
        attn = q @ k.transpose(-2, -1)
        if self.mode == "mask":
            attn = attn + self.head_mask
        elif self.mode == "split_view":
            b = attn.shape[0] // WINDOWS
            attn = (attn + self.bias).view(b, WINDOWS, HEADS, TOKENS, TOKENS)
            attn = attn + self.mask.unsqueeze(1)
            attn = attn.view(-1, HEADS, TOKENS, TOKENS)
        else:
            attn = attn + self.bias + self.mask.unsqueeze(1)
        attn = attn.softmax(-1)
        out = (attn @ v).transpose(1, 2).reshape(q.shape[0], TOKENS, HEADS * DIM)
        return (out, attn) if self.return_probabilities else out


def qkv(batch: int = 1) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(batch * WINDOWS, HEADS, TOKENS, DIM) for _ in range(3)]


def flushed_runs() -> int:
    return torch_graphfuse.kernel_stats()["flushed_runs"]


def softmax_kinds(graph: torch._C.Graph) -> list[str]:
    return sorted(n.kind() for n in graph.nodes() if "softmax" in n.kind())


@pytest.mark.parametrize("mode", MODES)
def test_the_product_of_masked_probabilities_runs_flushed_and_matches_eager(mode: str) -> None:
    model, inputs = WindowAttention(mode), qkv()
    probabilities = torch.softmax(model.mask, -1)
    assert (probabilities > 0).any() and (probabilities < torch.finfo().tiny).any()
    module, _, graph = fuse(model, inputs)
    torch_graphfuse.reset_kernel_stats()
    out = run(module, inputs)
    assert flushed_runs() > 0
    assert_matches(out, eager(model, inputs), "fp32")
    # Left to ATen (at 49 tokens oneDNN's attention kernel is slower than ATen), the
    # softmax runs flushed too: only the product reads it.
    assert softmax_kinds(graph) == ["graphfuse::softmax_flushed"], graph


@pytest.mark.parametrize("mode", MODES)
def test_eager_ops_after_a_flushed_group_keep_denormals_on_every_thread(mode: str) -> None:
    model, inputs = WindowAttention(mode), qkv()
    module, _, _ = fuse(model, inputs)
    torch_graphfuse.reset_kernel_stats()
    run(module, inputs)
    assert flushed_runs() > 0
    # Large enough for ATen to split it over the intra-op threads.
    tiny = torch.full((1 << 20,), 1e-30) * 1e-10
    assert (tiny > 0).all()
    assert (torch.full((1,), 1e-30) * 1e-10).item() > 0


def test_probabilities_the_model_returns_keep_their_denormals() -> None:
    model, inputs = WindowAttention("bias_and_mask", return_probabilities=True), qkv()
    module, _, graph = fuse(model, inputs)
    assert softmax_kinds(graph) == ["aten::softmax"], graph
    out, probabilities = run(module, inputs)
    ref_out, ref_probabilities = eager(model, inputs)
    assert_matches(out, ref_out, "fp32")
    # Where eager's are denormal, not 0 (a log of them gives about -100, not -inf).
    assert ((probabilities > 0) & (probabilities < torch.finfo().tiny)).any()
    assert torch.equal(probabilities > 0, ref_probabilities > 0)


def test_the_switch_keeps_gradual_underflow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(flush_denormals.ENV, "0")
    model, inputs = WindowAttention("split_view"), qkv()
    module, _, graph = fuse(model, inputs)
    assert softmax_kinds(graph) == ["aten::softmax"], graph
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, inputs), eager(model, inputs), "fp32")
    assert flushed_runs() == 0


class ScaledByInput(nn.Module):
    """The product divided by a tensor: a division amplifies a flushed operand."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                scale: torch.Tensor) -> torch.Tensor:
        attn = (q @ k.transpose(-2, -1) - 100.0 * (q[..., :1] > 0)).softmax(-1)
        return (attn @ v) / scale


def test_a_group_with_a_division_by_a_tensor_is_not_flushed() -> None:
    model, inputs = ScaledByInput(), [*qkv(), torch.rand(DIM) + 0.5]
    module, _, graph = fuse(model, inputs)
    divisions = [g for g in runner.fusion_groups(graph)
                 if any(n.kind() == "aten::div" for n in g.g("Subgraph").nodes())]
    assert divisions, graph
    torch_graphfuse.reset_kernel_stats()
    assert_matches(run(module, inputs), eager(model, inputs), "fp32")
    assert flushed_runs() == 0


def test_size_arithmetic_in_a_group_leaves_it_flushed() -> None:
    # Swin's window sizes, `h // 7` on the 0-dim tensors tracing makes of sizes, join the
    # group of the product with the values; a float tensor divided the same way could turn
    # a flushed -1e-44 into 0 where eager gives -1.
    graph = torch._C.parse_ir("""
        graph(%x : Float(4, 8)):
          %zero : int = prim::Constant[value=0]()
          %seven : int = prim::Constant[value=7]()
          %h : int = aten::size(%x, %zero)
          %t : Tensor = prim::NumToTensor(%h)
          %q : Tensor = aten::floor_divide(%t, %seven)
          %n : int = aten::Int(%q)
          %f : Float(4, 8) = aten::floor_divide(%x, %seven)
          return (%n, %f)""")
    bounded = [(n.kind(), flush_denormals._bounded(n)) for n in graph.nodes()
               if n.kind() != "prim::Constant"]
    assert bounded == [("aten::size", True), ("prim::NumToTensor", True),
                       ("aten::floor_divide", True), ("aten::Int", True),
                       ("aten::floor_divide", False)]
