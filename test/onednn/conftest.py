"""Fixtures of the oneDNN backend's tests."""

from __future__ import annotations

import pytest

from torch_graphfuse import pipeline


@pytest.fixture
def int8_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """int8 stays int8 on every CPU: for tests that pin oneDNN's int8 mapping and its
    refusals, which on a CPU without VNNI int8_as_float would otherwise bypass (8-bit
    activations computed in float32)."""
    monkeypatch.setattr(pipeline, "_int8_saturates", lambda devices: False)
