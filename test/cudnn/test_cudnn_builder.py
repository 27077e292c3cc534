"""The cuDNN frontend builder (IR -> cudnn.pygraph), with no device: every IR
(hand-built, and every pattern of the catalog lowered) builds a frontend graph,
and the frontend's own JSON says the ops, dims, strides and dtypes the IR says.
cuDNN's support for these graphs is the deviceless tier's (test_cudnn_deviceless.py).

Tests that build skip when the frontend (the `cuda` extra) is not installed.
"""

from __future__ import annotations

import json
import sys

import pytest
from frontend_installed import needs_cudnn
from hand_built_ir import (
    CONV_ATTRS,
    HAND_BUILT,
    bmm_scaled_row_max,
    conv_bias_relu6,
    linear_bias_gelu_tanh,
)
from lowered_patterns import every_lowered

from torch_graphfuse.backends.cudnn import builder, frontend, ir
from torch_graphfuse.backends.cudnn.ir_maker import Maker

FRONTEND_NODE = {"conv_fprop": ("CONV_FPROP", {"X": "image", "W": "weight", "Y": "Y"}),
                 "matmul": ("MATMUL", {"A": "A", "B": "B", "C": "C"}),
                 "pointwise": ("POINTWISE", {}),
                 "reduction": ("REDUCTION", {"X": "input", "Y": "OUT_0"})}
FRONTEND_DTYPE = {"float": "data_type.FLOAT", "half": "data_type.HALF",
                  "bfloat16": "data_type.BFLOAT16"}


def frontend_json(graph: ir.Graph) -> dict:
    """The frontend's own JSON printout of the graph it builds; needs no device."""
    return json.loads(str(builder.build(graph).graph))


def assert_frontend_says_what_the_ir_says(graph: ir.Graph) -> None:
    fe = frontend_json(graph)
    assert len(fe["nodes"]) == len(graph.nodes)
    for node, got in zip(graph.nodes, fe["nodes"], strict=True):
        kind, ports = FRONTEND_NODE[node.op]
        assert got["type"] == kind, (node, got)
        for port, tid in (*node.inputs.items(), *node.outputs.items()):
            side = "inputs" if port in node.inputs else "outputs"
            assert got[side][ports.get(port, port)] == f"t{tid}", (node, got)
        if node.op == "pointwise":
            # The frontend names cuDNN's CUDNN_POINTWISE_X_FWD modes x.
            assert got["params"]["mode"] == node.attrs["mode"].removesuffix("_fwd")
        if node.op == "conv_fprop":
            assert got["params"] == {k: node.attrs[k] for k in ("padding", "stride", "dilation")}
    for t in graph.tensors:
        got = fe["tensors"][f"t{t.id}"]
        assert (got["dim"], got["stride"]) == (t.dims, t.strides), t
        assert (got["dtype"], got["is_virtual"]) == (FRONTEND_DTYPE[t.dtype], t.virtual), t


def test_missing_frontend_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cudnn", None)  # what an absent package looks like
    with pytest.raises(frontend.CudnnUnavailable, match=r"torch_graphfuse\[cuda\]"):
        builder.build(conv_bias_relu6())


@needs_cudnn
def test_conv_epilogue_translates_node_by_node() -> None:
    fe = frontend_json(conv_bias_relu6())
    assert [(n["name"], n["type"], n["params"].get("mode")) for n in fe["nodes"]] == [
        ("n0_conv_fprop", "CONV_FPROP", None),
        ("n1_add", "POINTWISE", "add"),
        ("n2_relu_fwd", "POINTWISE", "relu"),
    ]
    conv, add, relu = fe["nodes"]
    assert conv["inputs"] == {"image": "t0", "weight": "t1"}
    assert conv["params"] == CONV_ATTRS
    assert add["inputs"] == {"IN_0": "t3", "IN_1": "t2"}
    assert relu["params"]["upper_clip"] == 6.0


@needs_cudnn
@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_ir_translates_node_by_node(name: str) -> None:
    assert_frontend_says_what_the_ir_says(HAND_BUILT[name]())


@needs_cudnn
def test_every_lowered_pattern_translates_node_by_node() -> None:
    graphs = every_lowered()
    assert len(graphs) >= 30  # the catalog's grouping patterns, at least
    for name, graph in graphs.items():
        try:
            assert_frontend_says_what_the_ir_says(graph)
        except (AssertionError, builder.BuildError) as error:
            raise AssertionError(f"pattern {name}") from error


@needs_cudnn
def test_group_ports_get_uids_from_their_ir_ids() -> None:
    graph = linear_bias_gelu_tanh()
    built = builder.build(graph)
    for tid in (*graph.inputs, *graph.outputs):
        assert built.tensors[tid].get_uid() == builder.uid(tid)
    assert set(built.tensors) == {t.id for t in graph.tensors}


@needs_cudnn
def test_number_operand_becomes_a_scalar_input() -> None:
    fe = frontend_json(bmm_scaled_row_max())
    mul = fe["nodes"][1]
    assert mul["params"] == {"mode": "mul"}
    assert mul["inputs"]["IN_0"] == "t2"
    scalar = fe["tensors"][mul["inputs"]["IN_1"]]
    assert scalar["dim"] == [1, 1, 1, 1]


@needs_cudnn
def test_reduction_takes_its_mode_and_reduced_dims() -> None:
    fe = frontend_json(bmm_scaled_row_max())
    reduction = fe["nodes"][2]
    assert reduction["type"] == "REDUCTION"
    assert "MAX" in str(reduction["params"]["mode"])
    assert fe["tensors"][reduction["outputs"]["OUT_0"]]["dim"] == [4, 64, 1]


@needs_cudnn
@pytest.mark.parametrize("mode", sorted(ir.POINTWISE))
def test_every_pointwise_mode_builds(mode: str) -> None:
    m = Maker()
    inputs = {f"IN_{i}": m.input([2, 3, 4]) for i in range(ir.POINTWISE[mode].arity)}
    m.result("pointwise", inputs, [2, 3, 4], out=True, mode=mode)
    (node,) = frontend_json(m.graph)["nodes"]
    assert node["name"] == f"n0_{mode}"
    assert node["params"]["mode"] == ir.POINTWISE[mode].method
    assert sorted(node["inputs"]) == sorted(inputs)


@needs_cudnn
@pytest.mark.parametrize("attrs, match", [
    ({"mode": "hardswish_fwd"}, "unknown mode"),
    ({"mode": "relu_fwd", "elu_alpha": 1.0}, "no frontend counterpart"),
    ({"mode": "sigmoid_fwd", "scalar": 2.0}, "a scalar and no tensor input"),
])
def test_what_the_frontend_cannot_say_is_refused(attrs: dict, match: str) -> None:
    m = Maker()
    x = m.input([2, 3])
    m.result("pointwise", {"IN_0": x}, [2, 3], out=True, **attrs)
    with pytest.raises(builder.BuildError, match=match):
        builder.build(m.graph)


@needs_cudnn
def test_a_port_the_node_does_not_have_is_refused() -> None:
    m = Maker()
    a, b = m.input([1, 2, 3]), m.input([1, 3, 4])
    m.result("matmul", {"A": a, "B": b, "bias": a}, [1, 2, 4], out=True)
    with pytest.raises(builder.BuildError, match="input ports"):
        builder.build(m.graph)


@needs_cudnn
def test_a_conv_without_its_padding_is_refused() -> None:
    m = Maker()
    x, w = m.input([1, 4, 8, 8]), m.input([4, 4, 3, 3])
    m.result("conv_fprop", {"X": x, "W": w}, [1, 4, 6, 6], out=True, stride=[1, 1],
             dilation=[1, 1])
    with pytest.raises(builder.BuildError, match="padding"):
        builder.build(m.graph)
