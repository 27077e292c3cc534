"""What an op table entry works with, and how it registers.

A lowering maps one JIT node through its `Lowering` context: it reads the node's tensors
(their specs from the profiled types) and arguments, emits backend ops, and raises
`Unsupported` (with the reason `torch_graphfuse.last_report()` shows) when the node
cannot be taken as it is; the node then stays in the graph as a wildcard. `@lowering(...)`
files it in `LOWERINGS` as an `Entry`, with what the partitioner needs to know of it.
The op families' modules hold the entries; op_table.py gathers them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ...passes import shape_arguments
from ...passes.finiteness import Facts
from ..base import Unsupported
from .graph_desc import BACKEND_DTYPES, QUANTIZED_DTYPES, BackendGraph, BackendOp, TensorSpec


def tensor_spec(value: torch._C.Value) -> TensorSpec:
    """The logical tensor of a JIT value, from its profiled type."""
    t = value.type()
    spec = TensorSpec(value.unique())
    if not isinstance(t, torch._C.TensorType):
        return spec
    dtype = t.dtype()
    if dtype in BACKEND_DTYPES:
        spec.dtype = BACKEND_DTYPES[dtype]
    elif dtype in QUANTIZED_DTYPES:
        spec.dtype = QUANTIZED_DTYPES[dtype]
    elif dtype == torch.bool:
        spec.dtype = "bool"
    sizes = t.sizes() if t.dim() is not None else None
    if sizes is not None and all(s is not None for s in sizes):
        spec.sizes = list(sizes)
        strides = t.strides()
        if strides is not None and all(s is not None for s in strides):
            spec.strides = list(strides)
    spec.constant = value.node().kind() == "prim::Constant"
    if spec.constant and spec.sizes == []:
        # A 0-dim constant (a scalar operand) broadcasts like shape [1]; the
        # kernel binds it so.
        spec.sizes, spec.strides = [1], [1]
    return spec


class Lowering:
    """What a table entry sees of one JIT node while mapping it."""

    def __init__(self, graph: BackendGraph, jit_graph: torch._C.Graph, node: torch._C.Node,
                 facts: Facts, quantized: bool = False) -> None:
        self.graph = graph
        self.jit_graph = jit_graph
        self.node = node
        self.facts = facts
        self.quantized = quantized  # the op takes u8/s8 tensors (Entry.quantized)
        self.absorbed: list[torch._C.Node] = []  # list nodes taken in by the mapping
        self.constants: list[torch._C.Value] = []  # constant tensors the mapping added
        # Tensors whose profiled sizes an absorbed shape computation reads.
        self.shape_sources: list[torch._C.Value] = []
        self.pinned = False  # the mapping used profiled sizes: guard exact sizes
        # Tensors whose profiled last size the mapping baked in: the guard checks that one.
        self.last_dims: set[int] = set()
        # The op whose partition takes the node (an alias of its result, or an operand it
        # takes in): the node emits nothing.
        self.joins: BackendOp | None = None
        # Graph inputs the mapping assumes finite: the group checks them per call.
        self.assumes_finite: frozenset[int] = frozenset()

    # -- tensors ---------------------------------------------------------
    def _tensor(self, value: torch._C.Value, what: str, mask: bool = False) -> int:
        t = value.type()
        if not isinstance(t, torch._C.TensorType):
            raise Unsupported(f"{what} is not a tensor")
        if t.device() is not None and t.device().type != "cpu":
            raise Unsupported(f"{what} is on {t.device()}")
        if t.dtype() not in BACKEND_DTYPES and not (
                self.quantized and t.dtype() in QUANTIZED_DTYPES) and not (
                mask and t.dtype() == torch.bool):
            raise Unsupported(f"{what} has dtype {t.dtype()}")
        spec = tensor_spec(value)
        if spec.sizes is None:
            raise Unsupported(f"{what} has no profiled shape")
        if len(spec.sizes) == 0:
            held = self._scalar_of_sizes(value)
            if held is None:
                raise Unsupported(f"{what} is a 0-dim tensor computed at run time")
            return held
        return self.graph.add_tensor(spec)

    def _scalar_of_sizes(self, value: torch._C.Value) -> int | None:
        """A 0-dim float tensor computed from sizes alone, which only this node reads
        (passes/shape_arguments): a constant, its value at the profiled sizes. Its arithmetic
        joins the node's partition, and the guard pins the sizes it reads (the last only,
        where it reads no other)."""
        if self.node.kind() not in shape_arguments.SCALAR_CONSUMERS:
            return None
        found = shape_arguments.chain(value, scalar=True)
        if (found is None or not isinstance(found.value, torch.Tensor)
                or not found.value.is_floating_point()
                or not shape_arguments.private(found, self.node)):
            return None
        self.absorbed += found.nodes
        self.shape_sources += found.sources
        if found.last_only:
            for source in found.sources:
                self.pin_last_dim(self.graph.resolve(source.unique()))
        else:
            self.pin_shapes()
        return self.constant(found.value)

    def input(self, i: int) -> int:
        return self._tensor(self.node.inputsAt(i), f"input {i}")

    def mask_input(self, i: int) -> int:
        """A tensor input that may also be bool (an attention mask, which Select reads)."""
        return self._tensor(self.node.inputsAt(i), f"input {i}", mask=True)

    def output(self, i: int = 0) -> int:
        return self._tensor(self.node.outputsAt(i), f"output {i}")

    def rank(self, i: int) -> int:
        return len(self.sizes(i))

    def sizes(self, i: int) -> list[int]:
        spec = self.graph.tensors.get(self.graph.resolve(self.node.inputsAt(i).unique()))
        if spec is None or spec.sizes is None:
            spec = self.graph.tensors[self.input(i)]
        assert spec.sizes is not None
        return spec.sizes

    def temp(self, like: int, sizes: list[int] | None = None, dtype: str | None = None) -> int:
        """A fresh tensor internal to this node's mapping, of `like`'s dtype and sizes unless
        given."""
        base = self.graph.tensors[like]
        return self.graph.add_tensor(TensorSpec(self.graph.fresh_id(), dtype or base.dtype,
                                                False, base.sizes if sizes is None else sizes,
                                                None))

    def constant(self, value: torch.Tensor) -> int:
        """A constant tensor input: a prim::Constant inserted before the node (dead code,
        removed at the end, if the node stays unfused)."""
        with self.jit_graph.insert_point_guard(self.node):
            const = self.jit_graph.insertConstant(value)
        const.setType(torch._C.TensorType.create_from_tensor(value))
        self.constants.append(const)
        return self._tensor(const, "a constant")

    def pin_shapes(self) -> None:
        """This mapping is right for the profiled sizes only."""
        self.pinned = True

    def pin_last_dim(self, tensor: int) -> None:
        """This mapping is right for the tensor's profiled last size only."""
        self.last_dims.add(tensor)

    def out_sizes(self, i: int = 0) -> list[int]:
        sizes = self.graph.tensors[self.output(i)].sizes
        assert sizes is not None
        return sizes

    def list_inputs(self, i: int) -> list[int]:
        """The tensors of a Tensor[] argument built by prim::ListConstruct."""
        producer = self.node.inputsAt(i).node()
        if producer.kind() != "prim::ListConstruct":
            raise Unsupported(f"argument {i} is not a list built in the graph")
        self.absorbed.append(producer)
        return [self._tensor(v, f"list element {j}") for j, v in enumerate(producer.inputs())]

    # -- non-tensor arguments ---------------------------------------------
    def is_none(self, i: int) -> bool:
        return self.node.inputsAt(i).node().mustBeNone()

    def const(self, i: int) -> Any:
        value = self.node.inputsAt(i)
        if value.node().kind() != "prim::Constant":
            raise Unsupported(f"argument {i} is not a constant")
        return value.toIValue()

    def shape(self, i: int, pin: bool = True) -> Any:
        """Argument i, a constant or a shape computed from sizes (passes/shape_arguments):
        its value at the profiled sizes. The computation joins the node's partition, and
        the group's guard pins the sizes it reads (unless the mapping is right at any, as
        the caller says with `pin`)."""
        value = self.node.inputsAt(i)
        if value.node().kind() == "prim::Constant":
            return value.toIValue()
        found = shape_arguments.chain(value)
        if found is None:
            raise Unsupported(f"argument {i} is computed from other than sizes")
        if not shape_arguments.private(found, self.node):
            raise Unsupported(f"argument {i} is shape arithmetic other nodes read")
        self.absorbed += found.nodes
        self.shape_sources += found.sources
        if pin:
            self.pin_shapes()
        return found.value

    def alias_input(self) -> bool:
        """Map the node's result as its input's tensor, computing nothing (a reshape to the
        same shape at the pinned sizes, a cast to the same dtype), where a backend op
        computes that input: the node joins that op's partition. oneDNN's attention pattern
        takes a transpose after it, not such a reshape between."""
        x = self.input(0)
        producer = self.graph.producer(x)
        if producer is None:
            return False
        self.graph.aliases[self.node.output().unique()] = x
        self.joins = producer
        return True

    def n_inputs(self) -> int:
        return self.node.inputsSize()

    def finite(self, i: int) -> bool:
        """Whether input i holds only finite numbers when the graph inputs
        that passes/finiteness assumed do; a True answer makes the group
        check those inputs per call (fusion/finite_guard)."""
        assumed = self.facts.get(self.node.inputsAt(i).unique())
        if assumed is None:
            return False
        self.assumes_finite |= assumed
        return True

    # -- emission -----------------------------------------------------------
    def emit(self, kind: str, inputs: list[int], outputs: list[int], **attrs: Any) -> None:
        self.graph.add_op(kind, inputs, outputs, attrs, self.node)


Lower = Callable[[Lowering], None]


@dataclass(frozen=True)
class Entry:
    """An aten op's mapping, and what the partitioner needs to know of it."""

    lower: Lower
    # Kept as a partition of its own: oneDNN beats ATen even with nothing fused.
    worth_alone: bool = False
    # The mapping bakes in profiled sizes (a reshape's target, a pool kernel
    # derived from the input): the group's guard checks exact sizes.
    static_shapes: bool = False
    # Index of a Tensor[] argument built by prim::ListConstruct, which the
    # mapping takes in (the list node joins the node's partition).
    list_input: int | None = None
    # Where oneDNN differs from eager on NaN or infinity: mapped only
    # when its input is proven finite (passes/finiteness), else left with
    # ATen for this reason.
    finite_only: str | None = None
    # Takes or makes quantized data (u8/s8 tensors); other entries refuse them.
    quantized: bool = False


# aten kind -> its entry, filled as the op families' modules load (op_table loads them all).
LOWERINGS: dict[str, Entry] = {}


def lowering(*kinds: str, worth_alone: bool = False, static_shapes: bool = False,
             list_input: int | None = None, finite_only: str | None = None,
             quantized: bool = False) -> Callable[[Lower], Lower]:
    """Files the decorated function as the entry of each of `kinds`."""
    def register(fn: Lower) -> Lower:
        for kind in kinds:
            # The families' modules load in any order: a kind filed twice would depend on it.
            assert kind not in LOWERINGS, f"{kind} has two lowerings"
            LOWERINGS[kind] = Entry(fn, worth_alone, static_shapes, list_input, finite_only,
                                    quantized)
        return fn
    return register
