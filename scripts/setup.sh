#!/usr/bin/env bash
# Set up torch_graphfuse from a fresh clone, idempotently: a virtual environment
# in .venv, torch 2.13.0 (CPU; its own oneDNN is the one the plugin uses), cuDNN and its
# frontend (the optional `cuda` extra, for the no-GPU cuDNN tests), the model zoo's
# libraries (the optional `zoo` extra, --no-deps beside the CPU torch), and the C++
# extension built with CMake + Ninja into build/cmake (incremental on rebuild).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with $python"
  "$python" -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"

# requirements-cuda.txt is the optional `cuda` extra (cuDNN and its frontend, no GPU needed):
# installed here so that the cuDNN test tiers that need no device always run; likewise
# requirements-zoo.txt (transformers, timm, torchvision) for the zoo's test slice.
stamp="$venv/.requirements.sha"
want=$(cat requirements.txt requirements-cuda.txt requirements-zoo.txt | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing requirements"
  python -m pip install -q --upgrade pip
  python -m pip install -q "$(grep '^torch==' requirements.txt)"
  python -m pip install -q -r requirements.txt -r requirements-cuda.txt
  python -m pip install -q --no-deps -r requirements-zoo.txt
  echo "$want" > "$stamp"
fi

# A build configured for the editable install writes torch_graphfuse/_C*.so
# itself; anything else (first run, older configuration) goes through pip.
if grep -q "^GRAPHFUSE_OUTPUT_DIR:.*=$PWD/torch_graphfuse\$" build/cmake/CMakeCache.txt 2>/dev/null \
    && ls torch_graphfuse/_C*.so >/dev/null 2>&1; then
  cmake --build build/cmake | grep -v "^ninja: no work to do" || true
else
  echo "setup: building the extension"
  python -m pip install -q --no-build-isolation --no-deps -e .
fi
