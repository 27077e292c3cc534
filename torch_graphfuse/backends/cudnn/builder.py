"""IR -> cuDNN frontend graph (`cudnn.pygraph`, the frontend's Python API).

One translation of an `ir.Graph`, node by node in the IR's (topological)
order. Every IR tensor becomes one frontend tensor named `t<id>` with the IR's
dims, strides and dtype, so the frontend's JSON reads like the IR; group ports
get uid `uid(id)`, fixed by the IR alone, so a plan deserialized in another
process binds the same buffers. Node outputs are made by the frontend and then
given the IR's dims/strides (a layout is strides: channels_last stays
channels_last through the epilogue) and, for group outputs, marked as outputs.

Building needs no device: the graph exists in Python until `validate()` lowers
it to cuDNN, which needs a handle, or a device description (deviceless mode,
cuDNN >= 9.8: `device` names one of device_specs.DEVICES). A pointwise node is
built as the IR's vocabulary (ir.POINTWISE) says: its frontend method, arity and
attribute keywords.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ... import log
from . import device_specs, ir
from .frontend import load_cudnn

NAME = log.module_name(__file__)


class BuildError(ValueError):
    """An IR the frontend cannot express (unknown mode, attribute or port)."""


def uid(tensor_id: int) -> int:
    """The frontend uid of IR tensor `tensor_id` (0 is the frontend's 'unset')."""
    return tensor_id + 1


_DTYPES = {"float": "FLOAT", "half": "HALF", "bfloat16": "BFLOAT16"}


@dataclass
class Built:
    graph: Any  # cudnn.pygraph
    tensors: dict[int, Any]  # IR tensor id -> frontend tensor (execute's variant pack by uid)


def build(graph: ir.Graph, handle: Any = None, device: str | None = None) -> Built:
    """The frontend graph of `graph`, not yet validated.

    `handle`: the cuDNN handle it will run on (None: the frontend's default one
    at validate()). `device`: a device_specs.DEVICES name, for deviceless mode
    (support checks and plans for that GPU with no GPU present)."""
    ir.validate(graph)
    cudnn = load_cudnn()
    options: dict[str, Any] = {}
    if device is not None:
        options["device_property"] = device_specs.device_properties(device)
        options["sm_version"] = device_specs.sm_version(device)
    fe = cudnn.pygraph(
        name="graphfuse",
        io_data_type=_dtype(cudnn, graph.io_dtype),
        intermediate_data_type=_dtype(cudnn, graph.intermediate_dtype),
        compute_data_type=_dtype(cudnn, graph.compute_dtype),
        handle=handle, **options)
    by_id = {t.id: t for t in graph.tensors}
    tensors: dict[int, Any] = {}
    for tid in graph.inputs:
        t = by_id[tid]
        tensors[tid] = fe.tensor(name=f"t{tid}", dim=list(t.dims), stride=list(t.strides),
                                 data_type=_dtype(cudnn, t.dtype), uid=uid(tid))
    for index, node in enumerate(graph.nodes):
        made = _NODE_BUILDERS[node.op](cudnn, fe, node, tensors, f"n{index}_{_label(node)}")
        for port, tid in node.outputs.items():
            if port not in made:
                raise BuildError(f"{node.op}: no output port {port}")
            tensors[tid] = _describe_output(cudnn, made[port], by_id[tid])
    log.debug(NAME, lambda: f"frontend graph:\n{fe}")
    return Built(fe, tensors)


# -- one builder per IR node op -------------------------------------------------------


def _conv_fprop(cudnn: ModuleType, fe: Any, node: ir.Node, tensors: dict[int, Any],
                name: str) -> dict[str, Any]:
    _check(node, {"X", "W"}, {"padding", "stride", "dilation"})
    y = fe.conv_fprop(image=tensors[node.inputs["X"]], weight=tensors[node.inputs["W"]],
                      padding=list(_attr(node, "padding")), stride=list(_attr(node, "stride")),
                      dilation=list(_attr(node, "dilation")), name=name)
    return {"Y": y}


def _matmul(cudnn: ModuleType, fe: Any, node: ir.Node, tensors: dict[int, Any],
            name: str) -> dict[str, Any]:
    _check(node, {"A", "B"}, set())
    return {"C": fe.matmul(A=tensors[node.inputs["A"]], B=tensors[node.inputs["B"]], name=name)}


def _pointwise(cudnn: ModuleType, fe: Any, node: ir.Node, tensors: dict[int, Any],
               name: str) -> dict[str, Any]:
    try:
        mode, n_tensors = ir.pointwise_mode(node)
    except ValueError as error:
        raise BuildError(str(error)) from None
    # A number operand (x * 0.5, clamp bounds) is the last input, as a scalar
    # the graph holds: the IR's fingerprint, and so the plan caches, hold it. A
    # runtime parameter, not a compile-time constant: cuDNN refuses constants
    # before 9.22 (CUDNN_ATTR_TENSOR_CONSTANT_VALUE), and CUDA builds of torch bring
    # older ones (9.20 for 2.13.0); the frontend passes the value at every execute.
    scalar = node.attrs.get("scalar")
    _check(node, {f"IN_{i}" for i in range(n_tensors)}, {"mode", "scalar", *mode.attrs})
    inputs = [tensors[node.inputs[f"IN_{i}"]] for i in range(n_tensors)]
    if scalar is not None:
        inputs.append(fe.tensor_scalar(float(scalar), cudnn.scalar_type.RUNTIME_PARAM,
                                       name=f"{name}_scalar"))
    options = {mode.attrs[a].keyword: float(v) for a, v in node.attrs.items()
               if a in mode.attrs and v is not None}
    return {"OUT_0": getattr(fe, mode.method)(*inputs, name=name, **options)}


def _reduction(cudnn: ModuleType, fe: Any, node: ir.Node, tensors: dict[int, Any],
               name: str) -> dict[str, Any]:
    _check(node, {"X"}, {"mode"})
    mode = _attr(node, "mode")
    if mode not in ir.REDUCTION_MODES:
        raise BuildError(f"reduction: mode {mode!r} has no frontend call")
    y = fe.reduction(tensors[node.inputs["X"]], mode=getattr(cudnn.reduction_mode, mode.upper()),
                     name=name)
    return {"Y": y}


_NODE_BUILDERS = {
    "conv_fprop": _conv_fprop,
    "matmul": _matmul,
    "pointwise": _pointwise,
    "reduction": _reduction,
}


# -- helpers ----------------------------------------------------------------------------


def _dtype(cudnn: ModuleType, name: str) -> Any:
    return getattr(cudnn.data_type, _DTYPES[name])


def _label(node: ir.Node) -> str:
    return str(node.attrs.get("mode", node.op)) if node.op == "pointwise" else node.op


def _attr(node: ir.Node, name: str) -> Any:
    if name not in node.attrs:
        raise BuildError(f"{node.op}: no attribute {name!r}")
    return node.attrs[name]


def _check(node: ir.Node, ports: set[str], attrs: set[str]) -> None:
    """Refuse what this translation would silently drop: other ports or attributes."""
    if set(node.inputs) != ports:
        raise BuildError(f"{node.op}: input ports {sorted(node.inputs)}, expected {sorted(ports)}")
    unknown = set(node.attrs) - attrs
    if unknown:
        raise BuildError(f"{node.op} {node.attrs.get('mode', '')}: attributes {sorted(unknown)} "
                         "have no frontend counterpart")


def _describe_output(cudnn: ModuleType, made: Any, tensor: ir.Tensor) -> Any:
    made.set_name(f"t{tensor.id}").set_dim(list(tensor.dims)).set_stride(list(tensor.strides))
    made.set_data_type(_dtype(cudnn, tensor.dtype))
    if not tensor.virtual:
        made.set_output(True).set_uid(uid(tensor.id))
    return made
