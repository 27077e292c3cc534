"""Refold dequantize: what no fusion group took runs as frozen TorchScript had it.

Two passes before partitioning reshape a quantized graph for oneDNN's int8
patterns: quantized_weights puts back the dequantization of each weight that
freezing folded, and split_dequantize gives every reader of a dequantized
activation its own dequantize node. Where the partitioner then leaves such a
region with ATen (an int8 product that saturates on a CPU without VNNI, a
pattern oneDNN does not take), ATen would dequantize every weight again on
each call, and each activation once per reader: a PT2E ResNet-50 ran 1.95x
slower than without the plugin on a Zen 3 EPYC. After partitioning, this pass

- folds a dequantize left outside the groups whose inputs are all constants
  into its result, computed once by the same op (bit for bit what ATen would
  compute on each call), and
- makes dequantize nodes left outside the groups that read the same values
  one node again: the first, which the others follow in their block.
"""

from __future__ import annotations

import torch

from .. import log
from . import split_dequantize

NAME = log.module_name(__file__)


def _folded(node: torch._C.Node) -> torch.Tensor | None:
    """The dequantize's result, where every input is a constant."""
    if not all(v.node().kind() == "prim::Constant" for v in node.inputs()):
        return None
    op = getattr(torch.ops.quantized_decomposed, node.kind().split("::")[1]).default
    args, kwargs = [], {}
    for arg, value in zip(op._schema.arguments, node.inputs(), strict=True):
        if arg.kwarg_only:
            kwargs[arg.name] = value.toIValue()
        else:
            args.append(value.toIValue())
    with torch.no_grad():
        return op(*args, **kwargs)


def _fold(graph: torch._C.Graph, node: torch._C.Node) -> bool:
    value = _folded(node)
    if value is None:
        return False
    with graph.insert_point_guard(node):
        constant = graph.insertConstant(value)
    constant.setType(node.output().type())
    node.output().replaceAllUsesWith(constant)
    node.destroy()
    return True


def _refold_block(graph: torch._C.Graph, block: torch._C.Block,
                 alias_db: torch._C.AliasDb) -> tuple[int, int]:
    folded, merged = 0, 0
    first: dict[tuple, torch._C.Node] = {}
    for node in list(block.nodes()):
        for inner in node.blocks():
            counts = _refold_block(graph, inner, alias_db)
            folded, merged = folded + counts[0], merged + counts[1]
        # A reader that may keep the tensor itself (a view, a tuple, the graph's result),
        # or a write in place, would see one tensor where eager makes a new one per node
        # and call.
        if (node.kind() not in split_dequantize.DEQUANTIZE or alias_db.has_writers(node.output())
                or any(split_dequantize.aliasing_reader(u.user) for u in node.output().uses())):
            continue
        if _fold(graph, node):
            folded += 1
            continue
        key = (node.kind(), tuple(v.unique() for v in node.inputs()))
        if key not in first:
            first[key] = node
            continue
        node.output().replaceAllUsesWith(first[key].output())
        node.destroy()
        merged += 1
    return folded, merged


def run(graph: torch._C.Graph) -> None:
    folded, merged = _refold_block(graph, graph.block(), graph.alias_db())
    log.update(NAME, f"{folded} dequantizations of constants folded, {merged} dequantize "
                     "nodes merged into an earlier one of the same values")
