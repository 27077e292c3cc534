"""The ways of running a model on the CPU that the benchmark compares (eager, frozen TorchScript,
the built-in oneDNN fuser, inductor, torch.compile with torch_graphfuse's backend, and
torch_graphfuse), and building one for a model."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner

from ..calls import Call, Forward, Inputs, eager, frozen


@contextlib.contextmanager
def fusers(onednn: bool, graphfuse: bool) -> Iterator[None]:
    """The built-in oneDNN fuser and torch_graphfuse on or off inside the block."""
    previous = torch.jit.onednn_fusion_enabled()
    torch.jit.enable_onednn_fusion(onednn)
    try:
        with torch_graphfuse.fuser(graphfuse):
            yield
    finally:
        torch.jit.enable_onednn_fusion(previous)


def autocast(dtype: torch.dtype) -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16)


def inductor_forward(model: nn.Module, inputs: Inputs) -> Forward:
    """The model compiled by inductor with freezing on, run once on `inputs`."""
    torch._dynamo.reset()
    torch._inductor.config.freezing = True
    compiled = torch.compile(copy.deepcopy(model), backend="inductor")  # freezing folds weights
    compiled(*inputs)
    return compiled


def _inductor(model: nn.Module, inputs: Inputs) -> Call:
    compiled = inductor_forward(model, inputs)
    return lambda: compiled(*inputs)


def _graphfuse_compile(model: nn.Module, inputs: Inputs) -> Call:
    """torch.compile with torch_graphfuse's backend: the first call traces, freezes and runs
    the profiling runs; the backend switches fusion on around its own calls. No dynamo reset:
    it would drop the inductor peer's compiled code."""
    compiled = torch.compile(model, backend="graphfuse")
    compiled(*inputs)
    return lambda: compiled(*inputs)


@dataclasses.dataclass(frozen=True)
class Peer:
    key: str
    label: str
    build: Callable[[Any, Inputs], Call | Forward]  # from the model (int8: Int8Models)
    onednn: bool = False
    graphfuse: bool = False
    first_calls: int = 3  # fresh processes that time its first call (0: not a compilation)
    forward: bool = False  # build gives a Forward, which also runs other inputs (int8 peers)


PEERS = (
    Peer("eager", "eager", eager, first_calls=0),
    Peer("script", "TorchScript (frozen)", frozen),
    Peer("onednn", "built-in oneDNN fuser", frozen, onednn=True),
    Peer("inductor", "torch.compile (inductor)", _inductor, first_calls=1),  # seconds each
    Peer("graphfuse_compile", "torch.compile (graphfuse)", _graphfuse_compile, first_calls=1),
    Peer("graphfuse", "torch_graphfuse", frozen, graphfuse=True),
)
PEERS_BY_KEY = {p.key: p for p in PEERS}
SCRIPT, GRAPHFUSE = PEERS[1], PEERS[-1]


@dataclasses.dataclass(frozen=True)
class Built:
    peer: Peer
    call: Call
    diff: float
    groups: int | None  # torch_graphfuse only: fusion groups in the optimized graph
    forward: Forward | None = None  # peers that run other inputs too (Peer.forward)


def _max_abs_diff(out: torch.Tensor, reference: torch.Tensor) -> float:
    return (out.float() - reference.float()).abs().max().item()


def build(peer: Peer, model: Forward, inputs: Inputs, dtype: torch.dtype,
          reference: torch.Tensor) -> Built:
    with torch.no_grad(), autocast(dtype), fusers(peer.onednn, peer.graphfuse):
        made = peer.build(model, inputs)
        forward = made if peer.forward else None
        call = functools.partial(made, *inputs) if peer.forward else made
        diff = _max_abs_diff(call(), reference)
        graph = torch.jit.last_executed_optimized_graph() if peer.graphfuse else None
    groups = None if graph is None else len(runner.fusion_groups(graph))
    return Built(peer, call, diff, groups, forward)
