"""Finite-only mappings: taken where passes/finiteness proves the input finite,
guarded per call by one graphfuse::all_finite check of the assumed graph inputs."""

from __future__ import annotations

import pytest
import torch
from fusion_check import DTYPES, check, check_nonfinite_call, fuse, run
from torch import nn
from torch.nn import functional as F

import torch_graphfuse
from torch_graphfuse.passes import finiteness
from torch_graphfuse.testing import runner


class Fn(nn.Module):
    def __init__(self, fn) -> None:  # noqa: ANN001
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


class ConvThen(nn.Module):
    def __init__(self, then, weight_nan: bool = False) -> None:  # noqa: ANN001
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        if weight_nan:
            with torch.no_grad():
                self.conv.weight[0, 0, 0, 0] = float("nan")
        self.then = then

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.then(self.conv(x))


def _descs(graph: torch._C.Graph) -> str:
    return "\n".join(g.s("desc") for g in runner.fusion_groups(graph))


def _checks(graph: torch._C.Graph) -> list[torch._C.Node]:
    return [n for n in graph.nodes() if n.kind() == "graphfuse::all_finite"]


def test_relu_of_a_checked_input_maps_to_onednn_relu() -> None:
    graph = check(ConvThen(torch.relu), [torch.randn(1, 3, 8, 8)], groups=1, left=[])
    assert " ReLU " in _descs(graph) and " Elu " not in _descs(graph)
    (check_node,) = _checks(graph)
    group = runner.fusion_groups(graph)[0]
    assert getattr(group, "is")("finite_inputs") == [1]
    assert list(group.inputs())[-1] == check_node.output()


@pytest.mark.parametrize("special", ["nan", "inf", "-inf"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_call_after_finite_profiling_gives_eager_nan_positions(
        dtype: str, special: str) -> None:
    model = ConvThen(lambda y: torch.sigmoid(F.max_pool2d(torch.relu(y), 2)))
    x = torch.randn(2, 3, 8, 8)
    bad = x.clone()
    bad[1, 0, 2, 2] = float(special)
    check_nonfinite_call(model, [x], [bad], dtype)


class TwoBranches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.relu(self.conv(x)), torch.relu(self.fc(y))


def test_nan_in_one_input_leaves_groups_of_other_inputs_fused() -> None:
    model = TwoBranches()
    x, y = torch.randn(1, 3, 8, 8), torch.randn(2, 8)
    module, _, graph = fuse(model, [x, y])
    assert len(_checks(graph)) == 2  # one scan per input
    bad = y.clone()
    bad[0, 0] = float("nan")
    torch_graphfuse.reset_kernel_stats()
    out = run(module, [x, bad])
    with torch.no_grad():
        torch.testing.assert_close(out, model(x, bad), equal_nan=True)
    stats = torch_graphfuse.kernel_stats()
    assert stats["nonfinite_fallbacks"] == 1 and stats["fused_runs"] == 1


def test_finite_call_after_a_nonfinite_one_runs_fused_again() -> None:
    model = ConvThen(torch.relu)
    x = torch.randn(1, 3, 8, 8)
    module, _, _ = fuse(model, [x])
    bad = x.clone()
    bad[0, 0, 0, 0] = float("nan")
    run(module, [bad])
    torch_graphfuse.reset_kernel_stats()
    out = run(module, [x])
    with torch.no_grad():
        torch.testing.assert_close(out, model(x))
    stats = torch_graphfuse.kernel_stats()
    assert stats["fused_runs"] == 1 and stats["nonfinite_fallbacks"] == 0


def test_nan_made_inside_the_graph_keeps_the_nan_safe_relu() -> None:
    # log of a negative number is NaN: relu after it is Elu + Abs, unguarded.
    model = ConvThen(lambda y: torch.relu(torch.log(y)))
    graph = check(model, [torch.randn(1, 3, 8, 8)], left=None)
    assert " Elu " in _descs(graph) and " ReLU " not in _descs(graph)
    assert _checks(graph) == []


def test_cast_to_float16_ends_a_proof() -> None:
    # 1e5 is inf in float16: (a - a) is NaN there, which oneDNN's ReLU would zero.
    model = Fn(lambda x: torch.relu(2.0 * (lambda a: a - a)(x.half().float())))
    x = torch.full((4, 8), 3.0)
    graph = check(model, [x], left=None)
    assert " ReLU " not in _descs(graph)
    big = x.clone()
    big[0, 0] = 1e5
    torch.testing.assert_close(run(fuse(model, [x])[0], [big]), model(big), equal_nan=True)


class GroupNormThenFeedForward(nn.Module):
    """wav2vec2's shape: its feature encoder's conv1d and group_norm (a group per channel,
    left with ATen on this plain layout) come before every linear -> gelu of its encoder."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 10, stride=5, bias=False)
        self.norm = nn.GroupNorm(8, 8, eps=eps)
        self.linear = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(self.norm(self.conv(x)).transpose(1, 2)))


def test_group_norm_keeps_finiteness_so_the_gelu_after_it_fuses() -> None:
    model = GroupNormThenFeedForward(eps=1e-5)
    x = torch.randn(1, 1, 400)
    graph = check(model, [x], left=None)
    assert " GELU " in _descs(graph) and len(_checks(graph)) == 1
    assert "aten::gelu" not in dict(torch_graphfuse.last_report().unmapped)
    nan = x.clone()
    nan[0, 0, 7] = float("nan")
    torch.testing.assert_close(run(fuse(model, [x])[0], [nan]), model(nan), equal_nan=True)


def test_group_norm_without_eps_ends_a_proof() -> None:
    # A constant group has variance 0: with eps 0, 0 / sqrt(0) is NaN.
    check(GroupNormThenFeedForward(eps=0.0), [torch.randn(1, 1, 400)], left=None)
    assert "not proven finite" in dict(torch_graphfuse.last_report().unmapped)["aten::gelu"]


class WaveformEncoder(nn.Module):
    """wav2vec2's input path: the waveform goes to an unsqueeze, which no op table takes,
    so the profiler records no type for the graph input; then conv1d -> gelu."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 8, 10, stride=5)

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.conv(wave[:, None]))


def test_an_input_the_profiler_leaves_untyped_is_assumed_finite_and_checked() -> None:
    model = WaveformEncoder()
    x = torch.randn(1, 400)
    graph = check(model, [x], groups=1, left=None)
    assert " GELU " in _descs(graph) and len(_checks(graph)) == 1
    for special in ("nan", "inf", "-inf"):
        bad = x.clone()
        bad[0, 11] = float(special)
        torch.testing.assert_close(run(fuse(model, [x])[0], [bad]), model(bad), equal_nan=True)


def test_finite_only_op_after_division_by_a_tensor_stays_with_aten() -> None:
    model = Fn(lambda x, y: F.max_pool2d(x / y, 2) * 2.0)
    x, y = torch.randn(1, 2, 8, 8), torch.randn(1, 2, 8, 8)
    y[0, 0, 0, 0] = 0.0
    check(model, [x, y], left=None)
    unmapped = dict(torch_graphfuse.last_report().unmapped)
    assert "not proven finite" in unmapped["aten::max_pool2d"]


def test_conv_with_a_nan_weight_stays_with_aten() -> None:
    # Eager multiplies the padding's zeros by the NaN weight; oneDNN skips them.
    check(ConvThen(torch.relu, weight_nan=True), [torch.randn(1, 3, 8, 8)], groups=0,
          left=["aten::_convolution", "aten::relu"])
    unmapped = dict(torch_graphfuse.last_report().unmapped)
    assert "weight not proven finite" in unmapped["aten::_convolution"]


def test_input_written_in_place_is_not_assumed_finite() -> None:
    def forward(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.relu(x * 2.0)
        x.div_(y)  # the caller's x may hold NaN after this call
        return out

    x, y = torch.randn(4, 8), torch.randn(4, 8)
    module, _, graph = fuse(Fn(forward), [x.clone(), y])
    assert _checks(graph) == []
    xs = x.clone()
    out = run(module, [xs, y])
    torch.testing.assert_close(out, torch.relu(x * 2.0))
    torch.testing.assert_close(xs, x / y)


class ShiftedWindowFeedForward(nn.Module):
    """Swin's path to its feed-forward: the cyclic shift (roll), the padding to whole
    windows (pad) and the shifted windows' mask (masked_fill of a constant mask) move or
    fill values; the linear -> gelu after them fuses when the fill values are finite."""

    def __init__(self, fill: float = -100.0) -> None:
        super().__init__()
        self.fill = fill
        self.fc = nn.Linear(8, 16)
        self.register_buffer("mask", torch.rand(6, 6, 1) > 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.roll(x, shifts=(-1, -1), dims=(1, 2))
        y = F.pad(y, (0, 0, 0, 1, 0, 1), value=self.fill)
        y = y.masked_fill(self.mask, self.fill)
        return F.gelu(self.fc(y.repeat(1, 1, 1, 1)))


def test_shift_pad_and_mask_keep_finiteness_so_the_gelu_after_them_fuses() -> None:
    model, x = ShiftedWindowFeedForward(), torch.randn(1, 5, 5, 8)
    graph = check(model, [x], left=None)
    assert " GELU " in _descs(graph) and len(_checks(graph)) == 1
    for special in ("nan", "inf", "-inf"):
        bad = x.clone()
        bad[0, 2, 3, 4] = float(special)
        torch.testing.assert_close(run(fuse(model, [x])[0], [bad]), model(bad), equal_nan=True)


@pytest.mark.parametrize("fill", [float("inf"), float("-inf"), float("nan")])
def test_a_fill_value_that_is_not_finite_ends_a_proof(fill: float) -> None:
    check(ShiftedWindowFeedForward(fill), [torch.randn(1, 5, 5, 8)], left=None)
    assert "not proven finite" in dict(torch_graphfuse.last_report().unmapped)["aten::gelu"]


class EmbeddingLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 8)
        self.fc = nn.Linear(8, 8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(self.emb(ids)))


def test_integer_inputs_need_no_check() -> None:
    graph = check(EmbeddingLinear(), [torch.randint(0, 10, (2, 5))], left=None)
    assert " ReLU " in _descs(graph)
    assert _checks(graph) == []


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("special", ["nan", "inf", "-inf"])
def test_all_finite_scans_every_element(dtype: torch.dtype, special: str) -> None:
    all_finite = torch.ops.graphfuse.all_finite
    x = torch.randn(3, 70001).to(dtype)  # past one parallel chunk
    assert all_finite([x, torch.arange(4)])
    for where in [(0, 0), (2, 70000), (1, 12345)]:
        y = x.clone()
        y[where] = float(special)
        assert not all_finite([x, y])
        assert not all_finite([y.t()])  # dense in another order
        assert all_finite([y[:, ::2]]) == (where[1] % 2 == 1)  # not dense: ATen's check
        # Rows of a slice (a split's piece), each contiguous: only the slice's elements.
        assert all_finite([y[:, 1:]]) == (where[1] == 0)
        column = where[1]
        inside = column < 70000 and column // 10000 >= 1 and column % 10000 >= 2
        assert all_finite([y[:, :70000].view(3, 7, 10000)[:, 1:, 2:].unsqueeze(0)]) == (
            not inside)
    assert all_finite([x.new_empty(0), torch.tensor([1, 2])])


def test_finiteness_facts_say_which_inputs_are_assumed() -> None:
    def forward(x: torch.Tensor, y: torch.Tensor,
                n: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a = torch.relu(x * 2.0 + y)
        b = torch.log(a)
        return a, b, n * 3

    graph = torch.jit.script(forward).graph
    torch._C._jit_pass_inline(graph)
    for v, dtype in zip(graph.inputs(), [torch.float32, torch.float32, torch.int64], strict=True):
        v.setType(torch._C.TensorType.create_from_tensor(torch.zeros(2, dtype=dtype)))
    facts = finiteness.analyze(graph)
    a, b, m = (v.node() for v in graph.return_node().inputsAt(0).node().inputs())
    assert facts[a.output().unique()] == frozenset({0, 1})
    assert b.output().unique() not in facts  # log can make NaN
    assert facts[m.output().unique()] == frozenset()  # int64: no NaN


def test_indices_and_conditions_of_unknown_type_need_no_proof() -> None:
    """T5's position bias: an embedding of computed bucket indices, chosen by a condition,
    both of types the profiler left unknown; the selected values are what counts."""
    def bias(table: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values = F.embedding(torch.argmax(scores, dim=1), table)
        keep = scores > 0
        return torch.where(keep, values, scores), torch.where(keep, torch.log(scores), values)

    graph = torch.jit.script(bias).graph
    torch._C._jit_pass_inline(graph)
    for v in graph.inputs():
        v.setType(torch._C.TensorType.create_from_tensor(torch.zeros(3, 3)))
    facts = finiteness.analyze(graph)
    chosen, logged = graph.return_node().inputsAt(0).node().inputs()
    assert facts[chosen.unique()] == frozenset({0, 1})
    assert logged.unique() not in facts  # the log of a value can be NaN


def test_inputs_beside_an_index_the_graph_allocates_and_writes_are_assumed_finite() -> None:
    """BEiT's relative position bias: an index tensor made by `zeros` and written in place,
    taken in a list by `aten::index`. Alias analysis lets every tensor in a list alias the
    graph inputs; a tensor the graph allocated cannot."""
    def bias(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        index = torch.zeros(3, dtype=torch.long)
        index[1:] += 1
        return x + table[index]

    graph = torch.jit.script(bias).graph
    torch._C._jit_pass_inline(graph)
    for v in graph.inputs():
        v.setType(torch._C.TensorType.create_from_tensor(torch.zeros(3)))
    facts = finiteness.analyze(graph)
    assert facts[graph.return_node().inputsAt(0).unique()] == frozenset({0, 1})


def test_rms_norm_sin_and_cos_keep_finiteness() -> None:
    def rotary(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
        # Llama's rotary embedding on an RMS-normalized input.
        q = torch.rms_norm(x, [16], None, 1e-6)
        rotated = torch.cat((-q[..., 8:], q[..., :8]), dim=-1)
        return q * angles.cos() + rotated * angles.sin()

    graph = torch.jit.script(rotary).graph
    for v in graph.inputs():
        v.setType(torch._C.TensorType.create_from_tensor(torch.zeros(2, 16)))
    facts = finiteness.analyze(graph)
    kinds = {"aten::rms_norm", "aten::sin", "aten::cos", "aten::neg"}
    nodes = [n for n in graph.nodes() if n.kind() in kinds]
    assert {n.kind() for n in nodes} == kinds
    assert all(n.output().unique() in facts for n in nodes)


def test_neg_of_a_proven_input_maps_to_a_product_with_minus_one() -> None:
    x = torch.randn(3, 8)
    x[0, :4] = 0.0  # relu's +0 becomes eager's -0.0
    graph = check(Fn(lambda y: -torch.relu(y) * 2.0), [x], left=None)
    assert "aten::neg" in runner.fused_kinds(graph)
    assert torch.equal(torch.signbit(run(fuse(Fn(lambda y: -torch.relu(y)), [x])[0], [x])),
                       torch.signbit(-torch.relu(x)))


def test_neg_of_a_nan_runs_unfused_so_the_nan_sign_is_eagers() -> None:
    model = Fn(lambda y: -torch.tanh(y) * 2.0)
    x = torch.randn(3, 8)
    bad = x.clone()
    bad[1, 2] = float("nan")
    check_nonfinite_call(model, [x], [bad])
    module = fuse(model, [x])[0]
    assert torch.equal(torch.signbit(run(module, [bad])), torch.signbit(model(bad)))


class ShuffleUnit(nn.Module):
    """ShuffleNet's unit: the channel shuffle, TorchScript's chunk of it, and a conv+relu
    on one half."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)
        self.branch = nn.Conv2d(2, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        n, c, h, w = y.shape
        y = y.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        left, right = y.chunk(2, dim=1)
        return torch.cat([left, torch.relu(self.branch(right))], dim=1)


def test_chunk_keeps_finiteness_so_the_relu_after_it_is_onednn_relu() -> None:
    model, x = ShuffleUnit(), torch.randn(1, 4, 6, 6)
    graph = check(model, [x], left=None)
    assert " ReLU " in _descs(graph) and " Elu " not in _descs(graph)
    bad = x.clone()
    bad[0, 1, 2, 3] = float("nan")
    check_nonfinite_call(model, [x], [bad])


class ResizedPositions(nn.Module):
    """A position table resized to the input's grid (DINOv2's bicubic, BEiT's bilinear)
    and added to the tokens before a linear and GELU."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.table = nn.Parameter(torch.randn(1, 8, 3, 3))
        self.fc = nn.Linear(8, 8)
        self.mode = mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[1], x.shape[2]
        table = F.interpolate(self.table, size=(h, w), mode=self.mode, align_corners=False)
        return F.gelu(self.fc(x + table.permute(0, 2, 3, 1)))


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
def test_resized_position_table_keeps_finiteness_so_the_gelu_after_it_maps(mode: str) -> None:
    check(ResizedPositions(mode), [torch.randn(1, 5, 5, 8)], left=None)
    assert "aten::gelu" not in dict(torch_graphfuse.last_report().unmapped)


class GatedSplit(nn.Module):
    """MambaOut's gated block: one projection split in three unequal pieces (traced as
    `split_with_sizes`), a GELU gate on the first and a scale by a constant divisor on
    the others."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, value, rest = torch.split(self.fc(x), [8, 4, 4], dim=-1)
        return F.gelu(gate) * torch.cat([value, torch.floor_divide(rest, 2.0)], dim=-1)


def test_unequal_split_and_floor_division_by_a_constant_keep_finiteness() -> None:
    graph = runner.freeze(GatedSplit(), [torch.randn(2, 5, 8)]).graph
    facts = finiteness.analyze(graph)
    kinds = {"prim::ListUnpack", "aten::gelu", "aten::floor_divide", "aten::mul"}
    nodes = [n for n in graph.nodes() if n.kind() in kinds]
    assert {n.kind() for n in nodes} == kinds
    assert all(o.unique() in facts for n in nodes for o in n.outputs())


_MADE = {
    "arange": lambda y: torch.arange(y.shape[-1], dtype=y.dtype),
    "zeros": lambda y: torch.zeros(y.shape[-1], dtype=y.dtype),
    "ones": lambda y: torch.ones(y.shape[-1], dtype=y.dtype),
}


@pytest.mark.parametrize("made", sorted(_MADE))
def test_a_new_tensor_from_sizes_is_finite_so_the_relu_after_it_is_onednn_relu(
        made: str) -> None:
    graph = check(ConvThen(lambda y: torch.relu(y + _MADE[made](y))),
                  [torch.randn(1, 3, 8, 8)], left=None)
    assert " ReLU " in _descs(graph) and " Elu " not in _descs(graph)
