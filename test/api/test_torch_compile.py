"""torch.compile(model, backend="graphfuse"): inference graphs run traced, frozen and fused,
with eager's results; training graphs and graphs the backend cannot take run eager."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from fusion_check import assert_matches
from setuptools.config.pyprojecttoml import read_configuration
from torch import nn

import torch_graphfuse
from torch_graphfuse import dynamo_backend
from torch_graphfuse.testing import fuzz, runner

ROOT = Path(__file__).resolve().parents[2]
FUZZ_CASES = 24


@pytest.fixture(autouse=True)
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    dynamo_backend.reset_stats()
    yield
    torch._dynamo.reset()


@pytest.fixture
def logged(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """The backend's log lines on (PYTORCH_JIT_LOG_LEVEL=dynamo_backend) inside the test."""
    previous = torch._C._jit_get_logging_option()
    torch._C._jit_set_logging_option("dynamo_backend")
    try:
        yield capsys
    finally:
        torch._C._jit_set_logging_option(previous)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.Tanh()).eval()


def conv_bn_relu() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()


def fusion_groups() -> int:
    return sum(len(runner.fusion_groups(g)) for g in dynamo_backend.frozen_graphs())


def stats(**expected: int) -> dict[str, int]:
    """The backend's counters named in `expected`."""
    return {key: dynamo_backend.stats()[key] for key in expected}


def test_backend_resolves_by_name() -> None:
    assert "graphfuse" in torch._dynamo.list_backends()
    assert torch._dynamo.lookup_backend("graphfuse") is dynamo_backend.graphfuse


ENTRY_POINT_SCRIPT = """
import sys, torch
imported = "torch_graphfuse" in sys.modules
m = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU()), backend="graphfuse")
with torch.no_grad():
    m(torch.randn(2, 8))
from torch_graphfuse import dynamo_backend
print(imported, dynamo_backend.stats()["frozen"])
"""


def test_entry_point_resolves_before_import(tmp_path: Path) -> None:
    """pyproject.toml's entry point, in an installed package's metadata (a dist-info on
    the path stands in), makes backend="graphfuse" load torch_graphfuse by name."""
    project = read_configuration(ROOT / "pyproject.toml", expand=False)["project"]
    group = dynamo_backend.ENTRY_POINT_GROUP
    target = project["entry-points"][group][dynamo_backend.BACKEND]
    info = tmp_path / "graphfuse_entry_point-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: graphfuse-entry-point\n"
                                   "Version: 0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\ngraphfuse = {target}\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", ENTRY_POINT_SCRIPT], env=env, text=True,
                          capture_output=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "1"]


@pytest.mark.parametrize("mode", [torch.no_grad, torch.inference_mode])
def test_inference_fuses_and_matches_eager(mode: type) -> None:
    model, x = conv_bn_relu(), torch.randn(2, 3, 10, 10)
    compiled = torch.compile(model, backend="graphfuse")
    with mode():
        outs = [compiled(x) for _ in range(3)]
        ref = model(x)
    for out in outs:
        assert_matches(out, ref, "fp32")
    assert fusion_groups() >= 1
    assert stats(graphs=1, frozen=1, eager=0) == {"graphs": 1, "frozen": 1, "eager": 0}


def test_each_side_of_a_graph_break_fuses() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = F.gelu(self.a(x))
            torch._dynamo.graph_break()
            return torch.tanh(self.b(y))

    model, x = Broken().eval(), torch.randn(4, 16)
    with torch.no_grad():
        out = torch.compile(model, backend="graphfuse")(x)
        assert_matches(out, model(x), "fp32")
    graphs = dynamo_backend.frozen_graphs()
    assert len(graphs) == 2 and all(runner.fusion_groups(g) for g in graphs)
    assert stats(graphs=2, frozen=2) == {"graphs": 2, "frozen": 2}


def test_new_input_shapes_recompile_dynamic_and_freeze_per_shape() -> None:
    model = mlp()
    compiled = torch.compile(model, backend="graphfuse")
    with torch.no_grad():
        for batch in (2, 5, 7, 5):
            x = torch.randn(batch, 16)
            assert_matches(compiled(x), model(x), "fp32")
    # batch 5 recompiles the frame with a dynamic batch size; that graph freezes per shape
    assert stats(graphs=2, recompiles=1, frozen=3, eager=0) == {
        "graphs": 2, "recompiles": 1, "frozen": 3, "eager": 0}
    assert fusion_groups() >= 3


def test_dynamic_true_specializes_each_shape() -> None:
    model = mlp()
    compiled = torch.compile(model, backend="graphfuse", dynamic=True)
    with torch.no_grad():
        for batch in (3, 4, 3):
            x = torch.randn(batch, 16)
            assert_matches(compiled(x), model(x), "fp32")
    assert stats(graphs=1, frozen=2) == {"graphs": 1, "frozen": 2}


def test_a_dynamic_graph_meeting_too_many_shapes_runs_eager(
        logged: pytest.CaptureFixture[str]) -> None:
    model = mlp()
    compiled = torch.compile(model, backend="graphfuse", dynamic=True)
    with torch.no_grad():
        # batch 1 is a graph of its own: Dynamo specializes sizes 0 and 1
        for batch in range(2, dynamo_backend.MAX_SHAPES + 4):
            x = torch.randn(batch, 16)
            assert_matches(compiled(x), model(x), "fp32")
    assert stats(frozen=dynamo_backend.MAX_SHAPES, eager=1) == {
        "frozen": dynamo_backend.MAX_SHAPES, "eager": 1}
    assert f"runs eager: more than {dynamo_backend.MAX_SHAPES} input shapes" in \
        logged.readouterr().err


def test_bf16_autocast() -> None:
    model, x = conv_bn_relu(), torch.randn(2, 3, 10, 10)
    compiled = torch.compile(model, backend="graphfuse")
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = compiled(x)
        out = compiled(x)
        ref = model(x)
    assert out.dtype == torch.bfloat16
    assert_matches(out, ref, "bf16")
    # Without bf16 instructions (AVX2) oneDNN has no bf16 kernels: nothing fuses.
    assert (fusion_groups() >= 1) == torch_graphfuse.onednn_info()["bf16"]


def test_training_runs_eager_with_a_log_line(logged: pytest.CaptureFixture[str]) -> None:
    model, x = mlp().train(), torch.randn(4, 16)
    out = torch.compile(model, backend="graphfuse")(x)
    out.sum().backward()
    assert out.requires_grad and model[0].weight.grad is not None
    assert stats(graphs=1, frozen=0, eager=1) == {"graphs": 1, "frozen": 0, "eager": 1}
    assert "[DUMP dynamo_backend.py] graph 0/0: runs eager: training" in logged.readouterr().err


def test_frozen_parameters_under_grad_mode_fuse() -> None:
    """Parameters that require no grad make an inference graph, grad mode on or not."""
    model, x = mlp().requires_grad_(False), torch.randn(4, 16)
    out = torch.compile(model, backend="graphfuse")(x)
    assert not out.requires_grad
    assert_matches(out, model(x), "fp32")
    assert stats(frozen=1, eager=0) == {"frozen": 1, "eager": 0}


def test_parameter_changed_after_freezing_freezes_again() -> None:
    model, x = mlp(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="graphfuse")
    with torch.no_grad():
        compiled(x)
        model[0].weight.mul_(2)  # in place
        assert_matches(compiled(x), model(x), "fp32")
        model[2].bias = nn.Parameter(torch.randn(8))  # replaced
        assert_matches(compiled(x), model(x), "fp32")
    assert stats(frozen=3, refrozen=2) == {"frozen": 3, "refrozen": 2}


def test_graph_writing_to_a_buffer_runs_eager(logged: pytest.CaptureFixture[str]) -> None:
    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(16, 8)
            self.register_buffer("calls", torch.zeros(()))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls.add_(1)
            return torch.relu(self.linear(x))

    model, x = Counting().eval(), torch.randn(4, 16)
    compiled = torch.compile(model, backend="graphfuse")
    with torch.no_grad():
        out = [compiled(x) for _ in range(2)]
    assert model.calls.item() == 2  # tracing wrote to a copy, not to the buffer
    assert_matches(out[-1], torch.relu(model.linear(x)), "fp32")
    assert stats(frozen=0, eager=1) == {"frozen": 0, "eager": 1}
    assert "writes to a parameter or buffer" in logged.readouterr().err


# -- the differential fuzzer's programs, through torch.compile ----------------------------


def traceable(program: fuzz.Program) -> fuzz.Program:
    """The program with its forward as Python source: Program.forward evaluates each op's
    compiled expression, which Dynamo would not trace into one graph."""
    scope = {"torch": torch, "F": F}
    exec(program.source(), scope)
    program.forward = types.MethodType(scope["forward"], program)  # type: ignore[method-assign]
    return program


def compiled_outcomes(case: fuzz.Case, program: fuzz.Program) -> list[fuzz.Outcome]:
    """The fuzzer's calls (the third, then two at the second shape) on fresh inputs."""
    compiled = torch.compile(traceable(program), backend="graphfuse")
    with torch.no_grad():
        return [fuzz.outcome(compiled, fuzz.make_inputs(case, call)) for _, call in case.calls()]


def test_fuzzer_programs_match_eager() -> None:
    failures, fused = [], 0
    for i in range(FUZZ_CASES):
        case = fuzz.generate(fuzz.RandomChooser(f"torch.compile:{i}"), "fp32")
        program = fuzz.build_program(case)
        reference = fuzz.reference(case, program)
        dynamo_backend.reset_stats()
        problems = fuzz.problems(case, reference, compiled_outcomes(case, program))
        fused += fusion_groups() > 0
        if problems:
            failures.append(fuzz.reproducer(case, fuzz.Result("plugin", problems=problems)))
    assert not failures, "\n\n".join(failures)
    assert fused >= FUZZ_CASES // 3
