"""Replace the ops of a graph that only Python defines with the runtime library's copies.

PT2E's quantize and dequantize ops (`quantized_decomposed::*`) are registered by torch's
Python code, so a libtorch program cannot load a graph that calls them. The runtime
library defines the same ops as `graphfuse::*`, making the same ATen calls
(csrc/decomposed_quant.cpp); each call is renamed, its inputs and outputs kept.
"""

from __future__ import annotations

import torch

from ..passes.graph_utils import all_nodes

PYTHON_ONLY = "quantized_decomposed"
# The ops the runtime library defines under its own namespace.
PORTABLE = ("quantize_per_tensor", "dequantize_per_tensor", "quantize_per_channel",
            "dequantize_per_channel")


def python_only_kinds(graph: torch._C.Graph) -> set[str]:
    """The kinds of the ops in `graph` (blocks included) that only Python defines."""
    kinds = set()
    for node in all_nodes(graph.block()):
        if node.kind().startswith(PYTHON_ONLY + "::"):
            kinds.add(node.kind())
    return kinds


def replace_python_only_ops(graph: torch._C.Graph) -> int:
    """Rename each call the runtime library has a copy of; how many were renamed."""
    renamed = 0
    for node in all_nodes(graph.block()):
        namespace, _, name = node.kind().partition("::")
        if namespace != PYTHON_ONLY or name not in PORTABLE:
            continue
        with graph.insert_point_guard(node):
            copy = graph.insertNode(graph.create(f"graphfuse::{name}", list(node.inputs()), 1))
        copy.output().setType(node.output().type())
        node.output().replaceAllUsesWith(copy.output())
        node.destroy()
        renamed += 1
    return renamed

