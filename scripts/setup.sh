#!/usr/bin/env bash
# Set up torch_graphfuse from a fresh clone, idempotently:
#
#   scripts/setup.sh             # what the plugin and the demo need
#   scripts/setup.sh cuda zoo docs  # and optional extras (scripts/test.sh asks for all three)
#
# Always: a virtual environment in .venv, torch 2.13.0 (CPU; its own oneDNN is the one the
# plugin uses) with requirements.txt, and the C++ extension built with CMake + Ninja into
# build/cmake (incremental on rebuild). Extras, each installed once:
# - cuda: cuDNN and its frontend (requirements-cuda.txt, about 2 GB), for the cuDNN tests that
#   need no GPU. The CPU path never imports them.
# - zoo: transformers, timm and torchvision (requirements-zoo.txt), --no-deps beside the CPU
#   torch, for the model zoo's tests and benchmark.
# - docs: mkdocs and its material theme (requirements-docs.txt), to build the docs site.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=()
for extra in "$@"; do
  case "$extra" in
    cuda | zoo | docs) extras+=("$extra") ;;
    *) echo "usage: scripts/setup.sh [cuda] [zoo] [docs]" >&2; exit 2 ;;
  esac
done

venv=.venv
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
if [ ! -x "$venv/bin/python" ]; then
  echo "setup: creating $venv with $python"
  "$python" -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"

# Installs requirement file $2 with pip arguments $3... unless the stamp for set $1 says
# this very file is installed already.
install() {
  local name=$1 file=$2
  shift 2
  local stamp="$venv/.requirements-$name.sha" want
  want=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "setup: installing $file"
    python -m pip install -q "$@" -r "$file"
    echo "$want" > "$stamp"
  fi
}

if [ ! -f "$venv/.requirements-base.sha" ]; then
  python -m pip install -q --upgrade pip
  # torch first and on its own, so that pip takes the CPU wheel.
  python -m pip install -q "$(grep '^torch==' requirements.txt)"
fi
install base requirements.txt
for extra in "${extras[@]}"; do
  case "$extra" in
    cuda) install cuda requirements-cuda.txt ;;
    zoo) install zoo requirements-zoo.txt --no-deps ;;
    docs) install docs requirements-docs.txt ;;
  esac
done

# A build configured for the editable install writes torch_graphfuse/_C*.so
# itself; anything else (first run, older configuration) goes through pip.
if grep -q "^GRAPHFUSE_OUTPUT_DIR:.*=$PWD/torch_graphfuse\$" build/cmake/CMakeCache.txt 2>/dev/null \
    && ls torch_graphfuse/_C*.so >/dev/null 2>&1; then
  cmake --build build/cmake | grep -v "^ninja: no work to do" || true
else
  echo "setup: building the extension"
  python -m pip install -q --no-build-isolation --no-deps -e .
fi
