"""Small helpers over torch's Python IR bindings shared by the passes."""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Any

import torch

from .. import _C
from ..aten_ops import SCALAR_TYPE_CODE
from ..group_schema import KIND


def insert_node(graph: torch._C.Graph, before: torch._C.Node, kind: str, args: list[Any],
                out_type: torch._C.Type) -> torch._C.Node:
    """A `kind` node before `before` with one output of `out_type`; arguments
    that are not graph values become constants."""
    with graph.insert_point_guard(before):
        values = [a if isinstance(a, torch._C.Value) else graph.insertConstant(a) for a in args]
        node = graph.insertNode(graph.create(kind, values, 1))
    node.output().setType(out_type)
    return node


def insert_cast(graph: torch._C.Graph, value: torch._C.Value, dtype: torch.dtype,
                before: torch._C.Node) -> torch._C.Node:
    """An `aten::to(value, dtype)` node before `before`, typed as value's type in `dtype`."""
    return insert_node(graph, before, "aten::to",
                       [value, SCALAR_TYPE_CODE[dtype], False, False, None],
                       value.type().with_dtype(dtype))


def profiled_dtype(value: torch._C.Value) -> torch.dtype | None:
    """The dtype the profiling executor recorded for a tensor value, if any."""
    t = value.type()
    return t.dtype() if isinstance(t, torch._C.TensorType) else None


def profiled_sizes(value: torch._C.Value) -> list[int] | None:
    """The sizes recorded for a tensor value, where all are known."""
    t = value.type()
    if not isinstance(t, torch._C.TensorType) or t.sizes() is None or None in t.sizes():
        return None
    return list(t.sizes())


def int_list(graph: torch._C.Graph, items: list[torch._C.Value]) -> torch._C.Value:
    """An int[] built from the items at the graph's insert point."""
    node = graph.insertNode(graph.create("prim::ListConstruct", items, 1))
    node.output().setType(torch._C.ListType.ofInts())
    return node.output()


def int_op(graph: torch._C.Graph, kind: str, a: torch._C.Value, b: torch._C.Value
           ) -> torch._C.Value:
    """`kind` (aten::mul, aten::floordiv) of two ints at the graph's insert point."""
    node = graph.insertNode(graph.create(kind, [a, b], 1))
    node.output().setType(torch._C.IntType.get())
    return node.output()


def int_product(graph: torch._C.Graph, values: list[torch._C.Value]) -> torch._C.Value:
    """The product of ints, its constant factors multiplied here."""
    constant, others = 1, []
    for value in values:
        n = value.toIValue() if value.node().kind() == "prim::Constant" else None
        if isinstance(n, int):
            constant *= n
        else:
            others.append(value)
    product = graph.insertConstant(constant) if constant != 1 or not others else None
    for value in others:
        product = value if product is None else int_op(graph, "aten::mul", product, value)
    assert product is not None
    return product


ShapeItem = torch._C.Value | int


def shape_items(view: torch._C.Node) -> list[ShapeItem] | None:
    """A view's shape argument, item by item: the values of a list built in the graph, or a
    constant list's ints."""
    shape = view.inputsAt(1)
    if shape.node().kind() == "prim::ListConstruct":
        return list(shape.node().inputs())
    listed = shape.toIValue() if shape.node().kind() == "prim::Constant" else None
    return list(listed) if isinstance(listed, list) else None


def shape_values(view: torch._C.Node, graph: torch._C.Graph) -> list[torch._C.Value] | None:
    """A view's shape argument as int values, a constant list's items inserted as constants
    at the graph's insert point."""
    items = shape_items(view)
    return None if items is None else [
        graph.insertConstant(i) if isinstance(i, int) else i for i in items]


def int_constant(item: ShapeItem) -> int | None:
    """The int an item holds, where it is a constant."""
    n = item if isinstance(item, int) else (
        item.toIValue() if item.node().kind() == "prim::Constant" else None)
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def inferred_size(graph: torch._C.Graph, sizes: list[torch._C.Value],
                  others: list[torch._C.Value]) -> torch._C.Value:
    """The size a view of a tensor of these sizes infers for its -1: the element count over
    the others' product, the values on both sides cancelled first (where the view is valid,
    the others divide the count, and so what is left of them divides what is left of it)."""
    left = list(sizes)
    divisors = []
    for value in others:
        n = int_constant(value)
        same = next((i for i, v in enumerate(left) if v.unique() == value.unique()
                     or (n is not None and int_constant(v) == n)), None)
        if same is None:
            divisors.append(value)
        else:
            del left[same]
    count = int_product(graph, left)
    return count if not divisors else int_op(graph, "aten::floordiv", count,
                                             int_product(graph, divisors))


def all_nodes(block: torch._C.Block) -> list[torch._C.Node]:
    """Every node of `block` and of the blocks nested in it, in order."""
    return _C._all_nodes(block)


def ranks_that_may_vary(graph: torch._C.Graph) -> set[int]:
    """The values (by unique id) whose rank may change from call to call, where the
    profiled one need not hold: a squeeze drops a dim only where its size is 1, the
    branches of an if (and a loop's iterations) may give other ranks, and the ops after
    them keep the ranks they are given, unless a shape list or a permutation fixes
    theirs."""
    varying: set[int] = set()
    for node in all_nodes(graph.block()):
        if node.kind() != "aten::squeeze" and not list(node.blocks()) and (not varying or not any(
                v.unique() in varying for v in node.inputs())):
            continue
        if node.kind() == "aten::permute" or (
                node.kind() in ("aten::view", "aten::reshape")
                and node.inputsAt(1).node().kind() in ("prim::ListConstruct", "prim::Constant")):
            continue
        varying.update(o.unique() for o in node.outputs())
    return varying


def constant_number(value: torch._C.Value) -> numbers.Number | None:
    """The constant number a value holds (a Python number, or a 0-dim tensor
    as tracing records the scalar of an in-place op), else None."""
    if value.node().kind() != "prim::Constant":
        return None
    v = value.toIValue()
    if isinstance(v, torch.Tensor):
        if v.dim() != 0 or v.dtype == torch.bool or v.is_complex():
            return None
        v = v.item()
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# Nodes without a schema that never write to a tensor.
_PURE_PRIMS = frozenset({
    "prim::Constant", "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
    "prim::TupleUnpack", "prim::TupleIndex", "prim::GetAttr", "prim::NumToTensor",
    "prim::device", "prim::dtype", "prim::If", "prim::Loop", "prim::RaiseException",
    "prim::Uninitialized", "prim::unchecked_cast", "prim::BailOut", "prim::Print", KIND,
})


@functools.cache
def _written_arguments(schema: str) -> tuple[int, ...]:
    """The positions of the arguments a schema writes in place (parsed once per schema: the
    passes ask for thousands of nodes of a few dozen ops)."""
    return tuple(i for i, arg in enumerate(torch._C.parse_schema(schema).arguments)
                 if arg.alias_info is not None and arg.alias_info.is_write)


def written_values(node: torch._C.Node) -> list[torch._C.Value] | None:
    """The values a node (or a node in its blocks) may write in place, from the
    alias annotations of its schema; None when it may write anything."""
    written: list[torch._C.Value] = []
    schema = node.schema()
    if schema != "(no schema)":
        indices = _written_arguments(schema)
        if indices:
            inputs = list(node.inputs())
            written += [inputs[i] for i in indices if i < len(inputs)]
    elif node.kind() not in _PURE_PRIMS:
        return None
    for block in node.blocks():
        for inner in block.nodes():
            inner_written = written_values(inner)
            if inner_written is None:
                return None
            written += inner_written
    return written


class WrittenMemory:
    """What the ops of a graph may write in place, looked up at the first question (and
    alias analysis only where something is written)."""

    def __init__(self, graph: torch._C.Graph) -> None:
        self.graph = graph
        # Each op that writes in place and what it writes (None: anything).
        self._writes: list[tuple[torch._C.Node, list[torch._C.Value] | None]] | None = None
        self._alias_db: Any = None

    @property
    def alias_db(self) -> Any:
        if self._alias_db is None:
            self._alias_db = self.graph.alias_db()
        return self._alias_db

    def may_write(self, values: Iterable[torch._C.Value],
                  ignoring: AbstractSet[torch._C.Node] = frozenset()) -> bool:
        """Whether an op of the graph, but those `ignoring`, may write memory one of
        `values` may alias."""
        if self._writes is None:
            self._writes = [(n, w) for n in all_nodes(self.graph.block())
                            if (w := written_values(n)) is None or w]
        writes = [w for n, w in self._writes if n not in ignoring]
        if not writes:
            return False
        values = list(values)
        return any(written is None or any(self.alias_db.may_contain_alias(w, v)
                                          for w in written for v in values)
                   for written in writes)
