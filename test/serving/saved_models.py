"""The models the serving tests save and run: one of each kind of group a saved file holds."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from torch_graphfuse.testing import models, quantize, zoo

Inputs = tuple[torch.Tensor, ...]


def mlp() -> tuple[nn.Module, Inputs, list[Inputs]]:
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.ReLU()).eval()
    return model, (torch.randn(4, 16),), [(torch.randn(1, 16),), (torch.randn(9, 16),)]


def convnet() -> tuple[nn.Module, Inputs, list[Inputs]]:
    model = models.resnet18(num_classes=10).eval()
    return model, (torch.randn(2, 3, 64, 64),), [(torch.randn(1, 3, 64, 64),),
                                                 (torch.randn(3, 3, 48, 48),)]


def resnet50() -> tuple[nn.Module, Inputs, list[Inputs]]:
    model = models.resnet50(num_classes=10).eval()
    return model, (torch.randn(1, 3, 64, 64),), [(torch.randn(2, 3, 64, 64),)]


def shorter(inputs: Inputs, by: int) -> Inputs:
    """Token inputs `by` tokens shorter: another length of the same request kind."""
    return tuple(t[:, :t.shape[1] - by] if t.dim() == 2 else t for t in inputs)


def zoo_model(name: str) -> Callable[[], tuple[nn.Module, Inputs, list[Inputs]]]:
    def build() -> tuple[nn.Module, Inputs, list[Inputs]]:
        if zoo.missing():
            pytest.skip(zoo.missing())
        model, inputs = zoo.build(name, small=True)
        inputs = tuple(inputs)
        return model, inputs, [shorter(inputs, 3), shorter(inputs, 7)]
    return build


def int8_pt2e() -> tuple[nn.Module, Inputs, list[Inputs]]:
    model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 3),
                          nn.ReLU()).eval()
    x = torch.randn(2, 3, 24, 24)
    quantized = quantize.pt2e(model, (x,), [(torch.randn(2, 3, 24, 24),) for _ in range(4)])
    return quantize.freeze_quantized(quantized, (x,)), (x,), [(torch.randn(2, 3, 24, 24),)]


MODELS = {
    "mlp": mlp,
    "convnet": convnet,
    "resnet50": resnet50,
    "bert": zoo_model("hf/bert"),                # head and tail views around attention
    "gpt2": zoo_model("hf/gpt2"),                # a causal mask from sizes
    "t5": zoo_model("hf/t5"),                    # size-constant groups (relative position bias)
    "int8_pt2e": int8_pt2e,
}


def eager(model: nn.Module, inputs: Inputs) -> object:
    """The model's outputs as eager computes them (a frozen int8 model run unfused)."""
    with torch.no_grad():
        return model(*inputs)
