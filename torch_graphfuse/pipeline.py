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

PASSES is that order as data: each pass with its name, its function, the passes whose work
it takes, and whether it may be disabled. TORCH_GRAPHFUSE_DISABLE_PASSES=name,... skips
passes by name, which leaves a graph that is still right, only less fused: the way to find
the pass behind a wrong answer. Each pass lives in a module of its name and logs under that
name (see log.py): GRAPH_DUMP shows the graph after the pass, GRAPH_DEBUG also the graph
before.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch

from . import config, group_schema, log
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


@dataclass
class Run:
    """What one run of the pipeline hands from pass to pass."""

    graph: torch._C.Graph
    devices: set[str]  # the device types of its tensors (no pass moves one to another)
    report: FusionReport = field(default_factory=FusionReport)
    facts: GraphFacts | None = None  # the shared analyses, made before the partitioners
    backends: list[Backend] = field(default_factory=list)  # those claiming its devices
    groups: list[torch._C.Node] = field(default_factory=list)


@dataclass(frozen=True)
class Pass:
    name: str  # what TORCH_GRAPHFUSE_DISABLE_PASSES names it by
    run: Callable[[Run], object]
    after: tuple[str, ...] = ()  # passes whose work it takes, where they run
    # Why it cannot be disabled (the guards: a group without them may give a wrong answer);
    # "": it can, and the graph it leaves is still right, only less fused.
    required: str = ""
    log_as: str = ""  # its log name, where it is not `name`


def _analyze(run: Run) -> None:
    run.facts = GraphFacts(run.graph, finiteness.analyze(run.graph),
                           integer_data.analyze(run.graph), run.report)
    run.backends = _claiming(run.devices)


def _partition(run: Run) -> None:
    assert run.facts is not None
    partitioners = [b.partitioner(run.facts) for b in run.backends]
    run.groups += fuse_block(run.graph, run.graph.block(), partitioners, run.facts)


def _label(run: Run) -> None:
    run.report.groups = [rewrite.group_kinds(g) for g in run.groups]
    rewrite.label(run.groups, run.report.id)


def _backend_passes(run: Run) -> None:
    for backend in run.backends:
        backend.finish(run.graph, [g for g in run.groups
                                   if group_schema.backend(g) == backend.name])


_GUARD = "its groups would run on inputs they were not built for"
PASSES = (
    Pass("mutation_removal", lambda r: mutation_removal.run(r.graph)),
    Pass("reference_quantization", lambda r: reference_quantization.run(r.graph)),
    Pass("int8_as_float", lambda r: int8_as_float.run(r.graph, _int8_saturates(r.devices)),
         after=("reference_quantization",)),
    Pass("quantized_weights", lambda r: quantized_weights.run(r.graph),
         after=("reference_quantization",)),
    Pass("split_dequantize", lambda r: split_dequantize.run(r.graph)),
    Pass("decompose", lambda r: decompose.run(r.graph)),
    Pass("rms_norm", lambda r: rms_norm.run(r.graph), after=("decompose",)),
    Pass("prepare_binary", lambda r: prepare_binary.run(r.graph)),
    Pass("attention_masks", lambda r: attention_masks.run(r.graph)),
    Pass("scalar_before_transpose", lambda r: scalar_before_transpose.run(r.graph)),
    Pass("defer_size_check", lambda r: defer_size_check.run(r.graph)),
    Pass("addend_through_views", lambda r: addend_through_views.run(r.graph)),
    Pass("fold_constant_addends", lambda r: fold_constant_addends.run(r.graph),
         after=("addend_through_views",)),
    Pass("linear_leading_views", lambda r: linear_leading_views.run(r.graph)),
    Pass("shape_arguments", lambda r: shape_arguments.run(r.graph)),
    Pass("alias_casts", lambda r: alias_casts.run(r.graph)),
    Pass("analyses", _analyze, required="the partitioners read the facts it finds"),
    Pass("rewrite", _partition, after=("analyses",)),
    Pass("rms_norm_unfold", lambda r: rms_norm.unfold(r.graph, r.groups),
         after=("rms_norm", "rewrite"), log_as="rms_norm"),
    Pass("refold_dequantize", lambda r: refold_dequantize.run(r.graph),
         after=("split_dequantize", "rewrite")),
    Pass("label", _label, after=("rewrite",), required="the report and the profiler name groups "
                                                       "by it"),
    Pass("type_guard", lambda r: type_guard.run(r.groups), after=("rewrite",), required=_GUARD),
    Pass("backend_passes", _backend_passes, after=("type_guard",),
         required="a backend's groups may not run without them"),
    Pass("finite_guard", lambda r: finite_guard.run(r.graph, r.groups), after=("rewrite",),
         required=_GUARD),
)
_SILENT = frozenset({"analyses", "label", "backend_passes"})  # each logs its own work


def disabled_passes() -> frozenset[str]:
    """The passes TORCH_GRAPHFUSE_DISABLE_PASSES names (comma-separated); a ValueError
    naming the passes that can be disabled where it names another."""
    names = frozenset(n.strip() for n in config.value(config.DISABLE_PASSES).split(",")
                      if n.strip())
    optional = [p.name for p in PASSES if not p.required]
    unknown = sorted(names - set(optional))
    if unknown:
        raise ValueError(f"{config.DISABLE_PASSES.env} names {', '.join(unknown)}: the passes "
                         f"that can be disabled are {', '.join(optional)}")
    return names


def run_pipeline(graph: torch._C.Graph, respecializing: bool = False) -> None:
    """`respecializing`: the graph is a fusion group's subgraph, profiled again at input
    sizes its guard refused (csrc/fusion_group.cpp); its report is logged, not
    published, so that `last_report()` stays the model's."""
    with _gc_paused():
        _run_passes(graph, respecializing)


def _run_passes(graph: torch._C.Graph, respecializing: bool = False) -> None:
    log.dump(NAME, lambda: f"graph given to torch_graphfuse:\n{graph}")
    run = Run(graph, _device_types(graph.block()))
    disabled = disabled_passes()
    for step in PASSES:
        if step.name in disabled:
            log.update(NAME, f"{step.name}: disabled ({config.DISABLE_PASSES.env})")
        elif step.name in _SILENT:
            step.run(run)
        else:
            log.logged_pass(step.log_as or step.name, graph, lambda s=step: s.run(run))
    torch._C._jit_pass_dce(graph)
    graph.lint()
    run.report.add_graph(graph, run.groups)
    if respecializing:
        log.update(NAME, lambda: f"a group's subgraph fused again at new sizes:\n{run.report}")
        return
    publish(run.report)
    log.update(NAME, lambda: str(run.report))
