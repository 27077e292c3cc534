"""The GPU tier's failures: a group whose executor fails, or that cuDNN has no plan
for, runs unfused with one warning and gives eager's result. Needs a CUDA GPU and
the `cuda` extra (scripts/gpu_test.sh)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from gpu_models import ConvAct, ConvResidual, assert_close, images, on_gpu, requires_gpu
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.backends.cudnn.plans.compiler import CudnnCompiler
from torch_graphfuse.testing import runner


def _warned_once_and_matched_eager(model: nn.Module, inputs: list[torch.Tensor]) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    module = runner.freeze(model, inputs)
    # However many profiling runs torch's executor takes (torch 2.11's fuses at the
    # second call), the group warns once, at its first fused run.
    with torch.no_grad(), torch_graphfuse.fuser(True), \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [module(*inputs) for _ in range(4)]
    unfused = [str(w.message) for w in seen if "runs unfused" in str(w.message)]
    assert len(unfused) == 1, [str(w.message) for w in seen]
    for out in outs:
        assert_close(out, expected, torch.float16)
    assert torch.equal(outs[-1], outs[-2])
    assert runtime.stats()["failures"] >= 1


@requires_gpu
def test_executor_failure_runs_the_group_unfused_with_one_warning(fresh_runtime: Path) -> None:
    def broken(desc: str) -> runtime.Executor:
        def run(inputs: Any) -> list[torch.Tensor]:
            raise RuntimeError("forced cuDNN failure")
        return run

    torch.manual_seed(0)
    with runtime.executor_factory(broken):
        _warned_once_and_matched_eager(*on_gpu(ConvResidual(), images(), torch.float16,
                                               channels_last=True))


@requires_gpu
def test_plan_cudnn_refuses_runs_the_group_unfused_with_one_warning(
        fresh_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cudnn

    def refuse(self: Any, graph: Any, *args: Any, **kwargs: Any) -> Any:
        raise cudnn.cudnnGraphNotSupportedError("forced: no engine supports this graph")

    monkeypatch.setattr(CudnnCompiler, "build", refuse)
    torch.manual_seed(0)
    _warned_once_and_matched_eager(*on_gpu(ConvAct("gelu_erf"), images(), torch.float16,
                                           channels_last=True))
    assert runtime.stats()["plans_built"] == 0
