"""Alias and mutation removal: in-place ops become functional where that is safe.

oneDNN Graph ops are pure, so `relu_`, `add_`, ... must become `relu`, `add`
before they can be mapped. torch's RemoveMutation pass rewrites an in-place op
only when alias analysis proves no other alias observes the write, and also
removes list mutation; whatever stays in place is left as a wildcard.

Traced code discards an in-place op's result, so it was never profiled; but
that result *is* the op's `self` input, with its dtype, shape and strides. It
gets that type first, and the functional op torch's pass creates inherits it;
where the functional op computes in a wider dtype (a bf16 `self` plus an f32
operand), it gets that dtype and an explicit cast back to `self`'s.
"""

from __future__ import annotations

import torch

from .graph_utils import all_nodes, insert_cast


def _is_inplace(node: torch._C.Node) -> bool:
    kind = node.kind()
    return (kind.startswith("aten::") and kind.endswith("_") and not kind.endswith("__")
            and node.outputsSize() == 1 and node.inputsSize() > 0)


def _type_inplace_results(graph: torch._C.Graph) -> None:
    for node in all_nodes(graph.block()):
        if not _is_inplace(node):
            continue
        self_type, out = node.inputsAt(0).type(), node.output()
        if (isinstance(self_type, torch._C.TensorType) and self_type.sizes() is not None
                and isinstance(out.type(), torch._C.TensorType) and out.type().sizes() is None):
            out.setType(self_type)


def _dummy(t: torch._C.TensorType) -> torch.Tensor:
    return torch.empty([1] * t.dim(), dtype=t.dtype())


# Functional form and input ids -> (self's dtype, the promoted dtype), or None
# where a profiled dtype is missing.
Promoting = dict[tuple[str, tuple[int, ...]], tuple[torch.dtype, torch.dtype] | None]


def _promoting(graph: torch._C.Graph) -> Promoting:
    """In-place ops whose functional form may compute in another dtype than
    `self`'s (a bf16 tensor += an f32 one)."""
    found: Promoting = {}
    for node in all_nodes(graph.block()):
        types = [v.type() for v in node.inputs() if isinstance(v.type(), torch._C.TensorType)]
        if not _is_inplace(node) or len(types) < 2:
            continue
        key = (node.kind()[:-1], tuple(v.unique() for v in node.inputs()))
        if any(t.dtype() is None or t.dim() is None for t in types):
            found[key] = None
            continue
        promoted = torch.result_type(*[_dummy(t) for t in types[:2]])
        if promoted != types[0].dtype():
            found[key] = (types[0].dtype(), promoted)
    return found


def _cast_back(graph: torch._C.Graph, promoting: Promoting) -> None:
    """`a.add_(b)` computes in the promoted dtype and rounds into `a`'s: its
    functional form gets a cast back to `a`'s dtype (`type_as` where unknown)."""
    for node in all_nodes(graph.block()):
        key = (node.kind(), tuple(v.unique() for v in node.inputs()))
        if key not in promoting or node.outputsSize() != 1:
            continue
        dtypes, out = promoting[key], node.output()
        if dtypes is None:
            with graph.insert_point_guard(node):
                cast = graph.insertNode(graph.create("aten::type_as", [out, node.inputsAt(0)], 1))
            cast.output().setType(node.inputsAt(0).type())
        else:
            out.setType(out.type().with_dtype(dtypes[1]))
            cast = insert_cast(graph, out, dtypes[0], node)
        cast.moveAfter(node)
        out.replaceAllUsesAfterNodeWith(cast, cast.output())


def run(graph: torch._C.Graph) -> None:
    _type_inplace_results(graph)
    promoting = _promoting(graph)
    torch._C._jit_pass_remove_mutation(graph)
    if promoting:
        _cast_back(graph, promoting)
