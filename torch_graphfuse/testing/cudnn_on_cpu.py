"""The cuDNN backend simulated on CPU, for tests: within `on_cpu()`, graphs of CPU
tensors are partitioned by the cuDNN partitioner (not oneDNN), and their fusion
groups run through the real FusionGroup kernel with the CPU reference interpreter
as executor. It checks everything between the partitioner and the executor
(rewrite, guards, ports, output views, fallbacks) where no GPU is."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ..backends import registry
from ..backends.cudnn import interpreter, runtime
from ..backends.cudnn.backend import CudnnBackend


@contextlib.contextmanager
def on_cpu() -> Iterator[None]:
    with registry.claiming(CudnnBackend(device_type="cpu")), \
            runtime.executor_factory(interpreter.executor):
        yield
