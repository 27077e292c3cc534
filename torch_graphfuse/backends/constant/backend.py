"""The size-constant backend as the pipeline sees it: regions on any device."""

from __future__ import annotations

import torch

from ...fusion.partition import Partition
from ..base import BlockPartitioner, Executor, GraphFacts
from . import BACKEND, OFFERED_BY, determined, partition


class ConstantBackend:
    name = BACKEND
    offered_by = OFFERED_BY
    device_type = "any"
    # The tensors whose sizes a region reads need profiled types, which the profiling
    # executor records for the inputs of the ops a backend names.
    op_table = dict.fromkeys(determined.METADATA)

    def available(self) -> bool:
        return True

    def partitioner(self, facts: GraphFacts) -> BlockPartitioner:
        budget = partition.Budget()

        def partition_block(block: torch._C.Block) -> list[Partition]:
            return partition.find_partitions(facts.graph, block, budget)

        return partition_block

    def executor(self, desc: str) -> Executor:
        raise TypeError("size-constant groups run in the built-in kernel "
                        "(csrc/constant_kernel.cpp), not through an executor")

    def finish(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        pass
