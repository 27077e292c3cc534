"""native_transformer: nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast-path ops
are written out, so their projections, norms and feed-forward fuse, with eager's result at
the traced size and others; a mask or attention weights read keep ATen's op."""

from __future__ import annotations

import pytest
import torch
from fusion_check import check, fuse, run
from torch import nn

from torch_graphfuse.backends.onednn import speed_trial
from torch_graphfuse.testing import runner

WIDTH, HEADS = 32, 4


class SelfAttention(nn.Module):
    """A pre-norm residual self-attention (batch first: the fast path's condition)."""

    def __init__(self, mask: bool = False, weights: bool = False) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.mask, self.weights = mask, weights

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        padding = (torch.arange(x.shape[1]) >= x.shape[1] - 2).expand(x.shape[0], -1) \
            if self.mask else None
        out, weights = self.attention(y, y, y, key_padding_mask=padding)
        return x + out + weights.sum() if self.weights else x + out


def _encoder(norm_first: bool, activation: str, layers: int = 1) -> nn.Module:
    layer = nn.TransformerEncoderLayer(WIDTH, HEADS, 2 * WIDTH, batch_first=True,
                                       norm_first=norm_first, activation=activation)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def _at_another_size(model: nn.Module, x: torch.Tensor) -> None:
    module, _, _ = fuse(model, [x])
    other = torch.randn(3, 5, WIDTH)
    with torch.no_grad():
        torch.testing.assert_close(run(module, [other]), model.eval()(other), rtol=1e-4,
                                   atol=1e-5)


def test_self_attention_is_written_out_and_its_projections_fuse(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The attention itself left with ATen, whichever kernel is faster on this CPU.
    monkeypatch.setenv(speed_trial.ENV, "aten")
    model, x = SelfAttention(), torch.randn(2, 9, WIDTH)
    graph = check(model, [x], left=None)
    fused = runner.fused_kinds(graph)
    assert fused.count("aten::linear") == 4
    assert runner.unfused_kinds(graph) == ["aten::scaled_dot_product_attention"]
    _at_another_size(model, x)


@pytest.mark.parametrize(("norm_first", "activation"), [(False, "relu"), (True, "gelu")])
def test_encoder_layers_are_written_out_and_fuse(norm_first: bool, activation: str) -> None:
    model, x = _encoder(norm_first, activation, layers=2), torch.randn(2, 9, WIDTH)
    graph = check(model, [x], left=None)
    assert "aten::_transformer_encoder_layer_fwd" not in runner.unfused_kinds(graph)
    assert runner.fused_kinds(graph).count("aten::linear") == 2 * 6
    assert runner.fused_kinds(graph).count("aten::layer_norm") == 2 * 2
    _at_another_size(model, x)


def test_nan_in_a_written_out_encoder_layer_is_where_eagers_is() -> None:
    model, x = _encoder(False, "gelu"), torch.randn(2, 9, WIDTH)
    module, _, _ = fuse(model, [x])
    bad = x.clone()
    bad[1, 3, 5] = float("nan")
    with torch.no_grad():
        torch.testing.assert_close(run(module, [bad]), model.eval()(bad), equal_nan=True,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("mask", "weights"), [(True, False), (False, True)])
def test_masked_attention_or_weights_read_keep_atens_op(mask: bool, weights: bool) -> None:
    model, x = SelfAttention(mask=mask, weights=weights), torch.randn(2, 9, WIDTH)
    graph = check(model, [x], left=None)
    assert "aten::_native_multi_head_attention" in runner.unfused_kinds(graph)
