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
from typing import Any

from .frontend import load_cudnn

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
    return load_cudnn().create_device_properties(description_json(device))
