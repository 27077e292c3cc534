"""A region a backend's partitioner chose, as the shared passes of fusion/ take it: they make
each one a graphfuse::FusionGroup node (rewrite), with the views at its boundary
(boundary_views) and its guards. Backends import this; nothing here imports a backend."""

from __future__ import annotations

from dataclasses import dataclass, field

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
    backend: str  # the kernel that runs it (the FusionGroup's `backend` attribute)
    offered_by: str  # who chose the region, as the report says it (its backend's)
    shape_inputs: int = 0
    # Input ids whose profiled last size a mapping baked in (where static_shapes is not
    # set): the guard checks that size.
    last_dims: frozenset[int] = frozenset()
    # Views the group takes of the description's results (fusion/boundary_views): the
    # tail's nodes, and the results it reads (`outputs` are then the tail's).
    tail: list[torch._C.Node] = field(default_factory=list)
    desc_outputs: list[torch._C.Value] = field(default_factory=list)
    # Views of the group's inputs the description reads: the head's nodes, and the ids of
    # the description's inputs it gives (`inputs` are then the head's, before the shape
    # inputs).
    head: list[torch._C.Node] = field(default_factory=list)
    desc_input_ids: list[int] = field(default_factory=list)
    # CPU features its results rely on ("vnni", "bf16"): a saved group runs its fallback
    # code where they are missing.
    cpu_needs: frozenset[str] = frozenset()

    @property
    def ports(self) -> int:
        """How many of `inputs` come before the shape inputs."""
        return len(self.inputs) - self.shape_inputs


def describe(nodes: list[torch._C.Node]) -> str:
    """A region as the log and the report name it: "_convolution, relu"."""
    return ", ".join(n.kind().split("::")[-1] for n in nodes)
