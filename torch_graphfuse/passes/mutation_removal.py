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

from collections import defaultdict, deque

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


# Per in-place op, in graph order: its output's id, its functional kind, and (self's dtype,
# the promoted dtype) where the functional form computes in another dtype, None where a
# profiled dtype is missing, SAME where it computes in self's.
SAME = "same"
InPlace = tuple[int, str, tuple[torch.dtype, torch.dtype] | None | str]


def _in_place_ops(graph: torch._C.Graph) -> list[InPlace]:
    """Every in-place op, and whether its functional form may compute in another dtype
    than `self`'s (a bf16 tensor += an f32 one)."""
    found: list[InPlace] = []
    for node in all_nodes(graph.block()):
        if not _is_inplace(node):
            continue
        entry: InPlace = (node.output().unique(), node.kind()[:-1], SAME)
        types = [v.type() for v in node.inputs() if isinstance(v.type(), torch._C.TensorType)]
        if len(types) >= 2:
            if any(t.dtype() is None or t.dim() is None for t in types):
                entry = (*entry[:2], None)
            else:
                promoted = torch.result_type(*[_dummy(t) for t in types[:2]])
                if promoted != types[0].dtype():
                    entry = (*entry[:2], (types[0].dtype(), promoted))
        found.append(entry)
    return found


def _cast_back(graph: torch._C.Graph, in_place: list[InPlace], before: set[int]) -> None:
    """`a.add_(b)` computes in the promoted dtype and rounds into `a`'s: its
    functional form gets a cast back to `a`'s dtype (`type_as` where unknown).

    The functional nodes are found by order, not by inputs: an in-place op whose `self`
    another in-place op made (`y.sigmoid_(); y.mul_(x)`) reads that op's functional
    result instead. torch's pass writes one new node per op it rewrites, where the op
    was, and leaves the others in the graph; `before` holds the ids of the values there
    were before it."""
    alive = _value_ids(graph)
    pending: dict[str, deque] = defaultdict(deque)
    for output, kind, dtypes in in_place:
        if output not in alive:
            pending[kind].append(dtypes)
    for node in all_nodes(graph.block()):
        if (node.outputsSize() != 1 or node.output().unique() in before
                or not pending.get(node.kind())):
            continue
        dtypes, out = pending[node.kind()].popleft(), node.output()
        if dtypes == SAME:
            continue
        if dtypes is None:
            with graph.insert_point_guard(node):
                cast = graph.insertNode(graph.create("aten::type_as", [out, node.inputsAt(0)], 1))
            cast.output().setType(node.inputsAt(0).type())
        else:
            out.setType(out.type().with_dtype(dtypes[1]))
            cast = insert_cast(graph, out, dtypes[0], node)
        cast.moveAfter(node)
        out.replaceAllUsesAfterNodeWith(cast, cast.output())


def _value_ids(graph: torch._C.Graph) -> set[int]:
    return {v.unique() for n in all_nodes(graph.block()) for v in n.outputs()}


def run(graph: torch._C.Graph) -> None:
    _type_inplace_results(graph)
    in_place = _in_place_ops(graph)
    promoting = any(dtypes != SAME for _, _, dtypes in in_place)
    before = _value_ids(graph) if promoting else set()
    torch._C._jit_pass_remove_mutation(graph)
    if promoting:
        _cast_back(graph, in_place, before)
