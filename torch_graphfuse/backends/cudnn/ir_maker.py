"""IR graphs by hand: the special-values sweep's groups, and the tests of what reads the IR
(builder, interpreter, plans)."""

from __future__ import annotations

from collections.abc import Callable

from . import ir

# A layout: the strides of dims.
Layout = Callable[[list[int]], list[int]]

# The output port of each node op (the frontend's names).
OUTPUT_PORT = {"conv_fprop": "Y", "matmul": "C", "pointwise": "OUT_0", "reduction": "Y"}


def contiguous(dims: list[int]) -> list[int]:
    strides, step = [], 1
    for d in reversed(dims):
        strides.insert(0, step)
        step *= max(d, 1)
    return strides


def nhwc(dims: list[int]) -> list[int]:
    n, c, h, w = dims
    return [h * w * c, 1, w * c, c]


class Maker:
    """An ir.Graph by hand: tensors get ids in creation order, contiguous unless given
    strides, of the io type unless virtual (then the intermediate type)."""

    def __init__(self, io: str = "float", intermediate: str = "float",
                 compute: str = "float") -> None:
        self.graph = ir.Graph(io, intermediate, compute)

    def tensor(self, dims: list[int], strides: list[int] | None = None, dtype: str | None = None,
               virtual: bool = False) -> int:
        tid = len(self.graph.tensors)
        default = self.graph.intermediate_dtype if virtual else self.graph.io_dtype
        self.graph.tensors.append(ir.Tensor(tid, list(dims), strides or contiguous(dims),
                                            dtype or default, virtual))
        return tid

    def input(self, dims: list[int], strides: list[int] | None = None,
              dtype: str | None = None) -> int:
        tid = self.tensor(dims, strides, dtype)
        self.graph.inputs.append(tid)
        return tid

    def node(self, op: str, inputs: dict[str, int], out: int, **attrs: object) -> int:
        self.graph.nodes.append(ir.Node(op, inputs, {OUTPUT_PORT[op]: out}, dict(attrs)))
        return out

    def output(self, tid: int) -> int:
        self.graph.outputs.append(tid)
        return tid

    def result(self, op: str, inputs: dict[str, int], dims: list[int], *,
               strides: list[int] | None = None, out: bool = False, dtype: str | None = None,
               **attrs: object) -> int:
        """A node and the tensor it makes: a group output where `out`, else virtual."""
        tid = self.node(op, inputs, self.tensor(dims, strides, dtype, virtual=not out), **attrs)
        return self.output(tid) if out else tid
