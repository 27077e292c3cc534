"""Shared fixtures: a clean fuser state and fixed seeds for every test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

import torch_graphfuse


@pytest.fixture(autouse=True)
def clean_state() -> Iterator[None]:
    torch.manual_seed(0)
    torch_graphfuse.disable()
    torch_graphfuse.reset_kernel_stats()
    yield
    torch_graphfuse.disable()
