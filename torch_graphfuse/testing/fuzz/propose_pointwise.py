"""Proposers for pointwise, view, cast, in-place and unmapped ops.

Unary and binary ops (with broadcasting operands, residuals or constants),
identities, reshapes and other views, dtype casts, in-place ops on inputs,
intermediates and views, and ops with no mapping so that regions get cut.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Callable
from typing import Any

import torch

from torch_graphfuse.testing.fuzz.builder import Gen
from torch_graphfuse.testing.fuzz.evaluate import NEAR_ZERO, away_from_zero
from torch_graphfuse.testing.fuzz.ops import UNSUPPORTED
from torch_graphfuse.testing.fuzz.propose_layers import divisors
from torch_graphfuse.testing.fuzz.spec import MAX_NUMEL, Chooser, Op, chance, choice, weighted

_UNARY: list[tuple[str, Callable[[Chooser], dict[str, Any]]]] = [
    ("relu", lambda c: {}), ("sigmoid", lambda c: {}), ("tanh", lambda c: {}),
    ("exp", lambda c: {}), ("log", lambda c: {}), ("sqrt", lambda c: {}), ("abs", lambda c: {}),
    ("square", lambda c: {}), ("round", lambda c: {}), ("reciprocal", lambda c: {}),
    ("hardswish", lambda c: {}), ("mish", lambda c: {}), ("relu6", lambda c: {}),
    ("hardsigmoid", lambda c: {}), ("silu", lambda c: {}), ("bucket", lambda c: {}),
    ("neg", lambda c: {}), ("sin", lambda c: {}), ("cos", lambda c: {}),
    ("hardtanh", lambda c: dict(zip(("lo", "hi"), choice(
        c, [(-1.0, 1.0), (0.0, 6.0), (-0.5, 2.0), (-2.0, 0.5)]), strict=True))),
    ("clamp", lambda c: dict(zip(("lo", "hi"), choice(
        c, [(-1.0, 1.0), (None, 0.5), (-0.5, None), (0.0, 6.0), (0.0, None), (0, 1)]),
        strict=True))),
    ("clamp_min", lambda c: {"lo": choice(c, [0.0, -0.5, 0.25])}),
    ("clamp_max", lambda c: {"hi": choice(c, [0.0, 0.5, 1.0])}),
    ("leaky_relu", lambda c: {"slope": choice(c, [0.01, 0.2, 0.5, 1.5, -0.1])}),
    ("elu", lambda c: {"alpha": choice(c, [1.0, 0.5, 2.0])}),
    ("gelu", lambda c: {"approximate": choice(c, ["none", "tanh"])}),
    ("softplus", lambda c: {"beta": choice(c, [1.0, 0.5, 2.0]),
                            "threshold": choice(c, [20.0, 1.0, 2.0, 5.0, 0.5])}),
    ("pow", lambda c: {"exponent": choice(c, [2, 0.5, 3, 2.0, 3.0, 1.5, -1.0])}),
]
_UNARY_ATTRS = dict(_UNARY)


def _positive(g: Gen, x: int) -> int | None:
    """abs(x) + c with c around x's magnitude: a well-conditioned operand for
    log/sqrt/reciprocal/div (a raw intermediate has elements near zero)."""
    a = g.emit(Op("abs", (x,)))
    bound = 2.0 ** math.ceil(math.log2(g.meta(x).scale)) if a is not None else 1.0
    return None if a is None else g.emit(Op("add", (a,), {"scalar": bound}))


# relu and the clamp family are what conv/linear chains end with most.
_UNARY_WEIGHTS = [(k, 4 if k in ("relu", "hardtanh", "clamp", "relu6", "sigmoid") else 1)
                  for k, _ in _UNARY]


def p_unary(g: Gen) -> int | None:
    x = g.pick()
    if x is None:
        return None
    kind = weighted(g.c, _UNARY_WEIGHTS)
    op = Op(kind, (x,), _UNARY_ATTRS[kind](g.c))
    out = g.emit(op)
    if out is None and (kind in NEAR_ZERO or kind == "pow") and chance(g.c, 0.7):
        p = _positive(g, x)
        out = None if p is None else g.emit(dataclasses.replace(op, args=(p,)))
    return out


def _bcast_shape(c: Chooser, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape broadcasting to `shape`: some dims 1, maybe fewer leading dims."""
    out = tuple(1 if chance(c, 0.5) else s for s in shape)
    return out[c.integer(0, len(out)) if chance(c, 0.3) else 0:] or (1,)


def _broadcasts(g: Gen, a: int, b: int, into: bool) -> bool:
    """b broadcasts with a at every shape (into: without growing a)."""
    for sa, sb in zip(g.shapes(a), g.shapes(b), strict=True):
        try:
            out = torch.broadcast_shapes(sa, sb)
        except RuntimeError:
            return False
        if math.prod(out) > MAX_NUMEL or (into and tuple(out) != sa):
            return False
    return True


_SCALARS = [2.0, 0.5, -1.5, 3, 1.0, 0, 1, 0.0, -2, 0.25]


def _other(g: Gen, x: int, into: bool) -> int | None:
    """Another value broadcasting with x (often a residual), or a constant."""
    if chance(g.c, 0.6):
        o = g.pick(lambda v: v != x and _broadcasts(g, x, v, into), dep=False)
        if o is not None:
            return o
    return g.const(_bcast_shape(g.c, g.shape(x)))


def p_binary(g: Gen) -> int | None:
    x = g.pick()
    if x is None:
        return None
    kind = choice(g.c, ["add", "mul", "sub", "div"])
    if chance(g.c, 0.45):
        attrs: dict[str, Any] = {"scalar": choice(g.c, _SCALARS)}
        if chance(g.c, 0.25):
            attrs["reverse"] = True
        return g.emit(Op(kind, (x,), attrs))
    other = _other(g, x, into=False)
    if other is None:
        return None
    if kind == "div" and not _divisor_ok(g, other):
        other = _positive(g, other)
        if other is None:
            return None
    attrs = {"alpha": choice(g.c, [2, -0.5, 0.5])} if kind in ("add", "sub") and \
        chance(g.c, 0.3) else {}
    args = (other, x) if chance(g.c, 0.3) and kind in ("add", "mul") else (x, other)
    return g.emit(Op(kind, args, attrs))


def _divisor_ok(g: Gen, v: int) -> bool:
    return all(away_from_zero(ev.values[v], ev.meta[v]) for ev in g.evals)


def p_identity(g: Gen) -> int | None:
    """x * 1.0, x + 0, x / 1, x.to(own dtype), x.contiguous(), x.reshape(own shape)."""
    x = g.pick()
    if x is None:
        return None
    form = choice(g.c, ["mul", "add", "div", "sub", "to", "contiguous", "reshape"])
    if form == "to":
        return g.emit(Op("to", (x,), {"dtype": g.dtype_of(x)}))
    if form == "contiguous":
        return g.emit(Op("contiguous", (x,)))
    if form == "reshape":
        shape = tuple(f"d{i}" for i in range(len(g.shape(x))))
        return g.emit(Op("reshape", (x,), {"shape": shape, "method": "view"}))
    scalar = choice(g.c, [1.0, 1] if form in ("mul", "div") else [0, 0.0])
    return g.emit(Op(form, (x,), {"scalar": scalar}))


def _reshape_attrs(c: Chooser, shape: tuple[int, ...]) -> dict[str, Any] | None:
    rank = len(shape)
    form = choice(c, ["flat", "batch", "split"])
    method = choice(c, ["reshape", "view"])
    if form == "flat" or rank < 2:
        return {"shape": (-1,), "method": method}
    if form == "batch":
        return {"shape": ("d0", -1), "method": method}
    i = c.integer(1, rank - 1)
    ks = [k for k in divisors(shape[i]) if 1 < k < shape[i]]
    if not ks:
        return None
    dims: list[Any] = [f"d{j}" for j in range(rank)]
    dims[i: i + 1] = [choice(c, ks), -1]
    return {"shape": tuple(dims), "method": method}


def p_shape(g: Gen) -> int | None:
    x = g.pick()
    if x is None:
        return None
    return _shape_op(g, x, choice(g.c, ["permute", "transpose", "t", "reshape", "flatten",
                                        "squeeze", "unsqueeze", "contiguous", "split",
                                        "narrow", "select", "expand", "chunk"]))


def _shape_op(g: Gen, x: int, kind: str) -> int | None:
    shape, c = g.shape(x), g.c
    rank = len(shape)
    if kind == "permute" and rank >= 2:
        perm = list(range(rank))
        random.Random(c.integer(0, 999)).shuffle(perm)
        return g.emit(Op("permute", (x,), {"dims": tuple(perm)}))
    if kind == "transpose" and rank >= 2:
        d0, d1 = c.integer(0, rank - 1), c.integer(-rank, rank - 1)
        return g.emit(Op("transpose", (x,), {"d0": d0, "d1": d1})) if d0 != d1 % rank else None
    if kind == "t" and rank <= 2:
        return g.emit(Op("t", (x,)))
    if kind == "reshape":
        attrs = _reshape_attrs(c, shape)
        return None if attrs is None else g.emit(Op("reshape", (x,), attrs))
    if kind == "flatten" and rank >= 1:
        start = c.integer(0, rank - 1)
        return g.emit(Op("flatten", (x,), {"start": start, "end": c.integer(start, rank - 1)}))
    if kind == "squeeze":
        ones = [i for i, s in enumerate(shape) if s == 1]
        return g.emit(Op("squeeze", (x,), {"dim": choice(c, ones)})) if ones else None
    if kind == "unsqueeze" and rank < 5:
        return g.emit(Op("unsqueeze", (x,), {"dim": c.integer(-rank - 1, rank)}))
    if kind == "contiguous":
        return g.emit(Op("contiguous", (x,)))
    return _slice_op(g, x, kind)


def _slice_op(g: Gen, x: int, kind: str) -> int | None:
    """A view of part of x (split, chunk, narrow, select) or of x broadcast (expand)."""
    shape, c = g.shape(x), g.c
    rank = len(shape)
    if rank == 0:
        return None
    dim = c.integer(-rank, rank - 1)
    n = shape[dim]
    if kind == "split" and n > 1:
        size = c.integer(1, n - 1)
        # A trace keeps the number of pieces: the same at every shape the case runs.
        if len({-(-s[dim] // size) for s in g.shapes(x)}) != 1:
            return None
        index = c.integer(0, (n - 1) // size)
        return g.emit(Op("split", (x,), {"size": size, "dim": dim, "index": index}))
    if kind == "chunk" and n > 1:
        chunks = c.integer(2, min(n, 4))
        # As with split, the trace keeps the number of pieces.
        pieces = {-(-s[dim] // -(-s[dim] // chunks)) for s in g.shapes(x)}
        if len(pieces) != 1:
            return None
        index = c.integer(0, pieces.pop() - 1)
        return g.emit(Op("chunk", (x,), {"chunks": chunks, "dim": dim, "index": index}))
    if kind == "narrow" and n > 1:
        start = c.integer(0, n - 1)
        return g.emit(Op("narrow", (x,), {"dim": dim, "start": start,
                                          "length": c.integer(1, n - start)}))
    if kind == "select":
        return g.emit(Op("select", (x,), {"dim": dim, "index": c.integer(-n, n - 1)}))
    if kind == "expand":
        ones = [i for i, s in enumerate(shape) if s == 1]
        if not ones:
            return None
        sizes = [-1] * rank
        sizes[choice(c, ones)] = choice(c, [2, 3])
        lead = [choice(c, [2])] if rank < 4 and chance(c, 0.3) else []
        return g.emit(Op("expand", (x,), {"sizes": tuple(lead + sizes)}))
    return None


def _along_a_dim(g: Gen) -> tuple[int, dict[str, object]] | None:
    """A floating value with a dim of it, and the view that lays a table of that dim's
    length along it."""
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.dtype_of(v).is_floating_point)
    if x is None:
        return None
    rank = len(g.shape(x))
    dim = g.c.integer(0, rank - 1)
    return x, {"dim": dim, "view": [-1 if d == dim else 1 for d in range(rank)]}


def p_positions(g: Gen) -> int | None:
    """x plus a table of its positions along one dim, masked: arange(x.size(dim)) and
    what is computed from it depend on x's sizes alone."""
    found = _along_a_dim(g)
    if found is None:
        return None
    x, attrs = found
    return g.emit(Op("positions", (x,), {**attrs, "period": choice(g.c, [1, 2, 3]),
                                         "scale": choice(g.c, [0.5, -1.25, 3.0])}))


def p_filled_positions(g: Gen) -> int | None:
    """x plus a table of its positions along one dim built with in-place writes to a tensor
    made from x's size (slice assignment, fill, in-place scale)."""
    found = _along_a_dim(g)
    if found is None:
        return None
    x, attrs = found
    return g.emit(Op("filled_positions", (x,), {**attrs,
                                                "scale": choice(g.c, [0.5, -1.25, 3.0]),
                                                "fill": choice(g.c, [-2.0, 7.0]),
                                                "k": choice(g.c, [1.0, 0.25, -3.0])}))


def p_size_scale(g: Gen) -> int | None:
    """x divided by sqrt(x.size(dim) * k), the scale a 0-dim tensor computed from a size."""
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.dtype_of(v).is_floating_point)
    if x is None:
        return None
    dim = choice(g.c, [-1, g.c.integer(0, len(g.shape(x)) - 1)])
    return g.emit(Op("size_scale", (x,), {"dim": dim, "k": choice(g.c, [1, 3, 0.5])}))


def p_cast(g: Gen) -> int | None:
    x = g.pick()
    if x is None:
        return None
    to = torch.float32 if g.dtype_of(x) == torch.bfloat16 or chance(g.c, 0.2) else torch.bfloat16
    return g.emit(Op("to", (x,), {"dtype": to}))


def p_inplace(g: Gen) -> int | None:
    """relu_/sigmoid_/clamp_/add_/mul_ on an input, an intermediate or a view of one."""
    where = choice(g.c, ["input", "value", "view"])
    if where == "input":
        x = g.pick(lambda v: v < len(g.inputs))
    else:
        x = g.pick(lambda v: v >= len(g.inputs))
    if x is not None and where == "view":
        x = _shape_op(g, x, choice(g.c, ["reshape", "transpose", "unsqueeze", "permute", "t",
                                         "flatten", "contiguous"]))
    if x is None:
        return None
    kind = choice(g.c, ["relu_", "add_", "mul_", "sigmoid_", "clamp_"])
    if kind == "clamp_":
        return g.emit(Op(kind, (x,), _UNARY_ATTRS["clamp"](g.c)))
    if kind in ("relu_", "sigmoid_"):
        return g.emit(Op(kind, (x,)))
    if chance(g.c, 0.4):
        return g.emit(Op(kind, (x,), {"scalar": choice(g.c, _SCALARS)}))
    other = _other(g, x, into=True)
    if other is None:
        return None
    attrs = {"alpha": choice(g.c, [2, -0.5])} if kind == "add_" and chance(g.c, 0.3) else {}
    return g.emit(Op(kind, (x, other), attrs))


def p_unsupported(g: Gen) -> int | None:
    """Ops with no mapping, so that regions get cut."""
    x = g.pick()
    if x is None:
        return None
    kind, rank = choice(g.c, UNSUPPORTED), len(g.shape(x))
    if kind == "floor_divide":
        return g.emit(Op(kind, (x,), {"divisor": choice(g.c, [2.0, 0.5, 3.0])}))
    if kind == "cumsum" and rank:
        return g.emit(Op(kind, (x,), {"dim": g.c.integer(-rank, rank - 1)}))
    if kind == "flip" and rank:
        return g.emit(Op(kind, (x,), {"dims": (g.c.integer(0, rank - 1),)}))
    return g.emit(Op("erf", (x,)))
