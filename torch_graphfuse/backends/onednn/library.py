"""torch's oneDNN, as the plugin found it (csrc/onednn/api.cpp resolves it when the
extension loads): its version, the library it lives in, and the instruction set its
kernels use on this CPU, which decides what can be fused exactly (see rules.py).

The plugin and torch share this one oneDNN: one OpenMP thread pool (torch's), and one
copy of oneDNN's process-wide settings. The plugin turns on the constant-tensor cache
(frozen weights keep their reordered copy, as torch's LLGA fuser also asks) and sets the
compiled-partition cache's capacity to 0 (each fusion group keeps its compiled
partitions within the memory budget instead); torch's LLGA fuser keeps its compiled
partitions itself, so it only loses reuse across identical partitions, which it does not
rely on. ONEDNN_MAX_CPU_ISA and ONEDNN_VERBOSE apply to both.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import torch

from ... import _C


@dataclass(frozen=True)
class Isa:
    name: str  # oneDNN's name (ONEDNN_MAX_CPU_ISA spells it in capitals)
    vnni: bool  # int8 dot products without int16 saturation
    bf16: bool  # bf16 compute instructions


# dnnl_cpu_isa_t values (dnnl_types.h) oneDNN reports as its effective ISA.
ISAS = {
    0x1: Isa("sse41", False, False),
    0x3: Isa("avx", False, False),
    0x7: Isa("avx2", False, False),
    0xF: Isa("avx2_vnni", True, False),
    0x1F: Isa("avx2_vnni_2", True, True),
    0x27: Isa("avx512_core", False, False),
    0x67: Isa("avx512_core_vnni", True, False),
    0xE7: Isa("avx512_core_bf16", True, True),
    0x1EF: Isa("avx512_core_fp16", True, True),
    0xFEF: Isa("avx512_core_amx", True, True),
    0x1FEF: Isa("avx512_core_amx_fp16", True, True),
    0x201FF: Isa("avx10_2_512", True, True),
    0x22FFF: Isa("avx10_2_512_amx_2", True, True),
}


@dataclass(frozen=True)
class OneDNN:
    available: bool
    version: str  # "3.12.0"; empty when unknown
    hash: str
    library: str  # where its functions were found
    problem: str  # why it cannot be used (available is False)
    isa: Isa | None  # the ISA its kernels use here (None: unavailable)
    resolve_ms: float


@functools.cache
def info() -> OneDNN:
    found = _C._onednn()
    isa = None
    if found["ok"]:
        value = found["cpu_isa"]
        # An ISA newer than this table: its bits still say VNNI (0x8, 0x40) and bf16 (0x10, 0x80).
        isa = ISAS.get(value, Isa(f"isa_{value:#x}", bool(value & 0x48), bool(value & 0x90)))
    return OneDNN(found["ok"], found["version"], found["hash"], found["library"],
                  found["problem"], isa, found["resolve_ms"])


def available() -> bool:
    return info().available


def isa() -> Isa | None:
    return info().isa


def holds(name: str) -> bool:
    """Whether oneDNN's ISA in this process holds the instructions of ISA `name`
    (ONEDNN_MAX_CPU_ISA's spelling, any case), so that a process limited to it runs it:
    the limit only lowers the ISA. oneDNN's ISA values are bit sets, each holding those of
    the ISAs below it."""
    wanted = next(value for value, known in ISAS.items() if known.name == name.lower())
    here = _C._onednn()["cpu_isa"]
    return here & wanted == wanted


def warn_if_unavailable() -> None:
    """One message at import when torch's oneDNN cannot be used: CPU models run unfused."""
    found = info()
    if not found.available:
        warnings.warn(f"torch_graphfuse: the oneDNN in torch {torch.__version__} cannot be "
                      f"used ({found.problem}); CPU models run unfused", stacklevel=3)
