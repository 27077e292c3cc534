"""No fused group runs one of oneDNN's reference implementations (`ref:any` in
ONEDNN_VERBOSE), which run orders of magnitude slower than ATen, or its generic layer
norm (`simple:any`, 70 times slower than its JIT kernel): the partition
policy refuses the patterns known to reach them, and the kernel refuses any
spec whose compiled partition would (it reads oneDNN's creation verbose)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.onednn import workarounds
from torch_graphfuse.testing import onednn_verbose

# Each case: a model on an NCHW (or channels-last) input that ATen runs without a
# reference kernel of its own, so any reference kernel in the run is a group's.
SCRIPT = r"""
import json, os, sys, torch
from torch import nn
from torch.nn import functional as F
import torch_graphfuse
from torch_graphfuse.testing import runner

torch.manual_seed(0)


class Fn(nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for name, m in modules.items():
            setattr(self, name, m)

    def forward(self, x):
        return self.fn(self, x)


def se(s, x):
    w = torch.sigmoid(s.fc2(torch.relu(s.fc1(x.mean((2, 3), keepdim=True)))))
    return x * w


def repvgg(s, x):
    return torch.relu(s.conv3(x) + s.conv1(x) + s.bn(x))


c = 16
CASES = {
    "eltwise_times_input": (Fn(lambda s, x: torch.tanh(x) * x.flip(0)), (4, c, 28, 28)),
    "gelu_times_input": (Fn(lambda s, x: F.gelu(x) * (x + 1.0)), (4, c, 28, 28)),
    "relu_plus_input": (Fn(lambda s, x: torch.relu(x) + x.flip(0)), (4, c, 28, 28)),
    "squeeze_excite": (Fn(se, fc1=nn.Conv2d(c, 4, 1), fc2=nn.Conv2d(4, c, 1)), (1, c, 28, 28)),
    "repvgg_block": (Fn(repvgg, conv3=nn.Conv2d(c, c, 3, padding=1), conv1=nn.Conv2d(c, c, 1),
                        bn=nn.BatchNorm2d(c)), (1, c, 28, 28)),
    "t5_norm": (Fn(lambda s, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
                   * s.w, w=nn.Parameter(torch.randn(64))), (2, 32, 64)),
    "dilated_max_pool": (Fn(lambda s, x: F.max_pool2d(s.conv(x), 3, 1, 1, dilation=2),
                            conv=nn.Conv2d(c, c, 3, padding=1)), (1, c, 14, 14)),
    "mean_alone": (Fn(lambda s, x: s.conv(x).mean((2, 3)), conv=nn.Conv2d(c, c, 3)),
                   (1, c, 14, 14)),
    "layer_norm_divided_per_row": (Fn(lambda s, x: F.layer_norm(x, (64,)) / s.d,
                                      d=nn.Parameter(torch.rand(8, 1) + 0.5)), (8, 64)),
    # MobileNetV2's block: oneDNN fuses the 1x1 and the depthwise convolution into one
    # primitive, ref_fused_convolution, which chains their JIT kernels.
    "inverted_residual": (Fn(lambda s, x: F.relu6(s.dw(F.relu6(s.pw(x)))),
                             pw=nn.Conv2d(c, 6 * c, 1), dw=nn.Conv2d(6 * c, 6 * c, 3, padding=1,
                                                                     groups=6 * c)),
                          (1, c, 28, 28)),
}
name = sys.argv[1]
model, shape = CASES[name]
model = model.eval().requires_grad_(False)
x = torch.randn(shape)
module, _, graph = runner.fused(model, [x])
with torch.no_grad(), torch_graphfuse.fuser():
    module(x)
    os.write(1, b"STEADY\n")
    out = module(x)
    os.write(1, b"END\n")
    ok = torch.allclose(out, model(x), rtol=1e-4, atol=1e-5)
print(json.dumps({"groups": len(runner.fusion_groups(graph)), "matches": ok,
                  "fused_runs": torch_graphfuse.kernel_stats()["fused_runs"]}))
"""

CASES = ["eltwise_times_input", "gelu_times_input", "relu_plus_input", "squeeze_excite",
         "repvgg_block", "t5_norm", "dilated_max_pool", "mean_alone", "layer_norm_divided_per_row",
         "inverted_residual"]


@pytest.mark.parametrize("case", CASES)
def test_no_fused_group_runs_a_reference_kernel(case: str) -> None:
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT, case], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    steady = out.split("STEADY", 1)[1].split("END", 1)[0]
    slow = [e.line for e in onednn_verbose.primitive_executions(steady) if e.slow]
    assert not slow, "\n".join(slow)
    assert json.loads(out.strip().splitlines()[-1])["matches"]


def test_pointwise_and_depthwise_convolution_run_fused() -> None:
    # The kernel reads ref_fused_convolution as the kernels it chains: the group runs fused.
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, "-c", SCRIPT, "inverted_residual"], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    assert result["matches"] and result["groups"] == 1 and result["fused_runs"] > 0, result


@pytest.mark.parametrize(("implementation", "slow"), [
    ("ref:any", True),
    ("ref_fused_convolution:any:brgconv_1x1:avx512_core:brdgmm_dw:avx512_core", False),
    ("ref_fused_convolution:any:ref:any:jit_dw:avx2", True),
    ("brg_conv_fwd:avx512_core", False),
])
def test_what_counts_as_a_reference_kernel(implementation: str, slow: bool) -> None:
    assert onednn_verbose.Execution("convolution", implementation, "").slow == slow


class TanhTimes(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * y


def test_spec_that_would_run_a_reference_kernel_runs_unfused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # With the policy's rule off, the group forms; compiling it, the kernel sees
    # oneDNN create its reference eltwise implementation and runs ATen instead.
    monkeypatch.setattr(workarounds, "eltwise_head_with_binary", lambda ops: False)
    inputs = [torch.randn(2, 8, 14, 14), torch.randn(2, 8, 14, 14)]
    torch_graphfuse.reset_kernel_stats()
    module, _, _ = fuse(TanhTimes(), inputs)
    assert_matches(run(module, inputs), eager(TanhTimes(), inputs), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["fused_runs"] == 0 and stats["unfused_specs"] == 1
    (_, why), = torch_graphfuse.last_report().unfused_specs()
    assert "reference implementation (eltwise ref:any)" in why


def test_verbose_the_user_asked_for_still_reaches_stdout() -> None:
    # The kernel captures stdout while it compiles: oneDNN's lines go back out
    # when ONEDNN_VERBOSE is set, and other output always does.
    script = ("import torch, torch_graphfuse\n"
              "from torch_graphfuse.testing import runner\n"
              "m = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()).eval()\n"
              "runner.fused(m, [torch.randn(1, 3, 8, 8)])\n"
              "print('after')\n")
    for verbose in ("0", "1"):
        env = dict(os.environ, ONEDNN_VERBOSE=verbose)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=120, check=True).stdout
        assert out.rstrip().endswith("after")
        lines = onednn_verbose.primitive_executions(out)
        assert bool(lines) == (verbose == "1"), out[-2000:]
