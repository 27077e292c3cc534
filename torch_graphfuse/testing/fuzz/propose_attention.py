"""The attention block proposer: multi-head attention as models write it.

From a (batch, tokens, width) value: query, key and value from three linears or sliced
from one (a narrow per part, or timm's 5-d view, permute and select), split into heads,
grouped-query heads repeated or left to `enable_gqa`; then either
F.scaled_dot_product_attention or the scores written out (the scale before or after the
product; the products as matmul or as CvT's einsum), with a mask or bias of every form
models use: constant biases of ranks 1 to 4 (timm's learned attention biases are
(heads, N, N)), bool masks, masks built from the input at run time (Hugging Face's
padding masks, additive or bool), causal masks, Swin's window mask; a softmax in fp32
under autocast; the heads merged and projected.
"""

from __future__ import annotations

from torch_graphfuse.testing.fuzz.builder import Gen
from torch_graphfuse.testing.fuzz.propose_layers import divisors
from torch_graphfuse.testing.fuzz.spec import Op, chance, choice, weighted

# The additive fills models hide keys with: BERT's, float32's lowest (Hugging Face's),
# and -inf, which a mapping may take only where it proves no row all -inf.
FILLS = [-10000.0, -3.4028234663852886e38, float("-inf")]


def _linear(g: Gen, x: int, fout: int) -> int | None:
    return g.emit(Op("linear", (x,), {"fin": g.shape(x)[-1], "fout": fout,
                                       "bias": chance(g.c, 0.8), "seed": g.seed()}))


def _heads(g: Gen, x: int | None, heads: int, dim: int) -> int | None:
    """(batch, tokens, heads * dim) -> (batch, heads, tokens, dim)."""
    method = choice(g.c, ["view", "reshape"])
    split = None if x is None else g.emit(
        Op("reshape", (x,), {"method": method, "shape": ("d0", "d1", heads, dim)}))
    return None if split is None else g.emit(Op("transpose", (split,), {"d0": 1, "d1": 2}))


def _projections(g: Gen, x: int, heads: int, kv_heads: int, dim: int
                 ) -> tuple[int | None, int | None, int | None]:
    parts = (heads * dim, kv_heads * dim, kv_heads * dim)
    how = weighted(g.c, [("linears", 3), ("narrow", 2), ("timm", 2 if heads == kv_heads else 0)])
    if how == "linears":
        q, k, v = (_linear(g, x, width) for width in parts)
        return _heads(g, q, heads, dim), _heads(g, k, kv_heads, dim), _heads(g, v, kv_heads, dim)
    qkv = _linear(g, x, sum(parts))
    if qkv is None:
        return None, None, None
    if how == "narrow":
        starts = (0, parts[0], parts[0] + parts[1])
        return tuple(  # type: ignore[return-value]
            _heads(g, g.emit(Op("narrow", (qkv,), {"dim": -1, "start": start, "length": width})),
                   h, dim)
            for start, width, h in zip(starts, parts, (heads, kv_heads, kv_heads), strict=True))
    # timm: qkv.view(B, N, 3, H, D).permute(2, 0, 3, 1, 4), then q, k, v = qkv.unbind(0)
    split = g.emit(Op("reshape", (qkv,), {"method": "view", "shape": ("d0", "d1", 3, heads, dim)}))
    moved = None if split is None else g.emit(Op("permute", (split,), {"dims": (2, 0, 3, 1, 4)}))
    if moved is None:
        return None, None, None
    return tuple(  # type: ignore[return-value]
        g.emit(Op("select", (moved,), {"dim": 0, "index": i})) for i in range(3))


def _const_bias(g: Gen, heads: int, tokens: int, rank_one: bool) -> int | None:
    """A constant bias of a shape that broadcasts to (batch, heads, tokens, tokens) whatever
    the batch."""
    h, n = heads, tokens
    shapes = [(n, n), (h, n, n), (1, h, n, n), (h, 1, n), (1, n), (1, n, n), (1, 1, n, n),
              (h, n, 1)] + ([(n,)] if rank_one else [])
    return g.const(choice(g.c, shapes))


def _mask(g: Gen, x: int, heads: int, tokens: int, sdpa: bool
          ) -> tuple[int, dict[str, object]] | None:
    """A mask: a float tensor to add (attrs empty), or the float tensor a bool mask is made
    of, with the bool mask's attrs (ops._bool_mask: True keeps a key)."""
    form = weighted(g.c, [("bias", 4), ("bool", 2), ("key_mask", 2), ("key_bias", 2)])
    if form == "key_bias":
        # Hugging Face multiplies by the fill: a finite one (0 * -inf would be NaN).
        bias = g.emit(Op("key_bias", (x,), {"threshold": choice(g.c, [0.0, -0.3, 0.3]),
                                             "fill": choice(g.c, FILLS[:2])}))
        return None if bias is None else (bias, {})
    if form == "key_mask":
        return x, {"keys": True, "threshold": choice(g.c, [0.0, -0.3, 0.3])}
    table = _const_bias(g, heads, tokens, rank_one=not sdpa and form == "bias")
    if table is None:
        return None
    if form == "bias":
        return table, {}
    return table, {"keys": False, "threshold": choice(g.c, [0.0, -0.9, 0.9])}


def _sdpa(g: Gen, x: int, q: int, k: int, v: int, heads: int, kv_heads: int
          ) -> int | None:
    scale = choice(g.c, [None, 0.5, 0.35])
    if kv_heads != heads:
        return g.emit(Op("sdpa_gqa", (q, k, v), {"scale": scale}))
    form = weighted(g.c, [("mask", 6), ("none", 2), ("causal", 1)])
    if form == "causal":
        return g.emit(Op("sdpa_causal", (q, k, v), {"scale": scale}))
    if form == "none":
        return g.emit(Op("sdpa", (q, k, v), {"scale": scale}))
    mask = _mask(g, x, heads, g.shape(q)[-2], sdpa=True)
    if mask is None:
        return None
    tensor, bool_attrs = mask
    if bool_attrs:
        return g.emit(Op("sdpa_bool", (q, k, v, tensor), {"scale": scale, **bool_attrs}))
    return g.emit(Op("sdpa_masked", (q, k, v, tensor), {"scale": scale}))


def _written(g: Gen, x: int, q: int, k: int, v: int, heads: int) -> int | None:
    scale = choice(g.c, [0.5, 0.35, 0.125])
    einsum = chance(g.c, 0.2)  # CvT's
    if chance(g.c, 0.3):
        scaled_q = g.emit(Op("mul", (q,), {"scalar": scale}))
        kt = g.emit(Op("transpose", (k,), {"d0": -2, "d1": -1}))
        s = None if scaled_q is None or kt is None else g.emit(Op("matmul", (scaled_q, kt)))
    else:
        if einsum:
            s = g.emit(Op("einsum_scores", (q, k)))
        else:
            kt = g.emit(Op("transpose", (k,), {"d0": -2, "d1": -1}))
            s = None if kt is None else g.emit(Op("matmul", (q, kt)))
        s = None if s is None else g.emit(Op(choice(g.c, ["mul", "div"]), (s,),
                                             {"scalar": scale if chance(g.c, 0.5) else 1 / scale}))
    if s is None:
        return None
    form = weighted(g.c, [("mask", 6), ("none", 2), ("causal", 2), ("window", 1)])
    if form == "causal":
        s = g.emit(Op("add_causal", (s,), {"fill": choice(g.c, FILLS)}))
    elif form == "window":  # Swin's shifted-window mask, from a constant's signs
        table = _const_bias(g, heads, g.shape(s)[-1], rank_one=True)
        s = None if table is None else g.emit(Op("window_mask", (s, table)))
    elif form == "mask":
        mask = _mask(g, x, heads, g.shape(s)[-1], sdpa=False)
        if mask is not None and not mask[1]:
            s = g.emit(Op("add", (s, mask[0])))
        elif mask is not None:
            s = g.emit(Op("masked_fill", (s, mask[0]), {"fill": choice(g.c, FILLS),
                                                        **mask[1]}))
    if s is None:
        return None
    if g.dtype == "bf16" and chance(g.c, 0.6):
        p = g.emit(Op("softmax_f32", (s, q)))
    else:
        p = g.emit(Op("softmax", (s,), {"dim": -1}))
    return None if p is None else g.emit(Op("einsum_values" if einsum else "matmul", (p, v)))


def p_attention_block(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) == 3 and g.layer_ok(v))
    if x is None:
        return None
    heads, dim = choice(g.c, [2, 1, 3, 4]), choice(g.c, [4, 2, 8])
    kv_heads = choice(g.c, divisors(heads)[:-1]) if heads > 1 and chance(g.c, 0.25) else heads
    q, k, v = _projections(g, x, heads, kv_heads, dim)
    if None in (q, k, v):
        return None
    sdpa = chance(g.c, 0.5)
    if kv_heads != heads and (not sdpa or chance(g.c, 0.5)):
        repeat = heads // kv_heads
        k, v = (g.emit(Op("repeat_kv", (t,), {"repeat": repeat})) for t in (k, v))
        if k is None or v is None:
            return None
        kv_heads = heads
    out = _sdpa(g, x, q, k, v, heads, kv_heads) if sdpa else _written(g, x, q, k, v, heads)
    merged = None if out is None else g.emit(Op("transpose", (out,), {"d0": 1, "d1": 2}))
    merged = None if merged is None else g.emit(
        Op("reshape", (merged,), {"method": "reshape", "shape": ("d0", "d1", heads * dim)}))
    if merged is None or not chance(g.c, 0.6):
        return merged
    return _linear(g, merged, g.shape(x)[-1])
