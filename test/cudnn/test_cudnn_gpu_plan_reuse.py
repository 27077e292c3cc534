"""The GPU tier's plan caches: a second module of the same shapes, the same module
after the memory cache is dropped, and a second process all run on the plans made
first. Needs a CUDA GPU and the `cuda` extra (scripts/gpu_test.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch
from gpu_models import ConvAct, ConvResidual, assert_close, fused_run, images, on_gpu, requires_gpu

from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.backends.cudnn.plans.store import CACHE_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]


@requires_gpu
def test_second_module_of_the_same_shapes_reuses_the_plans(fresh_runtime: Path) -> None:
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvResidual(), images(), torch.float16, channels_last=True)
    fused_run(model, inputs)
    built = runtime.stats()["plans_built"]
    assert built >= 1
    fused_run(model, inputs)
    stats = runtime.stats()
    assert stats["plans_built"] == built and stats["memory_hits"] >= built, stats


@requires_gpu
def test_plans_are_read_back_from_disk_after_the_memory_cache_is_dropped(
        fresh_runtime: Path) -> None:
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvAct("gelu_erf"), images(), torch.float16, channels_last=True)
    first, _ = fused_run(model, inputs)
    built = runtime.stats()["plans_built"]
    assert built >= 1 and any(fresh_runtime.glob("*.plan"))
    runtime.reset()
    again, _ = fused_run(model, inputs)
    stats = runtime.stats()
    assert (stats["plans_built"], stats["disk_hits"]) == (0, built), stats
    assert_close(again, first, torch.float16)


SECOND_PROCESS = """
import json, sys
import torch
import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
sys.path.insert(0, sys.argv[2])
import gpu_models as tier
torch.manual_seed(0)
model, inputs = tier.on_gpu(tier.ConvResidual(), tier.images(), torch.float16,
                            channels_last=True)
out, _ = tier.fused_run(model, inputs)
torch.save(out.cpu(), sys.argv[1] + ".pt")
with open(sys.argv[1], "w") as f:
    json.dump(runtime.stats(), f)
"""


@requires_gpu
def test_second_process_takes_the_plans_from_disk(fresh_runtime: Path, tmp_path: Path) -> None:
    def process(name: str) -> tuple[dict[str, Any], torch.Tensor]:
        result = tmp_path / name
        env = {**os.environ, CACHE_DIR_ENV: str(fresh_runtime)}
        done = subprocess.run([sys.executable, "-c", SECOND_PROCESS, str(result),
                               str(Path(__file__).parent)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(result.read_text()), torch.load(str(result) + ".pt")

    first, out_first = process("first.json")
    assert first["plans_built"] >= 1 and first["disk_hits"] == 0, first
    second, out_second = process("second.json")
    assert second["plans_built"] == 0 and second["disk_hits"] == first["plans_built"], second
    assert_close(out_second, out_first, torch.float16)
