"""Blocks of real models, written in torch.nn: after fusion no conv, batch_norm,
relu, linear or pool is left outside a fusion group but those kept with ATen for
eager's NaN semantics, and outputs match eager."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from fusion_check import DTYPES, check, unfused
from torch import nn

from torch_graphfuse.testing import models, transformer

MUST_FUSE = {"aten::_convolution", "aten::conv2d", "aten::batch_norm", "aten::relu",
             "aten::relu_", "aten::linear", "aten::max_pool2d", "aten::avg_pool2d",
             "aten::adaptive_avg_pool2d"}

BLOCKS: dict[str, tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]]]] = {
    "resnet_basic": (lambda: models.ResNet(models.BasicBlock, [1, 1], num_classes=10,
                                           base_width=16),
                     lambda: [torch.randn(1, 3, 64, 64)]),
    "resnet_bottleneck": (lambda: models.ResNet(models.Bottleneck, [1, 1], num_classes=10,
                                                base_width=16),
                          lambda: [torch.randn(2, 3, 64, 64)]),
    "resnext": (models.resnext_block, lambda: [torch.randn(1, 64, 14, 14)]),
    "densenet": (models.DenseBlock, lambda: [torch.randn(1, 32, 12, 12)]),
    "mobilenet_v2": (models.InvertedResidual, lambda: [torch.randn(1, 24, 16, 16)]),
    "mobilenet_v3": (models.mobilenet_v3_block, lambda: [torch.randn(1, 40, 14, 14)]),
    "efficientnet": (models.mbconv, lambda: [torch.randn(1, 32, 16, 16)]),
    "bert_layer": (lambda: transformer.bert_layer(hidden=128, heads=4, intermediate=512),
                   lambda: list(transformer.bert_inputs(2, 16, 128, padding=3))),
}

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BLOCKS))
def test_model_block(dtype: str, name: str) -> None:
    make_model, make_inputs = BLOCKS[name]
    torch.manual_seed(0)
    model, inputs = make_model().eval(), make_inputs()
    graph = check(model, inputs, dtype, left=None)
    left = sorted(k for k in unfused(graph, dtype) if k in MUST_FUSE)
    assert left == [], \
        f"{name} ({dtype}) left {left} unfused:\n{graph}"
