"""The cuDNN frontend builder (IR -> cudnn.pygraph) and cuDNN's deviceless tier.

Tier 1, no device: every IR (hand-built here, and every pattern of the catalog
lowered) builds a frontend graph, and the frontend's own JSON says the ops,
dims, strides and dtypes the IR says.

Tier 2, deviceless: cuDNN checks support and builds plans for an H100, A100
and B200 from device descriptions (device_specs.py), with no GPU. cuDNN's
engine libraries load the CUDA driver library even then, so this tier compiles
fake_libcuda.c (a TEST-ONLY driver stand-in that reports no device) and runs
cuDNN in a subprocess whose library path holds it: the stand-in never enters
this process.

Both tiers skip when the frontend (the `cuda` extra) is not installed.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import patterns
import pytest

from torch_graphfuse.backends.cudnn import builder, device_specs, interpreter, ir
from torch_graphfuse.backends.cudnn.partition import find_partitions
from torch_graphfuse.passes import finiteness
from torch_graphfuse.report import FusionReport


def have_cudnn() -> bool:
    try:
        return importlib.util.find_spec("cudnn") is not None
    except (ImportError, ValueError):  # hidden or half-installed: as good as absent
        return False


HAVE_CUDNN = have_cudnn()
needs_cudnn = pytest.mark.skipif(
    not HAVE_CUDNN, reason="cuDNN frontend not installed (pip install 'torch_graphfuse[cuda]')")
HERE = Path(__file__).resolve().parent
DEVICES = tuple(device_specs.DEVICES)


# -- hand-built IRs -----------------------------------------------------------------------


def dense(dims: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(dims):
        strides.insert(0, step)
        step *= d
    return strides


def nhwc(dims: list[int]) -> list[int]:
    n, c, h, w = dims
    return [h * w * c, 1, w * c, c]


Layout = Callable[[list[int]], list[int]]


class Maker:
    """An ir.Graph by hand: tensors get ids in creation order."""

    def __init__(self, io: str = "half", intermediate: str = "float") -> None:
        self.graph = ir.Graph(io, intermediate, "float")

    def port(self, dims: list[int], strides: list[int] | None = None) -> int:
        tid = self._tensor(dims, strides, self.graph.io_dtype, False)
        self.graph.inputs.append(tid)
        return tid

    def node(self, op: str, inputs: dict[str, int], dims: list[int], *,
             strides: list[int] | None = None, out: bool = False, port: str = "OUT_0",
             dtype: str | None = None, **attrs: object) -> int:
        dtype = dtype or (self.graph.io_dtype if out else self.graph.intermediate_dtype)
        tid = self._tensor(dims, strides, dtype, not out)
        self.graph.nodes.append(ir.Node(op, inputs, {port: tid}, dict(attrs)))
        if out:
            self.graph.outputs.append(tid)
        return tid

    def _tensor(self, dims: list[int], strides: list[int] | None, dtype: str,
                virtual: bool) -> int:
        tid = len(self.graph.tensors)
        self.graph.tensors.append(ir.Tensor(tid, list(dims), strides or dense(dims), dtype,
                                            virtual))
        return tid


CONV = {"padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]}


def conv_bias_relu6(io: str = "half", layout: Layout = nhwc) -> ir.Graph:
    m = Maker(io)
    x = m.port([8, 64, 28, 28], layout([8, 64, 28, 28]))
    w = m.port([32, 64, 3, 3], layout([32, 64, 3, 3]))
    bias = m.port([1, 32, 1, 1], [0, 1, 0, 0])
    shape = [8, 32, 28, 28]
    y = m.node("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), port="Y", **CONV)
    b = m.node("pointwise", {"IN_0": y, "IN_1": bias}, shape, strides=layout(shape), mode="add")
    m.node("pointwise", {"IN_0": b}, shape, strides=layout(shape), out=True, mode="relu_fwd",
           relu_upper_clip=6.0)
    return m.graph


def conv_residual_gelu_channel_sum(layout: Layout = nhwc, out_dtype: str = "float") -> ir.Graph:
    m = Maker("half")
    shape = [4, 16, 14, 14]
    x = m.port(shape, layout(shape))
    w = m.port([16, 16, 3, 3], layout([16, 16, 3, 3]))
    residual = m.port(shape, layout(shape))
    y = m.node("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), port="Y", **CONV)
    r = m.node("pointwise", {"IN_0": y, "IN_1": residual}, shape, strides=layout(shape),
               mode="add")
    g = m.node("pointwise", {"IN_0": r}, shape, strides=layout(shape), mode="gelu_fwd")
    m.node("reduction", {"X": g}, [4, 1, 14, 14], strides=layout([4, 1, 14, 14]), out=True,
           port="Y", dtype=out_dtype, mode="add")
    return m.graph


def linear_bias_gelu_tanh(io: str = "bfloat16") -> ir.Graph:
    m = Maker(io)
    a = m.port([1, 128, 256])
    b = m.port([1, 256, 512], [0, 1, 256])  # a [512, 256] weight read transposed
    bias = m.port([1, 1, 512], [0, 0, 1])
    c = m.node("matmul", {"A": a, "B": b}, [1, 128, 512], port="C")
    d = m.node("pointwise", {"IN_0": c, "IN_1": bias}, [1, 128, 512], mode="add")
    m.node("pointwise", {"IN_0": d}, [1, 128, 512], out=True, mode="gelu_approx_tanh_fwd")
    return m.graph


def bmm_scaled_row_max(out_dtype: str = "float") -> ir.Graph:
    m = Maker("half")
    a = m.port([4, 64, 32])
    b = m.port([4, 32, 48])
    c = m.node("matmul", {"A": a, "B": b}, [4, 64, 48], port="C")
    s = m.node("pointwise", {"IN_0": c}, [4, 64, 48], mode="mul", scalar=0.125)
    m.node("reduction", {"X": s}, [4, 64, 1], out=True, port="Y", dtype=out_dtype, mode="max")
    return m.graph


def prologue_conv(intermediate: str, layout: Layout = nhwc) -> ir.Graph:
    """A BN-ReLU before a conv: per-channel scale + bias + relu on X."""
    m = Maker("half", intermediate)
    shape = [8, 64, 28, 28]
    x = m.port(shape, layout(shape))
    scale = m.port([1, 64, 1, 1], [0, 1, 0, 0])
    shift = m.port([1, 64, 1, 1], [0, 1, 0, 0])
    w = m.port([32, 64, 3, 3], layout([32, 64, 3, 3]))
    s = m.node("pointwise", {"IN_0": x, "IN_1": scale}, shape, strides=layout(shape),
               mode="mul")
    t = m.node("pointwise", {"IN_0": s, "IN_1": shift}, shape, strides=layout(shape),
               mode="add")
    r = m.node("pointwise", {"IN_0": t}, shape, strides=layout(shape), mode="relu_fwd")
    out = [8, 32, 28, 28]
    m.node("conv_fprop", {"X": r, "W": w}, out, strides=layout(out), out=True, port="Y",
           **CONV)
    return m.graph


def conv_epilogue(steps: tuple[str, ...], layout: Layout = dense,
                  residual: Layout | None = None) -> ir.Graph:
    """A half conv [2, 16, 8, 8] -> [2, 32, 8, 8] in `layout`, then `steps`: "bias"
    (a per-channel add), "residual" (an add of a full-size tensor, in `residual`
    layout, `layout` by default) or a unary pointwise mode."""
    m = Maker("half")
    x, w = m.port([2, 16, 8, 8], layout([2, 16, 8, 8])), m.port([32, 16, 3, 3],
                                                                 layout([32, 16, 3, 3]))
    shape = [2, 32, 8, 8]
    y = m.node("conv_fprop", {"X": x, "W": w}, shape, strides=layout(shape), port="Y",
               out=not steps, **CONV)
    for i, step in enumerate(steps):
        if step == "bias":
            inputs = {"IN_0": y, "IN_1": m.port([1, 32, 1, 1], layout([1, 32, 1, 1]))}
        elif step == "residual":
            inputs = {"IN_0": y, "IN_1": m.port(shape, (residual or layout)(shape))}
        else:
            inputs = {"IN_0": y}
        mode = "add" if step in ("bias", "residual") else step
        y = m.node("pointwise", inputs, shape, strides=layout(shape), out=i == len(steps) - 1,
                   mode=mode)
    return m.graph


HAND_BUILT = {
    "conv_bias_relu6_nhwc_fp16": conv_bias_relu6,
    "conv_bias_relu6_nchw_fp16": lambda: conv_bias_relu6("half", dense),
    "conv_bias_relu6_nchw_fp32": lambda: conv_bias_relu6("float", dense),
    "conv_residual_gelu_channel_sum_fp16": conv_residual_gelu_channel_sum,
    "linear_bias_gelu_tanh_bf16": linear_bias_gelu_tanh,
    "bmm_scaled_row_max_fp16": bmm_scaled_row_max,
    "prologue_conv_half_intermediate": lambda: prologue_conv("half"),
    "conv_nchw_bias_tanh_fp16": lambda: conv_epilogue(("bias", "tanh_fwd")),
    "conv_nhwc_bias_residual_relu_fp16": lambda: conv_epilogue(("bias", "residual", "relu_fwd"),
                                                               nhwc),
}


@functools.cache
def lowered_patterns() -> dict[str, ir.Graph]:
    """Every group the partitioner forms in the pattern catalog, lowered (what the
    goldens of test_cudnn_golden_ir.py pin), named `pattern` or `pattern#i`."""
    graphs = {}
    for name, pattern in patterns.PATTERNS.items():
        g = patterns.graph(pattern)
        parts = find_partitions(g.block(), finiteness.analyze(g), FusionReport())
        for i, part in enumerate(parts):
            graphs[name if len(parts) == 1 else f"{name}#{i}"] = ir.Graph.from_json(part.text)
    return graphs


# -- tier 1: frontend graphs with no device ---------------------------------------------------


FRONTEND_NODE = {"conv_fprop": ("CONV_FPROP", {"X": "image", "W": "weight", "Y": "Y"}),
                 "matmul": ("MATMUL", {"A": "A", "B": "B", "C": "C"}),
                 "pointwise": ("POINTWISE", {}),
                 "reduction": ("REDUCTION", {"X": "input", "Y": "OUT_0"})}
FRONTEND_DTYPE = {"float": "data_type.FLOAT", "half": "data_type.HALF",
                  "bfloat16": "data_type.BFLOAT16"}


def frontend_json(graph: ir.Graph) -> dict:
    return builder.graph_json(graph)


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
    with pytest.raises(builder.CudnnUnavailable, match=r"torch_graphfuse\[cuda\]"):
        builder.build(conv_bias_relu6())


def test_device_descriptions_name_each_gpu_and_its_sm_version() -> None:
    assert {name: device_specs.sm_version(name) for name in DEVICES} == {
        "H100": 90, "A100": 80, "B200": 100}
    for name in DEVICES:
        assert name in json.loads(device_specs.description_json(name))["deviceName"]


@needs_cudnn
@pytest.mark.parametrize("device", DEVICES)
def test_cudnn_accepts_each_device_description(device: str) -> None:
    described = json.loads(device_specs.device_properties(device).serialize())
    wanted = device_specs.DEVICES[device]
    for key in ("multiProcessorCount", "deviceVer", "maxSharedMemoryPerBlockOptin",
                "l2CacheSize"):
        assert described[key] == wanted[key]


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
    assert conv["params"] == CONV
    assert add["inputs"] == {"IN_0": "t3", "IN_1": "t2"}
    assert relu["params"]["upper_clip"] == 6.0


@needs_cudnn
@pytest.mark.parametrize("name", sorted(HAND_BUILT))
def test_hand_built_ir_translates_node_by_node(name: str) -> None:
    assert_frontend_says_what_the_ir_says(HAND_BUILT[name]())


@needs_cudnn
def test_every_lowered_pattern_translates_node_by_node() -> None:
    graphs = lowered_patterns()
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
@pytest.mark.parametrize("mode", sorted(builder.POINTWISE))
def test_every_pointwise_mode_builds(mode: str) -> None:
    m = Maker("float")
    spec = builder.POINTWISE[mode]
    inputs = {f"IN_{i}": m.port([2, 3, 4]) for i in range(spec.arity)}
    m.node("pointwise", inputs, [2, 3, 4], out=True, mode=mode)
    (node,) = frontend_json(m.graph)["nodes"]
    assert node["name"] == f"n0_{mode}"
    assert sorted(node["inputs"]) == sorted(inputs)


def test_every_interpreted_pointwise_mode_has_a_frontend_call() -> None:
    # elu's alpha and softplus's beta have no frontend parameter: the builder refuses
    # those modes (the op table never emits them).
    assert set(interpreter.POINTWISE_MODES) - set(builder.POINTWISE) == {"elu_fwd", "softplus_fwd"}
    assert set(builder.POINTWISE) <= set(interpreter.POINTWISE_MODES)
    assert set(interpreter.REDUCTION_MODES) <= set(builder.REDUCTION_MODES)


@needs_cudnn
@pytest.mark.parametrize("attrs, match", [
    ({"mode": "hardswish_fwd"}, "no frontend call"),
    ({"mode": "relu_fwd", "elu_alpha": 1.0}, "no frontend counterpart"),
    ({"mode": "sigmoid_fwd", "scalar": 2.0}, "a scalar and no tensor input"),
])
def test_what_the_frontend_cannot_say_is_refused(attrs: dict, match: str) -> None:
    m = Maker("float")
    x = m.port([2, 3])
    m.node("pointwise", {"IN_0": x}, [2, 3], out=True, **attrs)
    with pytest.raises(builder.BuildError, match=match):
        builder.build(m.graph)


@needs_cudnn
def test_a_port_the_node_does_not_have_is_refused() -> None:
    m = Maker("float")
    a, b = m.port([1, 2, 3]), m.port([1, 3, 4])
    m.node("matmul", {"A": a, "B": b, "bias": a}, [1, 2, 4], out=True, port="C")
    with pytest.raises(builder.BuildError, match="input ports"):
        builder.build(m.graph)


@needs_cudnn
def test_a_conv_without_its_padding_is_refused() -> None:
    m = Maker("float")
    x, w = m.port([1, 4, 8, 8]), m.port([4, 4, 3, 3])
    m.node("conv_fprop", {"X": x, "W": w}, [1, 4, 6, 6], out=True, port="Y", stride=[1, 1],
           dilation=[1, 1])
    with pytest.raises(builder.BuildError, match="padding"):
        builder.build(m.graph)


# -- tier 2: deviceless support checks and plans ------------------------------------------


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the test-only libcuda.so.1 stand-in, compiled here."""
    if not HAVE_CUDNN:
        pytest.skip("cuDNN frontend not installed")
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler for the driver stand-in")
    directory = tmp_path_factory.mktemp("fake_driver")
    subprocess.run([compiler, "-shared", "-fPIC", "-O1", "-Wall", "-Werror",
                    "-o", str(directory / "libcuda.so.1"), str(HERE / "fake_libcuda.c")],
                   check=True)
    return directory


def plan_deviceless(fake_driver: Path, graphs: dict[str, ir.Graph]) -> dict[str, dict[str, dict]]:
    """device_specs.plan_deviceless of each graph for each device: one subprocess
    per device, all at once, each with the stand-in on its library path."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(fake_driver), env.get("LD_LIBRARY_PATH")) if p)
    payload = json.dumps([json.loads(g.to_json()) for g in graphs.values()])
    runs = {device: subprocess.Popen([sys.executable, "-m", device_specs.__name__, device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env)
            for device in DEVICES}
    results = {}
    for device, run in runs.items():
        out, err = run.communicate(payload, timeout=600)
        assert run.returncode == 0, err[-4000:]
        results[device] = dict(zip(graphs, json.loads(out), strict=True))
    return results


# IRs cuDNN 9.24 refuses, and on which GPUs: the rules the partitioner and the
# lowering respect (lower.py: reductions write float, _check_conv_layout), each
# found by changing only that in an IR cuDNN plans.
REFUSED: dict[str, tuple[Callable[[], ir.Graph], set[str]]] = {
    # Runtime fusion engines keep a prologue's intermediates in the io type on
    # sm_90 and sm_100 (lower.py does); sm_80 takes float too.
    "prologue_conv_float_intermediate": (lambda: prologue_conv("float"), {"H100", "B200"}),
    # A reduction writes float, whatever the io type.
    "conv_channel_sum_to_half": (lambda: conv_residual_gelu_channel_sum(out_dtype="half"),
                                 set(DEVICES)),
    "bmm_row_max_to_half": (lambda: bmm_scaled_row_max("half"), set(DEVICES)),
    # A conv result that is not channels_last: a bias and one relu / tanh / sigmoid,
    # or broadcast operands before a final reduction, and no prologue.
    "conv_nchw_bias_gelu": (lambda: conv_epilogue(("bias", "gelu_fwd")), set(DEVICES)),
    "conv_nchw_relu_without_bias": (lambda: conv_epilogue(("relu_fwd",)), set(DEVICES)),
    "conv_nchw_bias_residual_relu": (lambda: conv_epilogue(("bias", "residual", "relu_fwd")),
                                     set(DEVICES)),
    "conv_nchw_residual_channel_sum": (lambda: conv_residual_gelu_channel_sum(dense),
                                       set(DEVICES)),
    "prologue_conv_nchw": (lambda: prologue_conv("half", dense), set(DEVICES)),
    # A channels_last conv reading a full-size tensor that is not.
    "conv_nhwc_nchw_residual": (lambda: conv_epilogue(("bias", "residual", "relu_fwd"), nhwc,
                                                      residual=dense), set(DEVICES)),
}


PATTERN_PREFIX = "pattern:"


@pytest.fixture(scope="module")
def deviceless_by_device(fake_driver: Path) -> dict[str, dict[str, dict]]:
    graphs = {name: make() for name, make in HAND_BUILT.items()}
    graphs.update((name, make()) for name, (make, _) in REFUSED.items())
    graphs.update((PATTERN_PREFIX + name, g) for name, g in lowered_patterns().items())
    return plan_deviceless(fake_driver, graphs)


@pytest.fixture(params=DEVICES)
def deviceless(request: pytest.FixtureRequest,
               deviceless_by_device: dict[str, dict[str, dict]]) -> tuple[str, dict[str, dict]]:
    return request.param, deviceless_by_device[request.param]


def test_every_hand_built_ir_gets_a_serialized_plan(deviceless: tuple[str, dict]) -> None:
    device, results = deviceless
    for name in HAND_BUILT:
        result = results[name]
        assert result["supported"], (name, result["failed_step"], result["error"][-500:])
        assert result["plan_count"] >= 1 and result["plan_bytes"] > 0, name


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_cudnn_refuses_what_its_rules_exclude(deviceless: tuple[str, dict], name: str) -> None:
    device, results = deviceless
    result = results[name]
    if device in REFUSED[name][1]:
        assert not result["supported"], name
        # No engine offers a plan, or none of those offered builds.
        assert result["failed_step"] in ("create_execution_plans", "build_plans"), \
            result["error"][-500:]
    else:
        assert result["supported"], (name, result["error"][-500:])


def test_cudnn_plans_every_group_the_partitioner_forms(deviceless: tuple[str, dict]) -> None:
    device, results = deviceless
    refused = [f"{key.removeprefix(PATTERN_PREFIX)}: refused on {device} at "
               f"{result['failed_step']}: {result['error'][:300]}"
               for key, result in results.items()
               if key.startswith(PATTERN_PREFIX) and not result["supported"]]
    assert not refused, "\n".join(refused)
    for key, result in results.items():
        if key.startswith(PATTERN_PREFIX):
            assert result["plan_count"] >= 1 and result["plan_bytes"] > 0, key


def test_driver_stand_in_never_loads_in_the_test_process(deviceless: tuple[str, dict]) -> None:
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert "libcuda.so" not in maps.read_text()
