#!/usr/bin/env bash
# Download the wheels scripts/gpu_test.sh brings to a GPU machine (requirements-gpu.txt) into
# wheels/gpu, for Python $GPU_PYTHON_VERSION (default 3.12, the GPU machines' python3) on
# x86-64 Linux. Run it wherever PyPI is reachable; wheels/gpu then travels with the tree.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ -x .venv/bin/python ]; then
  python=.venv/bin/python
fi
"$python" -m pip download -q --no-deps --only-binary :all: \
  --python-version "${GPU_PYTHON_VERSION:-3.12}" --platform manylinux_2_28_x86_64 \
  -d wheels/gpu -r requirements-gpu.txt
ls wheels/gpu
