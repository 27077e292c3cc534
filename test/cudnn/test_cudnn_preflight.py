"""The GPU tier's preflight: what it refuses to run on, and why it says so."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_graphfuse.backends.cudnn.preflight import Stack, cudnn_version_name, describe, problems

ROOT = Path(__file__).resolve().parents[2]

H100 = Stack(gpu="NVIDIA H100 80GB HBM3", driver="580.65.06", torch="2.13.0+cu130",
             torch_cuda="13.0", torch_sees_gpu=True, torch_cudnn=92000, frontend="1.32.0",
             frontend_cudnn=92000)


def test_a_cuda_13_stack_with_one_cudnn_passes() -> None:
    assert problems(H100) == []
    assert describe(H100) == ("NVIDIA H100 80GB HBM3, driver 580.65.06, torch 2.13.0+cu130 "
                              "(CUDA 13.0, cuDNN 9.20.0), cuDNN frontend 1.32.0 (cuDNN 9.20.0)")


def test_two_cudnns_in_one_process_are_refused() -> None:
    found = problems(dataclasses.replace(H100, frontend_cudnn=92400))
    assert found == ["torch loaded cuDNN 9.20.0, the frontend 9.24.0: one process, two cuDNNs"]


@pytest.mark.parametrize("driver", ["570.124.06", "535.1", "unknown"])
def test_a_driver_before_r580_is_refused(driver: str) -> None:
    found = problems(dataclasses.replace(H100, driver=driver))
    assert found == [f"driver {driver}: CUDA 13 needs R580 or newer"]


def test_a_cpu_torch_is_refused_with_how_to_get_a_cuda_one() -> None:
    found = problems(dataclasses.replace(H100, torch="2.13.0+cpu", torch_cuda=None,
                                         torch_sees_gpu=False, torch_cudnn=None))
    assert len(found) == 1 and "is a CPU build" in found[0] and "cu130" in found[0]


def test_no_gpu_and_no_frontend_are_both_said() -> None:
    found = problems(dataclasses.replace(H100, gpu=None, driver=None, torch_sees_gpu=False,
                                         torch_cudnn=None, frontend=None, frontend_cudnn=None))
    assert found == ["no NVIDIA GPU: nvidia-smi lists none",
                     "torch 2.13.0+cu130 (CUDA 13.0) sees no GPU",
                     "the cuDNN frontend does not import (wheels/gpu, scripts/gpu_wheels.sh)"]


def test_cudnn_version_numbers_read_as_cudnn_9_names() -> None:
    assert [cudnn_version_name(v) for v in (92000, 91002, None)] == ["9.20.0", "9.10.2", "none"]


def test_preflight_on_this_machine_exits_non_zero_without_a_gpu() -> None:
    env = {**os.environ, "PATH": "/nonexistent"}  # no nvidia-smi to ask
    done = subprocess.run([sys.executable, "-m", "torch_graphfuse.backends.cudnn.preflight"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert done.stdout.startswith("preflight: no GPU, driver none, torch ")
    assert "no NVIDIA GPU: nvidia-smi lists none" in done.stderr
