"""Golden IR of every grouping pattern of the catalog (test/cudnn/patterns.py):
the contract the builder compiles and the interpreter runs. One JSON object a
line: the graph's header, its tensors, its nodes (a blank line between groups).
Regenerate with `EXPECTTEST_ACCEPT=1 python -m pytest test/cudnn/test_cudnn_golden_ir.py`
and read the diff: a changed golden is a changed contract."""
# ruff: noqa: E501  (a golden line is one JSON object, as long as it is)

from __future__ import annotations

import json
from dataclasses import asdict

import expecttest
import pytest
from patterns import PATTERNS, graph

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.partition import find_partitions
from torch_graphfuse.passes import finiteness
from torch_graphfuse.report import FusionReport

# Patterns that group and refuse nothing (a refusal's group repeats one of them).
GOLDEN = [name for name, p in PATTERNS.items() if p.groups and not p.refusal]


def lines(graph_ir: ir.Graph) -> str:
    data = asdict(graph_ir)
    tensors, nodes = data.pop("tensors"), data.pop("nodes")
    return "\n".join(json.dumps(d, sort_keys=True) for d in (data, *tensors, *nodes))


def parsed(text: str) -> ir.Graph:
    """The IR a golden's lines hold (the inverse of `lines`)."""
    header, *rest = (json.loads(line) for line in text.splitlines())
    header["tensors"] = [d for d in rest if "dims" in d]
    header["nodes"] = [d for d in rest if "op" in d]
    return ir.Graph.from_json(json.dumps(header))


def lowered(name: str) -> list[ir.Graph]:
    g = graph(PATTERNS[name])
    parts = find_partitions(g.block(), finiteness.analyze(g), FusionReport())
    return [ir.Graph.from_json(p.text) for p in parts]


def golden(name: str) -> str:
    return "\n\n".join(lines(graph_ir) for graph_ir in lowered(name))


@pytest.mark.parametrize("name", GOLDEN)
def test_golden_lines_round_trip_to_the_partitions_ir(name: str) -> None:
    for graph_ir in lowered(name):
        assert parsed(lines(graph_ir)) == graph_ir


@pytest.mark.parametrize("name", GOLDEN)
def test_every_grouping_pattern_has_a_golden(name: str) -> None:
    assert hasattr(TestGoldenIR, f"test_{name}")


def test_lowering_twice_gives_the_same_ir() -> None:
    assert [g.to_json() for g in lowered("bn_relu_prologue_conv_relu_half")] == \
        [g.to_json() for g in lowered("bn_relu_prologue_conv_relu_half")]


class TestGoldenIR(expecttest.TestCase):
    def test_conv_bias_relu_half(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_float(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_bias_relu_channels_last_half(self) -> None:
        self.assertExpectedInline(golden("conv_bias_relu_channels_last_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv2d_residual_add_relu_bf16(self) -> None:
        self.assertExpectedInline(golden("conv2d_residual_add_relu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 3, "strides": [2048, 1, 256, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}""")

    def test_conv_scale_tanh_half(self) -> None:
        self.assertExpectedInline(golden("conv_scale_tanh_half"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [4], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 2, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 4, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 2}}
{"attrs": {"mode": "mul", "scalar": 0.5}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}
{"attrs": {"mode": "tanh_fwd"}, "inputs": {"IN_0": 3}, "op": "pointwise", "outputs": {"OUT_0": 4}}""")

    def test_conv_mul_channel_scale_sigmoid_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_mul_channel_scale_sigmoid_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 3, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}""")

    def test_conv_gelu_none_half(self) -> None:
        self.assertExpectedInline(golden("conv_gelu_none_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_gelu_tanh_half(self) -> None:
        self.assertExpectedInline(golden("conv_gelu_tanh_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_approx_tanh_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_sigmoid_float(self) -> None:
        self.assertExpectedInline(golden("conv_sigmoid_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_silu_half(self) -> None:
        self.assertExpectedInline(golden("conv_silu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 5, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "swish_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_conv_swish_diamond_half(self) -> None:
        self.assertExpectedInline(golden("conv_swish_diamond_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 4, "IN_1": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_relu6_half(self) -> None:
        self.assertExpectedInline(golden("conv_relu6_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": 0.0}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "min", "scalar": 6.0}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_clamp_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_clamp_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 6, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": -1.0}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "min", "scalar": 1.5}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_conv_relu_channel_sum_half(self) -> None:
        self.assertExpectedInline(golden("conv_relu_channel_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 6, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_conv_channel_mean_float(self) -> None:
        self.assertExpectedInline(golden("conv_channel_mean_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [6], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "float", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "float", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 6, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "mul", "scalar": 0.03125}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_conv_channel_max_channels_last_half(self) -> None:
        self.assertExpectedInline(golden("conv_channel_max_channels_last_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 5, "strides": [64, 1, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_conv_per_channel_sum_bf16(self) -> None:
        self.assertExpectedInline(golden("conv_per_channel_sum_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [1, 32, 1, 1], "dtype": "float", "id": 5, "strides": [32, 1, 1, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "add"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_bn_relu_prologue_conv_relu_half(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_conv_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "half", "io_dtype": "half", "outputs": [10], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "half", "id": 1, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "half", "id": 2, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 3, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 4, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 5, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 6, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 7, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 8, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 9, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "half", "id": 10, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 3, "X": 7}, "op": "conv_fprop", "outputs": {"Y": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 9}, "op": "pointwise", "outputs": {"OUT_0": 10}}""")

    def test_bn_relu_prologue_conv_channels_last_bf16(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_conv_channels_last_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "bfloat16", "io_dtype": "bfloat16", "outputs": [9], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 1, 128, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "bfloat16", "id": 1, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [1, 16, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [16, 1, 16, 16], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 3, "strides": [144, 1, 48, 16], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 4, "strides": [32, 1, 32, 32], "virtual": false}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 5, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 6, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 7, "strides": [1024, 1, 128, 16], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 8, "strides": [2048, 1, 256, 32], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "bfloat16", "id": 9, "strides": [2048, 1, 256, 32], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 3, "X": 7}, "op": "conv_fprop", "outputs": {"Y": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}""")

    def test_linear_bias_gelu_half(self) -> None:
        self.assertExpectedInline(golden("linear_bias_gelu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_3d_gelu_tanh_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_gelu_tanh_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "gelu_approx_tanh_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_3d_residual_add_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_residual_add_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [6], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 3, "strides": [256, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "bfloat16", "id": 6, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 6}}""")

    def test_matmul_tanh_float(self) -> None:
        self.assertExpectedInline(golden("matmul_tanh_float"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [3], "version": 1}
{"dims": [1, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 2}}
{"attrs": {"mode": "tanh_fwd"}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}""")

    def test_bmm_scale_mask_half(self) -> None:
        self.assertExpectedInline(golden("bmm_scale_mask_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [2, 64, 16], "dtype": "half", "id": 1, "strides": [1024, 16, 1], "virtual": false}
{"dims": [2, 1, 16], "dtype": "half", "id": 2, "strides": [16, 16, 1], "virtual": false}
{"dims": [2, 8, 16], "dtype": "float", "id": 3, "strides": [128, 16, 1], "virtual": true}
{"dims": [2, 8, 16], "dtype": "float", "id": 4, "strides": [128, 16, 1], "virtual": true}
{"dims": [2, 8, 16], "dtype": "half", "id": 5, "strides": [128, 16, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "div", "scalar": 8.0}, "inputs": {"IN_0": 3}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_addmm_relu_half(self) -> None:
        self.assertExpectedInline(golden("addmm_relu_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [5], "version": 1}
{"dims": [1, 1, 32], "dtype": "half", "id": 0, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 64], "dtype": "half", "id": 1, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 2, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 1, "B": 2}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 0}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_mm_sub_clamp_min_float(self) -> None:
        self.assertExpectedInline(golden("mm_sub_clamp_min_float"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "sub"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max", "scalar": 0.25}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_silu_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_silu_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [1, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "bfloat16", "id": 5, "strides": [256, 32, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "swish_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}""")

    def test_linear_relu_row_sum_half(self) -> None:
        self.assertExpectedInline(golden("linear_relu_row_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [6], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "float", "id": 5, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 1], "dtype": "float", "id": 6, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"X": 5}, "op": "reduction", "outputs": {"Y": 6}}""")

    def test_linear_3d_row_max_bf16(self) -> None:
        self.assertExpectedInline(golden("linear_3d_row_max_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [5], "version": 1}
{"dims": [2, 8, 64], "dtype": "bfloat16", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "bfloat16", "id": 1, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "bfloat16", "id": 2, "strides": [32, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 4, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 1], "dtype": "float", "id": 5, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "max"}, "inputs": {"X": 4}, "op": "reduction", "outputs": {"Y": 5}}""")

    def test_matmul_row_mean_float(self) -> None:
        self.assertExpectedInline(golden("matmul_row_mean_float"), """\
{"compute_dtype": "float", "inputs": [0, 1], "intermediate_dtype": "float", "io_dtype": "float", "outputs": [4], "version": 1}
{"dims": [2, 8, 64], "dtype": "float", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [2, 64, 32], "dtype": "float", "id": 1, "strides": [2048, 32, 1], "virtual": false}
{"dims": [2, 8, 32], "dtype": "float", "id": 2, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 32], "dtype": "float", "id": 3, "strides": [256, 32, 1], "virtual": true}
{"dims": [2, 8, 1], "dtype": "float", "id": 4, "strides": [8, 1, 1], "virtual": false}
{"attrs": {}, "inputs": {"A": 0, "B": 1}, "op": "matmul", "outputs": {"C": 2}}
{"attrs": {"mode": "mul", "scalar": 0.03125}, "inputs": {"IN_0": 2}, "op": "pointwise", "outputs": {"OUT_0": 3}}
{"attrs": {"mode": "add"}, "inputs": {"X": 3}, "op": "reduction", "outputs": {"Y": 4}}""")

    def test_bn_relu_prologue_linear_half(self) -> None:
        self.assertExpectedInline(golden("bn_relu_prologue_linear_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3, 4], "intermediate_dtype": "half", "io_dtype": "half", "outputs": [9], "version": 1}
{"dims": [1, 8, 64], "dtype": "half", "id": 0, "strides": [512, 64, 1], "virtual": false}
{"dims": [1, 1, 64], "dtype": "half", "id": 1, "strides": [64, 64, 1], "virtual": false}
{"dims": [1, 1, 64], "dtype": "half", "id": 2, "strides": [64, 64, 1], "virtual": false}
{"dims": [1, 64, 32], "dtype": "half", "id": 3, "strides": [2048, 1, 64], "virtual": false}
{"dims": [1, 1, 32], "dtype": "half", "id": 4, "strides": [32, 32, 1], "virtual": false}
{"dims": [1, 8, 64], "dtype": "half", "id": 5, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 64], "dtype": "half", "id": 6, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 64], "dtype": "half", "id": 7, "strides": [512, 64, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 8, "strides": [256, 32, 1], "virtual": true}
{"dims": [1, 8, 32], "dtype": "half", "id": 9, "strides": [256, 32, 1], "virtual": false}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 0, "IN_1": 1}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 5, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 6}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {}, "inputs": {"A": 7, "B": 3}, "op": "matmul", "outputs": {"C": 8}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 8, "IN_1": 4}, "op": "pointwise", "outputs": {"OUT_0": 9}}""")

    def test_nchw_conv_relu_scale_channel_sum_half(self) -> None:
        self.assertExpectedInline(golden("nchw_conv_relu_scale_channel_sum_half"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2, 3], "intermediate_dtype": "float", "io_dtype": "half", "outputs": [8], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "half", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "half", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "half", "id": 3, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 7, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 8, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 4}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 4, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "relu_fwd"}, "inputs": {"IN_0": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 6, "IN_1": 3}, "op": "pointwise", "outputs": {"OUT_0": 7}}
{"attrs": {"mode": "add"}, "inputs": {"X": 7}, "op": "reduction", "outputs": {"Y": 8}}""")

    def test_nchw_conv_swish_channel_max_bf16(self) -> None:
        self.assertExpectedInline(golden("nchw_conv_swish_channel_max_bf16"), """\
{"compute_dtype": "float", "inputs": [0, 1, 2], "intermediate_dtype": "float", "io_dtype": "bfloat16", "outputs": [7], "version": 1}
{"dims": [2, 16, 8, 8], "dtype": "bfloat16", "id": 0, "strides": [1024, 64, 8, 1], "virtual": false}
{"dims": [32, 16, 3, 3], "dtype": "bfloat16", "id": 1, "strides": [144, 9, 3, 1], "virtual": false}
{"dims": [1, 32, 1, 1], "dtype": "bfloat16", "id": 2, "strides": [32, 1, 1, 1], "virtual": false}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 3, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 4, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 5, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 32, 8, 8], "dtype": "float", "id": 6, "strides": [2048, 64, 8, 1], "virtual": true}
{"dims": [2, 1, 8, 8], "dtype": "float", "id": 7, "strides": [64, 64, 8, 1], "virtual": false}
{"attrs": {"dilation": [1, 1], "padding": [1, 1], "stride": [1, 1]}, "inputs": {"W": 1, "X": 0}, "op": "conv_fprop", "outputs": {"Y": 3}}
{"attrs": {"mode": "add"}, "inputs": {"IN_0": 3, "IN_1": 2}, "op": "pointwise", "outputs": {"OUT_0": 4}}
{"attrs": {"mode": "sigmoid_fwd"}, "inputs": {"IN_0": 4}, "op": "pointwise", "outputs": {"OUT_0": 5}}
{"attrs": {"mode": "mul"}, "inputs": {"IN_0": 4, "IN_1": 5}, "op": "pointwise", "outputs": {"OUT_0": 6}}
{"attrs": {"mode": "max"}, "inputs": {"X": 6}, "op": "reduction", "outputs": {"Y": 7}}""")
