"""Decomposition: ops the fusion backends have no op for, rewritten into ops they have.

- addmm(self, a, b, beta, alpha) with alpha or beta != 1 -> beta * self + alpha * mm(a, b)
- einsum of a batched matrix product (`bhlk,bhtk->bhlt`) -> matmul
- a convolution with padding "valid" or "same" (`_convolution_mode`, conv2d(padding="same"))
  -> convolution with the padding as numbers, where "same" pads both sides alike
- nn.MultiheadAttention's and nn.TransformerEncoderLayer's fast-path ops -> the linears,
  attention and norms they compute (native_transformer)

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
from .graph_utils import all_nodes, profiled_sizes
from .native_transformer import encoder_layer, multi_head_attention


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


def _padding_mode(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    """(input, weight, bias, stride, padding: str, dilation, groups): ATen pads "same"
    with dilation * (kernel - 1) split evenly, the odd one at the end by a copy of the
    input (`_convolution_same`); only the even split becomes `aten::conv<n>d`, which
    freezing's BatchNorm fold runs on next (as `torch.jit.freeze` would have, had the
    padding been numbers)."""
    x, weight = node.inputsAt(0), node.inputsAt(1)
    mode, stride, dilation = (node.inputsAt(i).toIValue() for i in (4, 3, 5))
    kernel = weight.toIValue().shape[2:] if weight.node().kind() == "prim::Constant" \
        and isinstance(weight.toIValue(), torch.Tensor) else None
    if (not isinstance(mode, str) or kernel is None or not 1 <= len(kernel) <= 3
            or not isinstance(stride, list) or not isinstance(dilation, list)
            or x.type().dim() != len(kernel) + 2):
        return False  # unbatched conv2d(padding=...) squeezes its result: left as it is
    dilation = dilation * len(kernel) if len(dilation) == 1 else dilation
    if mode == "valid":
        padding = [0] * len(kernel)
    elif mode == "same" and all(s == 1 for s in stride) and len(dilation) == len(kernel):
        totals = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
        if any(t % 2 for t in totals):
            return False
        padding = [t // 2 for t in totals]
    else:
        return False  # ATen raises for "same" with a stride
    b = _Builder(graph, node)
    out = node.output()
    out.replaceAllUsesWith(b.op(f"aten::conv{len(kernel)}d", [
        x, weight, node.inputsAt(2), node.inputsAt(3), padding, node.inputsAt(5),
        node.inputsAt(6)], out))
    return True


def _fold_into_convolutions(graph: torch._C.Graph) -> None:
    """The BatchNorm fold `torch.jit.freeze` runs (a BatchNorm after a convolution into its
    weights), for convolutions written out here. Not freezing's sum and product folds: they
    give a bf16 convolution's dtype to `conv(x) - c` with c float32, where eager promotes
    to float32 (frozen TorchScript has that bug for numerically padded convolutions)."""
    torch._C._jit_pass_fold_frozen_conv_bn(graph)


def _einsum(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    """A batched matrix product written as einsum (CvT's attention: `bhlk,bhtk->bhlt` and
    `bhlt,bhtv->bhlv`) -> matmul, transposing the second operand where it shares its last
    label with the first. einsum runs such a contraction as the same batched product, and
    lays its result out row-major as matmul does. einsum also broadcasts a contracted
    dim of size 1 against a longer one, which matmul refuses: the contracted dims must
    have one size, of more than 1, in the profiling runs."""
    equation, operands = node.inputsAt(0).toIValue(), node.inputsAt(1).node()
    if (not isinstance(equation, str) or operands.kind() != "prim::ListConstruct"
            or operands.inputsSize() != 2 or "..." in equation or "->" not in equation):
        return False
    sources, target = equation.replace(" ", "").split("->")
    a_labels, _, b_labels = sources.partition(",")
    a, b, out = operands.inputsAt(0), operands.inputsAt(1), node.output()
    if (len(a_labels) != len(b_labels) or len(a_labels) < 2
            or len(set(a_labels + b_labels + target)) != len(a_labels) + 1
            or not all(_float_tensor(v) for v in (a, b, out))
            or len({v.type().dtype() for v in (a, b, out)}) != 1):
        return False
    batch, (i, k) = a_labels[:-2], a_labels[-2:]
    a_sizes, b_sizes = profiled_sizes(a), profiled_sizes(b)
    if (a_sizes is None or b_sizes is None or len(b_sizes) != len(b_labels) or k not in b_labels
            or not a_sizes[-1] == b_sizes[b_labels.index(k)] > 1):
        return False
    if b_labels == batch + k + b_labels[-1] and target == batch + i + b_labels[-1]:
        second = b  # ...ik,...kj->...ij
    elif b_labels == batch + b_labels[-2] + k and target == batch + i + b_labels[-2]:
        t = b.type()  # ...ik,...jk->...ij
        if t.sizes() is None or t.strides() is None or None in (*t.sizes(), *t.strides()):
            return False
        meta = torch.empty_strided(t.sizes(), t.strides(), dtype=t.dtype(), device="meta")
        second = _Builder(graph, node).op("aten::transpose", [b, -1, -2], b)
        second.setType(torch._C.TensorType.create_from_tensor(meta.transpose(-1, -2))
                       .with_device(t.device()))
    else:
        return False
    out.replaceAllUsesWith(_Builder(graph, node).op("aten::matmul", [a, second], out))
    return True


_CONVOLUTIONS = {"aten::_convolution_mode", "aten::conv1d", "aten::conv2d", "aten::conv3d"}

DECOMPOSITIONS: dict[str, Callable[[torch._C.Graph, torch._C.Node], bool]] = {
    "aten::addmm": _addmm,
    "aten::einsum": _einsum,
    **dict.fromkeys(_CONVOLUTIONS, _padding_mode),
    "aten::_native_multi_head_attention": multi_head_attention,
    "aten::_transformer_encoder_layer_fwd": encoder_layer,
}


def run(graph: torch._C.Graph) -> None:
    kinds = set()
    for node in all_nodes(graph.block()):
        rewrite = DECOMPOSITIONS.get(node.kind())
        if rewrite is not None and rewrite(graph, node):
            kinds.add(node.kind())
            node.destroy()
    if kinds & _CONVOLUTIONS:
        _fold_into_convolutions(graph)
    if kinds:
        # beta * bias of a frozen addmm is a constant: fold it.
        torch._C._jit_pass_constant_propagation(graph)
