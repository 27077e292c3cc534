"""Type guard: a fusion group runs only on inputs of the kind it was built for.

Each group becomes

    %ok = graphfuse::Guard[types=...](%non_constant_inputs)
    %outs = prim::If(%ok)
      block0: graphfuse::FusionGroup(...)   # oneDNN
      block1: <the group's subgraph, inlined> # ATen

The guard checks dtype, device and rank (and not requires_grad under grad
mode). Sizes and strides are not guarded: the kernel compiles and caches a
partition per concrete input spec, so a new batch size is a cache miss, not a
fallback. A group whose mapping baked in profiled sizes (a reshape target, a
pool kernel; `static_shapes`) also checks exact sizes. Frozen weights are
constants and need no check.
"""

from __future__ import annotations

import torch

from .. import log

NAME = log.module_name(__file__)
GUARD = "graphfuse::Guard"


def _guarded_type(value: torch._C.Value, exact_sizes: bool) -> torch._C.TensorType:
    t = value.type()
    return t if exact_sizes else t.with_sizes([None] * t.dim())


def guard(graph: torch._C.Graph, group: torch._C.Node) -> None:
    checked = [v for v in group.inputs() if v.node().kind() != "prim::Constant"]
    check = graph.create(GUARD, checked, 1)
    check.insertBefore(group)
    exact = bool(group.i("static_shapes"))
    check.tys_("types", [_guarded_type(v, exact) for v in checked])
    check.output().setType(torch._C.BoolType.get())

    branch = graph.create("prim::If", [check.output()], group.outputsSize())
    branch.insertAfter(check)
    fused, unfused = branch.addBlock(), branch.addBlock()
    for old, new in zip(group.outputs(), branch.outputs(), strict=True):
        new.setType(old.type())
        old.replaceAllUsesWith(new)
    group.moveBefore(fused.returnNode())
    for v in group.outputs():
        fused.registerOutput(v)
    with graph.insert_point_guard(unfused):
        for v in graph.insertGraph(group.g("Subgraph"), list(group.inputs())):
            unfused.registerOutput(v)


def run(graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
    for group in groups:
        guard(graph, group)
