"""Decomposition: ops the fusion backends have no op for, rewritten into ops they have.

- addmm(self, a, b, beta, alpha) with alpha or beta != 1 -> beta * self + alpha * mm(a, b)

(gelu with approximate="tanh" is not decomposed: oneDNN v3.2 has no tanh GELU,
and it fuses none of the x*x*x chain a decomposition makes into a matmul or
convolution, so ATen's one gelu kernel is faster.)

The new nodes carry the profiled types of the values they replace, and their
number operands become tensors in prepare_binary, which runs next.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..aten_ops import FUSION_DTYPES
from .graph_utils import all_nodes


class _Builder:
    """Inserts aten nodes before `anchor`, typed like `like`."""

    def __init__(self, graph: torch._C.Graph, anchor: torch._C.Node) -> None:
        self.graph, self.anchor = graph, anchor

    def op(self, kind: str, inputs: list[torch._C.Value | float | int],
           like: torch._C.Value) -> torch._C.Value:
        with self.graph.insert_point_guard(self.anchor):
            values = [v if isinstance(v, torch._C.Value) else self.graph.insertConstant(v)
                      for v in inputs]
            node = self.graph.insertNode(self.graph.create(kind, values, 1))
        node.output().setType(like.type())
        return node.output()

    def add(self, a: torch._C.Value, b: torch._C.Value | float,
            like: torch._C.Value) -> torch._C.Value:
        return self.op("aten::add", [a, b, 1], like)

    def mul(self, a: torch._C.Value, b: torch._C.Value | float,
            like: torch._C.Value) -> torch._C.Value:
        return self.op("aten::mul", [a, b], like)


def _float_tensor(value: torch._C.Value) -> bool:
    t = value.type()
    return isinstance(t, torch._C.TensorType) and t.dtype() in FUSION_DTYPES


def _addmm(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    if node.inputsSize() != 5:
        return False  # addmm.out: its write to `out` must stay
    beta, alpha = node.inputsAt(3).toIValue(), node.inputsAt(4).toIValue()
    if (beta, alpha) == (1, 1) or not isinstance(beta, (int, float)) \
            or not isinstance(alpha, (int, float)):
        return False
    bias, a, bmat = node.inputsAt(0), node.inputsAt(1), node.inputsAt(2)
    out = node.output()
    if not all(_float_tensor(v) for v in (bias, a, bmat, out)):
        return False
    b = _Builder(graph, node)
    product = b.op("aten::mm", [a, bmat], out)
    scaled = b.mul(product, alpha, out) if alpha != 1 else product
    shifted = b.mul(bias, beta, bias) if beta != 1 else bias
    out.replaceAllUsesWith(b.add(scaled, shifted, out))
    return True


DECOMPOSITIONS: dict[str, Callable[[torch._C.Graph, torch._C.Node], bool]] = {
    "aten::addmm": _addmm,
}



def run(graph: torch._C.Graph) -> None:
    changed = False
    for node in all_nodes(graph.block()):
        rewrite = DECOMPOSITIONS.get(node.kind())
        if rewrite is not None and rewrite(graph, node):
            node.destroy()
            changed = True
    if changed:
        # beta * bias of a frozen addmm is a constant: fold it.
        torch._C._jit_pass_constant_propagation(graph)
