"""Backends: what each fusion backend owns, and the one thing they hand the shared passes.

    backends/onednn/  CPU: op table, oneDNN's own partitioning under the plugin's rules,
                      the text description csrc/backend.cpp compiles
    backends/cudnn/   CUDA: op table, the plugin's own partitioner (cuDNN does not
                      partition), the plain-data IR, its CPU reference interpreter,
                      the cuDNN frontend builder, plan caches and the runtime

A region's backend follows the profiled device of its tensors. Every backend's
partitioner produces `Partition`s; the shared passes (rewrite, type_guard,
finite_guard, report) turn them into graphfuse::FusionGroup nodes whose
`backend` attribute tells the kernel which compile/execute to use.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Partition:
    nodes: list[torch._C.Node]  # in block order
    # FusionGroup input order: the description's ports, then the tensors only its shape
    # arithmetic reads (the last `shape_inputs`; passes/shape_arguments).
    inputs: list[torch._C.Value]
    outputs: list[torch._C.Value]
    input_ids: list[int]  # the values' unique ids, which outlive a rewrite
    output_ids: list[int]
    text: str  # the backend description the kernel compiles
    static_shapes: bool  # a mapping baked in profiled sizes: guard exact sizes
    assumes_finite: frozenset[int]  # graph inputs its mappings assume finite
    backend: str = "onednn"
    shape_inputs: int = 0


def describe(nodes: list[torch._C.Node]) -> str:
    """A region as the log and the report name it: "_convolution, relu"."""
    return ", ".join(n.kind().split("::")[-1] for n in nodes)
