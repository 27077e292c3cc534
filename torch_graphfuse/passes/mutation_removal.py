"""Alias and mutation removal: in-place ops become functional where that is safe.

oneDNN Graph ops are pure, so `relu_`, `add_`, ... must become `relu`, `add`
before they can be mapped. torch's RemoveMutation pass rewrites an in-place op
only when alias analysis proves no other alias observes the write, and also
removes list mutation; whatever stays in place is left as a wildcard.

Traced code discards an in-place op's result, so it was never profiled; but
that result *is* the op's `self` input, with its dtype, shape and strides. It
gets that type first, and the functional op torch's pass creates inherits it.
"""

from __future__ import annotations

import torch

from .graph_utils import all_nodes


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


def run(graph: torch._C.Graph) -> None:
    _type_inplace_results(graph)
    torch._C._jit_pass_remove_mutation(graph)
