"""Transformer and MLP reference models in plain torch.nn, with random weights:
a BERT-base encoder written like HuggingFace's BertLayer, one such layer, and an MLP."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    """Multi-head self-attention with an additive mask, as in HuggingFace's BertSelfAttention."""

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_size = hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_size).permute(0, 2, 1, 3)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q = self._split_heads(self.query(hidden))
        k = self._split_heads(self.key(hidden))
        v = self._split_heads(self.value(hidden))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_size)
        probs = torch.softmax(scores + mask, dim=-1)
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return context.view(context.shape[0], context.shape[1], -1)


class BertLayer(nn.Module):
    """Attention, output dense + residual + LayerNorm, FFN (dense, GELU, dense) + residual +
    LayerNorm."""

    def __init__(self, hidden: int = 768, heads: int = 12, intermediate: int = 3072,
                 eps: float = 1e-12) -> None:
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.gelu = nn.GELU()
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attended = self.attention_output(self.attention(hidden, mask))
        hidden = self.attention_norm(attended + hidden)
        ffn = self.output(self.gelu(self.intermediate(hidden)))
        return self.output_norm(ffn + hidden)


class BertEncoder(nn.Module):
    """A stack of BertLayers over hidden states (batch, seq, hidden) and an additive mask
    (batch, 1, 1, seq)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12,
                 intermediate: int = 3072, eps: float = 1e-12) -> None:
        super().__init__()
        self.layers = nn.ModuleList(BertLayer(hidden, heads, intermediate, eps)
                                    for _ in range(layers))

    def forward(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            hidden = layer(hidden, mask)
        return hidden


def additive_mask(attention_mask: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(batch, seq) 0/1 attention mask to the (batch, 1, 1, seq) additive mask BERT adds to
    its attention scores: 0 where attended, the dtype's minimum where masked."""
    mask = attention_mask[:, None, None, :].to(dtype)
    return (1.0 - mask) * torch.finfo(dtype).min


def bert_inputs(batch: int, seq: int, hidden: int = 768,
                padding: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random hidden states and the additive mask of `batch` sequences whose last `padding`
    positions are padding."""
    states = torch.randn(batch, seq, hidden)
    attention_mask = torch.ones(batch, seq, dtype=torch.long)
    if padding:
        attention_mask[:, seq - padding:] = 0
    return states, additive_mask(attention_mask)


def bert_base() -> BertEncoder:
    """BERT-base encoder: 12 layers, hidden 768, 12 heads, intermediate 3072."""
    return BertEncoder()


def bert_layer(hidden: int = 768, heads: int = 12, intermediate: int = 3072) -> BertLayer:
    """One BERT-base layer (by default)."""
    return BertLayer(hidden, heads, intermediate)


def mlp(sizes: tuple[int, ...] = (1024, 4096, 4096, 1024)) -> nn.Sequential:
    """Linear layers between consecutive `sizes`, GELU then ReLU between them."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(sizes)):
        if i:
            layers.append(nn.GELU() if i % 2 else nn.ReLU())
        layers.append(nn.Linear(n_in, n_out))
    return nn.Sequential(*layers)
