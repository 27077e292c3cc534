"""What a fusion backend provides, and the partition it hands the shared passes.

A backend claims the regions whose tensors live on its device type. Per block, its
partitioner chooses regions under its own rules and lowers each to the description its
kernel compiles; the shared passes (fusion/rewrite, type_guard, finite_guard) make each
`Partition` a graphfuse::FusionGroup node whose `backend` attribute names the kernel
(csrc) that runs it. After the rewrite, `finish` runs the backend's own passes over its
groups.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..passes.finiteness import Facts
from ..report import FusionReport


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


@dataclass(frozen=True)
class GraphFacts:
    """What the shared analyses found in the whole graph, for every backend's partitioner."""

    graph: torch._C.Graph
    finite: Facts  # passes/finiteness
    integers: frozenset[int]  # passes/integer_data: values holding integer data
    report: FusionReport


# Runs a group: its input tensors -> its outputs.
Executor = Callable[[list[torch.Tensor]], list[torch.Tensor]]
# Partitions one block (not the blocks nested in it).
BlockPartitioner = Callable[[torch._C.Block], list[Partition]]


class Backend(Protocol):
    name: str  # the kernel kind: each of its groups' `backend` attribute
    offered_by: str  # who chose its regions, as the report says it: "oneDNN"
    device_type: str  # the profiled device type of the regions it claims ("any": all)
    op_table: Mapping[str, Any]  # aten kind -> what this backend does with the op

    def available(self) -> bool:
        """Whether its library loaded on this machine."""
        ...

    def partitioner(self, facts: GraphFacts) -> BlockPartitioner:
        """Its partitioner for one graph's blocks."""
        ...

    def executor(self, desc: str) -> Executor:
        """What runs one of its groups, made from the group's description, for a backend
        whose groups csrc/external_kernel runs (all but the built-in oneDNN kernel's). It is
        given the group's ports, then the graph inputs its mapping assumes finite, and
        returns the outputs, or none to decline a run it would not compute as eager does
        (an input assumed finite that is not): that run goes unfused."""
        ...

    def finish(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        """Its own passes over its groups after the shared ones guarded them."""
        ...
