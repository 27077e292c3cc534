#!/usr/bin/env bash
# Set up (see setup.sh), then run the linter and the whole test suite on this CPU. With no
# arguments, the slices that reach ISA-specific kernels (int8, eager semantics in fp32 and
# bf16, the fuzzer's quick mode in every mode, reference kernels, the benchmark smoke test)
# run again with oneDNN and ATen limited to their AVX2 kernels (no AVX-512, VNNI or bf16: an
# AMD Zen 2/3 or an Intel client CPU), and the int8 slice with oneDNN limited to AVX-512
# without VNNI. Emulation reproduces those CPUs' kernels and results, not their speed. The
# other tests pin what fuses on this CPU; test_isa.py pins what fuses on the older ISAs.
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
  python -m pytest -q "${int8[@]}" test/onednn/test_eager_semantics.py \
    test/onednn/test_eager_numerics.py test/models/test_differential_fuzz.py \
    test/onednn/test_reference_kernels.py test/benchmarks/test_benchmark_smoke.py \
    test/onednn/test_onednn_library.py test/onednn/test_attention_fusion.py
echo "test: int8 again on emulated AVX-512 without VNNI (ONEDNN_MAX_CPU_ISA=AVX512_CORE)"
ONEDNN_MAX_CPU_ISA=AVX512_CORE python -m pytest -q "${int8[@]}"
