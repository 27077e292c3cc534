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
- pointwise   inputs IN_0[, IN_1[, IN_2]]  outputs OUT_0  attrs mode[, scalar attrs]
- reduction   inputs X             outputs Y  attrs mode (output dims of 1 are reduced)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

VERSION = 1

# IR dtype names are cuDNN's data_type names in lower case.
TORCH_DTYPES = {"float": torch.float32, "half": torch.float16, "bfloat16": torch.bfloat16}
IR_DTYPES = {dtype: name for name, dtype in TORCH_DTYPES.items()}
DTYPES = tuple(TORCH_DTYPES)
NODE_OPS = ("conv_fprop", "matmul", "pointwise", "reduction")


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
