"""The oneDNN backend as the pipeline sees it: CPU regions, oneDNN's partitioning."""

from __future__ import annotations

import torch

from ... import log
from ...fusion.partition import Partition
from ..base import BlockPartitioner, Executor, GraphFacts
from . import (
    BACKEND,
    OFFERED_BY,
    flush_denormals,
    layout_propagation,
    library,
    op_mapping,
    partition,
    prepare_partitions,
)
from .op_table import LOWERINGS


class OneDnnBackend:
    name = BACKEND
    offered_by = OFFERED_BY
    device_type = "cpu"
    op_table = LOWERINGS

    def available(self) -> bool:
        return library.available()

    def partitioner(self, facts: GraphFacts) -> BlockPartitioner:
        free_id = op_mapping.first_free_id(facts.graph)

        def partition_block(block: torch._C.Block) -> list[Partition]:
            mapped = op_mapping.map_block(facts.graph, block, free_id, facts.finite,
                                          facts.integers)
            return partition.find_partitions(facts.graph, mapped, facts.report)

        return partition_block

    def executor(self, desc: str) -> Executor:
        raise TypeError("oneDNN groups run in the built-in kernel (csrc/onednn), not through "
                        "an executor")

    def finish(self, graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
        log.logged_pass("layout_propagation", graph, lambda: layout_propagation.run(groups))
        log.logged_pass("prepare_partitions", graph, lambda: prepare_partitions.run(groups))
        log.logged_pass("flush_denormals", graph, lambda: flush_denormals.run(graph, groups))
