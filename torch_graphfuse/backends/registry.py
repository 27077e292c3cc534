"""The registered fusion backends, in the order the pipeline offers them a block.

A block's regions go to each backend that claims a device type its tensors use. A
test swaps the backend of a device type with `claiming` (the cuDNN backend claiming
CPU tensors runs the whole cuDNN path on a machine without a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .base import Backend
from .cudnn.backend import CudnnBackend
from .onednn.backend import OneDnnBackend

_registered: list[Backend] = [OneDnnBackend(), CudnnBackend()]


def backends() -> list[Backend]:
    return list(_registered)


def by_name(name: str) -> Backend:
    for backend in _registered:
        if backend.name == name:
            return backend
    raise KeyError(f"no fusion backend named {name!r} is registered")


@contextlib.contextmanager
def claiming(backend: Backend) -> Iterator[None]:
    """`backend` takes the regions of its device type in place of the backend that
    claims them, while the context lasts."""
    global _registered
    previous = _registered
    _registered = [b for b in previous if b.device_type != backend.device_type]
    _registered.append(backend)
    try:
        yield
    finally:
        _registered = previous
