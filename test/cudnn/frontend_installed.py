"""Whether the cuDNN frontend (the `cuda` extra) imports here."""

from __future__ import annotations

import pytest


def have_cudnn() -> bool:
    try:
        import cudnn  # noqa: F401
    except ImportError:  # absent, hidden or half-installed alike
        return False
    return True


needs_cudnn = pytest.mark.skipif(
    not have_cudnn(), reason="cuDNN frontend not installed (pip install 'torch_graphfuse[cuda]')")
