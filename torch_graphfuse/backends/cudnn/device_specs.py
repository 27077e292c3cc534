"""Device descriptions for cuDNN's deviceless mode (cuDNN >= 9.8).

`cudnn.pygraph(device_property=..., sm_version=...)` checks support and builds
execution plans for a GPU that is not there, from a description of it. These
are the descriptions of the GPUs this project targets, as plain data, in the
JSON that `cudnn.create_device_properties` reads (every key below is required
by cuDNN 9.24 except `memoryBusWidth`, which is informative).

The numbers are the published specifications of each part (SXM variants) as
`cudaGetDeviceProperties` reports them: SM count, shared memory, L2, clocks.
Memory sizes are the marketed capacity. They steer heuristics, never
correctness: a plan built for a description is checked again on the real GPU.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import ir

# What every CUDA GPU since Volta reports alike.
_COMMON: dict[str, Any] = {
    "maxGridSize": [2147483647, 65535, 65535],
    "maxBlockSize": [1024, 1024, 64],
    "regsPerBlock": 65536,
    "warpSize": 32,
    "maxSharedMemoryPerBlock": 48 * 1024,
    "reservedSharedMemoryPerBlock": 1024,
    "maxRegistersPerSM": 65536,
    "maxCtasPerSM": 32,
    "maxThreadsPerBlock": 1024,
    "maxThreadsPerSM": 2048,
    "pciDeviceId": 0,
    "cudaDeviceId": 0,
    "isTccDriver": 0,
    "supportCoopLaunch": 1,
    # CUDA 13.0, the driver the cu13 cuDNN wheel is built for.
    "driverVer": 13000,
}

_GIB = 1024**3
_MIB = 1024**2

DEVICES: dict[str, dict[str, Any]] = {
    "H100": {
        **_COMMON,
        "deviceName": "NVIDIA H100 80GB HBM3",
        "deviceVer": 900,
        "multiProcessorCount": 132,
        "maxSharedMemoryPerBlockOptin": 227 * 1024,
        "l2CacheSize": 50 * _MIB,
        "smClockRateKHz": 1980000,
        "memClockRateKHz": 2619000,
        "memoryBusWidth": 5120,
        "totalGlobalMem": 80 * _GIB,
    },
    "A100": {
        **_COMMON,
        "deviceName": "NVIDIA A100-SXM4-80GB",
        "deviceVer": 800,
        "multiProcessorCount": 108,
        "maxSharedMemoryPerBlockOptin": 163 * 1024,
        "l2CacheSize": 40 * _MIB,
        "smClockRateKHz": 1410000,
        "memClockRateKHz": 1593000,
        "memoryBusWidth": 5120,
        "totalGlobalMem": 80 * _GIB,
    },
    "B200": {
        **_COMMON,
        "deviceName": "NVIDIA B200",
        "deviceVer": 1000,
        "multiProcessorCount": 148,
        "maxSharedMemoryPerBlockOptin": 227 * 1024,
        "l2CacheSize": 126 * _MIB,
        "smClockRateKHz": 1965000,
        "memClockRateKHz": 3996000,
        "memoryBusWidth": 8192,
        "totalGlobalMem": 180 * _GIB,
    },
}


def description_json(device: str) -> str:
    """The description of `device` (a key of DEVICES) as cuDNN reads it."""
    return json.dumps(DEVICES[device], sort_keys=True)


def sm_version(device: str) -> int:
    """The SM version cuDNN's support checks take: 90 for an H100 (deviceVer 900)."""
    return DEVICES[device]["deviceVer"] // 10


def device_properties(device: str) -> Any:
    """cuDNN's device-properties object for `device`, for `builder.build`."""
    from .builder import load_cudnn

    return load_cudnn().create_device_properties(description_json(device))


@dataclass
class DevicelessResult:
    """How far cuDNN got with one IR for one described GPU, and why it stopped."""

    supported: bool
    failed_step: str | None  # the frontend step that raised, None when all ran
    error: str
    plan_count: int  # execution plans the heuristics offered
    plan_bytes: int  # size of the serialized built plan
    build_seconds: float  # IR -> frontend graph -> validate()


# The frontend's steps from a graph to a serialized plan, in order.
STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support",
         "build_plans", "serialize")


def plan_deviceless(graph: ir.Graph, device: str) -> DevicelessResult:
    """Take `graph` through every planning step for `device` with no GPU present.

    cuDNN's engine libraries load the CUDA driver library even here: on a
    machine without one, run this where a driver stand-in is on the library
    path (the test tier does, in a subprocess) or some engines are not offered."""
    from . import builder

    cudnn = builder.load_cudnn()
    start = time.perf_counter()
    fe = builder.build(graph, device=device).graph
    seconds = 0.0
    plan_bytes = 0
    for step in STEPS:
        try:
            if step == "create_execution_plans":
                fe.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            elif step == "serialize":
                plan_bytes = len(fe.serialize(as_bytes=True))
            else:
                getattr(fe, step)()
        except Exception as error:  # any refusal is the answer, whatever its type
            return DevicelessResult(False, step, f"{type(error).__name__}: {error}",
                                    _plan_count(fe), 0, seconds)
        if step == "validate":
            seconds = time.perf_counter() - start
    return DevicelessResult(True, None, "", _plan_count(fe), plan_bytes, seconds)


def _plan_count(fe: Any) -> int:
    try:
        return int(fe.get_execution_plan_count())
    except Exception:  # not lowered yet: no plans
        return 0


def main() -> None:
    """`python -m torch_graphfuse.backends.cudnn.device_specs DEVICE`: a JSON list
    of IR graphs on stdin, a JSON list of DevicelessResults on stdout."""
    if len(sys.argv) != 2 or sys.argv[1] not in DEVICES:
        sys.exit(f"usage: python -m {__name__} {{{','.join(DEVICES)}}} < irs.json")
    graphs = [ir.Graph.from_json(json.dumps(g)) for g in json.load(sys.stdin)]
    json.dump([asdict(plan_deviceless(g, sys.argv[1])) for g in graphs], sys.stdout)


if __name__ == "__main__":
    main()
