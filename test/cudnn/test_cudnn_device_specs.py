"""The GPUs the project targets, described for cuDNN's deviceless mode (device_specs.py)."""

from __future__ import annotations

import json

import pytest
from frontend_installed import needs_cudnn

from torch_graphfuse.backends.cudnn import device_specs

DEVICES = tuple(device_specs.DEVICES)


def test_device_descriptions_name_each_gpu_and_its_sm_version() -> None:
    assert {name: device_specs.sm_version(name) for name in DEVICES} == {
        "H100": 90, "A100": 80, "B200": 100}
    for name in DEVICES:
        assert name in json.loads(device_specs.description_json(name))["deviceName"]


@needs_cudnn
@pytest.mark.parametrize("device", DEVICES)
def test_cudnn_accepts_each_device_description(device: str) -> None:
    described = json.loads(device_specs.device_properties(device).serialize())
    wanted = device_specs.DEVICES[device]
    for key in ("multiProcessorCount", "deviceVer", "maxSharedMemoryPerBlockOptin",
                "l2CacheSize"):
        assert described[key] == wanted[key]
