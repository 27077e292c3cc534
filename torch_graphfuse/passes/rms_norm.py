"""RMS normalization, as Hugging Face writes it, folded into one `aten::rms_norm`.

Llama, Mistral, Qwen, T5 and their kin normalize with five ops before their weight:

    %v = aten::mean(aten::pow(%x, 2), [-1], True, None)
    %h = aten::mul(%x, aten::rsqrt(aten::add(%v, eps, 1)))

which become

    %n : int = aten::size(%x, -1)
    %h = aten::rms_norm(%x, prim::ListConstruct(%n), None, eps)

A backend maps `aten::rms_norm` to its one normalization kernel (oneDNN's RMSNorm),
where it would otherwise see a lone pow, a reduction and a chain of binaries. ATen's
rms_norm computes exactly these ops (bit for bit in fp32 on this CPU, NaN, infinity and
overflow included), but not its layout: the chain's multiply lays its result out as x
is and aten::rms_norm writes row-major. So the chain folds only over a profiled row-major
x, and after the partitioners `unfold` puts the chain back wherever the folded node runs
unfused (in the graph and in each group's fallback), where a later call may bring another
layout. The weight's multiply stays an op of its own: it may promote to another dtype
than the norm's, which the graph may see at other calls than the profiled ones, and the
fold holds for any dtype and size. The chain folds only where its intermediate results
are read by nothing else and nothing between its first and last op may write in place.
"""

from __future__ import annotations

import torch

from .. import log
from ..group_schema import subgraph
from .graph_utils import all_nodes, constant_number, insert_node, written_values

NAME = log.module_name(__file__)
# Marks the aten::rms_norm nodes the fold made (the graph's own stay as they are).
FOLDED = "graphfuse_folded"


def _only_use(value: torch._C.Value, kind: str) -> torch._C.Node | None:
    """The one node reading `value`, if it is of `kind`."""
    uses = value.uses()
    if len(uses) != 1 or uses[0].user.kind() != kind:
        return None
    return uses[0].user


def _reads_in_order(mul: torch._C.Node, a: torch._C.Value, b: torch._C.Value) -> bool:
    """Whether `mul` is a * b: with x first as `unfold` writes it (TensorIterator takes
    the result's dim order from the first operand that orders two dims)."""
    return (mul.inputsSize() == 2 and mul.inputsAt(0).unique() == a.unique()
            and mul.inputsAt(1).unique() == b.unique())


def _row_major(t: torch._C.TensorType) -> bool:
    """Whether the profiled type is contiguous (strides of size-1 dims aside)."""
    sizes, strides = t.sizes(), t.strides()
    if strides is None or None in (*sizes, *strides):
        return False
    step = 1
    for size, stride in reversed(list(zip(sizes, strides, strict=True))):
        if size != 1 and stride != step:
            return False
        step *= size
    return True


def _chain(power: torch._C.Node) -> tuple[list[torch._C.Node], float] | None:
    """The pow's nodes through the normalizing multiply, and eps, if they are the chain.
    Only over a row-major x: the chain's multiply lays its result out as x is, and
    aten::rms_norm writes row-major (a transposed x would change the result's strides)."""
    x_type = power.inputsAt(0).type()
    if (not isinstance(x_type, torch._C.TensorType) or x_type.dim() is None
            or x_type.dim() == 0 or constant_number(power.inputsAt(1)) != 2
            or not _row_major(x_type)):
        return None
    mean = _only_use(power.output(), "aten::mean")
    if (mean is None or mean.inputsSize() != 4
            or mean.inputsAt(1).toIValue() not in ([-1], [x_type.dim() - 1])
            or mean.inputsAt(2).toIValue() is not True
            or not mean.inputsAt(3).node().mustBeNone()):
        return None
    add = _only_use(mean.output(), "aten::add")
    if add is None or add.inputsAt(0).unique() != mean.output().unique():
        return None
    eps, alpha = constant_number(add.inputsAt(1)), constant_number(add.inputsAt(2))
    if eps is None or alpha != 1:
        return None
    rsqrt = _only_use(add.output(), "aten::rsqrt")
    normalize = rsqrt and _only_use(rsqrt.output(), "aten::mul")
    if not normalize or not _reads_in_order(normalize, power.inputsAt(0), rsqrt.output()):
        return None
    return [power, mean, add, rsqrt, normalize], float(eps)


def _untouched(nodes: list[torch._C.Node]) -> bool:
    """Whether no node of their block between the chain's first and last writes in place:
    eager's second read of x would see the write."""
    order = list(nodes[0].owningBlock().nodes())
    first, last = order.index(nodes[0]), order.index(nodes[-1])
    return all(written_values(n) == [] for n in order[first + 1:last])


def run(graph: torch._C.Graph) -> None:
    # Collected first: a fold destroys the nodes after its pow (never another pow).
    powers = [n for n in all_nodes(graph.block())
              if n.kind() == "aten::pow" and n.inputsSize() == 2]
    folded = 0
    for power in powers:
        found = _chain(power)
        if (found is None or any(n.owningBlock() != power.owningBlock() for n in found[0])
                or not _untouched(found[0])):
            continue
        nodes, eps = found
        x, result, last = power.inputsAt(0), nodes[-1].output(), nodes[-1]
        size = insert_node(graph, last, "aten::size", [x, -1], torch._C.IntType.get())
        shape = insert_node(graph, last, "prim::ListConstruct", [size.output()],
                            torch._C.ListType.ofInts())
        norm = insert_node(graph, last, "aten::rms_norm", [x, shape.output(), None, eps],
                           result.type())
        norm.i_(FOLDED, 1)
        result.replaceAllUsesWith(norm.output())
        for dead in reversed(nodes):
            dead.destroy()
        folded += 1
    log.update(NAME, f"{folded} RMS normalizations folded into aten::rms_norm")


def _unfold_node(graph: torch._C.Graph, norm: torch._C.Node) -> None:
    """The chain in place of a folded aten::rms_norm."""
    x, eps, result = norm.inputsAt(0), norm.inputsAt(3), norm.output()
    x_type = x.type()
    sizes = x_type.sizes() if isinstance(x_type, torch._C.TensorType) else None
    reduced = (x_type.with_sizes([*sizes[:-1], 1])
               if sizes and None not in sizes else x_type)
    power = insert_node(graph, norm, "aten::pow", [x, 2], x_type)
    mean = insert_node(graph, norm, "aten::mean", [power.output(), [-1], True, None], reduced)
    add = insert_node(graph, norm, "aten::add", [mean.output(), eps, 1], reduced)
    rsqrt = insert_node(graph, norm, "aten::rsqrt", [add.output()], reduced)
    scaled = insert_node(graph, norm, "aten::mul", [x, rsqrt.output()], result.type())
    result.replaceAllUsesWith(scaled.output())
    norm.destroy()


def _unfold_graph(graph: torch._C.Graph) -> int:
    folded = [n for n in all_nodes(graph.block())
              if n.kind() == "aten::rms_norm" and n.hasAttribute(FOLDED)]
    for norm in folded:
        _unfold_node(graph, norm)
    if folded:
        torch._C._jit_pass_dce(graph)
    return len(folded)


def unfold(graph: torch._C.Graph, groups: list[torch._C.Node]) -> None:
    """The chain back in place of each folded aten::rms_norm that runs unfused: in the
    graph, and in the groups' fallbacks (the backends compiled their own descriptions)."""
    left = _unfold_graph(graph)
    in_fallbacks = sum(_unfold_graph(subgraph(g)) for g in groups)
    log.update(NAME, f"{left} folded RMS normalizations unfolded in the graph, "
                     f"{in_fallbacks} in fallbacks")
