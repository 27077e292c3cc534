"""The pass pipeline torch's pass registry runs (through csrc/module.cpp) on each
profiled graph while fusion is enabled:

    mutation_removal -> reference_quantization -> int8_as_float -> quantized_weights
      -> split_dequantize
      -> decompose -> rms_norm
      -> prepare_binary -> attention_masks -> scalar_before_transpose -> defer_size_check
      -> addend_through_views -> fold_constant_addends -> linear_leading_views -> shape_arguments
      -> alias_casts
      -> finiteness -> integer_data
      -> per block, each registered backend's partitioner -> rewrite -> rms_norm unfold
      -> refold_dequantize
      -> type_guard -> each backend's own passes on its groups -> finite_guard

The passes before the partitioners are backend-agnostic (passes/); the partitioners
and their own passes are the backends' (backends/registry.py lists them; a block's
regions go to the backend claiming its tensors' device type); rewrite and the guards
make their partitions fusion groups (fusion/).

Each pass lives in a module of its name and logs under that name (see log.py):
GRAPH_DUMP shows the graph after the pass, GRAPH_DEBUG also the graph before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

import torch

from . import group_schema, log
from .backends import registry
from .backends.base import Backend, BlockPartitioner, GraphFacts
from .backends.onednn import library as onednn_library
from .fusion import finite_guard, rewrite, type_guard
from .passes import (
    addend_through_views,
    alias_casts,
    attention_masks,
    decompose,
    defer_size_check,
    finiteness,
    fold_constant_addends,
    graph_utils,
    int8_as_float,
    integer_data,
    linear_leading_views,
    mutation_removal,
    prepare_binary,
    quantized_weights,
    reference_quantization,
    refold_dequantize,
    rms_norm,
    scalar_before_transpose,
    shape_arguments,
    split_dequantize,
)
from .report import FusionReport, publish

NAME = log.module_name(__file__)


def _device_types(block: torch._C.Block) -> set[str]:
    """The device types of the tensors profiled in a block and its nested blocks."""
    found = set()
    for node in graph_utils.all_nodes(block):
        for v in node.outputs():
            t = v.type()
            if isinstance(t, torch._C.TensorType) and t.device() is not None:
                found.add(t.device().type)
    return found


def fuse_block(graph: torch._C.Graph, block: torch._C.Block,
               partitioners: list[BlockPartitioner], facts: GraphFacts) -> list[torch._C.Node]:
    """Partition and rewrite one block with each backend that claims its devices (a
    group's outputs keep the finiteness facts of the values they replace, for the backends
    after it), then the blocks nested in it."""
    groups = []
    for partition_block in partitioners:
        groups += rewrite.rewrite(graph, block, partition_block(block), facts.report,
                                  facts.finite)
    for node in list(block.nodes()):
        for inner in node.blocks():
            groups += fuse_block(graph, inner, partitioners, facts)
    return groups


def _int8_saturates(devices: set[str]) -> bool:
    """Whether the graph holds CPU tensors (`devices`: its device types), whose int8
    products oneDNN sums in saturating int16 pairs on this CPU (no VNNI)."""
    isa = onednn_library.isa()
    return isa is not None and not isa.vnni and "cpu" in devices


def _claiming(devices: set[str]) -> list[Backend]:
    return [b for b in registry.backends()
            if (b.device_type in devices or b.device_type == "any") and b.available()]


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


def run_pipeline(graph: torch._C.Graph, respecializing: bool = False) -> None:
    """`respecializing`: the graph is a fusion group's subgraph, profiled again at input
    sizes its guard refused (csrc/fusion_group.cpp); its report is logged, not
    published, so that `last_report()` stays the model's."""
    with _gc_paused():
        _run_passes(graph, respecializing)


def _run_passes(graph: torch._C.Graph, respecializing: bool = False) -> None:
    log.dump(NAME, lambda: f"graph given to torch_graphfuse:\n{graph}")
    # The passes before the partitioners move no tensor to another device.
    devices = _device_types(graph.block())
    log.logged_pass("mutation_removal", graph, lambda: mutation_removal.run(graph))
    log.logged_pass("reference_quantization", graph, lambda: reference_quantization.run(graph))
    log.logged_pass("int8_as_float", graph,
                    lambda: int8_as_float.run(graph, _int8_saturates(devices)))
    log.logged_pass("quantized_weights", graph, lambda: quantized_weights.run(graph))
    log.logged_pass("split_dequantize", graph, lambda: split_dequantize.run(graph))
    log.logged_pass("decompose", graph, lambda: decompose.run(graph))
    log.logged_pass("rms_norm", graph, lambda: rms_norm.run(graph))
    log.logged_pass("prepare_binary", graph, lambda: prepare_binary.run(graph))
    log.logged_pass("attention_masks", graph, lambda: attention_masks.run(graph))
    log.logged_pass("scalar_before_transpose", graph,
                    lambda: scalar_before_transpose.run(graph))
    log.logged_pass("defer_size_check", graph, lambda: defer_size_check.run(graph))
    log.logged_pass("addend_through_views", graph, lambda: addend_through_views.run(graph))
    log.logged_pass("fold_constant_addends", graph, lambda: fold_constant_addends.run(graph))
    log.logged_pass("linear_leading_views", graph, lambda: linear_leading_views.run(graph))
    log.logged_pass("shape_arguments", graph, lambda: shape_arguments.run(graph))
    log.logged_pass("alias_casts", graph, lambda: alias_casts.run(graph))
    groups: list[torch._C.Node] = []
    report = FusionReport()
    facts = GraphFacts(graph, finiteness.analyze(graph), integer_data.analyze(graph), report)
    backends = _claiming(devices)
    partitioners = [b.partitioner(facts) for b in backends]
    log.logged_pass("rewrite", graph, lambda: groups.extend(
        fuse_block(graph, graph.block(), partitioners, facts)))
    log.logged_pass("rms_norm", graph, lambda: rms_norm.unfold(graph, groups))
    log.logged_pass("refold_dequantize", graph, lambda: refold_dequantize.run(graph))
    report.groups = [rewrite.group_kinds(g) for g in groups]
    rewrite.label(groups, report.id)
    log.logged_pass("type_guard", graph, lambda: type_guard.run(groups))
    for backend in backends:
        backend.finish(graph, [g for g in groups if group_schema.backend(g) == backend.name])
    log.logged_pass("finite_guard", graph, lambda: finite_guard.run(graph, groups))
    torch._C._jit_pass_dce(graph)
    graph.lint()
    report.add_graph(graph, groups)
    if respecializing:
        log.update(NAME, lambda: f"a group's subgraph fused again at new sizes:\n{report}")
        return
    publish(report)
    log.update(NAME, lambda: str(report))
