"""The pass pipeline torch's pass registry runs (through csrc/module.cpp) on each
profiled graph while fusion is enabled:

    mutation_removal -> decompose -> prepare_binary -> defer_size_check
      -> finiteness -> op_mapping -> partition -> rewrite -> layout_propagation
      -> type_guard -> prepare_partitions -> finite_guard

Each pass lives in passes/<name>.py and logs under that name (see log.py):
GRAPH_DUMP shows the graph after the pass, GRAPH_DEBUG also the graph before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

import torch

from . import log, picture
from .passes import (
    decompose,
    defer_size_check,
    finite_guard,
    finiteness,
    layout_propagation,
    mutation_removal,
    op_mapping,
    partition,
    prepare_binary,
    prepare_partitions,
    rewrite,
    type_guard,
)
from .report import FusionReport, publish

NAME = log.module_name(__file__)


def _logged(name: str, graph: torch._C.Graph, run: Callable[[], object]) -> None:
    log.debug(name, lambda: f"before {name}:\n{graph}")
    run()
    log.dump(name, lambda: f"after {name}:\n{graph}")


def fuse_block(graph: torch._C.Graph, block: torch._C.Block, free_id: int,
               facts: finiteness.Facts, report: FusionReport) -> list[torch._C.Node]:
    """Map, partition and rewrite one block, then the blocks nested in it."""
    mapped = op_mapping.map_block(block, free_id, facts)
    for node, why in mapped.unmapped.items():
        if node.kind().startswith("aten::"):
            report.add_unmapped(node, why)
    groups = rewrite.rewrite(graph, block, partition.find_partitions(mapped, report), report)
    for node in list(block.nodes()):
        for inner in node.blocks():
            groups += fuse_block(graph, inner, free_id, facts, report)
    return groups


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """The passes make many short-lived IR wrappers; a cyclic collection
    meanwhile would only rescan the (large) model, at a third of the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def run_pipeline(graph: torch._C.Graph) -> None:
    with _gc_paused():
        _run_passes(graph)


def _run_passes(graph: torch._C.Graph) -> None:
    log.dump(NAME, lambda: f"graph given to torch_graphfuse:\n{graph}")
    _logged("mutation_removal", graph, lambda: mutation_removal.run(graph))
    _logged("decompose", graph, lambda: decompose.run(graph))
    _logged("prepare_binary", graph, lambda: prepare_binary.run(graph))
    _logged("defer_size_check", graph, lambda: defer_size_check.run(graph))
    groups: list[torch._C.Node] = []
    report = FusionReport()
    free_id = op_mapping.first_free_id(graph)
    facts = finiteness.analyze(graph)
    _logged("rewrite", graph,
            lambda: groups.extend(fuse_block(graph, graph.block(), free_id, facts, report)))
    report.groups = [rewrite.group_kinds(g) for g in groups]
    rewrite.label(groups)
    _logged("layout_propagation", graph, lambda: layout_propagation.run(groups))
    _logged("type_guard", graph, lambda: type_guard.run(groups))
    _logged("prepare_partitions", graph, lambda: prepare_partitions.run(groups))
    _logged("finite_guard", graph, lambda: finite_guard.run(graph, groups))
    torch._C._jit_pass_dce(graph)
    graph.lint()
    report.graph = picture.snapshot(graph, groups, report)
    publish(report)
    log.update(NAME, lambda: str(report))
