"""examples/cpp (a libtorch server and the checker the serving tests run), built against
the torch of this Python environment and torch_graphfuse's runtime library."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import torch
import torch.utils

from ..serving import runtime_library

ROOT = Path(__file__).resolve().parents[2]


def missing() -> str | None:
    """What keeps the examples from being built here, or None."""
    if not (ROOT / "examples" / "cpp" / "CMakeLists.txt").exists():
        return "examples/cpp is not in this checkout (an installed package)"
    if shutil.which("cmake") is None:
        return "cmake is not installed"
    return None


def build(build_dir: Path = ROOT / "build" / "cpp") -> Path:
    """Configure and build (incrementally) into `build_dir`; the folder of the programs.
    Raises RuntimeError with the build's output where it fails."""
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = ["cmake", "-S", str(ROOT / "examples" / "cpp"), "-B", str(build_dir), *generator,
                 f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                 f"-DGRAPHFUSE_RUNTIME={runtime_library()}"]
    for command in (configure, ["cmake", "--build", str(build_dir)]):
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:2])} failed:\n"
                               + done.stdout[-3000:] + done.stderr[-3000:])
    return build_dir
