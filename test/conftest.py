"""Shared fixtures: a clean fuser state and fixed seeds for every test."""

from __future__ import annotations

import os
from collections.abc import Iterator

# A spec other than the profiled one is compiled at its first call here (the default waits
# for its second): the suite's checks at other sizes then compare fused results with
# eager's. Read once per process, so set before any kernel runs; subprocesses inherit it.
os.environ.setdefault("TORCH_GRAPHFUSE_COMPILE_AT", "1")

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
