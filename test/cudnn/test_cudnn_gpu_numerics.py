"""The GPU tier's numerics: cuDNN fusion groups through the whole plugin on a CUDA
device give eager's results. Every test that runs a model on the GPU needs a CUDA
GPU and the `cuda` extra, and skips without them; scripts/gpu_test.sh runs this
tier on a GPU machine.

For a convolution whose result is not channels_last, cuDNN 9's runtime fusion
engines take a per-channel bias and one relu, tanh or sigmoid, or an epilogue that
ends in a reduction, and no prologue, no operand of the result's size and no other
epilogue (group_rules.py's _check_conv_layout, which the partitioner applies). Two
tests pin that NCHW rule: what it fuses, and what it leaves with ATen and why.

The last test runs on any machine: a channels_last group's partition through the
CPU simulation of the backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from gpu_models import (
    CASES,
    CONV_CASES,
    DTYPES,
    ConvAct,
    ConvResidual,
    assert_close,
    check_pattern,
    cudnn_groups,
    fused_run,
    images,
    on_gpu,
    requires_gpu,
)

import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.backends.cudnn.group_rules import (
    NCHW_EPILOGUE,
    NCHW_FULL_SIZE_OPERAND,
    NCHW_PROLOGUE,
)
from torch_graphfuse.backends.cudnn.partition import LONE_ANCHOR
from torch_graphfuse.backends.cudnn.plans.compiler import AUTOTUNE_ENV
from torch_graphfuse.fusion.rewrite import group_kinds
from torch_graphfuse.testing import cudnn_on_cpu, runner


@requires_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_pattern_matches_eager(case: str, dtype: torch.dtype, fresh_runtime: Path) -> None:
    make, make_inputs = CASES[case]
    check_pattern(make, make_inputs, dtype, channels_last=case in CONV_CASES)


# -- cuDNN's rule for convolutions that are not channels_last ------------------------------------


@requires_gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", ["conv_relu", "conv_tanh", "conv_sigmoid", "conv_relu_sum"])
def test_nchw_conv_fuses_bias_and_one_relu_tanh_or_sigmoid_or_a_final_reduction(
        case: str, dtype: torch.dtype, fresh_runtime: Path) -> None:
    """What cuDNN fuses with an NCHW convolution (group_rules.NCHW_ACTIVATIONS and the
    reduction that lifts the rule) fuses whole and gives eager's result."""
    make, make_inputs = CASES[case]
    check_pattern(make, make_inputs, dtype, channels_last=False)


# case -> (the region the report leaves unfused, and why), besides the lone convolution.
NCHW_REFUSALS = {
    "conv_gelu_erf": ("gelu", NCHW_EPILOGUE),
    "conv_residual": ("add, relu", NCHW_FULL_SIZE_OPERAND),
    "bn_relu_conv": ("relu", NCHW_PROLOGUE),
}


@requires_gpu
@pytest.mark.parametrize("case", sorted(NCHW_REFUSALS))
def test_nchw_conv_with_more_than_bias_and_activation_stays_with_aten(
        case: str, fresh_runtime: Path) -> None:
    """An NCHW convolution with another epilogue, a residual operand or a
    prologue forms no cuDNN group (the convolution alone stays with ATen, which
    calls cuDNN for it): the report says why, and the model gives eager's
    result. One half type is enough: the partition is the same in float16 and
    bfloat16 (in float32 a prologue is refused for its intermediate type first)."""
    torch.manual_seed(0)
    make, make_inputs = CASES[case]
    model, inputs = on_gpu(make(), make_inputs(), torch.float16)
    with torch.no_grad():
        expected = model(*inputs)
    out, graph = fused_run(model, inputs)
    assert cudnn_groups(graph) == [], graph
    report = torch_graphfuse.last_report()
    assert report is not None
    assert report.rejected == [("_convolution", LONE_ANCHOR), NCHW_REFUSALS[case]]
    assert runtime.stats()["executions"] == 0
    assert_close(out, expected, torch.float16)


@requires_gpu
@pytest.mark.parametrize("case", ["conv_relu", "linear_gelu_erf"])
def test_fp32_matches_eager_fused_or_not(case: str, fresh_runtime: Path) -> None:
    """fp32 runs fused where cuDNN takes it and unfused elsewhere; either way eager's result."""
    torch.manual_seed(0)
    make, make_inputs = CASES[case]
    model, inputs = on_gpu(make(), make_inputs(), torch.float32,
                           channels_last=case in CONV_CASES)
    with torch.no_grad():
        expected = model(*inputs)
    out, _ = fused_run(model, inputs)
    assert_close(out, expected, torch.float32)


@requires_gpu
def test_autotuned_plans_match_eager(fresh_runtime: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(AUTOTUNE_ENV, "1")
    check_pattern(*CASES["conv_residual"], torch.float16, channels_last=True)


@requires_gpu
def test_run_on_a_side_stream_matches_eager(fresh_runtime: Path) -> None:
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvAct("relu"), images(), torch.float16, channels_last=True)
    module = runner.freeze(model, inputs)
    with torch.no_grad():
        expected = model(*inputs)
        with torch_graphfuse.fuser(True):
            for _ in range(2):
                module(*inputs)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                out = module(*inputs)
            torch.cuda.current_stream().wait_stream(stream)
    assert runtime.stats()["executions"] >= 1
    assert_close(out, expected, torch.float16)


@requires_gpu
@pytest.mark.parametrize(("act", "dtype"), [("relu", torch.float16), ("relu", torch.float32),
                                            ("clamp", torch.float16)], ids=str)
def test_nan_and_infinities_after_fused_runs_give_eagers(act: str, dtype: torch.dtype,
                                                        fresh_runtime: Path) -> None:
    """relu and clamp map on inputs assumed finite. Where a probe can settle it (a 16-bit
    relu output) the runtime probes each plan once, and one that keeps NaN and infinities
    runs such inputs fused with no host read; any other group sends them unfused (the
    executor declines, or all_finite's flag). Either way the result is eager's, NaN and
    infinities included."""
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvAct(act), images(), dtype, channels_last=True)
    special = inputs[0].clone()
    special[0, 0, 3, 3] = float("nan")
    special[1, 5, 7, 7] = float("inf")
    special[2, 9, 11, 11] = float("-inf")
    module = runner.freeze(model, inputs)
    with torch.no_grad():
        expected = model(special)
        with torch_graphfuse.fuser(True):
            for _ in range(3):
                module(*inputs)
            out = module(special)
    stats = runtime.stats()
    assert stats["executions"] >= 1 and stats["failures"] == 0, stats
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.isinf(), expected.isinf())
    assert torch.equal(out[out.isinf()], expected[expected.isinf()])
    finite = expected.isfinite()
    assert_close(out[finite], expected[finite], dtype)


# -- on any machine ------------------------------------------------------------------------------


def test_channels_last_conv_residual_add_relu_is_one_group_in_the_cpu_simulation(
        fresh_runtime: Path) -> None:
    """The partition the channels_last GPU tests rely on, checked without a GPU:
    cudnn_on_cpu.on_cpu() has the cuDNN partitioner take CPU graphs and runs the
    groups through the FusionGroup kernel with the reference interpreter."""
    torch.manual_seed(0)
    model = ConvResidual().eval().to(memory_format=torch.channels_last)
    inputs = [x.contiguous(memory_format=torch.channels_last) for x in images()]
    with torch.no_grad():
        expected = model(*inputs)
    with cudnn_on_cpu.on_cpu():
        _, out, graph = runner.fused(model, inputs)
    (group,) = cudnn_groups(graph)
    assert group_kinds(group) == ["aten::_convolution", "aten::add", "aten::relu"]
    assert runner.unfused_kinds(graph) == []
    stats = runtime.stats()
    assert stats["executions"] >= 1 and stats["failures"] == 0, stats
    assert_close(out, expected, torch.float32)
