"""The plain-data op-graph IR of one cuDNN fusion group.

It is what the partitioner's lowering produces, what the FusionGroup node
stores (attribute `desc`, as JSON), what the log prints, what golden tests
pin, what the CPU reference interpreter runs and what the builder turns into a
cuDNN frontend graph. Plain data only: ints, strings, lists, dicts.

Tensors are cuDNN's: logical dims plus strides (a layout is strides, never a
node: channels_last is NCHW dims with NHWC strides, a transposed weight is a
matmul operand with swapped strides). `virtual` tensors live inside the fused
kernel; the others are the group's inputs and outputs, in `inputs`/`outputs`
order (the FusionGroup node's port order).

Nodes (cuDNN frontend op names; port names are the frontend's):
- conv_fprop  inputs X, W          outputs Y  attrs padding, stride, dilation
- matmul      inputs A, B          outputs C  (rank 3: batch, rows, cols)
- pointwise   inputs IN_0[, IN_1]  outputs OUT_0  attrs mode[, scalar][, the mode's attrs]
- reduction   inputs X             outputs Y  attrs mode (output dims of 1 are reduced)

The modes are the vocabulary below, the one table the builder and the interpreter
both read: what one accepts, the other does.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

VERSION = 1

# IR dtype names are cuDNN's data_type names in lower case.
TORCH_DTYPES = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}
IR_DTYPES = {dtype: name for name, dtype in TORCH_DTYPES.items()}
DTYPES = tuple(TORCH_DTYPES)
NODE_OPS = ("conv_fprop", "matmul", "pointwise", "reduction")


@dataclass(frozen=True)
class ScalarAttr:
    """A pointwise mode's scalar attribute (named in the IR as cuDNN names it)."""

    keyword: str  # the frontend method's keyword for it
    # cuDNN's value where the IR leaves it out; None where that depends on the
    # compute type (the interpreter says how).
    default: float | None


@dataclass(frozen=True)
class PointwiseMode:
    """One cuDNN pointwise mode, as the builder builds it and the interpreter runs it."""

    arity: int  # tensor inputs IN_0..; a `scalar` attribute stands for the last
    method: str  # the frontend's pygraph method, which takes the inputs positionally
    attrs: dict[str, ScalarAttr] = field(default_factory=dict)


# IR pointwise modes are cuDNN's CUDNN_POINTWISE_* names in lower case. Adding a
# mode is one entry here and its semantics in the interpreter.
POINTWISE: dict[str, PointwiseMode] = {
    "add": PointwiseMode(2, "add"),
    "sub": PointwiseMode(2, "sub"),
    "mul": PointwiseMode(2, "mul"),
    "div": PointwiseMode(2, "div"),
    "max": PointwiseMode(2, "max"),
    "min": PointwiseMode(2, "min"),
    "pow": PointwiseMode(2, "pow"),
    "identity": PointwiseMode(1, "identity"),
    "neg": PointwiseMode(1, "neg"),
    "abs": PointwiseMode(1, "abs"),
    "exp": PointwiseMode(1, "exp"),
    "log": PointwiseMode(1, "log"),
    "sqrt": PointwiseMode(1, "sqrt"),
    "rsqrt": PointwiseMode(1, "rsqrt"),
    "reciprocal": PointwiseMode(1, "reciprocal"),
    "erf": PointwiseMode(1, "erf"),
    "sin": PointwiseMode(1, "sin"),
    "cos": PointwiseMode(1, "cos"),
    "tan": PointwiseMode(1, "tan"),
    "ceil": PointwiseMode(1, "ceil"),
    "floor": PointwiseMode(1, "floor"),
    "tanh_fwd": PointwiseMode(1, "tanh"),
    "sigmoid_fwd": PointwiseMode(1, "sigmoid"),
    "gelu_fwd": PointwiseMode(1, "gelu"),
    "gelu_approx_tanh_fwd": PointwiseMode(1, "gelu_approx_tanh"),
    "relu_fwd": PointwiseMode(1, "relu", {
        "relu_lower_clip": ScalarAttr("lower_clip", 0.0),
        "relu_upper_clip": ScalarAttr("upper_clip", None),
        "relu_lower_clip_slope": ScalarAttr("negative_slope", 0.0)}),
    "swish_fwd": PointwiseMode(1, "swish", {"swish_beta": ScalarAttr("swish_beta", 1.0)}),
    # The frontend's elu and softplus take no alpha or beta: it sets cuDNN's
    # ELU_ALPHA and SOFTPLUS_BETA to 1, so the IR has no attribute for them.
    "elu_fwd": PointwiseMode(1, "elu"),
    "softplus_fwd": PointwiseMode(1, "softplus"),
}

# IR reduction modes are cuDNN's CUDNN_REDUCE_TENSOR_* names in lower case.
REDUCTION_MODES = ("add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros")


@dataclass
class Tensor:
    id: int
    dims: list[int]
    strides: list[int]
    dtype: str
    virtual: bool = False


@dataclass
class Node:
    op: str
    inputs: dict[str, int]  # port name -> tensor id
    outputs: dict[str, int]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Graph:
    io_dtype: str
    intermediate_dtype: str
    compute_dtype: str
    tensors: list[Tensor] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    version: int = VERSION

    def tensor(self, tid: int) -> Tensor:
        for t in self.tensors:
            if t.id == tid:
                return t
        raise KeyError(f"IR has no tensor {tid}")

    def to_json(self, indent: int | None = None) -> str:
        return json.dumps(asdict(self), indent=indent, sort_keys=True)

    def fingerprint(self) -> str:
        """A stable hash of the graph (the plan caches' key, with the device)."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()

    @staticmethod
    def from_json(text: str) -> Graph:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError(f"not an IR of version {VERSION}")
        try:
            graph = Graph(data["io_dtype"], data["intermediate_dtype"], data["compute_dtype"],
                          [Tensor(**t) for t in data["tensors"]],
                          [Node(**n) for n in data["nodes"]],
                          list(data["inputs"]), list(data["outputs"]))
        except (KeyError, TypeError) as e:
            raise ValueError(f"malformed IR: {e!r}") from e
        validate(graph)
        return graph


def pointwise_mode(node: Node) -> tuple[PointwiseMode, int]:
    """A pointwise node's mode and the tensors it reads: its arity, less the one a
    `scalar` attribute stands for (a number operand, bound by value as the last
    input). ValueError for a mode outside the vocabulary, or a scalar alone."""
    name = node.attrs.get("mode")
    mode = POINTWISE.get(name)  # type: ignore[arg-type]
    if mode is None:
        raise ValueError(f"pointwise: unknown mode {name!r}")
    n_tensors = mode.arity - (node.attrs.get("scalar") is not None)
    if n_tensors < 1:
        raise ValueError(f"pointwise {name}: a scalar and no tensor input")
    return mode, n_tensors


def extent(dims: Sequence[int], strides: Sequence[int]) -> int:
    """Elements a dims + strides view spans, from its first to one past its last."""
    if any(d == 0 for d in dims):
        return 0
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides, strict=True))


def validate(graph: Graph) -> None:
    """Raise ValueError unless the graph is well formed: known ops and dtypes,
    every tensor produced once or a group input, ports non-virtual, topological order."""
    ids = [t.id for t in graph.tensors]
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate tensor ids")
    by_id = {t.id: t for t in graph.tensors}
    for t in graph.tensors:
        if t.dtype not in DTYPES:
            raise ValueError(f"tensor {t.id}: dtype {t.dtype!r}")
        if len(t.dims) != len(t.strides):
            raise ValueError(f"tensor {t.id}: dims and strides differ in rank")
    for d in (graph.io_dtype, graph.intermediate_dtype, graph.compute_dtype):
        if d not in DTYPES:
            raise ValueError(f"graph dtype {d!r}")
    known = set(graph.inputs)
    for tid in (*graph.inputs, *graph.outputs):
        if tid not in by_id or by_id[tid].virtual:
            raise ValueError(f"port tensor {tid} is missing or virtual")
    for node in graph.nodes:
        if node.op not in NODE_OPS:
            raise ValueError(f"unknown node op {node.op!r}")
        for tid in node.inputs.values():
            if tid not in known:
                raise ValueError(f"{node.op} reads tensor {tid} before it is made")
        for tid in node.outputs.values():
            if tid not in by_id or tid in known:
                raise ValueError(f"{node.op} writes tensor {tid} twice or unknown")
            known.add(tid)
    for tid in graph.outputs:
        if tid not in known:
            raise ValueError(f"output {tid} is never computed")
