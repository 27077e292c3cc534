"""Every setting torch_graphfuse reads, in one table.

Settings are environment variables: the C++ runtime reads its own (a server without Python
loads it alone), once per process, and the Python side reads the others when it needs them.
`settings()` gives each one's value in this process. docs/configuration.md lists the same
table, and a test keeps the two, and the variables the sources read, equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from . import _C


@dataclass(frozen=True)
class Setting:
    env: str  # the environment variable
    default: str  # its value when unset ("": none)
    read: str  # who reads it, and when
    what: str


_RUNTIME = "the C++ runtime, once per process"
_PIPELINE = "the pass pipeline, at each run"

SPECS_PER_GROUP = Setting(
    "TORCH_GRAPHFUSE_SPECS_PER_GROUP", "8", _RUNTIME,
    "compiled input specs a fusion group keeps (least recently used dropped first), specs "
    "a group is fused again for, and sizes a size-constant group keeps values of")
WEIGHT_CACHE_MB = Setting(
    "TORCH_GRAPHFUSE_WEIGHT_CACHE_MB", "", _RUNTIME,
    "megabytes of constant weights cached compiled partitions may bind, all groups together; "
    "unset: three times the weights the live groups take, at least 256 MB")
POOL_MB = Setting(
    "TORCH_GRAPHFUSE_POOL_MB", "256", _RUNTIME,
    "megabytes of idle output buffers kept for reuse")
COMPILE_AT = Setting(
    "TORCH_GRAPHFUSE_COMPILE_AT", "1", _RUNTIME,
    "the call of an input spec other than the profiled one that compiles it; the calls "
    "before it run unfused (2: sizes that never repeat pay no compile)")
STRICT_LOAD = Setting(
    "TORCH_GRAPHFUSE_STRICT_LOAD", "0", "the C++ runtime, as it loads each saved group",
    "1: a saved group that cannot run fused here (another torch or oneDNN, a CPU without "
    "the features it relies on, a state that does not parse) fails the load instead of "
    "running its fallback code after one warning")
SPEED_TRIALS = Setting(
    "TORCH_GRAPHFUSE_SPEED_TRIALS", "measure", _PIPELINE,
    "measure: a mapping oneDNN runs faster than ATen on some CPUs only (attention, a linear's "
    "GELU or SiLU) is timed against ATen on this one; fuse: mapped without timing; aten: "
    "left with ATen")
FLUSH_DENORMALS = Setting(
    "TORCH_GRAPHFUSE_FLUSH_DENORMALS", "1", _PIPELINE,
    "0: no group runs with denormals flushed to zero (attention's products, where flushing "
    "changes nothing eager returns)")
CUDNN_NATIVE = Setting(
    "TORCH_GRAPHFUSE_CUDNN_NATIVE", "0", "the cuDNN backend, as it makes each group",
    "1: cuDNN groups run their settled plan from the C++ executor, where the extension has it")
CUDNN_AUTOTUNE = Setting(
    "TORCH_GRAPHFUSE_CUDNN_AUTOTUNE", "0", "the cuDNN backend, as it builds each plan",
    "1: a cuDNN graph's plan is chosen by timing the candidates, not by cuDNN's heuristics")
CACHE_DIR = Setting(
    "TORCH_GRAPHFUSE_CACHE_DIR", "", "the cuDNN backend, as it stores and finds plans",
    "where cuDNN plans are kept on disk; unset: $XDG_CACHE_HOME (or ~/.cache)"
    "/torch_graphfuse/cudnn")

SETTINGS = (SPECS_PER_GROUP, WEIGHT_CACHE_MB, POOL_MB, COMPILE_AT, STRICT_LOAD, SPEED_TRIALS,
            FLUSH_DENORMALS, CUDNN_NATIVE, CUDNN_AUTOTUNE, CACHE_DIR)


def value(setting: Setting) -> str:
    """The setting's value in the environment now, its default where unset or empty."""
    return os.environ.get(setting.env) or setting.default


def settings() -> dict[str, str]:
    """Each setting's value in this process (the C++ runtime's as it read them)."""
    budget = _C._memory_budget()
    runtime = {SPECS_PER_GROUP.env: str(budget["specs_per_group"]),
               WEIGHT_CACHE_MB.env: str(budget["weight_cache_bytes"] >> 20 or ""),
               POOL_MB.env: str(budget["pool_idle_bytes"] >> 20),
               COMPILE_AT.env: str(budget["compile_at"])}
    return {s.env: runtime.get(s.env, value(s)) for s in SETTINGS}
