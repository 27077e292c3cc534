"""The C++ executor of cuDNN groups (csrc/cudnn, TORCH_GRAPHFUSE_CUDNN_NATIVE=1) on a GPU:
once a group's plan has run through the Python executor, later runs execute it from C++,
with the Python run's bits, on torch's current stream. Needs a CUDA GPU and an extension
built against a CUDA torch with the cuDNN frontend's headers (scripts/gpu_test.sh)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from gpu_models import (
    ConvAct,
    ConvResidual,
    LinearAct,
    assert_close,
    fused_run,
    images,
    on_gpu,
    requires_gpu,
    rows,
)

import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.testing import runner

requires_native = pytest.mark.skipif(
    not runtime.native_available(),
    reason="this extension has no C++ executor (scripts/gpu_test.sh builds it against a "
           "CUDA torch)")


@requires_gpu
@requires_native
@pytest.mark.parametrize("case", ["conv_residual", "linear_gelu"])
def test_settled_plans_run_from_cpp_with_the_python_executors_bits(
        case: str, fresh_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    if case == "conv_residual":
        model, inputs = on_gpu(ConvResidual(), images(), torch.float16, channels_last=True)
    else:
        model, inputs = on_gpu(LinearAct("gelu_erf"), rows(), torch.float16)
    monkeypatch.delenv(runtime.NATIVE_ENV, raising=False)
    in_python, _ = fused_run(model, inputs, runs=5)
    assert runtime.stats()["native_runs"] == 0
    monkeypatch.setenv(runtime.NATIVE_ENV, "1")
    from_cpp, _ = fused_run(model, inputs, runs=5)
    stats = runtime.stats()
    assert stats["native_runs"] >= 2 and stats["native_failures"] == 0, stats
    assert torch.equal(from_cpp, in_python)
    with torch.no_grad():
        assert_close(from_cpp, model(*inputs), torch.float16)


@requires_gpu
@requires_native
def test_cpp_runs_go_on_torchs_current_stream(fresh_runtime: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The input is written on a side stream behind a long sleep: a run launched on
    any other stream would read it before it is written."""
    monkeypatch.setenv(runtime.NATIVE_ENV, "1")
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvAct("relu"), images(), torch.float16, channels_last=True)
    module = runner.freeze(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(True):
        for _ in range(4):
            module(*inputs)
        before = runtime.stats()["native_runs"]
        expected = model(*inputs)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(100_000_000)
            late = (inputs[0] * 1).contiguous(memory_format=torch.channels_last)
            out = module(late)
        side.synchronize()
    assert runtime.stats()["native_runs"] == before + 1
    assert_close(out, expected, torch.float16)


@requires_gpu
@requires_native
def test_an_input_the_cpp_runner_cannot_take_goes_to_the_python_executor(
        fresh_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An input of the profiled sizes and strides but 2 bytes off cuDNN's 16-byte
    alignment passes the kernel's guard; the C++ runner leaves it to the Python
    executor, which refuses it, and the group runs unfused with eager's result."""
    monkeypatch.setenv(runtime.NATIVE_ENV, "1")
    torch.manual_seed(0)
    model, inputs = on_gpu(LinearAct("relu"), rows(), torch.float16)
    module = runner.freeze(model, inputs)
    x = inputs[0]
    shifted = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)[1:].view_as(x)
    shifted.copy_(x)
    with torch.no_grad(), torch_graphfuse.fuser(True), \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for _ in range(4):
            module(x)
        before = runtime.stats()
        out = module(shifted)
        expected = model(x)
    after = runtime.stats()
    assert before["native_runs"] >= 1
    assert after["native_runs"] == before["native_runs"]
    assert after["failures"] == before["failures"] + 1
    assert any("16-byte aligned" in str(w.message) for w in seen), [str(w.message) for w in seen]
    assert_close(out, expected, torch.float16)
