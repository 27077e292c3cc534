"""The pass pipeline torch's pass registry runs (through csrc/module.cpp) on each
profiled graph while fusion is enabled:

    mutation_removal -> reference_quantization -> quantized_weights -> split_dequantize
      -> decompose
      -> prepare_binary -> defer_size_check -> shape_arguments
      -> finiteness -> integer_data -> op_mapping -> partition -> rewrite -> layout_propagation
      -> type_guard -> prepare_partitions -> finite_guard

op_mapping and partition are the backend's: backends/onednn for CPU tensors,
backends/cudnn (its own partitioner) for CUDA tensors; layout_propagation and
prepare_partitions concern oneDNN groups only.

Each pass lives in passes/<name>.py and logs under that name (see log.py):
GRAPH_DUMP shows the graph after the pass, GRAPH_DEBUG also the graph before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator

import torch

from . import log, picture
from .backends.cudnn import simulation as cudnn_simulation
from .backends.onednn import library, op_mapping, partition
from .passes import (
    decompose,
    defer_size_check,
    finite_guard,
    finiteness,
    integer_data,
    layout_propagation,
    mutation_removal,
    prepare_binary,
    prepare_partitions,
    quantized_weights,
    reference_quantization,
    rewrite,
    shape_arguments,
    split_dequantize,
    type_guard,
)
from .report import FusionReport, publish

NAME = log.module_name(__file__)


def _logged(name: str, graph: torch._C.Graph, run: Callable[[], object]) -> None:
    log.debug(name, lambda: f"before {name}:\n{graph}")
    run()
    log.dump(name, lambda: f"after {name}:\n{graph}")


def _device_types(block: torch._C.Block) -> set[str]:
    """The device types of the tensors profiled in a block and its nested blocks."""
    found = set()
    for node in block.nodes():
        for v in node.outputs():
            t = v.type()
            if isinstance(t, torch._C.TensorType) and t.device() is not None:
                found.add(t.device().type)
        for inner in node.blocks():
            found |= _device_types(inner)
    return found


def fuse_block(graph: torch._C.Graph, block: torch._C.Block, free_id: int,
               facts: finiteness.Facts, integers: frozenset[int], report: FusionReport,
               devices: set[str]) -> list[torch._C.Node]:
    """Partition and rewrite one block for each backend whose device it uses
    (oneDNN on CPU, cuDNN on CUDA), then the blocks nested in it."""
    groups = []
    cudnn_device = cudnn_simulation.device_type()
    if "cpu" in devices and cudnn_device != "cpu" and library.available():
        mapped = op_mapping.map_block(graph, block, free_id, facts, integers)
        for node, why in mapped.unmapped.items():
            if node.kind().startswith("aten::"):
                report.add_unmapped(node, why)
        groups += rewrite.rewrite(graph, block, partition.find_partitions(mapped, report), report)
    if cudnn_device in devices:
        from .backends.cudnn import partition as cudnn_partition
        parts = cudnn_partition.find_partitions(block, facts, report, cudnn_device)
        groups += rewrite.rewrite(graph, block, parts, report)
    for node in list(block.nodes()):
        for inner in node.blocks():
            groups += fuse_block(graph, inner, free_id, facts, integers, report, devices)
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
    _logged("reference_quantization", graph, lambda: reference_quantization.run(graph))
    _logged("quantized_weights", graph, lambda: quantized_weights.run(graph))
    _logged("split_dequantize", graph, lambda: split_dequantize.run(graph))
    _logged("decompose", graph, lambda: decompose.run(graph))
    _logged("prepare_binary", graph, lambda: prepare_binary.run(graph))
    _logged("defer_size_check", graph, lambda: defer_size_check.run(graph))
    _logged("shape_arguments", graph, lambda: shape_arguments.run(graph))
    groups: list[torch._C.Node] = []
    report = FusionReport()
    free_id = op_mapping.first_free_id(graph)
    facts = finiteness.analyze(graph)
    integers = integer_data.analyze(graph)
    devices = _device_types(graph.block())
    _logged("rewrite", graph, lambda: groups.extend(
        fuse_block(graph, graph.block(), free_id, facts, integers, report, devices)))
    report.groups = [rewrite.group_kinds(g) for g in groups]
    rewrite.label(groups, report.id)
    onednn_groups = [g for g in groups if g.s("backend") == "onednn"]
    _logged("layout_propagation", graph, lambda: layout_propagation.run(onednn_groups))
    _logged("type_guard", graph, lambda: type_guard.run(groups))
    _logged("prepare_partitions", graph, lambda: prepare_partitions.run(onednn_groups))
    _logged("finite_guard", graph, lambda: finite_guard.run(graph, groups))
    torch._C._jit_pass_dce(graph)
    graph.lint()
    report.graph = picture.snapshot(graph, groups, report)
    publish(report)
    log.update(NAME, lambda: str(report))
