"""The GPU tier: cuDNN fusion groups through the whole plugin on a CUDA device.

Every test that runs a model on the GPU needs a CUDA GPU and the `cuda` extra,
and skips without them; scripts/gpu_test.sh runs this tier on a GPU machine.
Each model is traced and frozen on CUDA, run with torch_graphfuse on (two
profiling runs, then fused runs) and compared with eager in the same dtype.

Convolution models run channels_last (model and inputs), as users run convnets
on a GPU: for a convolution whose result is not channels_last, cuDNN 9's
runtime fusion engines take a per-channel bias and one relu, tanh or sigmoid,
or an epilogue that ends in a reduction, and no prologue, no operand of the
result's size and no other epilogue (lower.py's _check_conv_layout, which the
partitioner applies). Two tests pin that NCHW rule: what it fuses, and what it
leaves with ATen and why.

The last tests run on any machine: a channels_last group's partition through
the CPU simulation of the backend, and the tier's script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.cudnn import plans, runtime, simulation
from torch_graphfuse.backends.cudnn.lower import (
    NCHW_EPILOGUE,
    NCHW_FULL_SIZE_OPERAND,
    NCHW_PROLOGUE,
)
from torch_graphfuse.backends.cudnn.partition import LONE_ANCHOR
from torch_graphfuse.passes.rewrite import group_kinds
from torch_graphfuse.testing import runner

ROOT = Path(__file__).resolve().parents[2]


def _cudnn_importable() -> bool:
    try:
        import cudnn  # noqa: F401
    except ImportError:
        return False
    return True


requires_gpu = pytest.mark.skipif(
    not torch.cuda.is_available() or not _cudnn_importable(),
    reason="needs a CUDA GPU and the cuda extra (scripts/gpu_test.sh)")

# Eager and cuDNN round differently (accumulation order, fused intermediates):
# tolerances relative to the output's scale, per dtype.
TOLERANCE = {torch.float16: 2e-2, torch.bfloat16: 6e-2, torch.float32: 1e-3}
DTYPES = (torch.float16, torch.bfloat16)


# -- patterns ---------------------------------------------------------------------------------


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "silu": F.silu,
    "relu6": F.relu6,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.5),
}


class ConvAct(nn.Module):
    """conv2d + bias + activation."""

    def __init__(self, act: str, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class ConvResidual(nn.Module):
    """relu(conv(x) * scale + x). Freezing folds the scale into the conv's weight
    and bias, so the group is conv + bias + residual add + relu (the CPU
    simulation test below pins that partition)."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x) * 0.5 + x)


class BnReluConv(nn.Module):
    """A frozen BatchNorm + ReLU before a conv: the relu is the conv's prologue
    (the frozen graph keeps aten::batch_norm, which has no cuDNN mapping and
    stays with ATen)."""

    def __init__(self, channels: int = 64) -> None:
        super().__init__()
        self.bn = nn.BatchNorm2d(channels)
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(torch.relu(self.bn(x)))


class ConvReduce(nn.Module):
    """conv + relu, then a final reduction to one value per channel. cuDNN
    reduces a convolution's result over its channels or over every dim but
    them (lower.REDUCIBLE): a per-image pooling over (2, 3) is neither, and the
    partitioner would leave it out of the group."""

    def __init__(self, how: str, channels: int = 64) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        if self.how == "sum":
            return y.sum(dim=(0, 2, 3), keepdim=True)
        if self.how == "mean":
            return y.mean(dim=(0, 2, 3), keepdim=True)
        return y.amax(dim=(0, 2, 3), keepdim=True)


class LinearAct(nn.Module):
    def __init__(self, act: str, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)
        self.act = ACTIVATIONS[act]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


class LinearResidual(nn.Module):
    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) + x


class LinearRowSum(nn.Module):
    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)).sum(dim=-1, keepdim=True)


class ScaledReluMatmul(nn.Module):
    """A per-column scale + bias + relu prologue on matmul's A operand."""

    def __init__(self, features: int = 256) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.rand(features) + 0.5)
        self.shift = nn.Parameter(torch.rand(features) - 0.5)
        self.weight = nn.Parameter(torch.randn(features, features) / features**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(torch.relu(x * self.scale + self.shift), self.weight)


class BmmScaleSigmoid(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.bmm(a, b) * 0.125)


def _images(batch: int = 4, channels: int = 64, size: int = 28) -> list[torch.Tensor]:
    return [torch.randn(batch, channels, size, size)]


def _rows(batch: int = 4, seq: int = 32, features: int = 256) -> list[torch.Tensor]:
    return [torch.randn(batch, seq, features)]


def _bmm_inputs() -> list[torch.Tensor]:
    return [torch.randn(8, 64, 128), torch.randn(8, 128, 96)]


Case = tuple[Callable[[], nn.Module], Callable[[], list[torch.Tensor]]]
CASES: dict[str, Case] = {
    **{f"conv_{act}": ((lambda act=act: ConvAct(act)), _images) for act in ACTIVATIONS},
    "conv_residual": (ConvResidual, _images),
    "bn_relu_conv": (BnReluConv, _images),
    **{f"conv_relu_{how}": ((lambda how=how: ConvReduce(how)), _images)
       for how in ("sum", "mean", "max")},
    **{f"linear_{act}": ((lambda act=act: LinearAct(act)), _rows)
       for act in ("relu", "gelu_erf", "gelu_tanh", "silu")},
    "linear_residual": (LinearResidual, _rows),
    "linear_relu_row_sum": (LinearRowSum, _rows),
    "scale_bias_relu_matmul": (ScaledReluMatmul, _rows),
    "bmm_scale_sigmoid": (BmmScaleSigmoid, _bmm_inputs),
}
# The convolution models: run channels_last, as users run convnets.
CONV_CASES = frozenset(name for name, (_, inputs) in CASES.items() if inputs is _images)


# -- running through the plugin -----------------------------------------------------------------


@pytest.fixture
def fresh_runtime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty plan cache (memory and disk) and zeroed counts."""
    cache = tmp_path / "plans"
    monkeypatch.setenv(plans.CACHE_DIR_ENV, str(cache))
    runtime.reset()
    yield cache
    runtime.reset()


def on_gpu(model: nn.Module, inputs: list[torch.Tensor], dtype: torch.dtype,
           channels_last: bool = False) -> tuple[nn.Module, list[torch.Tensor]]:
    model = model.eval().to("cuda", dtype)
    inputs = [x.to("cuda", dtype) for x in inputs]
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        inputs = [x.contiguous(memory_format=torch.channels_last) for x in inputs]
    return model, inputs


def fused_run(model: nn.Module, inputs: list[torch.Tensor], runs: int = 3
              ) -> tuple[torch.Tensor, torch._C.Graph]:
    """Trace, freeze, run `runs` times with torch_graphfuse on; the last output and graph."""
    module = runner.freeze(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(True):
        for _ in range(runs):
            out = module(*inputs)
        graph = torch.jit.last_executed_optimized_graph()
    torch.cuda.synchronize()
    return out, graph


def cudnn_groups(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [g for g in runner.fusion_groups(graph)
            if g.hasAttribute("backend") and g.s("backend") == "cudnn"]


def assert_close(out: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    assert out.shape == expected.shape and out.dtype == expected.dtype
    scale = expected.float().abs().max().item() + 1.0
    diff = (out.float() - expected.float()).abs().max().item()
    assert diff <= TOLERANCE[dtype] * scale, f"max abs diff {diff} at scale {scale}"


def check_pattern(make: Callable[[], nn.Module], make_inputs: Callable[[], list[torch.Tensor]],
                  dtype: torch.dtype, channels_last: bool) -> None:
    """The model fuses whole (nothing the partitioner considered is left out),
    runs its cuDNN groups without failure and gives eager's result."""
    torch.manual_seed(0)
    model, inputs = on_gpu(make(), make_inputs(), dtype, channels_last)
    with torch.no_grad():
        expected = model(*inputs)
    out, graph = fused_run(model, inputs)
    assert cudnn_groups(graph), f"no cuDNN fusion group in\n{graph}"
    report = torch_graphfuse.last_report()
    assert report is not None and report.rejected == [], report
    stats = runtime.stats()
    assert stats["executions"] >= 1 and stats["failures"] == 0, stats
    assert_close(out, expected, dtype)


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
    """What cuDNN fuses with an NCHW convolution (lower.NCHW_ACTIVATIONS and the
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


# -- plans and their caches ----------------------------------------------------------------------


@requires_gpu
def test_second_module_of_the_same_shapes_reuses_the_plans(fresh_runtime: Path) -> None:
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvResidual(), _images(), torch.float16, channels_last=True)
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
    model, inputs = on_gpu(ConvAct("gelu_erf"), _images(), torch.float16, channels_last=True)
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
import test_cudnn_gpu as tier
torch.manual_seed(0)
model, inputs = tier.on_gpu(tier.ConvResidual(), tier._images(), torch.float16,
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
        env = {**os.environ, plans.CACHE_DIR_ENV: str(fresh_runtime)}
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


@requires_gpu
def test_autotuned_plans_match_eager(fresh_runtime: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(plans.AUTOTUNE_ENV, "1")
    check_pattern(*CASES["conv_residual"], torch.float16, channels_last=True)


@requires_gpu
def test_run_on_a_side_stream_matches_eager(fresh_runtime: Path) -> None:
    torch.manual_seed(0)
    model, inputs = on_gpu(ConvAct("relu"), _images(), torch.float16, channels_last=True)
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


# -- failures --------------------------------------------------------------------------------------


def _warned_once_and_matched_eager(model: nn.Module, inputs: list[torch.Tensor]) -> None:
    with torch.no_grad():
        expected = model(*inputs)
    module = runner.freeze(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(True):
        for _ in range(2):
            module(*inputs)
        with pytest.warns(UserWarning, match="runs unfused"):
            out = module(*inputs)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            again = module(*inputs)
    assert_close(out, expected, torch.float16)
    assert torch.equal(again, out)
    assert runtime.stats()["failures"] >= 1


@requires_gpu
def test_executor_failure_runs_the_group_unfused_with_one_warning(fresh_runtime: Path) -> None:
    def broken(desc: str) -> runtime.Executor:
        def run(inputs: Any) -> list[torch.Tensor]:
            raise RuntimeError("forced cuDNN failure")
        return run

    torch.manual_seed(0)
    with runtime.executor_factory(broken):
        _warned_once_and_matched_eager(*on_gpu(ConvResidual(), _images(), torch.float16,
                                               channels_last=True))


@requires_gpu
def test_plan_cudnn_refuses_runs_the_group_unfused_with_one_warning(
        fresh_runtime: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import cudnn

    def refuse(self: Any, graph: Any, handle: Any, autotune: bool) -> Any:
        raise cudnn.cudnnGraphNotSupportedError("forced: no engine supports this graph")

    monkeypatch.setattr(plans.CudnnCompiler, "build", refuse)
    torch.manual_seed(0)
    _warned_once_and_matched_eager(*on_gpu(ConvAct("gelu_erf"), _images(), torch.float16,
                                           channels_last=True))
    assert runtime.stats()["plans_built"] == 0


# -- on any machine ------------------------------------------------------------------------------


def test_channels_last_conv_residual_add_relu_is_one_group_in_the_cpu_simulation(
        fresh_runtime: Path) -> None:
    """The partition the channels_last GPU tests rely on, checked without a GPU:
    simulation.on_cpu() has the cuDNN partitioner take CPU graphs and runs the
    groups through the FusionGroup kernel with the reference interpreter."""
    torch.manual_seed(0)
    model = ConvResidual().eval().to(memory_format=torch.channels_last)
    inputs = [x.contiguous(memory_format=torch.channels_last) for x in _images()]
    with torch.no_grad():
        expected = model(*inputs)
    with simulation.on_cpu():
        _, out, graph = runner.fused(model, inputs)
    (group,) = cudnn_groups(graph)
    assert group_kinds(group) == ["aten::_convolution", "aten::add", "aten::relu"]
    assert runner.unfused_kinds(graph) == []
    stats = runtime.stats()
    assert stats["executions"] >= 1 and stats["failures"] == 0, stats
    assert_close(out, expected, torch.float32)
