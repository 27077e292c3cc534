"""The special-values sweep's parts that need no GPU: its comparison with eager counts
each kind of departure, every group it sweeps is valid IR in both 16-bit types, and the
runtime's probe of one plan tells one that keeps NaN and infinities from one that does
not."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch

from torch_graphfuse.backends.cudnn import interpreter, ir, special_values
from torch_graphfuse.backends.cudnn.ir_maker import Maker


def test_compare_counts_each_kind_of_departure_from_eager() -> None:
    nan, inf = math.nan, math.inf
    want = torch.tensor([nan, nan, 1.0, inf, -inf, 2.0, 3.0])
    got = torch.tensor([nan, 0.0, nan, inf, inf, 2.001, 4.0])
    found = special_values.compare(got, want)
    assert found["nan_lost"] == 1
    assert found["nan_made"] == 1
    assert found["inf_differs"] == 1
    assert found["finite_differs"] == 1  # 4 against 3; 2.001 is within rounding
    assert found["largest_finite_error"] == pytest.approx(1.0)


def test_compare_finds_nothing_in_eagers_own_result() -> None:
    want = torch.tensor([math.nan, math.inf, -math.inf, 0.5], dtype=torch.float16)
    assert not any(special_values.compare(want.clone(), want).values())


@pytest.mark.parametrize("io", list(special_values.DTYPES))
@pytest.mark.parametrize("case", special_values.CASES, ids=lambda c: c.name)
def test_every_swept_group_is_valid_ir(case: special_values.Case, io: str) -> None:
    graph = case.graph(io)
    ir.validate(graph)
    assert len(graph.outputs) == 1


def test_probe_inputs_keep_each_ports_layout_and_hold_nan_and_both_infinities() -> None:
    image = torch.zeros(2, 8, 4, 4, dtype=torch.half).to(memory_format=torch.channels_last)
    bias = torch.zeros(1, 8, 1, 1).expand(2, 8, 4, 4)  # one value per channel, stride 0
    index = torch.zeros(3, dtype=torch.int64)
    made = special_values.probe_inputs([image, bias, index])
    for x, like in zip(made, [image, bias, index], strict=True):
        assert (x.shape, x.stride(), x.dtype) == (like.shape, like.stride(), like.dtype)
    assert made[2] is index  # not floating: passed as it is
    values = made[0].flatten()
    assert values.isnan().any() and (values == math.inf).any() and (values == -math.inf).any()
    assert values[values.isfinite()].abs().max() <= 1


def test_probe_inputs_hold_the_memory_a_plan_may_read_past_the_view() -> None:
    rows = torch.zeros(64, 32)[:16]  # a plan reads through the IR's strides from the data
    (made,) = special_values.probe_inputs([rows])
    assert made.untyped_storage().nbytes() == rows.untyped_storage().nbytes()
    assert made.isnan().any() and made.isinf().any()


def _nan_lost(outputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return [y.nan_to_num(nan=0.0, posinf=math.inf, neginf=-math.inf) for y in outputs]


@pytest.mark.parametrize(("plan", "keeps"), [
    (lambda graph, xs: interpreter.run(graph, xs), True),
    (lambda graph, xs: _nan_lost(interpreter.run(graph, xs)), False),  # fmaxf's relu
    (lambda graph, xs: [y.clamp(max=6.0) for y in interpreter.run(graph, xs)], False),
], ids=["as_eager", "nan_lost", "infinity_clipped"])
def test_probe_tells_a_plan_keeping_nan_and_infinities_from_one_that_does_not(
        plan: Callable[[ir.Graph, list[torch.Tensor]], list[torch.Tensor]], keeps: bool) -> None:
    graph = special_values._conv_bias_relu("half")
    like = [torch.empty_strided(t.dims, t.strides, dtype=torch.half)
            for t in (graph.tensor(tid) for tid in graph.inputs)]
    assert special_values.keeps_special_values(
        graph, lambda xs: plan(graph, xs), like) is keeps


CASES = {case.name: case for case in special_values.CASES}


def _relu_then(dtype: str, *, read: bool = False) -> ir.Graph:
    """matmul -> relu (-> add of the relu's result to itself, where `read`)."""
    m = Maker(dtype)
    a, b = m.input([1, 8, 16]), m.input([1, 16, 4])
    y = m.result("matmul", {"A": a, "B": b}, [1, 8, 4])
    y = m.result("pointwise", {"IN_0": y}, [1, 8, 4], out=not read, mode="relu_fwd")
    if read:
        m.result("pointwise", {"IN_0": y, "IN_1": y}, [1, 8, 4], out=True, mode="add")
    return m.graph


@pytest.mark.parametrize(("graph", "decides"), [
    (_relu_then("half"), True),
    (_relu_then("bfloat16"), True),
    # relu(+inf) is FLT_MAX in float: an fp32 output shows it.
    (_relu_then("float"), False),
    # FLT_MAX + FLT_MAX is inf, as eager's, but FLT_MAX - inf would not be: a read of the
    # clipped value is not something probe inputs can settle.
    (_relu_then("half", read=True), False),
    (CASES["matmul+clamp(0,6)"].graph("half"), False),  # max/min lose NaN
    (CASES["matmul+row amax"].graph("half"), False),
], ids=["relu_half", "relu_bf16", "relu_float", "relu_read", "clamp", "amax"])
def test_probe_decides_only_where_a_relu_is_the_16_bit_output(graph: ir.Graph,
                                                             decides: bool) -> None:
    assert special_values.probe_decides(graph) is decides
    like = [torch.empty_strided(t.dims, t.strides, dtype=ir.TORCH_DTYPES[t.dtype])
            for t in (graph.tensor(tid) for tid in graph.inputs)]
    if not decides:  # even a plan that is the interpreter itself is not trusted there
        assert not special_values.keeps_special_values(
            graph, lambda xs: interpreter.run(graph, xs), like)
