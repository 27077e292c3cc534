"""Turn each fusion group of an optimized graph into code a file can hold.

A FusionGroup node cannot be saved: its subgraph and attributes do not survive
`torch.jit.save`. Each group the runtime library can run (oneDNN and size-constant
groups) becomes a call of `graphfuse::run_saved` on a `SavedGroup` constant that holds
the group's state as strings, and a `prim::If` on its answer: the call's outputs where it
ran fused, else the group's own ops, inlined, on the inputs it handed back (in eager's
layouts). A group of any other backend (cuDNN, run from Python) becomes its ops alone.
The weights stay the graph's constants, shared by the call and the inlined ops, so a file
holds them once.
"""

from __future__ import annotations

import re

import torch

from ..group_schema import ATTR, CONSTANT, KIND, ONEDNN, backend

RUN_SAVED = "graphfuse::run_saved"
# Kept as strings in the group's state (the runtime reads them in csrc/saved_group.cpp).
_INT_LISTS = ("guarded", "any_layout", "free_layout")
_INTS = ("shape_inputs", "flush_denormals")


def save_groups(graph: torch._C.Graph) -> dict[str, int]:
    """Rewrite every fusion group of `graph` in place; how many became saved calls
    ("saved") and how many their ops alone ("inlined")."""
    counts = {"saved": 0, "inlined": 0}
    for node in list(graph.findAllNodes(KIND, True)):
        if _savable(node):
            _save(graph, node)
            counts["saved"] += 1
        else:
            _inline(graph, node, list(node.inputs())[:_fallback_inputs(node)])
            counts["inlined"] += 1
    torch._C._jit_pass_lint(graph)
    return counts


def group_state(node: torch._C.Node) -> dict[str, str]:
    """The state a SavedGroup is made from: the process's header (format, torch and
    oneDNN versions) and the node's attributes."""
    state = dict(torch.ops.graphfuse.saved_group_header())
    names = set(node.attributeNames())
    state["backend"] = backend(node)
    state["desc"] = node.s(ATTR.desc)
    state["label"] = node.s(ATTR.label) if ATTR.label in names else KIND
    state["inputs"] = str(node.inputsSize())
    state["outputs"] = str(node.outputsSize())
    if ATTR.cpu_needs in names:
        state["cpu_needs"] = node.s(ATTR.cpu_needs)
    if ATTR.finite_inputs in names:
        state["finite_inputs"] = str(len(getattr(node, "is")(ATTR.finite_inputs)))
    for field in _INTS:
        if getattr(ATTR, field) in names:
            state[field] = str(node.i(getattr(ATTR, field)))
    for field in _INT_LISTS:
        if getattr(ATTR, field) in names:
            state[field] = " ".join(str(i) for i in getattr(node, "is")(getattr(ATTR, field)))
    if ATTR.types in names:
        state["types"] = ";".join(_type_text(t) for t in node.tys(ATTR.types))
    for field in ("head", "tail"):
        if getattr(ATTR, field) in names:
            state[field] = _graph_text(node.g(getattr(ATTR, field)))
    return state


def _savable(node: torch._C.Node) -> bool:
    if backend(node) not in (ONEDNN, CONSTANT) or node.hasAttribute(ATTR.finite_by_executor):
        return False
    inputs = list(node.inputs())
    n = _fallback_inputs(node)
    return (all(isinstance(v.type(), torch._C.TensorType) for v in inputs[:n])
            and all(v.type() == torch._C.BoolType.get() for v in inputs[n:])
            and all(isinstance(v.type(), torch._C.TensorType) for v in node.outputs()))


def _fallback_inputs(node: torch._C.Node) -> int:
    """The inputs the group's ops take: all but the finite flags."""
    if ATTR.finite_inputs not in node.attributeNames():
        return node.inputsSize()
    return node.inputsSize() - len(getattr(node, "is")(ATTR.finite_inputs))


def _type_text(t: torch._C.TensorType) -> str:
    """dtype|rank|sizes|strides, ? where the profiled type left it unknown."""
    dtype = str(t.scalarType()) if t.scalarType() is not None else "?"
    sizes = t.varyingSizes()
    if sizes is None:
        return f"{dtype}|?||"
    strides = t.strides()
    stride_text = ",".join(str(s) for s in strides) if strides and None not in strides else ""
    return (f"{dtype}|{len(sizes)}|" + ",".join("?" if s is None else str(s) for s in sizes)
            + f"|{stride_text}")


def _graph_text(g: torch._C.Graph) -> str:
    # The IR parser reads no scopes or source locations.
    return re.sub(r", scope: [^\n]*", "", g.str(False))


def _list(graph: torch._C.Graph, values: list[torch._C.Value],
          element: torch._C.JitType) -> torch._C.Value:
    node = graph.create("prim::ListConstruct", values, 1)
    node.output().setType(torch._C.ListType(element))
    return graph.insertNode(node).output()


def _save(graph: torch._C.Graph, node: torch._C.Node) -> None:
    inputs = list(node.inputs())
    n = _fallback_inputs(node)
    with graph.insert_point_guard(node):
        saved = graph.insertConstant(torch.classes.graphfuse.SavedGroup(group_state(node)))
        tensors = _list(graph, inputs[:n], torch._C.TensorType.get())
        flags = _list(graph, inputs[n:], torch._C.BoolType.get())
        call = graph.insertNode(graph.create(RUN_SAVED, [saved, tensors, flags], 2))
        call.outputsAt(0).setType(torch._C.BoolType.get())
        call.outputsAt(1).setType(torch._C.ListType(torch._C.TensorType.get()))
        branch = graph.insertNode(graph.create("prim::If", [call.outputsAt(0)], node.outputsSize()))
    fused, unfused = branch.addBlock(), branch.addBlock()
    with graph.insert_point_guard(fused.returnNode()):
        outputs = graph.insertNode(graph.create("prim::ListUnpack", [call.outputsAt(1)],
                                                node.outputsSize()))
    for value in outputs.outputs():
        value.setType(torch._C.TensorType.get())
        fused.registerOutput(value)
    with graph.insert_point_guard(unfused.returnNode()):
        handed_back = graph.insertNode(graph.create("prim::ListUnpack", [call.outputsAt(1)], n))
        for value, given in zip(handed_back.outputs(), inputs[:n], strict=True):
            value.setType(given.type())
        results = _inline_into(graph, node, list(handed_back.outputs()))
    for value in results:
        unfused.registerOutput(value)
    for old, new in zip(node.outputs(), branch.outputs(), strict=True):
        new.setType(old.type())
        old.replaceAllUsesWith(new)
    node.destroy()


def _inline(graph: torch._C.Graph, node: torch._C.Node, inputs: list[torch._C.Value]) -> None:
    with graph.insert_point_guard(node):
        results = _inline_into(graph, node, inputs)
    for old, new in zip(node.outputs(), results, strict=True):
        old.replaceAllUsesWith(new)
    node.destroy()


def _inline_into(graph: torch._C.Graph, node: torch._C.Node,
                 inputs: list[torch._C.Value]) -> list[torch._C.Value]:
    """The group's ops, cloned at the insert point over `inputs`; their outputs."""
    sub = node.g(ATTR.subgraph)
    env = dict(zip(sub.inputs(), inputs, strict=True))
    for inner in sub.nodes():
        clone = graph.insertNode(graph.createClone(inner, lambda v: env[v]))
        for old, new in zip(inner.outputs(), clone.outputs(), strict=True):
            env[old] = new
    return [env[v] for v in sub.outputs()]


__all__ = ["RUN_SAVED", "group_state", "save_groups"]
