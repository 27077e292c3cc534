"""Partitioning for cuDNN: the plugin's own (cuDNN does not partition).

A fusion pass in the way of TVM's fuse_ops: every op has a class in the op
table (anchor, pointwise, reduction; the rest is complicated), and groups grow
from anchors, since cuDNN's runtime fusion engines take one convolution or
matmul with pointwise ops around it and at most one final reduction.

For each convolution or matmul on `device_type`, in block order:
- the epilogue grows along the anchor's post-dominator tree: from the group's
  end E to its immediate post-dominator P, every node on a path E -> P joins
  if all of them are pointwise (P may be a reduction, which ends the group).
  Every path out of the group thus comes back through P, so no value inside
  is used outside and the group has one output; a complicated op on such a
  path would make a cycle and stops the growth; a fork that never meets again
  (P is the graph's end) stops it too,
- the prologue grows backwards from the anchor's data input (conv X / matmul
  A, never the weight) over pointwise ops marked `prologue` whose results the
  group alone reads (cuDNN cannot output a prologue value),
- every step is tried by lowering the candidate group (group_rules.py holds
  cuDNN's group rules: shapes, broadcasts, per-channel prologue operands, one
  reduction at the end, convolution layouts); a step that fails is left out
  with its reason. A group that fails only for want of a final reduction
  (Unfinished: an NCHW convolution's epilogue) grows on, and the group is
  the longest one that lowered.
A group needs more than its anchor: a lone convolution or matmul, and any
pointwise-only region, stays with ATen (which calls cuDNN/cuBLAS for it).
No op in the table makes a view, so no output aliases an input.

A node is a candidate only if its tensors are profiled on `device_type` with
static sizes and strides in float16/bfloat16/float32 (a 0-dim constant, a
number operand, may live on the CPU), its other arguments are constants, and,
for `finite_only` entries, passes/finiteness proves its input finite; the
group then records the graph inputs that proof assumed.
"""

from __future__ import annotations

import functools

import torch

from ... import log
from ...fusion.partition import Partition, describe
from ...passes.finiteness import Facts
from ...report import FusionReport
from . import BACKEND, OFFERED_BY
from .group_rules import lower
from .ir import IR_DTYPES
from .lowering import Unfinished, Unsupported, is_scalar_constant
from .op_table import LOWERINGS, OpClass

NAME = log.module_name(__file__)

LONE_ANCHOR = "a lone convolution or matmul (ATen runs it with cuDNN or cuBLAS as it is)"
POINTWISE_ONLY = "a pointwise-only region: no convolution or matmul to anchor it"
FORK = "the group's result is also read elsewhere (its epilogue would need a second output)"
AFTER_REDUCTION = "it follows the group's reduction (cuDNN fuses one reduction, as the last op)"
WEIGHT_PROLOGUE = "a prologue on the weight (cuDNN fuses one on the conv X / matmul A operand only)"
PROLOGUE_ESCAPES = ("its result is also read outside the group "
                    "(a prologue value cannot be an output)")
NOT_PROLOGUE = "not a prologue op (cuDNN fuses per-channel scale, bias and relu there)"
# The anchor's data and weight operands, by kind: a prologue joins the former only.
DATA_INPUT = {"aten::addmm": 1}
WEIGHT_INPUTS = {"aten::addmm": (0, 2)}


def _tensor_types(node: torch._C.Node) -> list[tuple[torch._C.Value, torch._C.TensorType]]:
    return [(v, v.type()) for v in (*node.inputs(), *node.outputs())
            if isinstance(v.type(), torch._C.TensorType)]


def _on_device(node: torch._C.Node, device_type: str) -> bool:
    """Whether the node reads or writes a tensor profiled on device_type."""
    return any(t.device() is not None and t.device().type == device_type
               for _, t in _tensor_types(node))


def _node_reason(node: torch._C.Node, facts: Facts, device_type: str) -> str | None:
    """Why the node cannot be in any cuDNN group, or None."""
    entry = LOWERINGS.get(node.kind())
    if entry is None:
        return "no cuDNN mapping"
    for v, t in _tensor_types(node):
        if is_scalar_constant(v):
            continue
        if t.device() is None or t.device().type != device_type:
            return f"a tensor on {t.device()}, not {device_type}"
        if t.dtype() not in IR_DTYPES:
            return f"a tensor of dtype {t.dtype()}"
        if t.sizes() is None or None in t.sizes() or t.strides() is None \
                or None in t.strides():
            return "a tensor without profiled sizes and strides"
    for v in node.inputs():
        if not isinstance(v.type(), torch._C.TensorType) \
                and v.node().kind() != "prim::Constant":
            return "an argument computed at run time"
    if entry.finite_only and node.inputsAt(0).unique() not in facts:
        return f"{entry.finite_only}, and its input is not proven finite"
    return None


class _Dataflow:
    """The block's nodes, their users and immediate post-dominators (None
    stands for the block's end: its return, or nothing at all)."""

    def __init__(self, block: torch._C.Block) -> None:
        self.nodes = list(block.nodes())
        self.index = {n: i for i, n in enumerate(self.nodes)}
        ret = block.returnNode()
        self.users: dict[torch._C.Node, set[torch._C.Node | None]] = {}
        for node in self.nodes:
            users: set[torch._C.Node | None] = set()
            for v in node.outputs():
                for use in v.uses():
                    user = use.user
                    # A use in a nested block is a use by its enclosing node.
                    while user != ret and user not in self.index:
                        user = user.owningBlock().owningNode()
                    users.add(None if user == ret else user)
            self.users[node] = users
        self.ipdom: dict[torch._C.Node, torch._C.Node | None] = {}
        depth: dict[torch._C.Node | None, int] = {None: 0}

        def meet(a: torch._C.Node | None, b: torch._C.Node | None) -> torch._C.Node | None:
            while a != b:
                if depth[a] >= depth[b]:
                    a = self.ipdom[a]  # type: ignore[index]
                else:
                    b = self.ipdom[b]  # type: ignore[index]
            return a

        for node in reversed(self.nodes):
            users = self.users[node]
            dom = functools.reduce(meet, users) if users and None not in users else None
            self.ipdom[node] = dom
            depth[node] = depth[dom] + 1

    def span(self, start: torch._C.Node, end: torch._C.Node) -> list[torch._C.Node]:
        """The nodes on paths from start to its post-dominator end (end
        included, start not), in block order."""
        seen: set[torch._C.Node] = set()
        stack = [start]
        while stack:
            for user in self.users[stack.pop()]:
                if user is not None and user not in seen:
                    seen.add(user)
                    if user != end:
                        stack.append(user)
        return sorted(seen, key=self.index.__getitem__)


def _ports(nodes: list[torch._C.Node], flow: _Dataflow) -> tuple[list[torch._C.Value],
                                                                 list[torch._C.Value]]:
    """A group's inputs (tensors read from outside, number constants aside)
    and outputs (values read outside, or its last node's), in first-use order."""
    inside = set(nodes)
    seen = {v.unique() for n in nodes for v in n.outputs()}
    inputs: list[torch._C.Value] = []
    for node in nodes:
        for v in node.inputs():
            if v.unique() not in seen and isinstance(v.type(), torch._C.TensorType) \
                    and not is_scalar_constant(v):
                seen.add(v.unique())
                inputs.append(v)
    outputs = [v for n in nodes for v in n.outputs()
               if n == nodes[-1] or any(u not in inside for u in flow.users[n])]
    return inputs, outputs


class _Partitioner:
    def __init__(self, block: torch._C.Block, facts: Facts, report: FusionReport,
                 device_type: str) -> None:
        self.flow = _Dataflow(block)
        self.facts = facts
        self.report = report
        self.static = {n: _node_reason(n, facts, device_type) for n in self.flow.nodes
                       if _on_device(n, device_type)}
        self.taken: set[torch._C.Node] = set()
        self.reasons: dict[torch._C.Node, str] = {}  # why a candidate was left out

    def candidate(self, node: torch._C.Node | None) -> bool:
        return node is not None and node in self.static and self.static[node] is None \
            and node not in self.taken

    def refuse(self, nodes: list[torch._C.Node], why: str) -> None:
        for node in nodes:
            if self.candidate(node) and LOWERINGS[node.kind()].op_class is not OpClass.ANCHOR:
                self.reasons.setdefault(node, why)
                log.debug(NAME, f"{node.kind()} not fused: {why}")

    def trial(self, nodes: list[torch._C.Node]) -> Unsupported | None:
        """Why the candidate group cannot be lowered, or None."""
        ordered = sorted(nodes, key=self.flow.index.__getitem__)
        try:
            lower(ordered, *_ports(ordered, self.flow))
        except Unsupported as e:
            return e
        return None

    def grow_epilogue(self, anchor: torch._C.Node) -> list[torch._C.Node]:
        """The longest group along the post-dominator tree that lowers: growth
        goes on through an Unfinished group (a final reduction may complete it)
        and stops at a step that cannot be lowered."""
        group, done = [anchor], 1  # group[:done] lowers as it is
        unfinished = ""
        end = anchor
        while True:
            post = self.flow.ipdom[end]
            if post is None:
                self.refuse([u for u in self.flow.users[end] if u is not None], FORK)
                break
            span = self.flow.span(end, post)
            blockers = [n for n in span if not self.candidate(n)
                        or LOWERINGS[n.kind()].op_class is OpClass.ANCHOR]
            if blockers:
                if blockers != [post]:
                    self.refuse(span, f"fusing it would make a cycle through "
                                      f"{blockers[0].kind()} (a path leaving the group and "
                                      "coming back)")
                break
            error = self.trial(group + span)
            if error is not None and not isinstance(error, Unfinished):
                self.refuse(span, str(error))
                break
            group += span
            end = post
            if error is None:
                done = len(group)
            else:
                unfinished = str(error)
            if LOWERINGS[post.kind()].op_class is OpClass.REDUCTION:
                self.refuse([u for u in self.flow.users[post] if u is not None],
                            AFTER_REDUCTION)
                break
        self.refuse(group[done:], unfinished)
        return group[:done]

    def grow_prologue(self, anchor: torch._C.Node,
                      group: list[torch._C.Node]) -> list[torch._C.Node]:
        data = anchor.inputsAt(DATA_INPUT.get(anchor.kind(), 0))
        shape = data.type().sizes()
        prologue: set[torch._C.Node] = set()
        frontier = [data.node()]
        while frontier:
            node = frontier.pop()
            if not self.candidate(node) or node in prologue:
                continue
            if not LOWERINGS[node.kind()].prologue:
                self.refuse([node], NOT_PROLOGUE)
                continue
            if any(use.user not in prologue and not (use.user == anchor and use.offset
                                                      == DATA_INPUT.get(anchor.kind(), 0))
                   for v in node.outputs() for use in v.uses()):
                self.refuse([node], PROLOGUE_ESCAPES)
                continue
            error = self.trial([*prologue, node, *group])
            if error is not None:
                self.refuse([node], str(error))
                continue
            prologue.add(node)
            # Only the full-size operand leads further back: per-channel ones are inputs.
            frontier += [v.node() for v in node.inputs()
                         if isinstance(v.type(), torch._C.TensorType)
                         and v.type().sizes() == shape]
        return sorted([*prologue, *group], key=self.flow.index.__getitem__)

    def refuse_weight_prologue(self, anchor: torch._C.Node) -> None:
        for i in WEIGHT_INPUTS.get(anchor.kind(), (1,)):
            producer = anchor.inputsAt(i).node()
            if self.candidate(producer) and LOWERINGS[producer.kind()].op_class \
                    is OpClass.POINTWISE:
                self.refuse([producer], WEIGHT_PROLOGUE)

    def partition(self, anchor: torch._C.Node) -> Partition | None:
        error = self.trial([anchor])
        if error is not None:
            self.static[anchor] = str(error)
            return None
        self.refuse_weight_prologue(anchor)
        group = self.grow_epilogue(anchor)
        group = self.grow_prologue(anchor, group)
        if len(group) == 1:
            self.reject([anchor], LONE_ANCHOR)
            return None
        inputs, outputs = _ports(group, self.flow)
        graph = lower(group, inputs, outputs)
        self.taken.update(group)
        finite = frozenset().union(*(self.facts[n.inputsAt(0).unique()] for n in group
                                     if LOWERINGS[n.kind()].finite_only))
        log.update(NAME, f"cuDNN group [{describe(group)}]: {len(inputs)} inputs, "
                         f"{len(outputs)} outputs")
        log.debug(NAME, lambda: graph.to_json(indent=1))
        return Partition(group, inputs, outputs, [v.unique() for v in inputs],
                         [v.unique() for v in outputs], graph.to_json(), True, finite,
                         backend=BACKEND, offered_by=OFFERED_BY)

    def reject(self, nodes: list[torch._C.Node], why: str) -> None:
        self.report.add_rejected(describe(nodes), nodes, why, by=OFFERED_BY)
        log.debug(NAME, f"region [{describe(nodes)}] left unfused: {why}")

    def report_leftovers(self) -> None:
        """Unmapped ops, and the candidates no group took, by connected region."""
        for node, why in self.static.items():
            if why is not None and node.kind().startswith("aten::"):
                self.report.add_unmapped(node, why)
        left = {n for n in self.flow.nodes if self.candidate(n)
                and LOWERINGS[n.kind()].op_class is not OpClass.ANCHOR}
        neighbours: dict[torch._C.Node, set[torch._C.Node]] = {n: set() for n in left}
        for node in left:
            for user in self.flow.users[node] & left:
                neighbours[node].add(user)
                neighbours[user].add(node)
        seen: set[torch._C.Node] = set()
        for start in sorted(left, key=self.flow.index.__getitem__):
            if start in seen:
                continue
            region, stack = [], [start]
            seen.add(start)
            while stack:
                node = stack.pop()
                region.append(node)
                stack += [n for n in neighbours[node] if n not in seen]
                seen.update(neighbours[node])
            region.sort(key=self.flow.index.__getitem__)
            whys = list(dict.fromkeys(self.reasons[n] for n in region if n in self.reasons))
            self.reject(region, "; ".join(whys) or POINTWISE_ONLY)


def find_partitions(block: torch._C.Block, facts: Facts, report: FusionReport,
                    device_type: str = "cuda") -> list[Partition]:
    """The cuDNN fusion groups of one block (not of the blocks nested in it)."""
    parts = _Partitioner(block, facts, report, device_type)
    result = []
    for node in parts.flow.nodes:
        if parts.candidate(node) and LOWERINGS[node.kind()].op_class is OpClass.ANCHOR:
            part = parts.partition(node)
            if part is not None:
                result.append(part)
    parts.report_leftovers()
    return result
