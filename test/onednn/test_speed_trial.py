"""Speed trials: a mapping whose faster kernel depends on the CPU (attention) is timed against
ATen at its profiled sizes, once per description, and kept only where oneDNN wins by the
margin; TORCH_GRAPHFUSE_SPEED_TRIALS pins either side."""

from __future__ import annotations

import pytest
import torch
from fusion_check import assert_matches, eager, fuse, group_kinds
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.backends.onednn import speed_trial
from torch_graphfuse.backends.onednn.graph_desc import BackendGraph, TensorSpec

SDPA = "aten::scaled_dot_product_attention"
N = 64


def _products(count: int) -> tuple[BackendGraph, list, list[int]]:
    """`count` independent [N, N] matrix products."""
    graph = BackendGraph(100)
    ops, outputs = [], []
    for i in range(count):
        a, b, c = (graph.add_tensor(TensorSpec(10 * i + j, "f32", False, [N, N],
                                               [N, 1] if j < 2 else None)) for j in range(3))
        ops.append(graph.add_op("MatMul", [a, b], [c]))
        outputs.append(c)
    return graph, ops, outputs


@pytest.fixture(autouse=True)
def _fresh_trials(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed_trial, "_TRIALS", {})
    monkeypatch.setenv(speed_trial.ENV, "measure")


def test_a_trial_times_the_partition_and_aten_once_per_description() -> None:
    graph, ops, outputs = _products(1)
    calls = []

    def aten(t: dict[int, torch.Tensor]) -> torch.Tensor:
        calls.append(1)
        return t[0] @ t[1]

    found = speed_trial.trial(graph, ops, outputs, {}, aten)
    assert found.onednn_ms is not None and found.onednn_ms > 0 and found.aten_ms > 0
    assert "on this CPU" in found.verdict()
    runs = len(calls)
    # The same ops under other tensor ids: the same description, the same trial.
    other, other_ops, other_outputs = _products(2)
    assert speed_trial.trial(other, other_ops[1:], other_outputs[1:], {}, aten) is found
    assert len(calls) == runs


def test_ops_onednn_does_not_take_as_one_partition_stay_with_aten() -> None:
    graph, ops, outputs = _products(2)
    found = speed_trial.trial(graph, ops, outputs, {}, lambda t: None)
    assert found.onednn_ms is None and not found.fused
    assert "could not run it alone" in found.verdict()


def test_a_trial_that_raises_leaves_the_ops_with_aten() -> None:
    graph, ops, outputs = _products(1)

    def aten(_: dict[int, torch.Tensor]) -> None:
        raise RuntimeError("no kernel for these inputs")

    found = speed_trial.trial(graph, ops, outputs, {}, aten)
    assert not found.fused and "no kernel for these inputs" in found.verdict()


@pytest.mark.parametrize(("onednn_ms", "fused"), [(0.5, True), (0.97, True), (0.99, False),
                                                   (1.5, False)])
def test_onednn_must_win_by_the_margin(onednn_ms: float, fused: bool) -> None:
    assert speed_trial.Trial(onednn_ms, 1.0).fused is fused


def test_an_unknown_setting_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(speed_trial.ENV, "sometimes")
    with pytest.raises(ValueError, match="expected one of measure, fuse, aten"):
        speed_trial.mode()


class TwoAttentions(nn.Module):
    """Two attentions of one shape (two layers of a model): one trial for both."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        first = F.scaled_dot_product_attention(q, k, v)
        return F.scaled_dot_product_attention(first.tanh(), k, v)


def _attention_groups(graph: torch._C.Graph) -> int:
    return sum(SDPA in kinds for kinds in group_kinds(graph))


def _inputs() -> list[torch.Tensor]:
    return [torch.randn(1, 4, 96, 32) for _ in range(3)]


@pytest.mark.parametrize(("onednn_ms", "aten_ms", "fused"), [(0.5, 1.0, True), (1.0, 0.5, False)],
                         ids=["onednn-faster", "aten-faster"])
def test_attention_fuses_where_its_trial_says_onednn_is_faster(
        monkeypatch: pytest.MonkeyPatch, onednn_ms: float, aten_ms: float, fused: bool) -> None:
    measured = []

    def measure(text: str, inputs: list[torch.Tensor], aten: object) -> speed_trial.Trial:
        measured.append(text)
        return speed_trial.Trial(onednn_ms, aten_ms)

    monkeypatch.setattr(speed_trial, "measure", measure)
    model, inputs = TwoAttentions(), _inputs()
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    assert len(measured) == 1
    assert _attention_groups(graph) == (2 if fused else 0), graph
    reasons = [why for kind, why in torch_graphfuse.last_report().unmapped if kind == SDPA]
    assert reasons == ([] if fused else
                       ["attention, left with ATen by its speed trial: ATen 0.500 ms, "
                        "oneDNN 1.000 ms on this CPU"] * 2)


@pytest.mark.parametrize("setting", ["fuse", "aten"])
def test_the_setting_skips_the_trial(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    def measure(*_: object) -> speed_trial.Trial:
        raise AssertionError("timed despite the setting")

    monkeypatch.setattr(speed_trial, "measure", measure)
    monkeypatch.setenv(speed_trial.ENV, setting)
    model, inputs = TwoAttentions(), _inputs()
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    assert _attention_groups(graph) == (2 if setting == "fuse" else 0), graph


def test_a_measured_attention_gives_eagers_result_either_way() -> None:
    model, inputs = TwoAttentions(), _inputs()
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    [trial] = speed_trial._TRIALS.values()
    assert _attention_groups(graph) == (2 if trial.fused else 0), (trial, graph)


class TwoMlps(nn.Module):
    """Two linears of one shape, each with an activation (two layers' MLPs): one trial."""

    def __init__(self, activation: str) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(32, 32), nn.Linear(32, 32)
        self.activation = getattr(F, activation)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.activation(self.first(x)), self.activation(self.second(x))


def _activation_groups(graph: torch._C.Graph, activation: str) -> int:
    return sum(f"aten::{activation}" in kinds for kinds in group_kinds(graph))


@pytest.mark.parametrize("activation", ["gelu", "silu"])
@pytest.mark.parametrize(("onednn_ms", "aten_ms", "fused"), [(0.5, 1.0, True), (1.0, 0.5, False)],
                         ids=["onednn-faster", "aten-faster"])
def test_an_activation_joins_its_linear_where_its_trial_says_onednn_is_faster(
        monkeypatch: pytest.MonkeyPatch, activation: str, onednn_ms: float, aten_ms: float,
        fused: bool) -> None:
    measured = []

    def measure(text: str, inputs: list[torch.Tensor], aten: object) -> speed_trial.Trial:
        measured.append(text)
        return speed_trial.Trial(onednn_ms, aten_ms)

    monkeypatch.setattr(speed_trial, "measure", measure)
    model, inputs = TwoMlps(activation).eval(), [torch.randn(4, 16, 32)]
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    assert len(measured) == 1 and "MatMul" in measured[0]
    assert _activation_groups(graph, activation) == (2 if fused else 0), graph
    # Either way each linear is fused.
    assert sum(kinds == ["aten::linear"] or f"aten::{activation}" in kinds
               for kinds in group_kinds(graph)) == 2, graph
    reasons = [why for kind, why in torch_graphfuse.last_report().unmapped
               if kind == f"aten::{activation}"]
    assert reasons == ([] if fused else [
        f"{activation} of a linear, left with ATen by its speed trial: ATen 0.500 ms, oneDNN "
        "1.000 ms on this CPU"] * 2)


def test_a_measured_activation_of_a_linear_gives_eagers_result_either_way() -> None:
    model, inputs = TwoMlps("gelu").eval(), [torch.randn(4, 16, 32)]
    _, out, graph = fuse(model, inputs)
    assert_matches(out, eager(model, inputs), "fp32")
    [trial] = speed_trial._TRIALS.values()
    assert trial.onednn_ms is not None, trial
    assert _activation_groups(graph, "gelu") == (2 if trial.fused else 0), (trial, graph)
