"""The registered fusion backends, in the order the pipeline offers them a block.

A block's regions go to each backend that claims a device type its tensors use. A
test swaps the backend of a device type with `claiming` (the cuDNN backend claiming
CPU tensors runs the whole cuDNN path on a machine without a GPU).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import _C
from .base import Backend
from .constant.backend import ConstantBackend
from .cudnn.backend import CudnnBackend
from .onednn.backend import OneDnnBackend

# The size constants first: the regions they take are computed once, and no other
# backend then maps their nodes.
_registered: list[Backend] = [ConstantBackend(), OneDnnBackend(), CudnnBackend()]
# Ops no backend maps whose inputs' types the pipeline reads: FX reference models'
# quantize and dequantize, which passes/reference_quantization rewrites, and the ops
# passes/decompose writes out.
_ALSO_PROFILED = ("aten::quantize_per_tensor", "aten::dequantize", "aten::_convolution_mode",
                  "aten::_native_multi_head_attention", "aten::_transformer_encoder_layer_fwd")


def _profile_mapped_ops() -> None:
    """The profiling executor records input types only for the ops a fuser names: every
    op a registered backend's table maps."""
    mapped = {kind for backend in _registered for kind in backend.op_table}
    _C._set_profiled_kinds(sorted({*mapped, *_ALSO_PROFILED}))


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
    _profile_mapped_ops()
    try:
        yield
    finally:
        _registered = previous
        _profile_mapped_ops()


_profile_mapped_ops()
