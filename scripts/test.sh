#!/usr/bin/env bash
# Set up (see setup.sh), then run the linter and the whole test suite on this CPU. With no
# arguments, the whole suite runs again with oneDNN and ATen limited to their AVX2 kernels
# (no AVX-512, VNNI or bf16: an AMD Zen 2/3 or an Intel client CPU), where the bf16 tests
# compare with eager and skip what they pin of a bf16 CPU's groups, and the int8 slice
# with oneDNN limited to AVX-512 without VNNI. Emulation reproduces those CPUs' kernels and
# results, not their speed. test_isa.py pins what fuses on the older ISAs.
# Arguments go to pytest, and only the main run happens.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh cuda zoo
. .venv/bin/activate
ruff check .
python -m pytest test -q "$@"
if [ $# -gt 0 ]; then
  exit 0
fi

int8=(test/onednn/test_int8_fusion.py test/onednn/test_int8_flows.py
      test/onednn/test_int8_fuzzer_regressions.py test/onednn/test_quantize_recipes.py)
echo "test: again on emulated AVX2 (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2)"
ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 \
  python -m pytest -q test
echo "test: int8 again on emulated AVX-512 without VNNI (ONEDNN_MAX_CPU_ISA=AVX512_CORE)"
ONEDNN_MAX_CPU_ISA=AVX512_CORE python -m pytest -q "${int8[@]}"
