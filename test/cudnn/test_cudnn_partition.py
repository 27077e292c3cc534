"""The cuDNN partitioner on CUDA-typed graphs built without a GPU: which nodes
group, for every pattern of the catalog (test/cudnn/patterns.py), and why the
rest stays with ATen."""

from __future__ import annotations

import pytest
import torch
from pattern_ir import CONV, Pattern, cpu_graph, graph
from patterns import PATTERNS

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.group_rules import (
    NCHW_EPILOGUE,
    NCHW_FULL_SIZE_OPERAND,
    NCHW_PROLOGUE,
    NOT_CHANNELS_LAST,
)
from torch_graphfuse.backends.cudnn.partition import (
    FORK,
    LONE_ANCHOR,
    POINTWISE_ONLY,
    find_partitions,
)
from torch_graphfuse.fusion.partition import Partition
from torch_graphfuse.fusion.rewrite import group_kinds, rewrite
from torch_graphfuse.group_schema import KIND
from torch_graphfuse.passes import finiteness
from torch_graphfuse.report import FusionReport

GROUPING = [name for name, p in PATTERNS.items() if p.groups]
REFUSALS = [name for name, p in PATTERNS.items() if p.refusal]


def partition(g: torch._C.Graph, device_type: str = "cuda") -> tuple[list[Partition],
                                                                     FusionReport]:
    report = FusionReport()
    return find_partitions(g.block(), finiteness.analyze(g), report, device_type), report


def kinds(parts: list[Partition]) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(n.kind() for n in p.nodes) for p in parts)


def reasons(report: FusionReport) -> list[str]:
    return [why for _, why in report.rejected] + [why for _, why in report.unmapped]


@pytest.mark.parametrize("name", PATTERNS)
def test_groups_are_the_catalogs(name: str) -> None:
    g = graph(PATTERNS[name])
    parts, _ = partition(g)
    assert kinds(parts) == PATTERNS[name].groups


@pytest.mark.parametrize("name", REFUSALS)
def test_what_stays_out_is_reported_with_its_reason(name: str) -> None:
    pattern = PATTERNS[name]
    _, report = partition(graph(pattern))
    assert any(pattern.refusal in why for why in reasons(report)), reasons(report)


@pytest.mark.parametrize("name", GROUPING)
def test_a_partition_is_a_cudnn_group_with_one_output_and_its_ir(name: str) -> None:
    g = graph(PATTERNS[name])
    for part in partition(g)[0]:
        assert part.backend == "cudnn" and part.static_shapes
        assert len(part.outputs) == 1
        assert part.input_ids == [v.unique() for v in part.inputs]
        assert part.output_ids == [v.unique() for v in part.outputs]
        lowered = ir.Graph.from_json(part.text)
        assert len(lowered.inputs) == len(part.inputs)
        assert lowered.io_dtype == {torch.float16: "half", torch.bfloat16: "bfloat16",
                                    torch.float32: "float"}[PATTERNS[name].dtype]


@pytest.mark.parametrize("name", PATTERNS)
def test_a_cpu_typed_graph_groups_alike_when_the_backend_simulates_on_cpu(name: str) -> None:
    g = cpu_graph(PATTERNS[name])
    assert kinds(partition(g, device_type="cpu")[0]) == PATTERNS[name].groups


@pytest.mark.parametrize("name", ["conv_bias_relu_half", "linear_bias_gelu_half"])
def test_nothing_groups_on_another_device(name: str) -> None:
    assert partition(cpu_graph(PATTERNS[name]), device_type="cuda")[0] == []
    assert partition(graph(PATTERNS[name]), device_type="cpu")[0] == []


@pytest.mark.parametrize("name", GROUPING)
def test_every_group_rewrites_into_one_fusion_group(name: str) -> None:
    g = graph(PATTERNS[name])
    parts, report = partition(g)
    groups = rewrite(g, g.block(), parts, report)
    assert [tuple(sorted(k)) for k in map(group_kinds, groups)] == \
        [tuple(sorted(kinds)) for kinds in PATTERNS[name].groups]
    assert [n.kind() for n in g.nodes()].count(KIND) == len(parts)
    g.lint()


def test_ports_are_the_tensors_read_from_outside_in_first_use_order() -> None:
    g = graph(PATTERNS["bn_relu_prologue_conv_relu_half"])
    (part,), _ = partition(g)
    x, w, b, scale, shift = g.inputs()
    assert [v.debugName() for v in part.inputs] == \
        [v.debugName() for v in (x, scale, shift, w, b)]
    assert part.outputs[0].node().kind() == "aten::relu"
    assert part.nodes[-1] == part.outputs[0].node()


def test_a_number_operand_is_a_scalar_attribute_not_a_port() -> None:
    g = graph(PATTERNS["conv_scale_tanh_half"])
    (part,), _ = partition(g)
    assert all(v.node().kind() == "prim::Param" for v in part.inputs)
    scaled = [n for n in ir.Graph.from_json(part.text).nodes if n.attrs.get("mode") == "mul"]
    assert [(len(n.inputs), n.attrs["scalar"]) for n in scaled] == [(1, 0.5)]


def test_a_finite_only_op_records_the_graph_inputs_its_proof_assumed() -> None:
    g = graph(PATTERNS["conv_bias_relu_half"])
    (part,), _ = partition(g)
    assert part.assumes_finite == frozenset({0, 1, 2})  # x, weight and bias
    g = graph(PATTERNS["conv_sigmoid_float"])
    (part,), _ = partition(g)
    assert part.assumes_finite == frozenset()


def test_unmapped_ops_on_the_device_are_reported_with_their_reason() -> None:
    _, report = partition(graph(PATTERNS["refuse_cycle_half"]))
    assert ("aten::softmax", "no cuDNN mapping") in report.unmapped


def test_a_lone_anchor_and_a_pointwise_only_region_stay_with_aten() -> None:
    _, report = partition(graph(PATTERNS["refuse_lone_conv_half"]))
    assert report.rejected == [("_convolution", LONE_ANCHOR)]
    _, report = partition(graph(PATTERNS["refuse_pointwise_only_half"]))
    assert report.rejected == [("tanh, sigmoid, mul", POINTWISE_ONLY)]


def test_a_fork_after_the_group_leaves_the_other_branch_out() -> None:
    _, report = partition(graph(PATTERNS["refuse_fork_half"]))
    assert report.rejected == [("tanh", FORK)]


def test_a_prologue_value_read_outside_keeps_the_whole_prologue_out() -> None:
    g = graph(PATTERNS["refuse_prologue_value_used_outside_half"])
    (part,), report = partition(g)
    assert [n.kind() for n in part.nodes] == ["aten::_convolution", "aten::relu"]
    assert [region for region, _ in report.rejected] == ["mul, add, relu"]


def test_a_reduction_ends_the_group_and_its_ir_keeps_reduced_dims_as_one() -> None:
    g = graph(PATTERNS["linear_relu_row_sum_half"])
    (part,), _ = partition(g)
    lowered = ir.Graph.from_json(part.text)
    (reduction,) = [n for n in lowered.nodes if n.op == "reduction"]
    assert lowered.nodes[-1] is reduction
    assert lowered.tensor(reduction.outputs["Y"]).dims == [1, 8, 1]
    assert part.outputs[0].type().sizes() == [8]


def test_the_catalog_covers_float16_bfloat16_and_float32_groups() -> None:
    dtypes = {PATTERNS[name].dtype for name in GROUPING}
    assert dtypes == {torch.float16, torch.bfloat16, torch.float32}


def test_a_pattern_is_plain_data() -> None:
    pattern = PATTERNS["conv_bias_relu_half"]
    assert isinstance(pattern, Pattern) and "device=cuda:0" in pattern.ir
    assert "device=cuda" not in str(cpu_graph(pattern))


# -- cuDNN's layout rules for convolutions (group_rules.py's _check_conv_layout) ---


def test_an_nchw_conv_group_stops_before_a_residual_add() -> None:
    g = graph(PATTERNS["refuse_nchw_conv_relu_residual_add_half"])
    (part,), report = partition(g)
    assert kinds([part]) == ((CONV, "aten::relu"),)
    assert report.rejected == [("add", NCHW_FULL_SIZE_OPERAND)]


def test_an_nchw_conv_with_an_activation_cudnn_does_not_fuse_stays_with_aten() -> None:
    _, report = partition(graph(PATTERNS["refuse_nchw_conv_gelu_bf16"]))
    assert report.rejected == [("_convolution", LONE_ANCHOR), ("gelu", NCHW_EPILOGUE)]


def test_an_nchw_epilogue_grows_through_to_a_final_reduction() -> None:
    # conv + bias, relu, mul alone is no NCHW group; with the sum after it, it is.
    g = graph(PATTERNS["nchw_conv_relu_scale_channel_sum_half"])
    (part,), report = partition(g)
    assert kinds([part])[0][-1] == "aten::sum" and report.rejected == []


def test_an_nchw_epilogue_that_never_reaches_a_reduction_keeps_the_longest_group() -> None:
    g = graph(PATTERNS["refuse_nchw_conv_relu_scale_tanh_half"])
    (part,), report = partition(g)
    assert kinds([part]) == ((CONV, "aten::relu"),)
    assert report.rejected == [("mul, tanh", NCHW_EPILOGUE)]


def test_an_nchw_conv_takes_no_prologue() -> None:
    g = graph(PATTERNS["refuse_nchw_prologue_half"])
    (part,), report = partition(g)
    assert kinds([part]) == ((CONV, "aten::relu"),)
    assert report.rejected == [("mul, add, relu", NCHW_PROLOGUE)]


def test_an_nchw_conv_reads_no_full_size_operand_before_its_reduction() -> None:
    _, report = partition(graph(PATTERNS["refuse_nchw_residual_add_channel_sum_half"]))
    assert report.rejected == [("_convolution", LONE_ANCHOR), ("add, sum", NCHW_FULL_SIZE_OPERAND)]


def test_a_channels_last_conv_reads_no_tensor_of_another_layout() -> None:
    g = graph(PATTERNS["refuse_nchw_residual_on_channels_last_conv_half"])
    (part,), report = partition(g)
    assert kinds([part]) == ((CONV, "aten::relu"),)
    assert report.rejected == [("add", NOT_CHANNELS_LAST)]


def test_a_reduction_writes_float_whatever_the_io_type() -> None:
    for name in ("conv_relu_channel_sum_half", "linear_3d_row_max_bf16"):
        (part,), _ = partition(graph(PATTERNS[name]))
        lowered = ir.Graph.from_json(part.text)
        (out,) = lowered.outputs
        assert lowered.io_dtype != "float" and lowered.tensor(out).dtype == "float"
