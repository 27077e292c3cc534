#!/usr/bin/env bash
# Set up (see setup.sh), then run the linter and the whole test suite on this CPU (the docs
# site's strict build and the docs' examples are tests too). With no
# arguments, the whole suite runs again with oneDNN and ATen limited to their AVX2 kernels
# (no AVX-512, VNNI or bf16: an AMD Zen 2/3 or an Intel client CPU), where the bf16 tests
# compare with eager and skip what they pin of a bf16 CPU's groups, and the int8 slice
# with oneDNN limited to AVX-512 without VNNI; each only where this CPU's ISA is above it
# (an AVX2-only CPU runs the main suite once). Emulation reproduces those CPUs' kernels and
# results, not their speed. test_isa.py pins what fuses on the older ISAs.
# Arguments go to pytest, and only the main run happens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh cuda zoo docs
. .venv/bin/activate
ruff check .
python -m pytest test -q "$@"
if [ $# -gt 0 ]; then
  exit 0
fi

int8=(test/onednn/test_int8_fusion.py test/onednn/test_int8_flows.py
      test/onednn/test_int8_fuzzer_regressions.py test/onednn/test_quantize_recipes.py)
# oneDNN's ISA on this CPU, and whether it holds each emulated one's instructions: an ISA
# can only be emulated downwards, and an emulation of this CPU's own ISA repeats the run.
read -r native avx2_below avx512_core_below < <(python -c '
from torch_graphfuse.backends.onednn import library
here = library.isa().name
print(here, *(int(library.holds(n) and n != here) for n in ("avx2", "avx512_core")))')
if [ "$avx2_below" = 1 ]; then
  echo "test: again on emulated AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)"
  ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
    python -m pytest -q test
else
  echo "test: no emulated AVX2 run: this CPU's oneDNN runs $native, so the run above was it"
fi
if [ "$avx512_core_below" = 1 ]; then
  echo "test: int8 again on emulated AVX-512 without VNNI (ONEDNN_MAX_CPU_ISA=AVX512_CORE)"
  ONEDNN_MAX_CPU_ISA=AVX512_CORE python -m pytest -q "${int8[@]}"
else
  echo "test: no emulated AVX-512 int8 run: this CPU's oneDNN runs $native, which has no" \
       "AVX-512 above AVX512_CORE to lower"
fi
