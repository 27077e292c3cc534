"""What a GPU configuration is: a workload at a batch size, in fp16 or bf16."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..calls import Inputs

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int, torch.dtype], Inputs]  # on the GPU, from batch and dtype
    memory_format: torch.memory_format = torch.contiguous_format


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # the driver's key of its workload
    workload: Workload
    batch: int
    dtype: str  # key of DTYPES

    @property
    def label(self) -> str:
        return f"{self.workload.name} b{self.batch} {self.dtype}"
