"""The cuDNN backend as the pipeline sees it: CUDA regions, the plugin's partitioner."""

from __future__ import annotations

import torch

from ...fusion.partition import Partition
from ...group_schema import ATTR
from ..base import BlockPartitioner, Executor, GraphFacts
from . import BACKEND, OFFERED_BY, partition
from .op_table import LOWERINGS


class CudnnBackend:
    name = BACKEND
    offered_by = OFFERED_BY
    op_table = LOWERINGS

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
        # A group whose plans a probe can clear of NaN and infinity takes the inputs it
        # assumes finite as tensors (finite_guard); any other keeps all_finite's flags,
        # one scan per input per call that every group relying on it shares.
        from . import ir, special_values

        for group in groups:
            if group.hasAttribute(ATTR.finite_inputs) and special_values.probe_decides(
                    ir.Graph.from_json(group.s(ATTR.desc))):
                group.i_(ATTR.finite_by_executor, 1)
