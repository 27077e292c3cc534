#!/usr/bin/env bash
# The GPU tier of the cuDNN backend in one command:
#
#   scripts/gpu_test.sh                  # set up, then test/cudnn with its GPU tests
#   scripts/gpu_test.sh --bench          # the same, then benchmarks/gpu_bench.py
#   scripts/gpu_test.sh --bench --quick  # the same with a small benchmark
#
# What it expects: Linux x86-64, an NVIDIA GPU with a driver for CUDA 13 (R580 or
# newer), what scripts/setup.sh needs (Python 3.11, gcc, cmake, PyPI), and PyTorch's
# wheel index (TORCH_CUDA_INDEX, default https://download.pytorch.org/whl/cu130).
#
# What it does: scripts/setup.sh (.venv with requirements.txt's torch, the `cuda`
# extra, the extension), then, once, if that torch is a CPU build, replaces it by the
# CUDA build of the same version, which brings its own cuDNN 9. The extension is
# kept, on the assumption (not verified: no GPU machine was available) that the CPU
# and CUDA builds of one version share the C++ API it uses; it calls no CUDA API
# itself (cuDNN groups run from Python). If it fails to load, rebuild it there. After the swap it does not
# run setup.sh again: reconfiguring CMake against a CUDA torch needs the CUDA toolkit.
# Back to the CPU torch: rm .venv/.torch-cuda .venv/.requirements.sha, pip uninstall
# torch, then scripts/setup.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=()
case "${1:-}" in
  --bench) shift; bench=(python benchmarks/gpu_bench.py "$@") ;;
  "") ;;
  *) echo "usage: scripts/gpu_test.sh [--bench [gpu_bench.py options]]" >&2; exit 2 ;;
esac

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_test: no NVIDIA GPU or driver here (nvidia-smi fails); the CPU tiers run" \
       "with scripts/test.sh" >&2
  exit 1
fi

cuda_stamp=.venv/.torch-cuda
if [ ! -f "$cuda_stamp" ]; then
  scripts/setup.sh
  # shellcheck disable=SC1091
  . .venv/bin/activate
  if [ "$(python -c 'import torch; print(torch.version.cuda is None)')" = True ]; then
    version=$(python -c "import torch; print(torch.__version__.split('+')[0])")
    index=${TORCH_CUDA_INDEX:-https://download.pytorch.org/whl/cu130}
    echo "gpu_test: replacing the CPU torch by torch $version from $index"
    # Uninstalled first: the CPU build satisfies torch==$version as far as pip can tell.
    python -m pip uninstall -q -y torch
    python -m pip install -q "torch==$version" --index-url "$index" \
      --extra-index-url https://pypi.org/simple
  fi
  python -c "import torch; print(torch.__version__)" > "$cuda_stamp"
fi
# shellcheck disable=SC1091
. .venv/bin/activate

python - <<'EOF'
import sys

import torch

if not torch.cuda.is_available():
    sys.exit(f"gpu_test: torch {torch.__version__} (CUDA {torch.version.cuda}) sees no GPU")
import cudnn

import torch_graphfuse  # noqa: F401  (the extension loads with this torch)

print(f"gpu_test: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
      f"cuDNN {cudnn.backend_version()}, frontend {cudnn.__version__}")
EOF

python -m pytest test/cudnn -q -rs
if [ ${#bench[@]} -gt 0 ]; then
  "${bench[@]}"
fi
