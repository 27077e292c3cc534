"""The catalog's patterns partitioned and lowered: the IR the GPU would compile."""

from __future__ import annotations

import functools

import torch
from pattern_ir import Pattern, graph
from patterns import PATTERNS

from torch_graphfuse.backends.cudnn import ir
from torch_graphfuse.backends.cudnn.partition import find_partitions
from torch_graphfuse.fusion.partition import Partition
from torch_graphfuse.passes import finiteness
from torch_graphfuse.report import FusionReport


def partitions(g: torch._C.Graph, device_type: str = "cuda") -> list[Partition]:
    return find_partitions(g.block(), finiteness.analyze(g), FusionReport(), device_type)


def lowered(pattern: Pattern) -> list[ir.Graph]:
    """The IR of each group the partitioner forms in the pattern's CUDA-typed graph."""
    return [ir.Graph.from_json(part.text) for part in partitions(graph(pattern))]


@functools.cache
def every_lowered() -> dict[str, ir.Graph]:
    """Every group the partitioner forms in the catalog, lowered (what the goldens
    pin), named `pattern` or `pattern#i`."""
    graphs = {}
    for name, pattern in PATTERNS.items():
        groups = lowered(pattern)
        for i, group in enumerate(groups):
            graphs[name if len(groups) == 1 else f"{name}#{i}"] = group
    return graphs
