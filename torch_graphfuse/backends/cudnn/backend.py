"""The cuDNN backend as the pipeline sees it: CUDA regions, the plugin's partitioner."""

from __future__ import annotations

import torch

from ..base import BlockPartitioner, Executor, GraphFacts, Partition
from . import BACKEND, OFFERED_BY, partition
from .op_table import TABLE


class CudnnBackend:
    name = BACKEND
    offered_by = OFFERED_BY
    op_table = TABLE

    def __init__(self, device_type: str = "cuda") -> None:
        self.device_type = device_type

    def available(self) -> bool:
        # Nothing loads cuDNN before a group's first run, where a missing library
        # sends the group to its unfused fallback.
        return True

    def partitioner(self, facts: GraphFacts) -> BlockPartitioner:
        def partition_block(block: torch._C.Block) -> list[Partition]:
            return partition.find_partitions(block, facts.finite, facts.report,
                                             self.device_type)

        return partition_block

    def executor(self, desc: str) -> Executor:
        # Imported on first use: CPU-only users never load the cuDNN runtime.
        from . import runtime

        return runtime.group_executor(desc)

    def finish(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        pass
