"""torch_graphfuse: TorchScript fuser plugin running fused regions with oneDNN Graph.

    import torch, torch_graphfuse
    torch.jit.enable_graphfuse(True)
    m = torch.jit.freeze(torch.jit.trace(model.eval(), example))
    m(example); m(example)      # profiling runs
    y = m(x)                    # fused regions run as oneDNN Graph partitions

or, for inference, torch.compile(model, backend="graphfuse") (see dynamo_backend).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

from . import _C, config, dynamo_backend, pipeline
from .backends import registry
from .backends.onednn import library as _onednn
from .pipeline import run_pipeline
from .report import FusionReport, last_report, picture
from .serving import export, runtime_library

__all__ = ["enable", "disable", "is_enabled", "fuser", "kernel_stats", "reset_kernel_stats",
           "release_buffers", "memory_budget", "onednn_info", "last_report", "FusionReport",
           "picture", "export", "runtime_library", "config"]


def enable() -> None:
    """Fuse graphs the profiling executor optimizes from now on."""
    _C._set_enabled(True)


def disable() -> None:
    """Stop fusing; graphs already optimized keep their fusion groups."""
    _C._set_enabled(False)


def is_enabled() -> bool:
    return _C._is_enabled()


def enable_graphfuse(enabled: bool) -> None:
    """`torch.jit.enable_graphfuse(enabled)`: switch torch_graphfuse on or off."""
    _C._set_enabled(bool(enabled))


@contextlib.contextmanager
def fuser(enabled: bool = True) -> Iterator[None]:
    """Fuse (or not) inside the block, restoring the previous state on exit."""
    previous = is_enabled()
    enable_graphfuse(enabled)
    try:
        yield
    finally:
        enable_graphfuse(previous)


def kernel_stats() -> dict[str, int]:
    return _C._kernel_stats()


# The counters and their meanings come from one list (csrc/kernel_stats.h).
kernel_stats.__doc__ = "Counters over all fusion groups:\n" + "".join(
    f"  {name}: {doc}\n" for name, doc in _C._kernel_stat_docs().items())


def reset_kernel_stats() -> None:
    _C._reset_kernel_stats()


def release_buffers() -> int:
    """Return the freed output buffers kept for reuse to the system; the bytes released.
    Their sizes' next outputs allocate (and page-fault) fresh memory again."""
    return _C._release_buffers()


def memory_budget() -> dict[str, int]:
    """What torch_graphfuse may keep cached, as the C++ runtime read its settings when the
    process started (config.SPECS_PER_GROUP, WEIGHT_CACHE_MB, POOL_MB, COMPILE_AT;
    docs/memory.md): compiled specs per group, bytes of weights cached partitions may bind
    (0: sized from the models), bytes of idle output buffers, and the call of a new spec
    that compiles it."""
    return _C._memory_budget()


def onednn_info() -> dict[str, object]:
    """The oneDNN torch_graphfuse runs CPU groups with: torch's own (its version, git hash and
    library), the instruction set its kernels use on this CPU (`isa`, as ONEDNN_MAX_CPU_ISA
    names it, lowercase) and whether that ISA has VNNI (exact int8 dot products) and bf16;
    `available` is False, with `problem` saying why, where the plugin cannot use it."""
    found = _onednn.info()
    isa = found.isa
    return {"available": found.available, "version": found.version, "hash": found.hash,
            "library": found.library, "problem": found.problem,
            "isa": isa.name if isa else None, "vnni": bool(isa and isa.vnni),
            "bf16": bool(isa and isa.bf16)}


def _group_executor(backend: str, desc: str) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    """What csrc/external_kernel runs a group of `backend` with: its backend's executor."""
    return registry.by_name(backend).executor(desc)


config.check_environment()
pipeline.disabled_passes()  # fails the import on a name of no pass
_onednn.warn_if_unavailable()
_C._set_pipeline(run_pipeline)
_C._set_group_executor_factory(_group_executor)
torch.jit.enable_graphfuse = enable_graphfuse  # type: ignore[attr-defined]
torch.jit.graphfuse_enabled = is_enabled  # type: ignore[attr-defined]
dynamo_backend.register()
