#!/usr/bin/env bash
# The GPU tier of the cuDNN backend in one command, on a GPU machine as it is:
#
#   scripts/gpu_test.sh                  # build, preflight, test/cudnn with its GPU tests
#                                        # and test/benchmarks/test_gpu_bench.py, then the
#                                        # special-values sweep
#   scripts/gpu_test.sh --bench [ARGS]   # the same, then benchmarks/gpu_bench.py ARGS
#   scripts/gpu_test.sh --gpu-only ...   # only the tests that need a GPU (the rest of the
#                                        # tier runs in CI): about a minute less of device time
#
# What it expects: Linux x86-64, an NVIDIA GPU with a driver for CUDA 13 (R580 or newer),
# a Python ($PYTHON, default python3) with a CUDA build of torch and the cuDNN 9 that torch
# loads, CMake, Ninja and a C++17 compiler. It makes no virtual environment and downloads
# nothing: GPU machines may have no package index and no pip. What that Python lacks of
# requirements-gpu.txt (the cuDNN frontend, pytest) comes from the wheels in wheels/gpu,
# which scripts/gpu_wheels.sh downloads wherever PyPI is reachable; they are unpacked into
# .gpu/site, which goes on PYTHONPATH.
#
# The extension is built against that Python's torch into build/gpu (the CPU build keeps
# build/cmake). Both write torch_graphfuse/_C.<python tag>.so: where the CPU venv's Python
# is the same version, run scripts/setup.sh again before using the CPU build.
set -euo pipefail
cd "$(dirname "$0")/.."

bench=()
tests=(test/cudnn test/benchmarks/test_gpu_bench.py)
if [ "${1:-}" = "--gpu-only" ]; then
  shift
  tests=(test/cudnn/test_cudnn_gpu_*.py)
fi
case "${1:-}" in
  --bench) shift; bench=(benchmarks/gpu_bench.py "$@") ;;
  "") ;;
  *) echo "usage: scripts/gpu_test.sh [--gpu-only] [--bench [gpu_bench.py options]]" >&2
     exit 2 ;;
esac

python=$(command -v "${PYTHON:-python3}")
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_test: no NVIDIA GPU or driver here (nvidia-smi fails); the CPU tiers run" \
       "with scripts/test.sh" >&2
  exit 1
fi

site=.gpu/site
mkdir -p "$site"
"$python" - "$site" wheels/gpu <<'PY'
# Unpack each carried wheel whose distribution this Python lacks: a wheel is a zip
# of what pip would copy into site-packages.
import importlib.metadata
import pathlib
import sys
import zipfile

site, carried = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
for wheel in sorted(carried.glob("*.whl")):
    # name-version[-build]-python-abi-platform
    parts = wheel.stem.split("-")
    dist, version, python_tag = parts[0], parts[1], parts[-3]
    try:
        have = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        have = None
    if have is not None and not (site / f"{dist}-{version}.dist-info").exists():
        continue
    if python_tag not in ("py3", tag):
        sys.exit(f"gpu_test: {wheel.name} is for {python_tag}, this Python is {tag}: "
                 f"GPU_PYTHON_VERSION={sys.version_info.major}.{sys.version_info.minor} "
                 "scripts/gpu_wheels.sh")
    print(f"gpu_test: unpacking {wheel.name}")
    zipfile.ZipFile(wheel).extractall(site)
PY
# The checkout first: benchmarks/gpu_bench.py imports torch_graphfuse from it, as the
# tests do through their rootdir.
export PYTHONPATH="$PWD:$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"
for module in cudnn pytest; do
  if ! "$python" -c "import $module" 2>/dev/null; then
    echo "gpu_test: $python cannot import $module; bring its wheel: scripts/gpu_wheels.sh" >&2
    exit 1
  fi
done

echo "gpu_test: building the extension against $python's torch into build/gpu"
# Its configure says whether cuDNN groups get the C++ executor (csrc/cudnn).
cmake -S . -B build/gpu -G Ninja -DPython3_EXECUTABLE="$python" \
  -DGRAPHFUSE_OUTPUT_DIR="$PWD/torch_graphfuse" | sed -n 's/^-- \(cuDNN groups: .*\)/gpu_test: \1/p'
cmake --build build/gpu

"$python" -m torch_graphfuse.backends.cudnn.preflight
# In parallel where pytest-xdist is there: device time is lent by the minute, and the
# tier took over 250 s in one process on an H200 machine's 16 cores, 100 s in twelve.
parallel=()
if "$python" -c "import xdist" 2>/dev/null; then
  parallel=(-n 12)
fi
status=0
"$python" -m pytest "${tests[@]}" -q -rs "${parallel[@]}" || status=$?
# A report, not a gate: which engines keep eager's NaN and infinities through relu,
# clamp and amax decides whether those ops may map without the finite guard. Plans that
# NVRTC compiles take seconds each, hence the limit.
timeout "${SPECIAL_VALUES_TIMEOUT:-600}" "$python" -m torch_graphfuse.backends.cudnn.special_values \
  --json "${SPECIAL_VALUES_JSON:-/dev/null}" || echo "gpu_test: the special-values sweep did not finish" >&2
if [ ${#bench[@]} -gt 0 ]; then
  "$python" "${bench[@]}"
fi
exit $status
