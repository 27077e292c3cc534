"""FusionReport.picture(): the optimized graph drawn, checked through its DOT text."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from test_report import Mixed
from torch import nn

import torch_graphfuse
from torch_graphfuse.report import FusionReport, Picture, layout, picture
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.models import Bottleneck, ResNet
from torch_graphfuse.testing.transformer import BertEncoder, bert_inputs

LONE_OP = "offered by oneDNN, left unfused: a lone op ATen runs as fast"


@dataclass
class Cluster:
    label: str = ""
    ops: list[str] = field(default_factory=list)  # node ids directly inside
    clusters: list[Cluster] = field(default_factory=list)

    def all_ops(self) -> list[str]:
        return self.ops + [op for c in self.clusters for op in c.all_ops()]

    def walk(self) -> list[Cluster]:
        return [self] + [d for c in self.clusters for d in c.walk()]


@dataclass
class Dot:
    root: Cluster
    labels: dict[str, str]  # node id -> label
    edges: list[tuple[str, str]]  # node ids

    def kinds(self, ids: list[str]) -> list[str]:
        return [self.labels[i].split("\n")[0] for i in ids]

    def marks(self, ids: list[str]) -> list[tuple[str, str]]:
        """(kind, why) of each op; the why unwrapped."""
        return [(kind, " ".join(why)) for kind, *why in (self.labels[i].split("\n") for i in ids)]

    def edge_labels(self) -> set[tuple[str, str]]:
        return {(self.labels[a].split("\n")[0], self.labels[b].split("\n")[0])
                for a, b in self.edges}

    def clusters(self, prefix: str) -> list[Cluster]:
        return [c for c in self.root.walk()[1:] if c.label.startswith(prefix)]


def _unescape(text: str) -> str:
    return text.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")


def parse_dot(text: str) -> Dot:
    """The one-statement-a-line DOT that picture.to_dot writes."""
    root = Cluster()
    stack = [root]
    labels: dict[str, str] = {}
    edges = []
    for line in (line.strip() for line in text.splitlines()):
        if line.startswith("subgraph cluster_"):
            stack[-1].clusters.append(Cluster())
            stack.append(stack[-1].clusters[-1])
        elif line == "}":
            stack.pop()
        elif m := re.fullmatch(r"(\w+) -> (\w+);", line):
            edges.append((m[1], m[2]))
        elif m := re.match(r'label="((?:[^"\\]|\\.)*)";', line):
            stack[-1].label = _unescape(m[1]).replace("\n", " ")  # unwrapped
        elif m := re.match(r'(\w+) \[label="((?:[^"\\]|\\.)*)"', line):
            labels[m[1]] = _unescape(m[2])
            if "shape=" not in line:  # not a graph input or output, nor a note
                stack[-1].ops.append(m[1])
    return Dot(root, labels, edges)


def fused_picture(model: nn.Module, inputs: list[torch.Tensor]) -> Picture:
    runner.fused(model, inputs)
    report = torch_graphfuse.last_report()
    assert report is not None and report.graph is not None
    return report.graph


@pytest.fixture(scope="module")
def mixed() -> Picture:
    torch.manual_seed(0)
    return fused_picture(Mixed(), [torch.randn(1, 3, 8, 8)])


def test_groups_are_boxes_of_their_ops_and_unfused_ops_say_why(mixed: Picture) -> None:
    dot = parse_dot(picture.to_dot(mixed))
    assert dot.root.label == "torch_graphfuse: 1 fusion groups, 2 of 5 aten ops fused"
    [group] = dot.clusters("group")
    assert group.label == "group 1"
    assert dot.kinds(group.ops) == ["_convolution", "relu"]
    assert dot.marks(dot.root.ops) == [("erf", "not mapped: no mapping"),
                                       ("floor_divide", "not mapped: no mapping"),
                                       ("tanh", LONE_OP)]
    [x] = mixed.inputs
    assert dot.edge_labels() == {
        (f"input {x}", "_convolution"), ("_convolution", "relu"), ("relu", "erf"),
        ("erf", "floor_divide"), ("floor_divide", "tanh"), ("tanh", "output 0")}


def test_all_finite_check_is_a_note(mixed: Picture) -> None:
    [x] = mixed.inputs
    assert mixed.notes == [f"graphfuse::all_finite checks {x} once per call; "
                           "group 1 runs unfused when it holds NaN or inf"]
    dot = parse_dot(picture.to_dot(mixed))
    assert "note0" in dot.labels and not any("note0" in e for e in dot.edges)


def test_text_form_when_dot_is_missing(mixed: Picture, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(picture.shutil, "which", lambda name: None)
    report = FusionReport(graph=mixed)
    previous = torch._C._jit_get_logging_option()
    torch._C._jit_set_logging_option("picture")
    try:
        written = report.picture(tmp_path / "mixed.svg")
    finally:
        torch._C._jit_set_logging_option(previous)
    assert written == tmp_path / "mixed.txt"
    assert not (tmp_path / "mixed.svg").exists()
    assert (tmp_path / "mixed.dot").read_text() == picture.to_dot(mixed)
    assert "[DUMP picture.py] Graphviz's dot is not installed" in capsys.readouterr().err
    [x] = mixed.inputs
    lines = written.read_text().splitlines()
    assert lines[0] == "torch_graphfuse: 1 fusion groups, 2 of 5 aten ops fused"
    assert lines[1] == f"  group 1: _convolution, relu  <- input {x}"
    assert re.fullmatch(r"  erf %\S+  <- group 1  \[not mapped: no mapping\]", lines[2])
    assert re.fullmatch(rf"  tanh %\S+  <- floor_divide %\S+  \[{LONE_OP}\]", lines[4])
    assert re.fullmatch(r"  output 0  <- tanh %\S+", lines[5])


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_renders_svg_with_dot(mixed: Picture, tmp_path: Path) -> None:
    written = FusionReport(graph=mixed).picture(tmp_path / "mixed.svg")
    assert written == tmp_path / "mixed.svg"
    assert "<svg" in written.read_text()


def test_rejected_region_is_a_dashed_box_of_its_ops() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.Sigmoid())
    graph = runner.freeze(model, [torch.randn(1, 3, 4, 4)]).graph
    convs = [n for n in graph.nodes() if n.kind() == "aten::_convolution"]
    [relu] = [n for n in graph.nodes() if n.kind() == "aten::relu"]
    [sigmoid] = [n for n in graph.nodes() if n.kind() == "aten::sigmoid"]
    report = FusionReport()
    report.add_rejected("_convolution, relu, _convolution", [convs[0], relu, convs[1]], "why",
                        by="oneDNN")
    report.add_unmapped(sigmoid, "no mapping")
    assert str(report).endswith("  [_convolution, relu, _convolution]: why")
    report.add_graph(graph, [])
    pic = report.graph
    assert pic is not None
    dot = parse_dot(picture.to_dot(pic))
    [region] = dot.clusters("offered by oneDNN")
    assert region.label == "offered by oneDNN, left unfused: why"
    assert dot.kinds(region.ops) == ["_convolution", "relu", "_convolution"]
    assert dot.marks(dot.root.ops) == [("sigmoid", "not mapped: no mapping")]
    [x] = pic.inputs
    assert dot.edge_labels() == {(f"input {x}", "_convolution"), ("_convolution", "relu"),
                                 ("relu", "_convolution"), ("_convolution", "sigmoid"),
                                 ("sigmoid", "output 0")}


def test_runs_line_up_with_the_end_of_a_stretch() -> None:
    def runs(keys: str, containers: list[int | None] | None = None,
             backs: frozenset[int] = frozenset({1})) -> list[tuple[int, int, int]]:
        n = len(keys)
        return layout.find_runs(list(keys), [backs] * n, containers or [None] * n)

    # A first block that differs at its start ("u"), then two alike: the run is the two.
    assert runs("ubcabcabc") == [(3, 3, 2)]
    assert runs("xababab") == [(1, 2, 3)]
    assert runs("aaaa") == [(0, 1, 4)]
    assert runs("aaaa", [None, None, 1, 1]) == []  # across a region's edge
    assert runs("aab") == []  # hides one: not worth a box
    assert runs("xaaaa", backs={4}) == []  # side by side, each reading x: not a chain
    # A block of two items not reading each other: cut across side by side branches.
    assert layout.find_runs(list("abababab"), [{1}, {5}] * 4, [None] * 8) == []


def test_repeated_resnet_blocks_drawn_once() -> None:
    torch.manual_seed(0)
    stage = ResNet(Bottleneck, [4], num_classes=4, base_width=4)  # a first block, then 3 alike
    pic = fused_picture(stage, [torch.randn(1, 3, 16, 16)])
    dot = parse_dot(picture.to_dot(pic))
    [run] = dot.clusters("x3")
    # One bottleneck (bn folded into the convs), fused or not.
    assert Counter(dot.kinds(run.all_ops())) == {"_convolution": 3, "relu": 3, "add": 1}
    assert len(dot.root.all_ops()) == len(pic.ops) - 2 * 7
    inside = set(run.all_ops())
    assert any(a not in inside and b in inside for a, b in dot.edges)
    assert any(a in inside and b not in inside for a, b in dot.edges)
    assert _acyclic(dot.edges)  # no edge from a block back to its next repetition


def _acyclic(edges: list[tuple[str, str]]) -> bool:
    indegree = Counter(b for _, b in edges)
    ready = list({a for a, _ in edges if not indegree[a]})
    seen = 0
    while ready:
        node = ready.pop()
        seen += 1
        for a, b in edges:
            if a == node:
                indegree[b] -= 1
                if not indegree[b]:
                    ready.append(b)
    return seen == len({n for e in edges for n in e})


def test_bert_layers_after_the_first_drawn_once() -> None:
    torch.manual_seed(0)
    model = BertEncoder(layers=3, hidden=16, heads=2, intermediate=32)
    pic = fused_picture(model, list(bert_inputs(1, 4, hidden=16)))
    dot = parse_dot(picture.to_dot(pic))
    [run] = dot.clusters("x2")
    drawn = Counter(dot.kinds(dot.root.all_ops()))
    assert Counter(op.kind.split("::")[-1] for op in pic.ops) == drawn + Counter(
        dot.kinds(run.all_ops()))
