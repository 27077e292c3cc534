"""Finite guard: groups whose mapping assumes finite graph inputs check them.

A group that took oneDNN's fast op for relu, clamp, max pooling, exp, ...
on the strength of passes/finiteness lists the graph inputs the proof assumed
(`finite_inputs`). One node at the top of the graph scans those inputs once
per call,

    %finite : bool = graphfuse::all_finite(%inputs)

and each such group takes its answer as its last input: when an input holds
NaN or infinity, the group runs its subgraph unfused (what eager computes),
and so does every other group relying on it. Runs after type_guard, which
guards tensor inputs only.
"""

from __future__ import annotations

import torch

from .. import log

NAME = log.module_name(__file__)
ALL_FINITE = "graphfuse::all_finite"


def run(graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
    guarded = [g for g in groups if g.hasAttribute("finite_inputs")]
    if not guarded:
        return
    offsets = sorted({i for g in guarded for i in getattr(g, "is")("finite_inputs")})
    inputs = list(graph.inputs())
    with graph.insert_point_guard(next(iter(graph.nodes()))):
        tensors = graph.insertNode(graph.create("prim::ListConstruct",
                                                [inputs[i] for i in offsets], 1))
        tensors.output().setType(torch._C.ListType(torch._C.TensorType.get()))
        check = graph.insertNode(graph.create(ALL_FINITE, [tensors.output()], 1))
    check.output().setType(torch._C.BoolType.get())
    check.output().setDebugName("finite")
    for group in guarded:
        group.addInput(check.output())
    log.update(NAME, lambda: f"{len(guarded)} fusion groups rely on graph inputs "
                             f"{offsets} being finite")
