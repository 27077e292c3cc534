"""The cuDNN backend simulated on CPU, for tests: with `on_cpu()` active,
graphs of CPU tensors are partitioned by the cuDNN partitioner (not oneDNN),
and their fusion groups run through the real FusionGroup kernel with the CPU
reference interpreter as executor. It checks everything between the
partitioner and the executor (rewrite, guards, ports, output views,
fallbacks) where no GPU is."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

_device_type = "cuda"


def device_type() -> str:
    """The device type whose regions the cuDNN backend takes."""
    return _device_type


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    global _device_type
    from . import interpreter, runtime

    previous = _device_type
    _device_type = "cpu"
    try:
        with runtime.executor_factory(interpreter.executor):
            yield
    finally:
        _device_type = previous
