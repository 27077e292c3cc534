"""Compile once, serve without Python: a fused model as a file `torch.jit.save` writes.

`export(model, example_inputs)` traces and freezes the model (or takes a frozen
ScriptModule), runs it fused on the examples, and returns a ScriptModule whose forward
is the optimized graph with each fusion group as a saved call (saved_groups.py).
The file it saves to runs fused wherever the runtime library is loaded
(`runtime_library()`): a libtorch program, Triton's PyTorch backend, or a Python
process that never imports torch_graphfuse. Without the library it does not load.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from .. import _C, log
from .python_free_ops import python_only_kinds, replace_python_only_ops
from .saved_groups import RUN_SAVED, save_groups

NAME = log.module_name(__file__)

Inputs = tuple[Any, ...]


def runtime_library() -> str:
    """The path of libgraphfuse_runtime.so: the kernels and the ops a saved model calls,
    with no Python in it (load it with `torch.ops.load_library`, `LD_PRELOAD`, or link it
    with -Wl,--no-as-needed)."""
    path = os.path.join(os.path.dirname(_C.__file__), "libgraphfuse_runtime.so")
    if not os.path.exists(path):
        raise FileNotFoundError(f"torch_graphfuse's runtime library is not at {path}")
    return path


def export(model: torch.nn.Module,
           example_inputs: Inputs | Sequence[Inputs]) -> torch.jit.ScriptModule:
    """A ScriptModule to `torch.jit.save`, fused for the example inputs.

    `model`: an nn.Module (traced on the first example and frozen here) or a frozen
    ScriptModule. `example_inputs`: one tuple of inputs, or a list of them. The graph is
    fused as the profiling runs on the first example see it. Where the file is loaded, each
    example's spec runs fused from its first call (compiled then: oneDNN keeps no compiled
    partition in a file). Inputs of other sizes run fused where a group's partition does
    not pin its sizes (compiled on the TORCH_GRAPHFUSE_COMPILE_AT-th call of each new
    spec), else through the group's own ops, saved beside it."""
    examples = _examples(example_inputs)
    frozen = _frozen(model, examples[0])
    graph = _fused_graph(frozen, examples[0])
    counts = save_groups(graph)
    replace_python_only_ops(graph)
    if left := python_only_kinds(graph):
        log.update(NAME, f"ops only Python defines are left ({', '.join(sorted(left))}): the "
                   "file loads where torch's Python registers them, not in libtorch alone")
    log.update(NAME, f"{counts['saved']} fusion groups saved, {counts['inlined']} kept as their "
               "ops (a backend the runtime library does not run)")
    log.dump(NAME, lambda: f"the exported graph:\n{graph}")
    exported = _module(graph)
    _remember_example_sizes(exported, examples)
    return exported


def _remember_example_sizes(exported: torch.jit.ScriptModule, examples: list[Inputs]) -> None:
    """Run each example until its groups compile (a spec is compiled on its
    TORCH_GRAPHFUSE_COMPILE_AT-th call), and save the sizes compiled: where the file is
    loaded, each example's spec then compiles on its first call, with no unfused run."""
    calls = max(1, _C._memory_budget()["compile_at"])
    with torch.no_grad():
        for inputs in examples:
            for _ in range(calls):
                exported(*inputs)
    for node in exported.graph.findAllNodes(RUN_SAVED, True):
        node.inputsAt(0).toIValue().remember_sizes()


def _examples(example_inputs: Inputs | Sequence[Inputs]) -> list[Inputs]:
    if isinstance(example_inputs, list):
        examples = [tuple(e) if isinstance(e, (tuple, list)) else (e,) for e in example_inputs]
    elif isinstance(example_inputs, tuple):
        examples = [example_inputs]
    else:
        examples = [(example_inputs,)]
    if not examples:
        raise ValueError("torch_graphfuse.export: no example inputs")
    return examples


def _frozen(model: torch.nn.Module, inputs: Inputs) -> torch.jit.ScriptModule:
    if isinstance(model, torch.jit.ScriptModule):
        if hasattr(model, "training"):  # scripted or traced, not frozen yet
            return torch.jit.freeze(model.eval())
        return model
    # Under autocast, tracing records each weight's cast, which the trace then holds as a
    # constant and refuses where the weight requires grad: traced with grad off, restored.
    needs_grad = [p for p in model.parameters() if p.requires_grad]
    try:
        for p in needs_grad:
            p.requires_grad_(False)
        with torch.no_grad():
            frozen = torch.jit.freeze(torch.jit.trace(model.eval(), inputs))
        # Freezing keeps a weight that requires no grad as the parameter itself: detached,
        # the constant stays without grad once the parameter's flag is restored.
        for node in frozen.graph.findAllNodes("prim::Constant"):
            if node.output().type().kind() == "TensorType" and node.hasAttribute("value"):
                node.t_("value", node.t("value").detach())
        return frozen
    finally:
        for p in needs_grad:
            p.requires_grad_(True)


def _fused_graph(frozen: torch.jit.ScriptModule, inputs: Inputs) -> torch._C.Graph:
    """The frozen forward's graph as the fuser optimizes it for `inputs`: run as a
    function of its own, so an executor the module already ran unfused is not reused."""
    graph = frozen.graph.copy()
    if next(graph.inputs()).uses():
        raise ValueError("torch_graphfuse.export: the frozen module's forward reads its "
                         "attributes; freeze it first")
    function = torch._C._create_function_from_graph("graphfuse_export", graph)
    from .. import fuser  # the package's switch; imported late: it imports this module

    with torch.no_grad(), fuser(True):
        for _ in range(torch._C._jit_get_num_profiled_runs() + 1):
            function(frozen._c, *inputs)
        optimized = torch.jit.last_executed_optimized_graph()
    return optimized.copy()


def _module(graph: torch._C.Graph) -> torch.jit.ScriptModule:
    return torch.jit._recursive.wrap_cpp_module(_C._module_from_graph("GraphfuseExport", graph))
