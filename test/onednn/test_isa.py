"""What fuses on each x86 ISA, checked on any CPU: each case runs in a process whose
oneDNN is limited to an older ISA (ONEDNN_MAX_CPU_ISA), as on an AVX2-only CPU (AMD
Zen 2/3, Intel client parts) or an AVX-512 one without VNNI. Emulation gives those
CPUs' kernels and results (scripts/test.sh also runs whole slices that way)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch_graphfuse
from torch_graphfuse.backends.onednn import library
from torch_graphfuse.passes.int8_as_float import FAKE_QUANTIZE

SCRIPT = """
import json, torch, torch_graphfuse
from int8_models import QConv, U7_IN, U8_OUT
from fusion_check import eager, fuse
torch.manual_seed(0)
result = {"isa": torch_graphfuse.onednn_info()["isa"]}
conv = torch.nn.Sequential(torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU())
x = torch.randn(2, 8, 10, 10)
cases = (("bf16", conv, "bf16", 2e-2), ("int8", QConv(), "fp32", U8_OUT.scale),
         ("int8_7bit", QConv(act_in=U7_IN), "fp32", U8_OUT.scale))
for name, model, dtype, step in cases:
    _, out, graph = fuse(model, [x], dtype)
    report = torch_graphfuse.last_report()
    result[name] = {"groups": report.groups, "rejected": [why for _, why in report.rejected],
                    "error": (out.float() - eager(model, [x], dtype).float()).abs().max().item(),
                    "step": step}
print(json.dumps(result))
"""


def run_on(isa: str) -> dict:
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa,
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                           str(Path(__file__).parents[1] / "helpers"),
                                           str(Path(torch_graphfuse.__file__).parents[1])]))
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def skip_unless_reachable(isa: str) -> None:
    """ONEDNN_MAX_CPU_ISA only lowers the ISA: skip where this CPU (or an emulation
    limiting this process) lacks the instructions of `isa`."""
    if not library.holds(isa):
        pytest.skip(f"this CPU runs {torch_graphfuse.onednn_info()['isa']}: "
                    f"{isa} cannot be emulated on it")


@pytest.mark.parametrize("isa", ["AVX2", "AVX512_CORE"])
def test_older_isas_compute_8_bit_int8_in_float_and_keep_bf16_with_aten(isa: str) -> None:
    skip_unless_reachable(isa)
    result = run_on(isa)
    assert result["isa"] == isa.lower()
    # No bf16 instructions: bf16 regions stay with ATen, and the report says why.
    assert result["bf16"]["groups"] == []
    assert any("without bf16 instructions" in why for why in result["bf16"]["rejected"])
    # No VNNI: 8-bit int8 products would saturate; the quantized activations are computed
    # in float32 (int8_as_float), and the convolution fuses with them in fp32.
    int8 = result["int8"]
    assert any("aten::_convolution" in group and FAKE_QUANTIZE in group
               for group in int8["groups"])
    assert not any("quantized_decomposed::" in k for group in int8["groups"] for k in group)
    # 7-bit activations: no pair sum int16 cannot hold, so the convolution fuses.
    assert any("aten::_convolution" in group for group in result["int8_7bit"]["groups"])
    for case in ("bf16", "int8", "int8_7bit"):
        assert result[case]["error"] <= result[case]["step"] * 1.001, (case, result[case])


def test_vnni_and_bf16_isa_fuses_both() -> None:
    skip_unless_reachable("AVX512_CORE_BF16")
    result = run_on("AVX512_CORE_BF16")
    assert result["bf16"]["groups"] and result["int8"]["groups"]
