"""Fixtures the cuDNN tiers share."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.backends.cudnn.plans.store import CACHE_DIR_ENV, PlanStore


@pytest.fixture
def store(tmp_path: Path) -> PlanStore:
    """An empty plan store in a fresh folder."""
    return PlanStore(tmp_path / "plans")


@pytest.fixture
def fresh_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty plan cache (memory and disk) and zeroed counts."""
    cache = tmp_path / "plans"
    monkeypatch.setenv(CACHE_DIR_ENV, str(cache))
    runtime.reset()
    yield cache
    runtime.reset()


@pytest.fixture(scope="session")
def deviceless_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The environment of a subprocess that runs cuDNN deviceless: cuDNN's engine
    libraries load libcuda.so.1 even with no GPU, so its library path leads to
    fake_libcuda.c (a TEST-ONLY driver stand-in that reports no device), compiled
    here. The stand-in never enters the test process."""
    cudnn = pytest.importorskip("cudnn", reason="the cuda extra is not installed")
    if cudnn.backend_version() < 90800:
        pytest.skip("cuDNN's deviceless mode needs cuDNN >= 9.8")
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler for the driver stand-in")
    folder = tmp_path_factory.mktemp("fake_driver")
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                    "-o", str(folder / "libcuda.so.1"),
                    str(Path(__file__).with_name("fake_libcuda.c"))], check=True)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(folder), env.get("LD_LIBRARY_PATH")) if p)
    return env
