"""The backend graph handed to oneDNN Graph, and its text form.

Op mapping builds a `BackendGraph` of a JIT block: one logical tensor per JIT
value (id = `Value.unique()`, plus fresh ids for tensors internal to a node's
mapping) and backend ops that remember the JIT node they came from. The text
form is parsed by csrc/onednn/desc.cpp, both for partitioning and, stored on each
FusionGroup node, to compile its partition at run time. A saved model
(torch_graphfuse.export) keeps it in its file, so it is a file format: its first
line names the format and its version, which the parser checks.

    graphfuse-desc 1
    t <id> <dtype> <c|v> <rank> <sizes...> [s <strides...>]     a logical tensor
    o <id> <kind> <n> <inputs...> <n> <outputs...> <n> (<attribute> <type> <n> <values...>)...
    in <ids...>                                                  the input ports, in order
    out <ids...>                                                 the output ports, in order
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

# The format's version: csrc/onednn/desc.cpp reads this one only.
FORMAT = "graphfuse-desc"
VERSION = 1
# torch dtype -> oneDNN data type name (csrc/onednn/desc.cpp's names).
_NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.uint8: "u8", torch.int8: "s8"}
# The floating dtypes oneDNN groups compute in.
BACKEND_DTYPES = {dtype: _NAMES[dtype] for dtype in (torch.float32, torch.bfloat16)}
# Quantized data, as plain integer tensors: only Quantize and Dequantize take them.
QUANTIZED_DTYPES = {dtype: _NAMES[dtype] for dtype in (torch.uint8, torch.int8)}


@dataclass
class TensorSpec:
    id: int
    dtype: str = "undef"
    constant: bool = False
    sizes: list[int] | None = None  # None: rank unknown
    strides: list[int] | None = None

    def line(self) -> str:
        prop = "c" if self.constant else "v"
        if self.sizes is None:
            return f"t {self.id} {self.dtype} {prop} -1"
        dims = " ".join(str(d) for d in self.sizes)
        text = f"t {self.id} {self.dtype} {prop} {len(self.sizes)} {dims}".rstrip()
        if self.strides is not None and len(self.strides) == len(self.sizes):
            text += " s " + " ".join(str(s) for s in self.strides)
        return text


@dataclass
class BackendOp:
    id: int
    kind: str
    inputs: list[int]
    outputs: list[int]
    attrs: dict[str, Any] = field(default_factory=dict)
    node: torch._C.Node | None = None
    # JIT nodes that belong with `node` (a prim::ListConstruct it takes in).
    absorbed: list[torch._C.Node] = field(default_factory=list)
    # Tensors whose sizes the absorbed shape arithmetic reads (passes/shape_arguments).
    shape_sources: list[torch._C.Value] = field(default_factory=list)
    # Right for the profiled sizes only (see lowering.Entry.static_shapes).
    static_shapes: bool = False
    # Tensors whose profiled last size it is right for only (Lowering.pin_last_dim).
    last_dims: frozenset[int] = frozenset()
    # Right only while these graph inputs are finite (see passes/finiteness).
    assumes_finite: frozenset[int] = frozenset()

    def line(self) -> str:
        parts = ["o", str(self.id), self.kind, str(len(self.inputs)), *map(str, self.inputs)]
        parts += [str(len(self.outputs)), *map(str, self.outputs), str(len(self.attrs))]
        for name, value in self.attrs.items():
            parts += [name, *_attr_tokens(name, value)]
        return " ".join(parts)


def _attr_tokens(name: str, value: Any) -> list[str]:
    if isinstance(value, bool):
        return ["b", "1", "1" if value else "0"]
    if isinstance(value, int):
        return ["i", "1", str(value)]
    if isinstance(value, float):
        return ["f", "1", repr(value)]
    if isinstance(value, str):
        if not value or any(c.isspace() for c in value):
            raise ValueError(f"attribute {name}: string {value!r} cannot be written")
        return ["s", "1", value]
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return ["I", str(len(value)), *map(str, value)]
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
            return ["F", str(len(value)), *(repr(float(v)) for v in value)]
    raise ValueError(f"attribute {name}: unsupported value {value!r}")


class BackendGraph:
    """Logical tensors and backend ops of one JIT block."""

    def __init__(self, first_free_id: int) -> None:
        self.tensors: dict[int, TensorSpec] = {}
        self.ops: list[BackendOp] = []
        # JIT values mapped as another value's tensor (a reshape to the same shape).
        self.aliases: dict[int, int] = {}
        self._fresh_ids = itertools.count(first_free_id)

    def fresh_id(self) -> int:
        return next(self._fresh_ids)

    def add_tensor(self, spec: TensorSpec) -> int:
        if spec.id in self.aliases:
            return self.aliases[spec.id]
        self.tensors.setdefault(spec.id, spec)
        return spec.id

    def resolve(self, value_id: int) -> int:
        """The tensor a JIT value is mapped as: its own, or the one it aliases."""
        return self.aliases.get(value_id, value_id)

    def producer(self, tensor: int) -> BackendOp | None:
        """The op computing `tensor`, unless it is a wildcard (or the tensor an input)."""
        return next((op for op in self.ops if tensor in op.outputs and op.kind != "Wildcard"),
                    None)

    def add_op(self, kind: str, inputs: Sequence[int], outputs: Sequence[int],
               attrs: dict[str, Any] | None = None, node: torch._C.Node | None = None) -> BackendOp:
        op = BackendOp(len(self.ops), kind, list(inputs), list(outputs), dict(attrs or {}), node)
        self.ops.append(op)
        return op

    def to_text(self, ops: Iterable[BackendOp] | None = None,
                inputs: Sequence[int] = (), outputs: Sequence[int] = ()) -> str:
        """The description of `ops` (all by default) with the given port order."""
        ops = list(self.ops if ops is None else ops)
        used = sorted({t for op in ops for t in (*op.inputs, *op.outputs)})
        lines = [f"{FORMAT} {VERSION}"]
        lines += [self.tensors[t].line() for t in used]
        lines += [op.line() for op in ops]
        if inputs:
            lines.append("in " + " ".join(map(str, inputs)))
        if outputs:
            lines.append("out " + " ".join(map(str, outputs)))
        return "\n".join(lines) + "\n"
