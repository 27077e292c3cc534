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
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from ..fusion.partition import Partition
from ..passes.finiteness import Facts
from ..report import FusionReport


class Unsupported(Exception):
    """An op or region a backend's lowering cannot take as it is; the message says why (the
    fusion report shows it)."""


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
