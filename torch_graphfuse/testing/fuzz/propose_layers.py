"""Proposers for layers and structural ops.

Each proposer emits one or a few ops through a `Gen` (or returns None):
convolutions, linear, matmul/addmm, attention, batch and layer norm, the
conv/bn diamond, pooling, mean, cat and softmax: what fusion groups form
around.
"""

from __future__ import annotations

from typing import Any

from torch_graphfuse.testing.fuzz.builder import Gen
from torch_graphfuse.testing.fuzz.spec import Chooser, Op, chance, choice


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _maybe_tuple(c: Chooser, values: list[int]) -> int | tuple[int, ...]:
    return values[0] if len(set(values)) == 1 and chance(c, 0.7) else tuple(values)


def p_conv(g: Gen) -> int | None:
    # Eager's own bf16 convolution spreads NaN/inf past the windows holding them
    # (in about one random conv in eight), so there the positions are no contract.
    x = g.pick(lambda v: 3 <= len(g.shape(v)) <= 5 and g.layer_ok(v)
               and (g.dtype == "fp32" or g.all_finite(v)))
    if x is not None and chance(g.c, 0.15):
        amounts = tuple(g.c.integer(0, 2) for _ in range(2 * (len(g.shape(x)) - 2)))
        padded = g.emit(Op("zero_pad", (x,), {"amounts": amounts,
                                               "value": choice(g.c, [0.0, 0.0, 0.0, 1.5])}))
        x = x if padded is None else padded
    return None if x is None else g.emit(conv_op(g, x))


def conv_op(g: Gen, x: int) -> Op:
    """A random convolution of x (rank 3 to 5)."""
    shape = g.shape(x)
    nd, cin, c = len(shape) - 2, shape[1], g.c
    groups = choice(c, [1, 1, 1] + divisors(cin)[1:])
    kernel, padding, dilation = [], [], []
    for size in shape[2:]:
        k = choice(c, [3, 1, 2, 3, 5])
        d = choice(c, [1, 1, 2])
        while (k - 1) * d + 1 > size + 2 * (k // 2) * d and k > 1:
            k, d = k - 1, 1
        kernel.append(k)
        dilation.append(d)
        padding.append(c.integer(0, (k // 2) * d))
    stride = [choice(c, [1, 1, 2]) for _ in kernel]
    multiplier = choice(c, [1, 2, 3, 4] if groups > 1 else [4, 2, 8])
    if g.dtype == "bf16" and groups == cin > 1:
        # ATen's own bf16 depthwise conv with a channel multiplier returns
        # nondeterministic values (1e35, NaN): no reference to compare with.
        multiplier = 1
    named = chance(c, 0.15)  # padding by name: traced as `_convolution_mode`
    if named and all(s == 1 for s in stride):
        padded: object = "same"
    elif named and all((k - 1) * d + 1 <= size
                       for k, d, size in zip(kernel, dilation, shape[2:], strict=True)):
        padded = "valid"
    else:
        padded = _maybe_tuple(c, padding)
    attrs = {"cin": cin, "cout": groups * multiplier,
             "kernel": tuple(kernel), "stride": _maybe_tuple(c, stride),
             "padding": padded, "dilation": _maybe_tuple(c, dilation),
             "groups": groups, "bias": chance(c, 0.6), "seed": g.seed()}
    return Op(f"conv{nd}d", (x,), attrs)


def p_linear(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.layer_ok(v))
    return None if x is None else g.emit(linear_op(g, x))


def linear_op(g: Gen, x: int) -> Op:
    attrs = {"fin": g.shape(x)[-1], "fout": choice(g.c, [8, 1, 3, 4, 16]),
             "bias": chance(g.c, 0.7), "seed": g.seed()}
    return Op("linear", (x,), attrs)


def p_matmul(g: Gen) -> int | None:
    """matmul/mm/bmm with a constant, or a value times another's transpose."""
    kind = choice(g.c, ["matmul", "mm", "bmm"])
    rank = {"mm": (2,), "bmm": (3,), "matmul": (1, 2, 3, 4)}[kind]
    x = g.pick(lambda v: len(g.shape(v)) in rank)
    if x is None:
        return None
    shape = g.shape(x)
    if chance(g.c, 0.4) and len(shape) >= 2:
        other = g.pick(lambda v: g.shape(v)[-1:] == shape[-1:] and len(g.shape(v)) >= 2)
        if other is None:
            return None
        t = g.emit(Op("transpose", (other,), {"d0": -1, "d1": -2}))
        return None if t is None else g.emit(Op(kind, (x, t)))
    m = choice(g.c, [4, 1, 3, 8])
    if kind == "bmm":
        cshape: tuple[int, ...] = (shape[0], shape[-1], m)
    elif kind == "matmul" and chance(g.c, 0.3):
        cshape = (shape[-1],)
    else:
        cshape = (shape[-1], m)
    w = g.const(cshape)
    return None if w is None else g.emit(Op(kind, (x, w)))


def p_addmm(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) == 2)
    if x is None:
        return None
    n, k = g.shape(x)
    m = choice(g.c, [4, 1, 3, 8])
    bias_shape = choice(g.c, [(m,), (1, m), (n, m)])
    w, b = g.const((k, m)), g.const(bias_shape)
    if w is None or b is None:
        return None
    attrs = {"beta": choice(g.c, [1, 0.5, 2.0, -1.0]), "alpha": choice(g.c, [1, 2.0, 0.5, -1])}
    return g.emit(Op("addmm", (b, x, w), attrs))


def p_attention(g: Gen) -> int | None:
    """q @ k^T * scale (+ mask) -> softmax -> @ v, with q, k, v linear projections, written
    out or as F.scaled_dot_product_attention."""
    x = g.pick(lambda v: len(g.shape(v)) in (3, 4) and g.layer_ok(v))
    if x is None:
        return None
    d = choice(g.c, [4, 8, 3])
    q, k, v = (g.emit(Op("linear", (x,), {"fin": g.shape(x)[-1], "fout": d, "bias": True,
                                           "seed": g.seed()})) for _ in range(3))
    if None in (q, k, v):
        return None
    if chance(g.c, 0.5):
        scale = choice(g.c, [None, 0.5, 0.35])
        scores = (*g.shape(q)[:-1], g.shape(k)[-2])
        if chance(g.c, 0.5):
            mask = g.const((1,) * (len(scores) - 1) + (scores[-1],))
            if mask is not None:
                return g.emit(Op("sdpa_masked", (q, k, v, mask), {"scale": scale}))
        return g.emit(Op("sdpa", (q, k, v), {"scale": scale}))
    kt = g.emit(Op("transpose", (k,), {"d0": -2, "d1": -1}))
    s = None if kt is None else g.emit(Op("matmul", (q, kt)))
    if s is None:
        return None
    s = g.emit(Op(choice(g.c, ["div", "mul"]), (s,), {"scalar": choice(g.c, [2.0, 0.5, 0.35])}))
    splits = [] if s is None else [
        (d, w) for d in range(len(g.shape(s))) for w in (2, 3, 4)
        if all(shape[d] % w == 0 for shape in g.shapes(s))]
    if splits and chance(g.c, 0.6):
        rank, shapes = len(g.shape(s)), g.shapes(s)
        # Over the last two dims where every shape has the same, else broadcast.
        bias = g.const((1,) * (rank - 2) + tuple(
            n if all(shape[i] == n for shape in shapes) else 1
            for i, n in enumerate(g.shape(s)[-2:], rank - 2)))
        d, w = choice(g.c, splits)
        mask = g.const((1,) * d + (1, w) + (1,) * (rank - d - 1))
        s = None if bias is None or mask is None else g.emit(
            Op("split_view_mask", (s, bias, mask), {"windows": w, "dim": d}))
    elif s is not None and chance(g.c, 0.5):
        mask = g.const((1,) * (len(g.shape(s)) - 1) + (g.shape(s)[-1],))
        kind = choice(g.c, ["add", "window_mask"])
        s = None if mask is None else g.emit(Op(kind, (s, mask)))
    p = None if s is None else g.emit(Op("softmax", (s,), {"dim": -1}))
    return None if p is None else g.emit(Op("matmul", (p, v)))


def p_windows(g: Gen) -> int | None:
    """Swin's padding to whole windows, or its window partition and reversal around a
    linear, over the second to last dim."""
    x = g.pick(lambda v: len(g.shape(v)) == 3 and g.layer_ok(v))
    if x is None:
        return None
    shapes = g.shapes(x)
    windows = [w for w in (2, 3, 4) if all(shape[1] % w == 0 for shape in shapes)]
    if not windows or chance(g.c, 0.4):
        return g.emit(Op("window_pad", (x,), {"windows": choice(g.c, [2, 3, 4])}))
    fin, fout = g.shape(x)[-1], choice(g.c, [4, 8, 16])
    weight = None if any(shape[-1] != fin for shape in shapes) else g.const((fout, fin))
    return None if weight is None else g.emit(Op(
        "window_linear", (x, weight), {"windows": choice(g.c, windows), "fin": fin,
                                       "fout": fout}))


def p_batch_norm(g: Gen) -> int | None:
    x = g.pick(lambda v: 2 <= len(g.shape(v)) <= 5 and g.layer_ok(v))
    if x is None:
        return None
    attrs = {"channels": g.shape(x)[1], "rank": len(g.shape(x)), "seed": g.seed()}
    return g.emit(Op("batch_norm", (x,), attrs))


def p_layer_norm(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.shape(v)[-1] > 1 and g.layer_ok(v))
    if x is None:
        return None
    attrs = {"dim": g.shape(x)[-1], "affine": chance(g.c, 0.7), "seed": g.seed()}
    if attrs["affine"] and chance(g.c, 0.25):
        attrs["bias"] = False  # ModernBERT's: a weight only
    return g.emit(Op("layer_norm", (x,), attrs))


def p_rms_norm(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.shape(v)[-1] > 1 and g.layer_ok(v))
    if x is None:
        return None
    attrs = {"dim": g.shape(x)[-1], "llama": chance(g.c, 0.5),
             "eps": choice(g.c, [1e-6, 1e-5]), "seed": g.seed()}
    return g.emit(Op("rms_norm", (x,), attrs))


def p_group_norm(g: Gen) -> int | None:
    """GroupNorm over a 3-d to 5-d value with channels a multiple of 2 (groups of 1, 2 or
    channels / 2); oneDNN fuses it on channels-last inputs only."""
    x = g.pick(lambda v: 3 <= len(g.shape(v)) <= 5 and g.shape(v)[1] % 2 == 0
               and g.layer_ok(v))
    if x is None:
        return None
    channels = g.shape(x)[1]
    attrs = {"groups": choice(g.c, [1, 2, channels // 2]), "channels": channels,
             "affine": chance(g.c, 0.7), "seed": g.seed()}
    return g.emit(Op("group_norm", (x,), attrs))


def p_diamond(g: Gen) -> int | None:
    """y = conv(x); bn(y) + y, or bn(conv(x)) + conv(x) (the same conv twice); sometimes
    with an activation before the bn (ConvMixer's conv -> GELU -> BatchNorm)."""
    y = p_conv(g)
    if y is None:
        return None
    normed = y
    if chance(g.c, 0.4):
        kind, attrs = choice(g.c, [("relu", {}), ("gelu", {"approximate": "none"}),
                                   ("silu", {}), ("hardswish", {}), ("sigmoid", {})])
        normed = g.emit(Op(kind, (y,), attrs))
        if normed is None:
            return None
    b = g.emit(Op("batch_norm", (normed,), {"channels": g.shape(y)[1],
                                             "rank": len(g.shape(y)), "seed": g.seed()}))
    if b is None:
        return None
    other = y
    if chance(g.c, 0.5):
        conv = g.ops[y - len(g.inputs)]
        other = g.emit(Op(conv.kind, conv.args, {**conv.attrs, "reuse": y}))
        if other is None:
            return None
    return g.emit(Op("add", (b, other)))


def _pool_window(c: Chooser, size: int) -> tuple[int, int, int]:
    k = min(size, choice(c, [2, 3, 1]))
    stride = choice(c, [k, 1, 2])
    return k, stride, c.integer(0, k // 2)


def p_pool(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) in (3, 4))
    if x is None:
        return None
    kind = choice(g.c, ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"])
    h, w = g.shape(x)[-2:]
    if kind == "adaptive_avg_pool2d":
        sizes = [choice(g.c, [s, 1, *divisors(s), s + 1]) for s in (h, w)]
        return g.emit(Op(kind, (x,), {"size": tuple(sizes)}))
    (kh, sh, ph), (kw, sw, pw) = _pool_window(g.c, h), _pool_window(g.c, w)
    attrs: dict[str, Any] = {"kernel": _maybe_tuple(g.c, [kh, kw]),
                             "stride": _maybe_tuple(g.c, [sh, sw]),
                             "padding": _maybe_tuple(g.c, [ph, pw])}
    if kind == "max_pool2d":
        attrs["dilation"] = choice(g.c, [1, 1, 2])
    attrs["ceil_mode"] = chance(g.c, 0.4)
    if kind == "avg_pool2d":
        attrs["count_include_pad"] = chance(g.c, 0.6)
    return g.emit(Op(kind, (x,), attrs))


def p_resize(g: Gen) -> int | None:
    """A 4-d value resized bilinearly or bicubically to another grid."""
    x = g.pick(lambda v: len(g.shape(v)) == 4 and g.dtype_of(v).is_floating_point)
    if x is None:
        return None
    size = tuple(choice(g.c, [s, s + 1, 2 * s, max(1, s // 2)]) for s in g.shape(x)[-2:])
    return g.emit(Op("resize", (x,), {"size": size, "mode": choice(g.c, ["bilinear", "bicubic"]),
                                      "align_corners": chance(g.c, 0.5)}))


def p_mean(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1)
    if x is None:
        return None
    rank = len(g.shape(x))
    if chance(g.c, 0.1):
        return g.emit(Op("mean", (x,), {"dims": None}))
    dims = sorted({g.c.integer(0, rank - 1) for _ in range(g.c.integer(1, rank))})
    dims = [d - rank if chance(g.c, 0.3) else d for d in dims]
    return g.emit(Op("mean", (x,), {"dims": dims, "keepdim": chance(g.c, 0.5)}))


def p_cat(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1)
    if x is None:
        return None
    rank = len(g.shape(x))
    dim = g.c.integer(-rank, rank - 1)

    def fits(v: int) -> bool:
        """Same shape as x but along `dim`, at every shape."""
        return all(len(a) == len(b) and all(a[i] == b[i] for i in range(len(a))
                                            if i != dim % rank)
                   for a, b in zip(g.shapes(v), g.shapes(x), strict=True))

    others = [g.pick(fits) for _ in range(g.c.integer(1, 2))]
    args = (x, *(o for o in others if o is not None))
    return g.emit(Op("cat", args, {"dim": dim})) if len(args) > 1 else None


def p_softmax(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1)
    if x is None:
        return None
    rank = len(g.shape(x))
    kind = choice(g.c, ["softmax", "log_softmax"])
    return g.emit(Op(kind, (x,), {"dim": g.c.integer(-rank, rank - 1)}))
