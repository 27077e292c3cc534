"""What a CPU configuration is: a workload at a batch size, a dtype and an ISA, native or
emulated."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn

from ..calls import Inputs

DTYPES = (torch.float32, torch.bfloat16)
INT8 = torch.int8  # the dtype of int8 configurations: statically quantized models
DTYPE_NAMES = {torch.float32: "fp32", torch.bfloat16: "bf16", INT8: "int8"}

NATIVE = "native"
# Older ISAs emulated by limiting oneDNN (torch's and torch_graphfuse's, one library), ATen's
# vectorized kernels and MKL (fp32 linear) in a child process.
EMULATED_ISAS = {
    "avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
             "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
    "avx512_core": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE", "ATEN_CPU_CAPABILITY": "avx512",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES[dtype]


FLOAT_DTYPES = {dtype_name(d): d for d in DTYPES}  # by name


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[int], Inputs]
    flops: Callable[[int], float]  # per call, from the batch size
    batches: tuple[int, ...]
    int8_batches: tuple[int, ...] = ()
    classifier: bool = False  # int8: top-1 agreement with the float model is reported
    transformer: bool = False  # int8: only linears quantized (FX), NNCF's transformer scheme


@dataclasses.dataclass(frozen=True)
class Config:
    model: str  # the driver's key of its workload
    workload: Workload
    batch: int
    dtype: torch.dtype
    isa: str = NATIVE  # NATIVE, or a key of EMULATED_ISAS

    @property
    def label(self) -> str:
        emulated = "" if self.isa == NATIVE else f" [{self.isa}, emulated]"
        return f"{self.workload.name} b{self.batch} {dtype_name(self.dtype)}{emulated}"


def model_and_inputs(config: Config) -> tuple[nn.Module, Inputs]:
    """The same weights and inputs in every process that builds this configuration."""
    torch.manual_seed(0)
    return config.workload.build().eval(), config.workload.inputs(config.batch)
