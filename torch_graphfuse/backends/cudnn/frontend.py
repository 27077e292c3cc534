"""The cuDNN frontend's Python module, loaded on first use.

`cudnn` comes from the optional `cuda` extra (`pip install torch_graphfuse[cuda]`):
the CPU path never needs it, so nothing imports it before a graph is built, a plan
is made or a device is described.
"""

from __future__ import annotations

from types import ModuleType


class CudnnUnavailable(ImportError):
    """The cuDNN frontend (the `cuda` extra) is not installed."""


def load_cudnn() -> ModuleType:
    """The `cudnn` module, or CudnnUnavailable saying how to get it."""
    try:
        import cudnn
    except ImportError as error:
        raise CudnnUnavailable(
            "the cuDNN backend needs nvidia-cudnn-frontend and nvidia-cudnn-cu13: "
            "pip install 'torch_graphfuse[cuda]'") from error
    return cudnn
