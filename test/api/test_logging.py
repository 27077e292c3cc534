"""PYTORCH_JIT_LOG_LEVEL shows each pass's work, as it does for torch's own passes."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import torch, torch_graphfuse
from torch_graphfuse.testing import runner
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
    def forward(self, x):
        return torch.relu(self.conv(x))
runner.fused(M(), [torch.randn(1, 3, 8, 8)])
"""


def run(level: str | None) -> str:
    env = dict(os.environ)
    env.pop("PYTORCH_JIT_LOG_LEVEL", None)
    if level is not None:
        env["PYTORCH_JIT_LOG_LEVEL"] = level
    done = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stderr


def test_each_pass_logs_under_its_module_name() -> None:
    err = run(">>partition:rewrite:type_guard:>op_mapping:mutation_removal:prepare_binary"
              ":>prepare_partitions")
    assert "[UPDATE partition.py] partition [_convolution, relu]" in err
    assert "[DUMP rewrite.py] after rewrite:" in err
    assert "graphfuse::FusionGroup" in err
    assert "[DUMP type_guard.py]" in err and "guarded=[0], types=[Float(*, *, *, *" in err
    assert "[UPDATE op_mapping.py] backend graph:" in err
    assert "o 0 Convolution" in err
    assert "[DUMP mutation_removal.py] after mutation_removal:" in err
    assert "[DUMP prepare_binary.py] after prepare_binary:" in err
    assert "[UPDATE prepare_partitions.py] 1 of 1 group partitions found in one oneDNN call" in err


def test_debug_level_adds_graph_before_pass() -> None:
    assert "[DEBUG rewrite.py] before rewrite:" in run(">>rewrite")
    assert "before rewrite" not in run("rewrite")


def test_no_output_without_log_level() -> None:
    assert ".py]" not in run(None)


def test_a_spec_run_unfused_costs_one_kernel_log_line() -> None:
    # The C++ kernel logs under its file's name through torch's jit_log: an
    # empty batch oneDNN cannot take runs unfused, once logged, never warned.
    script = SCRIPT.replace("runner.fused(M(), [torch.randn(1, 3, 8, 8)])",
                            "module, _, _ = runner.fused(M(), [torch.randn(1, 3, 8, 8)])\n"
                            "with torch.no_grad(), torch_graphfuse.fuser():\n"
                            "    for _ in range(3):\n"
                            "        module(torch.randn(0, 3, 8, 8))\n")
    env = dict(os.environ, PYTORCH_JIT_LOG_LEVEL=">onednn_kernel")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    lines = [line for line in done.stderr.splitlines() if "running unfused" in line]
    assert len(lines) == 1 and "onednn_kernel.cpp" in lines[0], done.stderr
    assert "Warning: torch_graphfuse" not in done.stderr


def test_a_spec_the_guard_refuses_logs_that_it_is_fused_again() -> None:
    # Once per spec fused again; past TORCH_GRAPHFUSE_SPECS_PER_GROUP, once per group.
    script = """
import torch, torch_graphfuse
from torch_graphfuse.testing import runner
import torch.nn.functional as F
class Padded(torch.nn.Module):  # padded to whole windows: zero at the profiled width only
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
    def forward(self, x):
        return F.pad(torch.relu(self.conv(x)), (0, (4 - x.size(3) % 4) % 4))
module, _, _ = runner.fused(Padded(), [torch.randn(1, 3, 8, 8)])
with torch.no_grad(), torch_graphfuse.fuser():
    for n in [12, 12, 16, 16, 20, 20]:
        module(torch.randn(1, 3, n, n))
"""
    env = dict(os.environ, PYTORCH_JIT_LOG_LEVEL=">fusion_group",
               TORCH_GRAPHFUSE_SPECS_PER_GROUP="2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    again = [line for line in done.stderr.splitlines() if "is fused again for it" in line]
    past = [line for line in done.stderr.splitlines() if "past the limits" in line]
    assert len(again) == 2 and "(spec 2 of at most 2)" in again[1], done.stderr
    # Which input the guard refused, and why: the width the padding was computed from.
    assert "(input 0 has size 12 in dim 2, profiled 8)" in again[0], done.stderr
    assert len(past) == 1 and "fusion_group.cpp" in past[0], done.stderr
