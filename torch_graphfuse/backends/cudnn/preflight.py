"""Before the GPU tier runs: can cuDNN groups run on this machine's stack?

    python -m torch_graphfuse.backends.cudnn.preflight

prints the GPU, its driver and the torch / cuDNN / frontend versions on one line and
exits non-zero, saying why, where:
- there is no GPU, or torch is not a CUDA build or sees no device;
- the driver is older than R580, the first that runs CUDA 13 builds (torch's cu130
  wheels and cuDNN for CUDA 13);
- the cuDNN torch loaded is not the one the frontend loaded. The frontend opens
  libcudnn itself (LD_LIBRARY_PATH first, then site-packages' nvidia/cudnn), so a
  process can hold two, and plans built against one would run with the other's handles.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

MIN_DRIVER = 580


@dataclass(frozen=True)
class Stack:
    """What the GPU tier runs on; None where it is missing."""

    gpu: str | None
    driver: str | None
    torch: str
    torch_cuda: str | None
    torch_sees_gpu: bool
    torch_cudnn: int | None
    frontend: str | None
    frontend_cudnn: int | None


def cudnn_version_name(version: int | None) -> str:
    """cuDNN 9's version number (major * 10000 + minor * 100 + patch) as 9.20.0."""
    if version is None:
        return "none"
    return f"{version // 10000}.{version // 100 % 100}.{version % 100}"


def problems(stack: Stack) -> list[str]:
    """Why cuDNN groups cannot run on `stack`, one sentence each; empty when they can."""
    found: list[str] = []
    if stack.gpu is None:
        found.append("no NVIDIA GPU: nvidia-smi lists none")
    if stack.driver is not None:
        major = stack.driver.split(".")[0]
        if not major.isdigit() or int(major) < MIN_DRIVER:
            found.append(f"driver {stack.driver}: CUDA 13 needs R{MIN_DRIVER} or newer")
    elif stack.gpu is not None:
        found.append("the driver's version is unknown")
    if stack.torch_cuda is None:
        found.append(f"torch {stack.torch} is a CPU build: install a CUDA one "
                     "(pip install torch --index-url https://download.pytorch.org/whl/cu130)")
    elif not stack.torch_sees_gpu:
        found.append(f"torch {stack.torch} (CUDA {stack.torch_cuda}) sees no GPU")
    if stack.frontend is None:
        found.append("the cuDNN frontend does not import (wheels/gpu, scripts/gpu_wheels.sh)")
    elif stack.frontend_cudnn is None:
        found.append(f"the cuDNN frontend {stack.frontend} found no cuDNN library to load")
    elif stack.torch_cuda is not None and stack.torch_cudnn != stack.frontend_cudnn:
        found.append(f"torch loaded cuDNN {cudnn_version_name(stack.torch_cudnn)}, the frontend "
                     f"{cudnn_version_name(stack.frontend_cudnn)}: one process, two cuDNNs")
    return found


def describe(stack: Stack) -> str:
    return (f"{stack.gpu or 'no GPU'}, driver {stack.driver or 'none'}, torch {stack.torch} "
            f"(CUDA {stack.torch_cuda or 'none'}, cuDNN {cudnn_version_name(stack.torch_cudnn)}), "
            f"cuDNN frontend {stack.frontend or 'none'} "
            f"(cuDNN {cudnn_version_name(stack.frontend_cudnn)})")


def _nvidia_smi() -> tuple[str | None, str | None]:
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    rows = [line.split(",") for line in done.stdout.splitlines() if "," in line]
    if done.returncode != 0 or not rows:
        return None, None
    return rows[0][0].strip(), rows[0][1].strip()


def probe() -> Stack:
    """This process's stack: torch and the frontend are imported, cuDNN loaded by both."""
    import torch

    gpu, driver = _nvidia_smi()
    cuda = torch.version.cuda
    sees = cuda is not None and torch.cuda.is_available()
    torch_cudnn = torch.backends.cudnn.version() if sees else None
    frontend: str | None = None
    frontend_cudnn: int | None = None
    try:
        import cudnn

        frontend = cudnn.__version__
        # Raises where the frontend found no libcudnn to open.
        frontend_cudnn = int(cudnn.backend_version())
    except Exception:
        pass
    return Stack(gpu, driver, torch.__version__, cuda, sees, torch_cudnn, frontend,
                 frontend_cudnn)


def main() -> int:
    stack = probe()
    print(f"preflight: {describe(stack)}")
    found = problems(stack)
    for problem in found:
        print(f"preflight: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
