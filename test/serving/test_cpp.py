"""A saved model in a libtorch program (examples/cpp, built against the wheel's libtorch),
under the conditions Triton's PyTorch backend runs it in: InferenceMode or NoGradGuard, the
graph executor's optimization on or off, threads sharing one module, sizes it was not
exported for, and an older ISA."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_graphfuse
from torch_graphfuse.backends.onednn import library
from torch_graphfuse.serving.saved_groups import RUN_SAVED
from torch_graphfuse.testing import cpp_examples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion_check  # noqa: E402
from saved_models import MODELS, Inputs, eager  # noqa: E402

EMULATED_AVX2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}


@pytest.fixture(scope="session")
def programs() -> Path:
    """examples/cpp built into build/cpp (incrementally: once per checkout)."""
    if cpp_examples.missing():
        pytest.skip(cpp_examples.missing())
    return cpp_examples.build()


def check_saved(programs: Path, tmp_path: Path, module: torch.jit.ScriptModule,
                calls: list[Inputs], *flags: str, env: dict[str, str] | None = None) -> dict:
    model, calls_path, out = tmp_path / "model.pt", tmp_path / "calls.pt", tmp_path / "out.pt"
    torch.jit.save(module, str(model))
    torch.save([list(call) for call in calls], str(calls_path))
    done = subprocess.run([str(programs / "check_saved"), str(model), str(calls_path), str(out),
                           *flags], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return {**torch.load(str(out), weights_only=False), "stderr": done.stderr}



def matches_eager(result: dict, model: torch.nn.Module, calls: list[Inputs]) -> None:
    assert len(result["outputs"]) == len(calls)
    for out, call in zip(result["outputs"], calls, strict=True):
        fusion_check.assert_matches(out, eager(model, call), "fp32")


@pytest.mark.parametrize("name", MODELS)
def test_a_saved_model_runs_fused_in_a_libtorch_program(programs: Path, tmp_path: Path,
                                                        name: str) -> None:
    model, inputs, _ = MODELS[name]()
    result = check_saved(programs, tmp_path, torch_graphfuse.export(model, inputs), [inputs])
    matches_eager(result, model, [inputs])
    assert not result["python_mapped"]
    assert result["stats"]["fused_runs"] > 0
    assert result["stats"]["fallbacks"] == 0, result["stats"]


@pytest.mark.parametrize("flags", [(), ("--no-grad",), ("--no-optimize",),
                                   ("--no-grad", "--no-optimize"), ("--no-jit-profiling",),
                                   ("--no-jit-executor",)])
@pytest.mark.parametrize("name", ["mlp", "bert", "t5"])
def test_threads_sharing_one_module_get_one_threads_bits_at_any_size(
        programs: Path, tmp_path: Path, name: str, flags: tuple[str, ...]) -> None:
    model, inputs, others = MODELS[name]()
    calls = [inputs, *others]
    result = check_saved(programs, tmp_path, torch_graphfuse.export(model, inputs), calls,
                         "--threads", "8", *flags)
    matches_eager(result, model, calls)
    assert result["thread_mismatches"] == 0
    assert result["stats"]["fused_runs"] > 0


@pytest.mark.parametrize("name", ["mlp", "convnet", "int8_pt2e"])
def test_a_saved_model_runs_on_emulated_avx2(programs: Path, tmp_path: Path, name: str) -> None:
    model, inputs, others = MODELS[name]()
    calls = [inputs, *others]
    result = check_saved(programs, tmp_path, torch_graphfuse.export(model, inputs), calls,
                         env=EMULATED_AVX2)
    matches_eager(result, model, calls)
    assert result["stats"]["fused_runs"] > 0


def with_states_changed(module: torch.jit.ScriptModule, **change: str) -> torch.jit.ScriptModule:
    """The module with every saved group's state changed: a file another process made."""
    graph = module.graph
    for node in graph.findAllNodes(RUN_SAVED, True):
        state = {**node.inputsAt(0).toIValue().state(), **change}
        with graph.insert_point_guard(node):
            node.replaceInput(0, graph.insertConstant(torch.classes.graphfuse.SavedGroup(state)))
    return module


def test_a_file_made_by_another_onednn_runs_its_fallback_code_with_one_warning(
        programs: Path, tmp_path: Path) -> None:
    model, inputs, _ = MODELS["bert"]()
    exported = with_states_changed(torch_graphfuse.export(model, inputs), onednn="9.9.9")
    result = check_saved(programs, tmp_path, exported, [inputs])
    matches_eager(result, model, [inputs])
    # Its oneDNN groups; its size-constant groups need no oneDNN and still run.
    assert result["stats"]["compiles"] == 0 and result["stats"]["fallbacks"] > 0
    assert result["stderr"].count("cannot run fused here") == 1


def test_a_group_relying_on_cpu_features_this_cpu_lacks_runs_its_fallback_code(
        programs: Path, tmp_path: Path) -> None:
    model, inputs, _ = MODELS["mlp"]()
    # A feature no CPU has, so that the test means the same on every CPU.
    exported = with_states_changed(torch_graphfuse.export(model, inputs), cpu_needs="avx1024")
    result = check_saved(programs, tmp_path, exported, [inputs])
    matches_eager(result, model, [inputs])
    assert result["stats"]["compiles"] == 0 and result["stats"]["fallbacks"] > 0
    assert result["stderr"].count("cannot run fused here") == 1
    assert "rely on avx1024 instructions" in result["stderr"]


@pytest.mark.skipif(not (library.isa() and library.isa().vnni),
                    reason="int8 products are fused exactly only on a CPU with VNNI")
def test_int8_products_fused_with_vnni_run_their_fallback_code_on_a_cpu_without_it(
        programs: Path, tmp_path: Path) -> None:
    # vpmaddubsw sums each pair of u8 x s8 products in int16: exported where VNNI maps
    # them, served on AVX2, they would saturate (results 17 quantization steps off).
    model, inputs, others = MODELS["int8_pt2e"]()
    exported = torch_graphfuse.export(model, inputs)
    needs = [node.inputsAt(0).toIValue().state().get("cpu_needs")
             for node in exported.graph.findAllNodes(RUN_SAVED, True)]
    assert "vnni" in needs
    calls = [inputs, *others]
    result = check_saved(programs, tmp_path, exported, calls, env=EMULATED_AVX2)
    matches_eager(result, model, calls)
    assert "its results rely on vnni instructions" in result["stderr"]
    result = check_saved(programs, tmp_path, exported, calls)
    matches_eager(result, model, calls)
    assert "cannot run fused here" not in result["stderr"]


def test_a_setting_the_runtime_does_not_take_is_a_clear_error(programs: Path,
                                                             tmp_path: Path) -> None:
    model, inputs, _ = MODELS["mlp"]()
    exported = torch_graphfuse.export(model, inputs)
    torch.jit.save(exported, str(tmp_path / "model.pt"))
    torch.save([list(inputs)], str(tmp_path / "calls.pt"))
    done = subprocess.run([str(programs / "check_saved"), str(tmp_path / "model.pt"),
                           str(tmp_path / "calls.pt"), str(tmp_path / "out.pt")],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TORCH_GRAPHFUSE_POOL_MB": "lots"})
    assert done.returncode != 0
    assert "TORCH_GRAPHFUSE_POOL_MB='lots': expected an integer from 0 on" in done.stderr


def test_a_file_that_does_not_load_is_an_error_not_a_crash(programs: Path,
                                                           tmp_path: Path) -> None:
    model, inputs, _ = MODELS["mlp"]()
    torch.jit.save(torch_graphfuse.export(model, inputs), str(tmp_path / "model.pt"))
    data = (tmp_path / "model.pt").read_bytes()
    (tmp_path / "model.pt").write_bytes(data[:len(data) // 2])
    torch.save([list(inputs)], str(tmp_path / "calls.pt"))
    done = subprocess.run([str(programs / "check_saved"), str(tmp_path / "model.pt"),
                           str(tmp_path / "calls.pt"), str(tmp_path / "out.pt")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert "check_saved:" in done.stderr
