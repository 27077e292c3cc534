"""torch_graphfuse.export: a fused model saved with torch.jit.save runs fused wherever the
runtime library is loaded, with results equal to eager's, at the exported sizes and others."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_graphfuse
from torch_graphfuse.group_schema import KIND
from torch_graphfuse.serving.saved_groups import RUN_SAVED
from torch_graphfuse.testing import cudnn_on_cpu, runner
from torch_graphfuse.testing.runner import precision

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import fusion_check  # noqa: E402
from saved_models import MODELS, Inputs, convnet, eager, mlp  # noqa: E402

LOADER = Path(__file__).with_name("load_saved.py")


def run_saved(tmp_path: Path, cases: dict[str, tuple[torch.jit.ScriptModule, list[Inputs]]],
              env: dict[str, str] | None = None) -> dict[str, dict]:
    """Each case's model saved, then loaded and called in a process that loads only the
    runtime library; {case: {"outputs", "stats", "imported"}}."""
    paths = []
    for name, (module, calls) in cases.items():
        model_path = tmp_path / f"{name}.pt"
        torch.jit.save(module, str(model_path))
        case_path = tmp_path / f"{name}.case"
        torch.save({"model": str(model_path), "calls": calls}, str(case_path))
        paths.append(str(case_path))
    done = subprocess.run([sys.executable, str(LOADER), torch_graphfuse.runtime_library(), *paths],
                          capture_output=True, text=True, env={**os.environ, **(env or {})},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: torch.load(path + ".out") for name, path in zip(cases, paths, strict=True)}



@pytest.mark.parametrize("name", MODELS)
def test_a_saved_model_runs_fused_where_only_the_runtime_library_is_loaded(
        tmp_path: Path, name: str) -> None:
    model, inputs, _ = MODELS[name]()
    exported = torch_graphfuse.export(model, inputs)
    result = run_saved(tmp_path, {name: (exported, [inputs, inputs])})[name]
    assert not result["imported"]
    assert result["stats"]["fused_runs"] > 0
    assert result["stats"]["fallbacks"] == 0, result["stats"]
    for out in result["outputs"]:
        fusion_check.assert_matches(out, eager(model, inputs), "fp32")


@pytest.mark.parametrize("name", ["mlp", "convnet", "bert", "gpt2", "t5"])
def test_a_saved_model_matches_eager_at_sizes_it_was_not_exported_for(
        tmp_path: Path, name: str) -> None:
    model, inputs, others = MODELS[name]()
    exported = torch_graphfuse.export(model, inputs)
    calls = [inputs, *others, *others]
    result = run_saved(tmp_path, {name: (exported, calls)})[name]
    for out, call in zip(result["outputs"], calls, strict=True):
        fusion_check.assert_matches(out, eager(model, call), "fp32")
    assert result["stats"]["fused_runs"] > 0


def test_each_exported_spec_runs_fused_from_its_first_call(tmp_path: Path) -> None:
    model, _, _ = mlp()
    batches = [(torch.randn(b, 16),) for b in (4, 8, 32)]
    exported = torch_graphfuse.export(model, batches)
    # Where other specs run unfused at first sight (TORCH_GRAPHFUSE_COMPILE_AT=2).
    result = run_saved(tmp_path, {"mlp": (exported, [batches[1], batches[2]])},
                       env={"TORCH_GRAPHFUSE_COMPILE_AT": "2"})["mlp"]
    assert result["stats"]["fallbacks"] == 0, result["stats"]
    assert result["stats"]["fused_runs"] == 4
    other = (torch.randn(5, 16),)
    result = run_saved(tmp_path, {"mlp": (exported, [other, other])},
                       env={"TORCH_GRAPHFUSE_COMPILE_AT": "2"})["mlp"]
    assert result["stats"]["unseen_spec_runs"] == 2
    for out in result["outputs"]:
        fusion_check.assert_matches(out, eager(model, other), "fp32")


def test_a_model_exported_under_bf16_autocast_runs_its_casts_without_autocast(
        tmp_path: Path) -> None:
    model, inputs, others = mlp()
    with torch.no_grad(), precision("bf16"):
        exported = torch_graphfuse.export(model, inputs)
        refs = [model(*call) for call in (inputs, *others)]
    result = run_saved(tmp_path, {"bf16": (exported, [inputs, *others])})["bf16"]
    for out, ref in zip(result["outputs"], refs, strict=True):
        fusion_check.assert_matches(out, ref, "bf16")


def test_cudnn_groups_are_saved_as_their_ops(tmp_path: Path) -> None:
    model, inputs, others = mlp()
    with cudnn_on_cpu.on_cpu():
        _, _, graph = runner.fused(model, inputs)
        exported = torch_graphfuse.export(model, inputs)
    assert [g for g in runner.fusion_groups(graph) if g.s("backend") == "cudnn"]
    assert not exported.graph.findAllNodes(RUN_SAVED, True)
    assert not exported.graph.findAllNodes(KIND, True)
    calls = [inputs, *others]
    result = run_saved(tmp_path, {"cudnn": (exported, calls)})["cudnn"]
    assert result["stats"]["fused_runs"] == 0
    for out, call in zip(result["outputs"], calls, strict=True):
        fusion_check.assert_matches(out, eager(model, call), "fp32")


def test_a_saved_model_is_not_fused_again_where_fusion_is_on() -> None:
    model, inputs, _ = mlp()
    exported = torch_graphfuse.export(model, inputs)
    with torch.no_grad(), torch_graphfuse.fuser(True):
        for _ in range(4):
            out = exported(*inputs)
        graph = torch.jit.last_executed_optimized_graph()
    assert graph.findAllNodes(RUN_SAVED, True)
    assert not graph.findAllNodes(KIND, True)
    fusion_check.assert_matches(out, eager(model, inputs), "fp32")


def test_the_file_holds_the_weights_once(tmp_path: Path) -> None:
    model, inputs, _ = convnet()
    frozen = torch.jit.freeze(torch.jit.trace(model, inputs))
    torch.jit.save(frozen, str(tmp_path / "frozen.pt"))
    torch.jit.save(torch_graphfuse.export(model, inputs), str(tmp_path / "exported.pt"))
    frozen_bytes = (tmp_path / "frozen.pt").stat().st_size
    assert (tmp_path / "exported.pt").stat().st_size < 1.1 * frozen_bytes


def saved_groups(module: torch.jit.ScriptModule) -> list[torch.ScriptObject]:
    return [node.inputsAt(0).toIValue() for node in module.graph.findAllNodes(RUN_SAVED, True)]


def first_group_inputs(module: torch.jit.ScriptModule, inputs: Inputs) -> list[torch.Tensor]:
    """The tensors the first saved group takes: the graph's inputs and constants it lists."""
    listed = module.graph.findAllNodes(RUN_SAVED, True)[0].inputsAt(1).node()
    graph_inputs = list(module.graph.inputs())[1:]
    return [inputs[graph_inputs.index(v)] if v in graph_inputs else v.toIValue()
            for v in listed.inputs()]


@pytest.mark.parametrize("change", [
    {"onednn": "0.0.0"},
    {"torch": "1.0.0"},
    {"format": "0"},
    {"backend": "cudnn"},
    {"desc": "this is no description"},
    {"desc": "graphfuse-desc 99\n"},
    {"types": "Float|2|x,16|"},
    {"head": "graph(%0 : Tensor):\n  what\n"},
])
def test_a_group_that_cannot_run_fused_here_hands_its_inputs_back(
        change: dict[str, str], capfd: pytest.CaptureFixture[str]) -> None:
    model, inputs, _ = mlp()
    exported = torch_graphfuse.export(model, inputs)
    state = dict(saved_groups(exported)[0].state())
    state.update(change)
    given = first_group_inputs(exported, inputs)
    group = torch.classes.graphfuse.SavedGroup(state)
    ran, values = torch.ops.graphfuse.run_saved(group, given, [True])
    # c10's warning, on stderr: a torch.classes constructor does not pass it to Python's.
    # Once per cause and process: each change here is a cause no other test gives.
    assert "cannot run fused here" in capfd.readouterr().err
    assert not ran
    assert len(values) == len(given)
    for value, expected in zip(values, given, strict=True):
        assert torch.equal(value, expected)


def test_strict_load_refuses_a_file_made_by_another_onednn(tmp_path: Path) -> None:
    model, inputs, _ = mlp()
    exported = torch_graphfuse.export(model, inputs)
    state = dict(saved_groups(exported)[0].state())
    state["onednn"] = "0.0.0"
    with pytest.raises(RuntimeError, match="TORCH_GRAPHFUSE_STRICT_LOAD"):
        os.environ["TORCH_GRAPHFUSE_STRICT_LOAD"] = "1"
        try:
            torch.classes.graphfuse.SavedGroup(state)
        finally:
            del os.environ["TORCH_GRAPHFUSE_STRICT_LOAD"]


def test_a_truncated_file_fails_to_load_with_an_error(tmp_path: Path) -> None:
    model, inputs, _ = mlp()
    path = tmp_path / "mlp.pt"
    torch.jit.save(torch_graphfuse.export(model, inputs), str(path))
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(RuntimeError):
        torch.jit.load(str(path))


def test_the_runtime_library_needs_no_python() -> None:
    library = torch_graphfuse.runtime_library()
    needed = subprocess.run(["readelf", "-d", library], capture_output=True, text=True,
                            check=True).stdout
    assert "libpython" not in needed and "libtorch_python" not in needed
    undefined = subprocess.run(["nm", "-D", "--undefined-only", library], capture_output=True,
                               text=True, check=True).stdout.split()
    assert not [symbol for symbol in undefined if symbol.startswith("Py")]
