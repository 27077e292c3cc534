"""The one logger of torch_graphfuse, driven by PYTORCH_JIT_LOG_LEVEL like torch's own.

PYTORCH_JIT_LOG_LEVEL is a ':'-separated list of file names without extension,
each optionally prefixed by '>' characters: no prefix enables GRAPH_DUMP,
'>' adds GRAPH_UPDATE, '>>' adds GRAPH_DEBUG. Each pass logs under its module's
name, so `PYTORCH_JIT_LOG_LEVEL=">>partition:rewrite"` shows the partitioner's
decisions and the graph after rewriting. The C++ kernels log through torch's
jit_log under their file names: `onednn_kernel` and `external_kernel`.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Callable
from pathlib import Path

import torch


class Level(enum.IntEnum):
    DUMP = 0
    UPDATE = 1
    DEBUG = 2


def _levels() -> dict[str, int]:
    option = torch._C._jit_get_logging_option()
    levels: dict[str, int] = {}
    for part in option.split(":"):
        name = part.lstrip(">")
        if name:
            levels[name] = len(part) - len(name)
    return levels


def enabled(name: str, level: Level) -> bool:
    wanted = _levels().get(name)
    return wanted is not None and level <= wanted


# A message, or a function making it: printing a whole graph costs time, so it
# is made only when its level is on.
Message = str | Callable[[], str]


def _emit(name: str, level: Level, message: Message) -> None:
    if not enabled(name, level):
        return
    text = message() if callable(message) else message
    prefix = f"[{level.name} {name}.py] "
    sys.stderr.write("".join(prefix + line + "\n" for line in text.splitlines()))


def dump(name: str, message: Message) -> None:
    _emit(name, Level.DUMP, message)


def update(name: str, message: Message) -> None:
    _emit(name, Level.UPDATE, message)


def debug(name: str, message: Message) -> None:
    _emit(name, Level.DEBUG, message)


def module_name(file: str) -> str:
    """The log name of a module: its file name without extension."""
    return Path(file).stem


def logged_pass(name: str, graph: torch._C.Graph, run: Callable[[], object]) -> None:
    """Runs a pass logged under `name`: GRAPH_DEBUG shows the graph before it, GRAPH_DUMP
    after it."""
    debug(name, lambda: f"before {name}:\n{graph}")
    run()
    dump(name, lambda: f"after {name}:\n{graph}")
