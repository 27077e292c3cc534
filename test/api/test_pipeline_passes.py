"""The pass pipeline as data (pipeline.PASSES): each pass comes after the passes whose work
it takes, TORCH_GRAPHFUSE_DISABLE_PASSES skips any pass but the guards by name and leaves
eager's results, and a name of no such pass fails the import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from fusion_check import assert_matches
from torch import nn

import torch_graphfuse
from torch_graphfuse import config, pipeline
from torch_graphfuse.testing import quantize, runner, zoo

OPTIONAL = [p.name for p in pipeline.PASSES if not p.required]


def test_each_pass_comes_after_the_passes_whose_work_it_takes() -> None:
    names = [p.name for p in pipeline.PASSES]
    assert len(set(names)) == len(names)
    for i, step in enumerate(pipeline.PASSES):
        for before in step.after:
            assert before in names[:i], f"{step.name} runs before {before}"


def test_the_guards_cannot_be_disabled() -> None:
    assert {"type_guard", "finite_guard"} <= {p.name for p in pipeline.PASSES if p.required}


QUANTIZATION = {"reference_quantization", "int8_as_float", "quantized_weights",
                "split_dequantize", "refold_dequantize"}


@pytest.fixture(scope="module")
def t5() -> tuple[nn.Module, list[torch.Tensor], object]:
    model, inputs = zoo.build("hf/t5", small=True)
    with torch.no_grad():
        return model, inputs, model(*inputs)


@pytest.mark.parametrize("name", OPTIONAL)
def test_any_pass_but_the_guards_can_be_disabled_and_results_stay_eager(
        name: str, t5: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.DISABLE_PASSES.env, name)
    if name in QUANTIZATION:
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 4, 3),
                              nn.ReLU()).eval()
        x = torch.randn(2, 3, 12, 12)
        reference = quantize.pt2e(model, (x,), [(torch.randn(2, 3, 12, 12),)])
        frozen = quantize.freeze_quantized(reference, (x,))
        with torch.no_grad():
            expected = reference(x)
            with torch_graphfuse.fuser():
                for _ in range(3):
                    out = frozen(x)
        assert_matches(out, expected, "fp32")
        return
    model, inputs, expected = t5
    with torch.no_grad(), torch_graphfuse.fuser():
        frozen = runner.freeze(model, inputs)
        for _ in range(3):
            out = frozen(*inputs)
    assert zoo.relative_error(out, expected) <= zoo.FP32_TOLERANCE


def test_a_disabled_pass_does_not_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Without the analyses' partitioning pass, nothing fuses.
    monkeypatch.setenv(config.DISABLE_PASSES.env, "rewrite")
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    x = torch.randn(4, 16)
    with torch.no_grad(), torch_graphfuse.fuser():
        frozen = runner.freeze(model, [x])
        frozen(x)
        frozen(x)
        assert runner.fusion_groups(torch.jit.last_executed_optimized_graph()) == []


def test_a_name_of_no_pass_fails_the_import_naming_those_that_can_be_disabled() -> None:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_GRAPHFUSE_")}
    done = subprocess.run([sys.executable, "-c", "import torch_graphfuse"], capture_output=True,
                          text=True, env={**clean, config.DISABLE_PASSES.env: "decompose,fuse"},
                          timeout=120)
    assert done.returncode != 0
    assert (f"{config.DISABLE_PASSES.env} names fuse: the passes that can be disabled are "
            f"{', '.join(OPTIONAL)}") in done.stderr
