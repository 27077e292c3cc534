"""Finite guard: groups whose mapping assumes finite graph inputs check them.

A group whose backend's op differs from ATen's on NaN or infinity (oneDNN's
relu, clamp, max pooling, exp, ...), taken on the strength of the finiteness
analysis, lists the graph inputs the proof assumed
(`finite_inputs`). One node per such input at the top of the graph scans it
once per call,

    %finite_x : bool = graphfuse::all_finite(%xs)

and each group takes the answers for its inputs as its last inputs, in
`finite_inputs` order: when one holds NaN or infinity, the group runs
its subgraph unfused (what eager computes); groups relying on other inputs
only stay fused. A group its backend marked `finite_by_executor` (cuDNN's,
where a probe of its plan can settle NaN and infinities) takes the inputs
themselves instead, and its executor checks them where the plan needs it.
Runs after the backends' own passes and type_guard, which guards tensor
inputs only.
"""

from __future__ import annotations

import torch

from .. import log
from ..group_schema import ALL_FINITE, ATTR

NAME = log.module_name(__file__)


def run(graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
    guarded = [g for g in groups if g.hasAttribute(ATTR.finite_inputs)]
    if not guarded:
        return
    needs = {g: tuple(getattr(g, "is")(ATTR.finite_inputs)) for g in guarded}
    offsets = sorted({i for need in needs.values() for i in need})
    inputs = list(graph.inputs())
    scanned = sorted({i for g, need in needs.items() if not _checks_itself(g) for i in need})
    with graph.insert_point_guard(next(iter(graph.nodes()))):
        scans = {i: _all_finite(graph, inputs[i]) for i in scanned}
    for group, need in needs.items():
        for i in need:
            group.addInput(inputs[i] if _checks_itself(group) else scans[i])
    log.update(NAME, lambda: f"{len(guarded)} fusion groups rely on graph inputs "
                             f"{offsets} being finite")


def _checks_itself(group: torch._C.Node) -> bool:
    """A group its backend marked `finite_by_executor` takes the inputs themselves: its
    executor reads them only where its plan differs from ATen on NaN or infinity (cuDNN's
    runtime tries each plan on such values once), so a plan that does not needs no host
    read per call, which on a GPU would wait for the device."""
    return group.hasAttribute(ATTR.finite_by_executor)


def _all_finite(graph: torch._C.Graph, x: torch._C.Value) -> torch._C.Value:
    """One scan per input: a group waits only on the inputs its proof assumed."""
    tensors = graph.insertNode(graph.create("prim::ListConstruct", [x], 1))
    tensors.output().setType(torch._C.ListType(torch._C.TensorType.get()))
    check = graph.insertNode(graph.create(ALL_FINITE, [tensors.output()], 1))
    check.output().setType(torch._C.BoolType.get())
    check.output().setDebugName(f"finite_{x.debugName().replace('.', '_')}")
    return check.output()
