"""The cuDNN backend end to end on CPU: models partitioned by the cuDNN
partitioner run through the real FusionGroup kernel with the reference
interpreter as executor (testing/cudnn_on_cpu.py), and give eager's
results; guards and failures fall back to the unfused subgraph."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, run
from torch import nn

import torch_graphfuse
from torch_graphfuse.backends.cudnn import runtime
from torch_graphfuse.testing import cudnn_on_cpu, models, runner, transformer


@pytest.fixture(autouse=True)
def simulated() -> Iterator[None]:
    with cudnn_on_cpu.on_cpu():
        yield


def backends(graph: torch._C.Graph) -> list[str]:
    return [g.s("backend") for g in runner.fusion_groups(graph)]


class ConvBiasRelu(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(8, 16, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_conv_bias_relu_runs_as_one_cudnn_group(dtype: str) -> None:
    model, x = ConvBiasRelu(), torch.randn(2, 8, 10, 10)
    _, out, graph = fuse(model, [x], dtype)
    assert backends(graph) == ["cudnn"]
    assert_matches(out, eager(model, [x], dtype), dtype)
    assert torch_graphfuse.kernel_stats()["fused_runs"] > 0


def test_channels_last_conv_keeps_eager_strides() -> None:
    model = ConvBiasRelu().to(memory_format=torch.channels_last)
    x = torch.randn(2, 8, 10, 10).to(memory_format=torch.channels_last)
    _, out, graph = fuse(model, [x])
    assert backends(graph) == ["cudnn"]
    ref = eager(model, [x])
    assert_matches(out, ref, "fp32")
    assert out.stride() == ref.stride()


def test_residual_block_matches_eager() -> None:
    model, x = models.BasicBlock(16, 16), torch.randn(2, 16, 8, 8)
    _, out, graph = fuse(model, [x])
    assert backends(graph) and set(backends(graph)) == {"cudnn"}
    assert_matches(out, eager(model, [x]), "fp32")


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_mlp_linear_gelu_matches_eager(dtype: str) -> None:
    model, x = transformer.mlp((32, 64, 64, 32)), torch.randn(4, 7, 32)
    _, out, graph = fuse(model, [x], dtype)
    assert backends(graph) and set(backends(graph)) == {"cudnn"}
    assert_matches(out, eager(model, [x], dtype), dtype)


def test_bert_layer_matches_eager() -> None:
    model = transformer.bert_layer(hidden=64, heads=4, intermediate=128)
    inputs = transformer.bert_inputs(2, 16, hidden=64)
    _, out, graph = fuse(model, inputs)
    assert "cudnn" in backends(graph)
    assert_matches(out, eager(model, inputs), "fp32")


def test_other_strides_run_unfused() -> None:
    # The guard refuses them: the first call at that spec profiles the subgraph unfused.
    model, x = ConvBiasRelu(), torch.randn(2, 8, 10, 10)
    module, _, graph = fuse(model, [x])
    assert backends(graph) == ["cudnn"]
    torch_graphfuse.reset_kernel_stats()
    y = x.to(memory_format=torch.channels_last)
    assert_matches(run(module, [y]), eager(model, [y]), "fp32")
    stats = torch_graphfuse.kernel_stats()
    assert stats["respecialized_runs"] == 1 and stats["fused_runs"] == 0


def test_executor_failure_runs_unfused_with_one_warning() -> None:
    def broken(desc: str) -> runtime.Executor:
        def execute(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
            raise RuntimeError("cuDNN refused the plan (simulated)")
        return execute

    model, x = ConvBiasRelu(), torch.randn(2, 8, 10, 10)
    with runtime.executor_factory(broken):
        module = runner.freeze(model.eval(), [x])
        with pytest.warns(UserWarning, match="runs unfused: .*simulated") as caught:
            outs = [run(module, [x]) for _ in range(4)]
    assert sum("runs unfused" in str(w.message) for w in caught) == 1
    for out in outs:
        assert_matches(out, eager(model, [x]), "fp32")
    assert torch_graphfuse.kernel_stats()["fallbacks"] >= 1


@pytest.mark.parametrize(("dtype", "by_executor"), [("bf16", True), ("fp32", False)])
def test_relu_group_takes_its_input_where_a_probe_can_clear_its_plans(
        dtype: str, by_executor: bool) -> None:
    """A 16-bit relu output: the group takes x itself, which its executor checks only for
    plans a probe does not clear (no host read per call where one does). A float one:
    cuDNN's relu clips +inf to FLT_MAX there, which no probe clears, so x is scanned once
    per call by all_finite, a scan every group relying on x shares."""
    model, x = ConvBiasRelu(), torch.randn(2, 8, 10, 10)
    _, _, graph = fuse(model, [x], dtype)
    group, = runner.fusion_groups(graph)
    x_input = list(graph.inputs())[1]  # after the module
    assert group.s("backend") == "cudnn" and getattr(group, "is")("finite_inputs") == [1]
    assert group.hasAttribute("finite_by_executor") is by_executor
    scans = [n for n in graph.nodes() if n.kind() == "graphfuse::all_finite"]
    assert len(scans) == (0 if by_executor else 1)
    last = list(group.inputs())[-1]
    assert last is (x_input if by_executor else scans[0].output())


@pytest.mark.parametrize(("dtype", "by_executor"), [("bf16", True), ("fp32", False)])
def test_input_assumed_finite_that_is_not_runs_unfused_without_a_warning(
        dtype: str, by_executor: bool, fresh_runtime: Path) -> None:
    """all_finite's flag, or the executor declining the run (the simulation's does, as
    cuDNN's does with a plan no probe cleared): the kernel runs it unfused, quietly."""
    model, x = ConvBiasRelu(), torch.randn(2, 8, 10, 10)
    bad = x.clone()
    bad[0, 0, 3, 3] = float("nan")
    bad[1, 2, 5, 5] = float("inf")
    module, _, _ = fuse(model, [x], dtype)
    torch_graphfuse.reset_kernel_stats()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run(module, [bad], dtype)
        again = run(module, [x], dtype)
    assert_matches(out, eager(model, [bad], dtype), dtype)
    assert out[0, :, 3, 3].isnan().all()
    assert_matches(again, eager(model, [x], dtype), dtype)
    stats = torch_graphfuse.kernel_stats()
    assert (stats["nonfinite_fallbacks"], stats["fused_runs"]) == (1, 1)
    assert runtime.stats()["declined"] == (1 if by_executor else 0)


class OuterRelu(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu_(torch.mm(x.transpose(-1, -2), x))


def test_float_relu_of_an_infinity_after_profiling_is_eagers_not_flt_max(
        fresh_runtime: Path) -> None:
    """cuDNN's relu computing in float clips +inf to FLT_MAX (its default upper clip);
    eager's relu(inf) is inf. The group maps relu on inputs assumed finite, so an
    infinity that arrives after profiling sends the run unfused. Found by the fuzzer
    (seed 2771, graph 1256) while the simulation ran such inputs fused."""
    model, x = OuterRelu(), torch.randn(1, 16)
    module = runner.freeze(model.eval(), [x])
    for _ in range(3):
        run(module, [x])
    bad = x.clone()
    bad[0, 6] = math.inf
    out = run(module, [bad])
    assert torch_graphfuse.kernel_stats()["fused_runs"] >= 1
    assert torch.equal(out.isinf(), eager(model, [bad]).isinf())
    assert out.max() == math.inf
    assert_matches(out, eager(model, [bad]), "fp32")
