"""Running a model through the fuser and looking at what it did."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator, Sequence

import torch

import torch_graphfuse
from torch_graphfuse.fusion.rewrite import group_kinds
from torch_graphfuse.group_schema import is_group
from torch_graphfuse.passes.graph_utils import all_nodes

PROFILING_RUNS = 2


@contextlib.contextmanager
def precision(dtype: str) -> Iterator[None]:
    """fp32, or eager bf16 autocast with TorchScript's own autocast off (as docs/bf16.md says)."""
    if dtype == "fp32":
        yield
        return
    previous = torch._C._jit_set_autocast_mode(False)
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    finally:
        torch._C._jit_set_autocast_mode(previous)


def freeze(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> torch.jit.ScriptModule:
    """Trace and freeze, as a user deploying the model would."""
    with torch.no_grad():
        return torch.jit.freeze(torch.jit.trace(model.eval(), tuple(inputs), check_trace=False))


def profiled(model: torch.nn.Module, inputs: Sequence[torch.Tensor]) -> torch.jit.ScriptModule:
    """Trace and freeze, then the profiling runs (where the fusers that are on compile)."""
    module = freeze(model, inputs)
    for _ in range(PROFILING_RUNS):
        module(*inputs)
    return module


def fused(model: torch.nn.Module, inputs: Sequence[torch.Tensor],
          enabled: bool = True) -> tuple[torch.jit.ScriptModule, object, torch._C.Graph]:
    """Freeze `model`, run its profiling runs with torch_graphfuse on (or off)
    and once more; returns the module, the output and the optimized graph."""
    module = freeze(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(enabled):
        for _ in range(PROFILING_RUNS):
            module(*inputs)
        out = module(*inputs)
        graph = torch.jit.last_executed_optimized_graph()
    return module, out, graph


def fusion_groups(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [n for n in all_nodes(graph.block()) if is_group(n)]


def fused_kinds(graph: torch._C.Graph) -> list[str]:
    """Aten kinds inside fusion groups, one entry per node."""
    return [kind for g in fusion_groups(graph) for kind in group_kinds(g)]


def unfused_kinds(graph: torch._C.Graph) -> list[str]:
    """Aten kinds left outside fusion groups on the fused path."""
    return [n.kind() for n in all_nodes(graph.block()) if n.kind().startswith("aten::")]


def median_ms(fn: Callable[[], object], warmup: int = 3, iters: int = 20,
              max_seconds: float = 30.0) -> float:
    """Median latency of `fn` in ms, after warm-up; stops early past max_seconds."""
    for _ in range(warmup):
        fn()
    times = []
    deadline = time.perf_counter() + max_seconds
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return statistics.median(times)
