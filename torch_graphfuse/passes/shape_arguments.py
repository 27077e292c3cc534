"""Shape arguments: sizes a model reads at run time, made private to each view that uses them.

Tracing a Hugging Face model records `x.view(batch, seq, heads, -1)` with `batch` and `seq`
read by `aten::size` at run time, and the size nodes shared by every layer:

    %b : int = aten::size(%hidden, 0)
    %shape : int[] = prim::ListConstruct(%b, %s, 12, 64)
    %q : Tensor = aten::view(%proj, %shape)

Such a shape is exact for the profiled sizes of the tensors it reads, and a fusion group
already compiles per profiled spec behind a guard of exact sizes. So each view or reshape
gets its own copy of the arithmetic, just before it; its mapping takes the copy into its
partition (`ShapeChain.nodes`), and the tensors whose sizes it reads (`sources`) join the
group as inputs its guard pins. The group's subgraph keeps the arithmetic, so a call with
other sizes runs unfused with eager's shape.

Shape arithmetic is: constants, `aten::size(t, dim)`, int lists, and int arithmetic, as
ints or as the 0-dim tensors tracing makes of them (`prim::NumToTensor`, `aten::Int`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from .. import log
from ..aten_ops import BINARY_ARITHMETIC, DTYPE_OF_CODE, RESHAPES

NAME = log.module_name(__file__)

# Ops whose argument 1 is a shape their mapping reads (the oneDNN reshape, rms_norm and pad
# lowerings).
SHAPE_CONSUMERS = frozenset({"aten::view", "aten::reshape", "aten::rms_norm", "aten::pad"})


def _add(a: Any, b: Any, alpha: Any = 1) -> Any:
    return a + alpha * b


def _sub(a: Any, b: Any, alpha: Any = 1) -> Any:
    return a - alpha * b


def _rsub(a: Any, b: Any, alpha: Any = 1) -> Any:
    return b - alpha * a


# Arithmetic over sizes: kind -> the function of its argument values.
ARITHMETIC: dict[str, Callable[..., Any]] = {
    "prim::ListConstruct": lambda *items: list(items),
    "prim::NumToTensor": torch.tensor,
    "aten::Int": int,
    "aten::mul": operator.mul,
    "aten::add": _add,
    "aten::sub": _sub,
    "aten::floordiv": operator.floordiv,
    "aten::floor_divide": torch.floor_divide,
    # Python's % and torch.remainder both take the divisor's sign (Swin's padding to whole
    # windows, `(window - h % window) % window`).
    "aten::remainder": operator.mod,
    "aten::rsub": _rsub,
    "aten::__getitem__": operator.getitem,
}


def _cast(value: Any, *arguments: Any) -> Any:
    """aten::to(self, [device,] dtype, ...) of a 0-dim CPU tensor to a CPU tensor: a
    dtype cast (the flags say nothing of values)."""
    if arguments and isinstance(arguments[0], torch.device):
        if arguments[0].type != "cpu":
            raise LookupError
        arguments = arguments[1:]
    if (not isinstance(value, torch.Tensor) or value.device.type != "cpu" or not arguments
            or arguments[0] not in DTYPE_OF_CODE
            or any(not (f is None or isinstance(f, bool)) for f in arguments[1:])):
        raise LookupError
    return value.to(DTYPE_OF_CODE[arguments[0]])


# Scalars computed from sizes (DeBERTa's attention scale, `sqrt(tensor(d) * 3)`): the same
# arithmetic, on 0-dim tensors of any dtype, with casts and square roots.
SCALAR_ARITHMETIC: dict[str, Callable[..., Any]] = {
    **ARITHMETIC, "aten::to": _cast, "aten::sqrt": torch.sqrt,
}
# Ops that read such a scalar as an operand (the oneDNN binary lowerings).
SCALAR_CONSUMERS = frozenset({"aten::add", "aten::sub", "aten::mul", "aten::div"})


def _integral(value: Any) -> bool:
    """An int, a list of ints, or an integer 0-dim tensor (how tracing keeps a size)."""
    if isinstance(value, torch.Tensor):
        return value.dim() == 0 and not value.is_floating_point() and not value.is_complex()
    if isinstance(value, list):
        return all(isinstance(x, int) for x in value)
    return isinstance(value, int)


def _profiled_sizes(value: torch._C.Value) -> list[int] | None:
    t = value.type()
    if not isinstance(t, torch._C.TensorType) or t.dim() is None:
        return None
    sizes = t.sizes()
    return list(sizes) if all(s is not None for s in sizes) else None


@dataclass
class ShapeChain:
    """The arithmetic computing one shape argument, and its value at the profiled sizes."""
    nodes: list[torch._C.Node]  # each after the nodes it reads, constants left out
    sources: list[torch._C.Value]  # the tensors whose sizes it reads, each once
    value: Any
    last_only: bool = False  # it reads each source's last size only


def floating_scalar(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() == 0 and value.is_floating_point()


def chain(value: torch._C.Value, scalar: bool = False) -> ShapeChain | None:
    """The shape arithmetic computing `value`, or None where it is anything else or reads a
    tensor without profiled sizes. `scalar`: a 0-dim tensor of any dtype, through
    SCALAR_ARITHMETIC."""
    if value.node().kind() == "prim::Constant":
        return None
    arithmetic = SCALAR_ARITHMETIC if scalar else ARITHMETIC
    nodes: list[torch._C.Node] = []
    sources: list[torch._C.Value] = []
    seen: dict[int, Any] = {}
    last_only = True

    def evaluate(v: torch._C.Value) -> Any:
        nonlocal last_only
        if v.unique() in seen:
            return seen[v.unique()]
        node = v.node()
        if node.kind() == "prim::Constant":
            result = v.toIValue()
        elif node.kind() == "aten::size" and node.inputsSize() == 2:
            sizes = _profiled_sizes(node.inputsAt(0))
            dim = node.inputsAt(1)
            if sizes is None or dim.node().kind() != "prim::Constant":
                raise LookupError
            result = sizes[dim.toIValue()]
            last_only &= dim.toIValue() in (-1, len(sizes) - 1)
            if all(t.unique() != node.inputsAt(0).unique() for t in sources):
                sources.append(node.inputsAt(0))
            nodes.append(node)
        elif node.kind() in arithmetic and node.outputsSize() == 1:
            result = arithmetic[node.kind()](*(evaluate(x) for x in node.inputs()))
            if not (_integral(result) or (scalar and floating_scalar(result))):
                raise LookupError
            nodes.append(node)
        else:
            raise LookupError
        seen[v.unique()] = result
        return result

    try:
        result = evaluate(value)
    except (LookupError, TypeError, ValueError, RuntimeError, ZeroDivisionError):
        return None
    # Each value is evaluated once (`seen`), after its inputs: no node twice, in order.
    return ShapeChain(nodes, sources, result, last_only)


def _clone_before(graph: torch._C.Graph, shape: ShapeChain, anchor: torch._C.Node,
                  value: torch._C.Value) -> torch._C.Value:
    """Copies of the chain's nodes just before `anchor`; returns the copy of `value`."""
    env: dict[int, torch._C.Value] = {}
    with graph.insert_point_guard(anchor):
        for node in shape.nodes:
            clone = graph.insertNode(graph.createClone(node, lambda x: env.get(x.unique(), x)))
            for old, new in zip(node.outputs(), clone.outputs(), strict=True):
                env[old.unique()] = new
    return env[value.unique()]


def private(shape: ShapeChain, consumer: torch._C.Node) -> bool:
    """Whether nothing but the consumer (through the chain) reads the chain's values."""
    inside = set(shape.nodes) | {consumer}
    return all(use.user in inside for node in shape.nodes for out in node.outputs()
               for use in out.uses())


def arguments(node: torch._C.Node) -> list[tuple[int, bool]]:
    """(index, scalar) of the arguments of `node` a mapping, or a group's boundary views,
    may read as shape arithmetic."""
    if node.kind() in SHAPE_CONSUMERS:
        return [(1, False)]
    if node.kind() == "aten::slice" and node.inputsSize() == 5:  # (self, dim, start, end, step)
        return [(i, False) for i in (2, 3, 4)]
    if node.kind() in SCALAR_CONSUMERS:
        return [(i, True) for i in (0, 1)
                if isinstance(node.inputsAt(i).type(), torch._C.TensorType)]
    return []


def run(graph: torch._C.Graph) -> None:
    copied = 0
    for node in list(graph.nodes()):  # top-level block: views in loops stay as they are
        for i, scalar in arguments(node):
            shape = chain(node.inputsAt(i), scalar)
            if shape is None or private(shape, node) or (
                    scalar and not floating_scalar(shape.value)):
                continue
            node.replaceInput(i, _clone_before(graph, shape, node, node.inputsAt(i)))
            copied += 1
    if copied:
        torch._C._jit_pass_dce(graph)
    log.update(NAME, f"shape arithmetic copied for {copied} views")


# Ops whose result has their first input's sizes, whatever those are.
_SAME_SIZES = frozenset({
    "aten::relu", "aten::gelu", "aten::silu", "aten::sigmoid", "aten::tanh", "aten::neg",
    "aten::exp", "aten::sqrt", "aten::rsqrt", "aten::abs", "aten::erf", "aten::hardswish",
    "aten::hardsigmoid", "aten::dropout", "aten::contiguous", "aten::clone", "aten::to",
    "aten::type_as", "aten::layer_norm", "aten::softmax", "aten::log_softmax",
    "aten::rms_norm", "aten::group_norm", "aten::batch_norm",
})
# Elementwise ops of two operands: the result has the first one's size at a dim where the
# second is a constant of size 1 there (or has no such dim), as a bias or scale is.
_BROADCAST = frozenset({*BINARY_ARITHMETIC, "aten::masked_fill"})


def _dim_source(value: torch._C.Value, dim: int) -> tuple[torch._C.Value, int] | int | None:
    """The input value and dim whose size is the size of `value` at `dim` for any input
    sizes, through one op, or that size where it is a constant; None where it may differ."""
    node = value.node()
    kind = node.kind()
    rank = value.type().dim() if isinstance(value.type(), torch._C.TensorType) else None
    if rank is None or node.inputsSize() == 0:
        return None
    first = node.inputsAt(0)
    if kind in _SAME_SIZES:
        return first, dim
    if kind in _BROADCAST and node.inputsSize() >= 2:
        other = node.inputsAt(1)
        if other.node().kind() != "prim::Constant":
            return None
        if not isinstance(other.type(), torch._C.TensorType):
            return first, dim  # a number
        sizes = _profiled_sizes(other)
        if sizes is None or len(sizes) > rank:
            return None
        at = dim - (rank - len(sizes))
        return (first, dim) if at < 0 or sizes[at] == 1 else None
    if kind == "aten::linear":
        if dim < rank - 1:
            return first, dim
        weight = node.inputsAt(1)  # a frozen weight fixes the features
        sizes = _profiled_sizes(weight) if weight.node().kind() == "prim::Constant" else None
        return sizes[0] if sizes is not None and len(sizes) == 2 else None
    if kind == "aten::transpose" and node.inputsSize() == 3:
        a, b = (node.inputsAt(i).toIValue() % rank for i in (1, 2))
        return first, b if dim == a else a if dim == b else dim
    if kind == "aten::permute":
        return first, node.inputsAt(1).toIValue()[dim] % rank
    if (kind in ("aten::scaled_dot_product_attention", "aten::matmul") and rank >= 2
            and first.type().dim() == rank):
        # The rows are the first operand's, the columns the last's; a batch dim is the
        # first's where the second's comes from the same size (else it may broadcast).
        if dim == rank - 1:
            last = node.inputsAt(2 if kind == "aten::scaled_dot_product_attention" else 1)
            return (last, rank - 1) if last.type().dim() == rank else None
        if dim == rank - 2 or _same_size(first, node.inputsAt(1), dim):
            return first, dim
        return None
    if kind == "aten::slice" and node.inputsSize() == 5:
        return (first, dim) if node.inputsAt(1).toIValue() % rank != dim else None
    if kind in RESHAPES:
        target = generic_target(node)
        if target is None or target[dim] == -1:
            return None
        return (first, dim) if target[dim] == 0 else target[dim]
    return None


Root = tuple[int, int] | int  # (value, dim) a size comes from, or the constant it is


def _dim_root(value: torch._C.Value, dim: int) -> Root:
    """Where the size of `value` at `dim` comes from, through ops that keep it."""
    found: tuple[torch._C.Value, int] | int | None = (value, dim)
    while isinstance(found, tuple):
        value, dim = found
        try:
            found = _dim_source(value, dim)
        except (RuntimeError, TypeError, IndexError):
            found = None
    return found if isinstance(found, int) else (value.unique(), dim)


def _same_size(a: torch._C.Value, b: torch._C.Value, dim: int) -> bool:
    if a.type().dim() != b.type().dim():
        return False
    return _dim_root(a, dim) == _dim_root(b, dim)


def generic_identity(node: torch._C.Node, target: list[int]) -> bool:
    """Whether a view or reshape of generic target `target` returns its input's sizes at any
    input sizes: the target copies each size, or names the constant it always is."""
    x = node.inputsAt(0)
    return len(target) == x.type().dim() and all(
        t in (0, -1) or _dim_root(x, i) == t for i, t in enumerate(target))


def generic_target(node: torch._C.Node) -> list[int] | None:
    """The target of a view or reshape as StaticReshape's shape with `special_zero` (0:
    the input's size at that dim, -1: what the others leave), right at any input sizes;
    None where it is not.

    Each element must be a constant or the input's own size at the same dim, read
    through ops that keep it (`x.view(hidden.size(0), hidden.size(1), -1, 64)` of
    `x = linear(hidden)`); a constant -1 stays one, so an element computed otherwise, or a
    size of another dim, keeps the mapping at the profiled sizes."""
    x = node.inputsAt(0)
    rank = x.type().dim() if isinstance(x.type(), torch._C.TensorType) else None
    shape = node.inputsAt(1)
    if rank is None:
        return None
    if shape.node().kind() == "prim::Constant":
        items = shape.toIValue()
        elements: list[torch._C.Value | int] = list(items) if isinstance(items, list) else []
    elif shape.node().kind() == "prim::ListConstruct":
        elements = list(shape.node().inputs())
    else:
        return None
    target: list[int] = []
    for i, element in enumerate(elements):
        while not isinstance(element, int) and element.node().kind() in (
                "aten::Int", "prim::NumToTensor"):
            element = element.node().inputsAt(0)
        if not isinstance(element, int) and element.node().kind() == "prim::Constant":
            element = element.toIValue()
        if isinstance(element, int):
            if element == 0 or element < -1:  # a literal zero-size dim: not special_zero's 0
                return None
            target.append(element)
            continue
        sized = element.node()
        if (sized.kind() != "aten::size" or sized.inputsSize() != 2
                or sized.inputsAt(1).node().kind() != "prim::Constant" or i >= rank):
            return None
        source = sized.inputsAt(0)
        source_rank = source.type().dim() if isinstance(source.type(), torch._C.TensorType) \
            else None
        if source_rank is None:
            return None
        if _dim_root(source, sized.inputsAt(1).toIValue() % source_rank) != _dim_root(x, i):
            return None
        target.append(0)
    return target if target.count(-1) <= 1 else None
