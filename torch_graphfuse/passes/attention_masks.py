"""Attention masks: a bias or mask meets attention scores at the scores' rank, and a bool
mask over all of their last two dims.

timm's attention biases (tiny_vit, efficientformerv2, LeViT) are (heads, N, N), added to
(batch, heads, N, N) scores; masks of F.scaled_dot_product_attention come in any rank
that broadcasts. oneDNN 3.12's attention kernel reads a mask of rank 3 wrongly (0.7-1.4
off relative to the result wherever there is more than one batch x head slice), and a bool
mask broadcast over queries or keys too ((B, 1, 1, N): 2.5-8.6 off with every key
visible); the same values as a (1, heads, N, N) tensor, or as a bool view expanded to
(B, 1, N, N) with stride 0, come out right.

Eager broadcasts a lower-rank operand as if it had leading 1s, so `unsqueeze(0)` of it
changes no result; nor does `expand` of a bool mask to the scores' last two sizes, read
from the query and key at run time. Both are views, which the group reading them takes
in as its head (fusion/boundary_views): the backend is given the mask in the form its
kernel reads right. A constant is reshaped instead, since unsqueezing needs no sizes.

Eager's F.scaled_dot_product_attention picks its kernel by the mask's rank: a mask of rank
3 sends it to the math kernel, whose result is contiguous; of rank 2 or 4, to the flash
kernel, whose result keeps the query's layout (the heads' transpose of a projection). Where
the mask goes from rank 3 to 4, the attention's result is made contiguous, so that the ATen
ops a group falls back to return eager's strides and a later reshape copies as eager's does.

The operands found: the mask of aten::scaled_dot_product_attention, and each tensor of
more than one element that a binary op adds (or multiplies, ...) to a result that a
softmax reads, directly or through binary ops alone. backends/onednn/workarounds.py
(`attention_mask_operand`) refuses any such form this pass leaves.
"""

from __future__ import annotations

import torch

from .. import log
from ..aten_ops import BINARY_ARITHMETIC
from .graph_utils import all_nodes, insert_node, int_list, profiled_sizes

NAME = log.module_name(__file__)

SOFTMAX = frozenset({"aten::softmax", "aten::_softmax"})
SDPA = "aten::scaled_dot_product_attention"


def reaches_a_softmax(value: torch._C.Value, depth: int = 3) -> bool:
    """Whether a softmax reads the value, or a value computed from it by binary ops alone
    (attention scores with their scale, bias or mask)."""
    for use in value.uses():
        kind = use.user.kind()
        if kind in SOFTMAX:
            return True
        if (depth > 0 and kind in BINARY_ARITHMETIC
                and reaches_a_softmax(use.user.output(), depth - 1)):
            return True
    return False


def _typed_as(meta: torch.Tensor, device: torch.device) -> torch._C.TensorType:
    """The profiled type of a tensor of `meta`'s sizes, strides and dtype on `device`."""
    return torch._C.TensorType.create_from_tensor(meta).with_device(device)


def _at_rank(graph: torch._C.Graph, node: torch._C.Node, i: int, rank: int) -> bool:
    """Input i of the node at `rank` dims: a constant reshaped, another value unsqueezed."""
    value = node.inputsAt(i)
    sizes = profiled_sizes(value)
    if sizes is None or len(sizes) >= rank:
        return False
    if value.node().kind() == "prim::Constant":
        held = value.toIValue()
        if not isinstance(held, torch.Tensor):
            return False
        reshaped = held.reshape([1] * (rank - len(sizes)) + sizes).clone()
        with graph.insert_point_guard(node):
            constant = graph.insertConstant(reshaped)
        constant.setType(torch._C.TensorType.create_from_tensor(reshaped))
        node.replaceInput(i, constant)
        return True
    t = value.type()
    if t.strides() is None or None in t.strides():
        return False
    meta = torch.empty_strided(sizes, t.strides(), dtype=t.dtype(), device="meta")
    while meta.dim() < rank:
        meta = meta.unsqueeze(0)
        value = insert_node(graph, node, "aten::unsqueeze", [value, 0],
                            _typed_as(meta, t.device())).output()
    node.replaceInput(i, value)
    return True


def _over_the_scores(graph: torch._C.Graph, sdpa: torch._C.Node) -> bool:
    """The bool mask of an attention expanded over its last two dims to the query's and
    the key's token counts, where it broadcasts over either."""
    mask, q, k = sdpa.inputsAt(3), sdpa.inputsAt(0), sdpa.inputsAt(1)
    sizes, q_sizes, k_sizes = profiled_sizes(mask), profiled_sizes(q), profiled_sizes(k)
    # A mask dim of size 1 broadcasts at other sizes even where the profiled token count
    # was 1 too (a one-token profile of a (B, 1, 1, N) key mask): it is expanded as well.
    if mask.type().dtype() != torch.bool or None in (sizes, q_sizes, k_sizes) or len(sizes) < 2:
        return False
    if sizes[-2:] == [q_sizes[-2], k_sizes[-2]] and 1 not in sizes[-2:]:
        return False
    reads = [insert_node(graph, sdpa, "aten::size", [tensor, -2], torch._C.IntType.get())
             .output() for tensor in (q, k)]
    with graph.insert_point_guard(sdpa):
        keep = [graph.insertConstant(-1) for _ in sizes[:-2]]
        shape = int_list(graph, keep + reads)
    expanded = sizes[:-2] + [q_sizes[-2], k_sizes[-2]]
    strides = [s if n == m else 0 for n, m, s in zip(
        sizes, expanded, mask.type().strides(), strict=True)]
    out_type = _typed_as(torch.empty_strided(expanded, strides, dtype=torch.bool, device="meta"),
                         mask.type().device())
    view = insert_node(graph, sdpa, "aten::expand", [mask, shape, False], out_type)
    sdpa.replaceInput(3, view.output())
    return True


def _contiguous_result(graph: torch._C.Graph, sdpa: torch._C.Node) -> None:
    """Eager's strides for an attention whose mask had rank 3 (the math kernel's)."""
    result = sdpa.output()
    copy = insert_node(graph, sdpa, "aten::contiguous", [result, 0], result.type())
    copy.moveAfter(sdpa)
    result.replaceAllUsesAfterNodeWith(copy, copy.output())


def run(graph: torch._C.Graph) -> None:
    changed = 0
    for node in all_nodes(graph.block()):
        if node.kind() == SDPA and not node.inputsAt(3).node().mustBeNone():
            q, mask = profiled_sizes(node.inputsAt(0)), profiled_sizes(node.inputsAt(3))
            if q is not None:
                ranked = _at_rank(graph, node, 3, len(q))
                if ranked and len(q) == 4 and mask is not None and len(mask) == 3:
                    _contiguous_result(graph, node)
                changed += ranked + _over_the_scores(graph, node)
        elif node.kind() in BINARY_ARITHMETIC and reaches_a_softmax(node.output()):
            scores = profiled_sizes(node.output())
            if scores is None:
                continue
            for i in (0, 1):
                sizes = profiled_sizes(node.inputsAt(i))
                if sizes is not None and len(sizes) > 0 and torch.Size(sizes).numel() > 1:
                    changed += _at_rank(graph, node, i, len(scores))
    log.update(NAME, lambda: f"{changed} attention masks given the scores' form")
