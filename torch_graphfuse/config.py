"""Every setting torch_graphfuse reads, in one table.

Settings are environment variables: the C++ runtime reads its own (a server without Python
loads it alone), once per process, and the Python side reads the others when it needs them.
`settings()` gives each one's value in this process. docs/configuration.md lists the same
table, and a test keeps the two, and the variables the sources read, equal.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import _C


@dataclass(frozen=True)
class Setting:
    env: str  # the environment variable
    default: str  # its value when unset ("": none)
    read: str  # who reads it, and when
    what: str
    # The values it takes: a tuple of words, COUNT (an integer from `least` on), PATH, or
    # NAMES (comma-separated; their reader checks them).
    values: tuple[str, ...] | str = ("0", "1")
    least: int = 0

    def check(self, raw: str) -> str:
        """`raw` if the setting takes it, else a ValueError naming what it takes."""
        if self.values in (PATH, NAMES):
            return raw
        if self.values == COUNT:
            if raw.isdigit() and int(raw) >= self.least:
                return raw
            allowed = f"an integer from {self.least} on"
        elif raw in self.values:
            return raw
        else:
            allowed = "one of " + ", ".join(self.values)
        raise ValueError(f"{self.env}={raw!r}: expected {allowed}")


COUNT, PATH, NAMES = "count", "path", "names"


_RUNTIME = "the C++ runtime, once per process"
_PIPELINE = "the pass pipeline, at each run"

SPECS_PER_GROUP = Setting(
    "TORCH_GRAPHFUSE_SPECS_PER_GROUP", "8", _RUNTIME, values=COUNT, least=1, what=
    "compiled input specs a fusion group keeps (least recently used dropped first), specs "
    "a group is fused again for, and sizes a size-constant group keeps values of")
WEIGHT_CACHE_MB = Setting(
    "TORCH_GRAPHFUSE_WEIGHT_CACHE_MB", "", _RUNTIME, values=COUNT, what=
    "megabytes of constant weights cached compiled partitions may bind, all groups together; "
    "unset: three times the weights the live groups take, at least 256 MB")
POOL_MB = Setting(
    "TORCH_GRAPHFUSE_POOL_MB", "256", _RUNTIME, values=COUNT, what=
    "megabytes of idle output buffers kept for reuse")
COMPILE_AT = Setting(
    "TORCH_GRAPHFUSE_COMPILE_AT", "1", _RUNTIME, values=COUNT, least=1, what=
    "the call of an input spec other than the profiled one that compiles it; the calls "
    "before it run unfused (2: sizes that never repeat pay no compile)")
STRICT_LOAD = Setting(
    "TORCH_GRAPHFUSE_STRICT_LOAD", "0", "the C++ runtime, as it loads each saved group",
    "1: a saved group that cannot run fused here (another torch or oneDNN, a CPU without "
    "the features it relies on, a state that does not parse) fails the load instead of "
    "running its fallback code after one warning")
SPEED_TRIALS = Setting(
    "TORCH_GRAPHFUSE_SPEED_TRIALS", "measure", _PIPELINE, values=("measure", "fuse", "aten"),
    what="measure: a mapping oneDNN runs faster than ATen on some CPUs only (attention, a linear's "
    "GELU or SiLU) is timed against ATen on this one; fuse: mapped without timing; aten: "
    "left with ATen")
FLUSH_DENORMALS = Setting(
    "TORCH_GRAPHFUSE_FLUSH_DENORMALS", "1", _PIPELINE,
    "0: no group runs with denormals flushed to zero (attention's products, where flushing "
    "changes nothing eager returns)")
DISABLE_PASSES = Setting(
    "TORCH_GRAPHFUSE_DISABLE_PASSES", "", _PIPELINE, values=NAMES,
    what="comma-separated names of passes the pipeline skips (torch_graphfuse.pipeline.PASSES; "
    "not the guards): to find the pass behind a wrong answer")
CUDNN_NATIVE = Setting(
    "TORCH_GRAPHFUSE_CUDNN_NATIVE", "0", "the cuDNN backend, as it makes each group",
    "1: cuDNN groups run their settled plan from the C++ executor, where the extension has it")
CUDNN_AUTOTUNE = Setting(
    "TORCH_GRAPHFUSE_CUDNN_AUTOTUNE", "0", "the cuDNN backend, as it builds each plan",
    "1: a cuDNN graph's plan is chosen by timing the candidates, not by cuDNN's heuristics")
CACHE_DIR = Setting(
    "TORCH_GRAPHFUSE_CACHE_DIR", "", "the cuDNN backend, as it stores and finds plans",
    values=PATH, what="where cuDNN plans are kept on disk; unset: $XDG_CACHE_HOME (or ~/.cache)"
    "/torch_graphfuse/cudnn")

SETTINGS = (SPECS_PER_GROUP, WEIGHT_CACHE_MB, POOL_MB, COMPILE_AT, STRICT_LOAD, SPEED_TRIALS,
            FLUSH_DENORMALS, DISABLE_PASSES, CUDNN_NATIVE, CUDNN_AUTOTUNE, CACHE_DIR)


def value(setting: Setting) -> str:
    """The setting's value in the environment now, its default where unset or empty; a
    ValueError naming the values it takes where it is set to another."""
    raw = os.environ.get(setting.env)
    return setting.check(raw) if raw else setting.default


def check_environment() -> None:
    """A ValueError for the first setting the environment sets to a value it does not take
    (import torch_graphfuse calls it, so a typo fails at once, not at some later call)."""
    for setting in SETTINGS:
        value(setting)


def settings() -> dict[str, str]:
    """Each setting's value in this process (the C++ runtime's as it read them)."""
    budget = _C._memory_budget()
    runtime = {SPECS_PER_GROUP.env: str(budget["specs_per_group"]),
               WEIGHT_CACHE_MB.env: str(budget["weight_cache_bytes"] >> 20 or ""),
               POOL_MB.env: str(budget["pool_idle_bytes"] >> 20),
               COMPILE_AT.env: str(budget["compile_at"])}
    return {s.env: runtime.get(s.env, value(s)) for s in SETTINGS}


def _values_text(setting: Setting) -> str:
    if setting.values == PATH:
        return "a path"
    if setting.values == NAMES:
        return "names, comma-separated"
    if setting.values == COUNT:
        return f"an integer, at least {setting.least}"
    return ", ".join(f"`{v}`" for v in setting.values)


def page() -> str:
    """docs/configuration.md, made from SETTINGS (write_page() writes it; a test checks that
    the committed page is this)."""
    rows = [f"| `{s.env}` | {f'`{s.default}`' if s.default else 'unset'} | {_values_text(s)} "
            f"| {s.read} | {s.what} |" for s in SETTINGS]
    return "\n".join([
        "# Configuration", "",
        "Every setting is an environment variable, so the same ones reach a libtorch server",
        "that loads only the runtime library. `torch_graphfuse.config.settings()` gives each",
        "one's value in this process (the C++ runtime's as it read them when it started), and",
        "`torch_graphfuse.config.SETTINGS` is this table. `import torch_graphfuse` fails on a",
        "value a setting does not take, naming the values it takes.", "",
        "<!-- Made from torch_graphfuse/config.py by torch_graphfuse.config.write_page(). -->", "",
        "| variable | default | values | read by | what it does |",
        "| --- | --- | --- | --- | --- |", *rows, "",
        "Variables of torch and oneDNN that matter here:", "",
        "| variable | what it does |", "| --- | --- |",
        "| `PYTORCH_JIT_LOG_LEVEL` | the JIT log, with each pass's module name "
        "(`\">>partition:rewrite:type_guard\"`; the C++ kernels: "
        "`\">fusion_group:saved_group\"`) ([observing](observing.md)) |",
        "| `ONEDNN_VERBOSE=1` | oneDNN prints each primitive it runs, with its kernel and ISA |",
        "| `ONEDNN_MAX_CPU_ISA`, `ATEN_CPU_CAPABILITY` | limit oneDNN's and ATen's kernels to "
        "an older instruction set (`AVX2`, `AVX512_CORE`, ...): results of an older CPU, not "
        "its speed ([oneDNN](onednn.md)) |", ""])


def write_page() -> None:
    """Writes page() over docs/configuration.md, in a source checkout."""
    Path(__file__).resolve().parents[1].joinpath("docs", "configuration.md").write_text(page())
