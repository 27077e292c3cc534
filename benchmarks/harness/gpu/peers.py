"""The ways of running a model on the GPU that the benchmark compares: eager, torch.compile in
two modes, frozen TorchScript, and torch_graphfuse's cuDNN groups."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..calls import Call, Inputs, eager, frozen


def _compiled(mode: str | None) -> Callable[[nn.Module, Inputs], Call]:
    def build(model: nn.Module, inputs: Inputs) -> Call:
        # Weights become constants inductor can fold, as torch.jit.freeze makes them for the
        # TorchScript peers: otherwise batch norms stay separate kernels here alone.
        torch._inductor.config.freezing = True
        compiled = torch.compile(model, mode=mode)
        return lambda: compiled(*inputs)
    return build


@dataclasses.dataclass(frozen=True)
class Peer:
    key: str
    label: str
    short: str  # in "torch_graphfuse vs ..." column headers
    build: Callable[[nn.Module, Inputs], Call]
    graphfuse: bool = False


GRAPHFUSE = "graphfuse"
PEERS = (
    Peer("eager", "eager", "eager", eager),
    Peer("compile", "torch.compile", "compile", _compiled(None)),
    Peer("max_autotune", "torch.compile max-autotune-no-cudagraphs", "max-autotune",
         _compiled("max-autotune-no-cudagraphs")),
    Peer("script", "TorchScript (frozen)", "TorchScript", frozen),
    Peer(GRAPHFUSE, "torch_graphfuse (cuDNN)", "torch_graphfuse", frozen, graphfuse=True),
)
PEERS_BY_KEY = {p.key: p for p in PEERS}
