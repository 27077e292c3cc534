"""Partitioning: oneDNN chooses the fusible regions, the plugin's policy keeps some.

oneDNN Graph's `get_partitions` (fusion policy) runs on the whole backend graph of a
block, or on pieces of it where it throws. Each partition it offers is a
`rules.Candidate`, and becomes a fusion group unless a rule of `rules.RULES` refuses it;
the report gives the rule's reason. Some are partitioned again in pieces first: an
attention over few tokens without its softmaxes, a chain a binary op heads at its anchor,
and a partition of several products of weights (a gated MLP) one product each.
A group is pinned to its profiled sizes where a mapping baked them in, or where a
workaround finds them safe only as profiled (a binary operand that could broadcast
wrongly after a linear or a pool at another size, or vary along the last dim only after
a binary head, a matmul operand with its batch dims out of order whose matrix dim could
be 1 or whose batch dims could broadcast, an int8 convolution's windows).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import torch

from ... import _C, log
from ...fusion import boundary_views
from ...fusion.partition import Partition, describe
from ...report import FusionReport
from . import BACKEND, OFFERED_BY
from .graph_desc import BackendGraph, BackendOp
from .int8_workarounds import int8_padding_windows
from .matmul_workarounds import (
    flattened_matmul_broadcast,
    matmul_operand_layout,
    products_of_weights,
)
from .op_mapping import MappedBlock
from .rules import Candidate, cpu_needs, refusal
from .workarounds import (
    SizeVerdict,
    binary_head_with_width_operand,
    full_then_two_width_operands,
    layer_norm_sum,
    pool_operand,
    short_attention_softmaxes,
)

NAME = log.module_name(__file__)


def _partition_in_pieces(backend: BackendGraph, ops: list[BackendOp]
                         ) -> tuple[list[tuple], list[tuple[int, str]]]:
    """oneDNN's partitions of `ops`, and the ops it refuses. Where get_partitions throws
    (3.12 throws std::out_of_range on some graphs, as it does under torch's LLGA on several
    Hugging Face models), the ops are split in two, in order, and each half is partitioned
    alone: partitions then cannot cross the cut, but the rest of the graph still fuses. A
    single op it throws on stays with ATen. A description the C++ side cannot read
    (ValueError) is the plugin's own error and is not split: the pass fails, with its
    warning."""
    try:
        return _C._partition(backend.to_text(ops))
    except (IndexError, RuntimeError) as error:  # std::out_of_range, dnnl::error
        if len(ops) == 1:
            return [], [(ops[0].id, f"oneDNN's partitioner fails on it: {error}")]
        log.debug(NAME, f"oneDNN's partitioner fails on {len(ops)} ops, splitting them: {error}")
        middle = len(ops) // 2
        first, first_refused = _partition_in_pieces(backend, ops[:middle])
        second, second_refused = _partition_in_pieces(backend, ops[middle:])
        return first + second, first_refused + second_refused


SHORT_ATTENTION = ("oneDNN's attention kernel runs it slower than ATen at this many tokens; "
                   "the products fuse without it")


def _short_attention_split(backend: BackendGraph, mapped: MappedBlock, partitions: list[tuple]
                           ) -> list[tuple]:
    """The partitions, each attention one over few tokens partitioned again without its
    softmaxes (workarounds.short_attention_softmaxes), which stay with ATen."""
    result = []
    for partition in partitions:
        ops = [backend.ops[i] for i in partition[1]]
        softmaxes = short_attention_softmaxes(ops, backend) if partition[0] else []
        if not softmaxes:
            result.append(partition)
            continue
        for op in softmaxes:
            mapped.unmapped[op.node] = SHORT_ATTENTION
        pieces, _ = _partition_in_pieces(backend, [op for op in ops if op not in softmaxes])
        result += pieces
    return result


_ANCHORS = ("MatMul", "Convolution")


def _split_at_anchor(backend: BackendGraph, partitions: list[tuple]) -> list[tuple]:
    """The partitions, each that workarounds.full_then_two_width_operands refuses
    partitioned again in two: its ops before its first convolution or matmul, and that op
    with the rest. oneDNN 3.12 computes each half right (the sweep behind that workaround
    found the wrong order in chains a binary op heads, never in an anchor's post-ops), so
    MobileBERT's `(x + r) * w + b -> linear -> (+ r) * w + b` fuses as two groups instead
    of none."""
    result = []
    for partition in partitions:
        ops = [backend.ops[i] for i in partition[1]]
        cut = min((op.id for op in ops if op.kind in _ANCHORS), default=None)
        if (partition[0] and cut is not None and any(op.id < cut for op in ops)
                and full_then_two_width_operands(ops, backend)):
            result += _cut_before(backend, partition, [cut])
        else:
            result.append(partition)
    return result


def _one_product_of_weights_each(backend: BackendGraph, partitions: list[tuple]) -> list[tuple]:
    """The partitions, each holding several products of weights
    (matmul_workarounds.products_of_weights) partitioned again in pieces cut before each of them
    but the first, so that oneDNN packs each product's weights."""
    result = []
    for partition in partitions:
        ops = [backend.ops[i] for i in partition[1]]
        products = products_of_weights(ops, backend) if partition[0] else []
        result += _cut_before(backend, partition, [op.id for op in products[1:]]) \
            if products else [partition]
    return result


def _cut_before(backend: BackendGraph, partition: tuple, cuts: list[int]) -> list[tuple]:
    """oneDNN's partitions of the partition's ops cut before each op id in `cuts` (in
    order), each piece partitioned alone; the partition itself where the pieces give none
    or would not give each other what they read."""
    ops = [backend.ops[i] for i in partition[1]]
    bounds = zip([-1, *cuts], [*cuts, len(backend.ops)], strict=True)
    pieces = [p for low, high in bounds
              for p in _partition_in_pieces(backend, [op for op in ops if low <= op.id < high])[0]]
    return pieces if pieces and _keeps_outputs(backend, partition, pieces) else [partition]


def _keeps_outputs(backend: BackendGraph, whole: tuple, pieces: list[tuple]) -> bool:
    """Whether each piece gives every tensor it makes that is read outside it: the whole
    partition's outputs and what the other pieces read. oneDNN partitions a piece seeing
    only its ops, so a tensor another piece reads could be left inside."""
    made = [{t for i in piece[1] for t in backend.ops[i].outputs} for piece in pieces]
    read = [{t for i in piece[1] for t in backend.ops[i].inputs} for piece in pieces]
    return all(made[k] & set(whole[3]).union(*read[:k], *read[k + 1:]) <= set(piece[3])
               for k, piece in enumerate(pieces))


def exposed_values(backend: BackendGraph, nodes: list[torch._C.Node],
                   out_ids: list[int]) -> list[int]:
    """The JIT value each output tensor stands for: its own, or, where only the partition
    reads that, the one value read outside that the mapping made an alias of it (a reshape
    to the same shape, computing nothing): `linear(x).view(b, s, -1)` read by an unfused
    split. Eager's view then aliases a tensor no one else holds, so a new tensor is the same
    to every reader."""
    inside = set(nodes)
    made = {v.unique(): v for n in nodes for v in n.outputs()}

    def read_outside(i: int) -> bool:
        return any(use.user not in inside for use in made[i].uses())

    exposed = []
    for out in out_ids:
        views = [i for i, t in backend.aliases.items()
                 if t == out and i in made and read_outside(i)]
        alone = out in made and not read_outside(out) and len(views) == 1
        exposed.append(views[0] if alone else out)
    return exposed


def _without_views_read_beside_their_base(backend: BackendGraph, nodes: list[torch._C.Node],
                                          out_ids: list[int], op_count: Counter
                                          ) -> list[torch._C.Node]:
    """The nodes but those of each view that computes nothing (a reshape to the same shape,
    an alias of a result) read outside where the result itself is read outside too, with
    the shape arithmetic only it reads. The group gives one value per tensor: GPT-2's
    attention result is read by size ops for the heads' merge and, through
    `reshape(same shape)`, by its transpose. The view then runs in ATen (or joins the group
    as a view of its result, fusion/boundary_views), reading the group's result."""
    inside = set(nodes)
    made = {v.unique(): v for n in nodes for v in n.outputs()}

    def read_outside(i: int) -> bool:
        return any(use.user not in inside for use in made[i].uses())

    dropped = {made[view].node() for view, base in backend.aliases.items()
               if base in out_ids and view in made and base in made
               and read_outside(view) and read_outside(base)}
    if not dropped:
        return nodes
    grew = True
    while grew:  # the shape arithmetic only the dropped views read
        grew = False
        for node in nodes:
            if (node not in dropped and node not in op_count and node.outputsSize() > 0
                    and all(use.user in dropped for v in node.outputs() for use in v.uses())):
                dropped.add(node)
                grew = True
    return [n for n in nodes if n not in dropped]


def _reading_exposed(part: Partition, exposed_as: dict[int, torch._C.Value]) -> Partition:
    """The partition reading, for each tensor another group gives only as a view that
    computes nothing (exposed_values), that view: the tensor's own value stays inside the
    group that computes it."""
    ports = [exposed_as.get(i) for i in part.input_ids[:part.ports]]
    if not any(ports):
        return part
    inputs = [v or given for v, given in zip(ports, part.inputs, strict=False)]
    ids = [v.unique() if v else i for v, i in zip(ports, part.input_ids, strict=False)]
    return dataclasses.replace(part, inputs=[*inputs, *part.inputs[part.ports:]],
                               input_ids=[*ids, *part.input_ids[part.ports:]])


def find_partitions(graph: torch._C.Graph, mapped: MappedBlock, report: FusionReport
                    ) -> list[Partition]:
    """The block's partitions, each with the views of its inputs and results it can take
    (fusion/boundary_views); the report gets the block's ops left with ATen."""
    backend = mapped.backend
    op_count = Counter(op.node for op in backend.ops if op.node is not None)
    order = {node: i for i, node in enumerate(mapped.nodes)}
    result = []
    exposed_as: dict[int, torch._C.Value] = {}  # a group's tensor -> the view it gives
    left: list[tuple[list[torch._C.Node], str]] = []  # refused: their nodes, why
    partitions, refused = _partition_in_pieces(backend, backend.ops)
    partitions = _short_attention_split(backend, mapped, partitions)
    partitions = _split_at_anchor(backend, partitions)
    partitions = _one_product_of_weights_each(backend, partitions)
    for op_id, why in refused:
        op = backend.ops[op_id]
        name = op.node.kind() if op.node is not None else op.kind
        log.debug(NAME, f"oneDNN refused the {op.kind} op of {name}: {why}")
    for supported, op_ids, in_ids, out_ids in partitions:
        ops = [backend.ops[i] for i in op_ids]
        nodes = sorted({n for op in ops for n in (op.node, *op.absorbed) if n is not None},
                       key=order.__getitem__)
        if not nodes or any(op.kind in ("Wildcard", "End") for op in ops):
            continue
        nodes = _without_views_read_beside_their_base(backend, nodes, out_ids, op_count)
        exposed = exposed_values(backend, nodes, out_ids)
        candidate = Candidate(supported, ops, nodes, in_ids, out_ids, exposed, mapped, op_count)
        why = refusal(candidate)
        if why is not None:
            left.append((nodes, why))
            log.debug(NAME, f"partition [{describe(nodes)}] left unfused: {why}")
            continue
        pinned = SizeVerdict.PIN in (binary_head_with_width_operand(ops, backend),
                                     flattened_matmul_broadcast(ops, backend),
                                     pool_operand(ops, backend),
                                     layer_norm_sum(ops, backend),
                                     matmul_operand_layout(ops, backend),
                                     int8_padding_windows(ops, backend))
        shape_inputs = candidate.shape_inputs
        made = {v.unique(): v for n in nodes for v in n.outputs()}
        exposed_as.update((out, made.get(e) or mapped.values[e])
                          for out, e in zip(out_ids, exposed, strict=True) if e != out)
        read_as = candidate.read_as
        inputs = [read_as.get(i) or mapped.values[i] for i in in_ids]
        result.append(Partition(nodes, inputs + shape_inputs,
                                [made.get(i) or mapped.values[i] for i in exposed],
                                [v.unique() for v in inputs + shape_inputs], exposed,
                                backend.to_text(ops, in_ids, out_ids),
                                pinned or any(op.static_shapes for op in ops),
                                frozenset().union(*(op.assumes_finite for op in ops)),
                                backend=BACKEND, offered_by=OFFERED_BY,
                                shape_inputs=len(shape_inputs),
                                last_dims=frozenset().union(*(op.last_dims for op in ops)),
                                cpu_needs=cpu_needs(candidate)))
        log.update(NAME, f"partition [{describe(nodes)}]: {len(in_ids)} inputs, "
                         f"{len(out_ids)} outputs")
    result = [_reading_exposed(part, exposed_as) for part in result]
    result, absorbed = boundary_views.extend(graph, mapped.block, result)
    for node, why in mapped.unmapped.items():
        if node.kind().startswith("aten::") and node not in absorbed:
            report.add_unmapped(node, why)
    for nodes, why in left:
        if rest := [n for n in nodes if n not in absorbed]:
            report.add_rejected(describe(rest), rest, why, by=OFFERED_BY)
    return result
