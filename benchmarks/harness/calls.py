"""What a peer is built into, a call of the model on fixed inputs, and the two builds that both
devices' benchmarks share: eager and frozen TorchScript."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from torch_graphfuse.testing import runner

Inputs = list[torch.Tensor]
Call = Callable[[], torch.Tensor]
Forward = Callable[..., torch.Tensor]  # a model's forward: called with its inputs


def eager(model: nn.Module, inputs: Inputs) -> Call:
    return lambda: model(*inputs)


def frozen(model: nn.Module, inputs: Inputs) -> Call:
    """Trace, freeze and run the profiling runs (the fusers that are on compile at the last)."""
    module = runner.profiled(model, inputs)
    return lambda: module(*inputs)
