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
overflow included), so a group that runs unfused still gives eager's result. The weight's
multiply stays an op of its own: it may promote to another dtype than the norm's, which
the graph may see at other calls than the profiled ones, and the fold holds for any dtype
and size. The chain folds only where its intermediate results are read by nothing else
and nothing between its first and last op may write in place.
"""

from __future__ import annotations

import torch

from .. import log
from .graph_utils import all_nodes, constant_number, insert_node, written_values

NAME = log.module_name(__file__)


def _only_use(value: torch._C.Value, kind: str) -> torch._C.Node | None:
    """The one node reading `value`, if it is of `kind`."""
    uses = value.uses()
    if len(uses) != 1 or uses[0].user.kind() != kind:
        return None
    return uses[0].user


def _reads_both(mul: torch._C.Node, a: torch._C.Value, b: torch._C.Value) -> bool:
    ids = {mul.inputsAt(0).unique(), mul.inputsAt(1).unique()}
    return mul.inputsSize() == 2 and ids == {a.unique(), b.unique()}


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
    if not normalize or not _reads_both(normalize, power.inputsAt(0), rsqrt.output()):
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
        result.replaceAllUsesWith(norm.output())
        for dead in reversed(nodes):
            dead.destroy()
        folded += 1
    log.update(NAME, f"{folded} RMS normalizations folded into aten::rms_norm")
