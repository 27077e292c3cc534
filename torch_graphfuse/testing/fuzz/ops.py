"""The op kinds a case can hold, and how one op renders as Python.

`KINDS` maps each kind to its expression template, the aten ops it traces to
(the supported-ops page's coverage), whether it is bit-exact and whether it is in place.
Kept apart from the generator so that the renderer, the evaluator and the
comparison share one table.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from torch_graphfuse.testing.fuzz.spec import Op


@dataclass(frozen=True)
class Kind:
    render: Callable[[Op, list[str], str], str]  # (op, arg names, layer name) -> expression
    aten: tuple[str, ...]  # the aten ops it traces to (docs/supported_ops.md coverage)
    exact: bool = False  # bit-exact in any correct implementation, given exact inputs
    inplace: bool = False


KINDS: dict[str, Kind] = {}


_DTYPE_NAMES = {torch.bfloat16: "torch.bfloat16", torch.float32: "torch.float32",
                torch.uint8: "torch.uint8", torch.int8: "torch.int8"}


def _lit(v: object) -> str:
    if isinstance(v, float) and math.isinf(v):
        return f"float('{v}')"
    return _DTYPE_NAMES[v] if isinstance(v, torch.dtype) else repr(v)


def _template(text: str) -> Callable[[Op, list[str], str], str]:
    def render(op: Op, args: list[str], layer: str) -> str:
        return text.format(*args, layer=layer, **{k: _lit(v) for k, v in op.attrs.items()})
    return render


def _kind(name: str, render: str | Callable[[Op, list[str], str], str],
          aten: Sequence[str] | None = None, exact: bool = False) -> None:
    fn = _template(render) if isinstance(render, str) else render
    KINDS[name] = Kind(fn, tuple(aten) if aten is not None else (name.rstrip("_"),), exact,
                       name.endswith("_"))


for _n in ("relu", "sigmoid", "tanh", "exp", "log", "sqrt", "abs", "square", "round",
           "reciprocal", "erf", "neg", "sin", "cos"):
    _kind(_n, f"torch.{_n}({{0}})", exact=_n in ("relu", "abs", "round", "neg"))
for _n in ("hardswish", "mish", "hardsigmoid", "silu", "relu6"):
    _kind(_n, f"F.{_n}({{0}})", exact=_n == "relu6")
_kind("hardtanh", "F.hardtanh({0}, {lo}, {hi})", exact=True)
_kind("clamp", "torch.clamp({0}, {lo}, {hi})", exact=True)
_kind("clamp_min", "torch.clamp_min({0}, {lo})", exact=True)
_kind("clamp_max", "torch.clamp_max({0}, {hi})", exact=True)
_kind("leaky_relu", "F.leaky_relu({0}, {slope})")
_kind("elu", "F.elu({0}, {alpha})")
_kind("gelu", "F.gelu({0}, approximate={approximate})")
_kind("softplus", "F.softplus({0}, {beta}, {threshold})")
_kind("pow", "torch.pow({0}, {exponent})")
_kind("softmax", "torch.softmax({0}, {dim})")
_kind("log_softmax", "torch.log_softmax({0}, {dim})")
_kind("sdpa", "F.scaled_dot_product_attention({0}, {1}, {2}, scale={scale})",
      aten=["scaled_dot_product_attention"])
_kind("sdpa_masked", "F.scaled_dot_product_attention({0}, {1}, {2}, attn_mask={3}, scale={scale})",
      aten=["scaled_dot_product_attention"])
# Attention blocks (propose_attention): every mask form models pass F.scaled_dot_product_attention,
# grouped-query heads repeated as Llama repeats them, masks built from the input at run time as
# Hugging Face builds them from its attention mask, a causal mask from sizes, and the softmax
# computed in fp32 under autocast.
_kind("sdpa_gqa", "F.scaled_dot_product_attention({0}, {1}, {2}, scale={scale}, enable_gqa=True)",
      aten=["scaled_dot_product_attention"])
_kind("sdpa_causal", "F.scaled_dot_product_attention({0}, {1}, {2}, is_causal=True, scale={scale})",
      aten=["scaled_dot_product_attention"])
_kind("repeat_kv", "{0}[:, :, None].expand(-1, -1, {repeat}, -1, -1)"
      ".reshape({0}.shape[0], -1, {0}.shape[2], {0}.shape[3])",
      aten=["slice", "unsqueeze", "expand", "reshape"], exact=True)


def _bool_mask(op: Op, table: str) -> str:
    """A bool mask (True keeps a key) from a float tensor: a constant table's signs, or the
    keys whose activations average above a threshold ((batch, tokens, width) -> (batch,
    1, 1, tokens), Hugging Face's padding mask). It is no value of its own: the evaluator
    keeps floating values only."""
    if op.attrs["keys"]:
        return f"({table}.mean(-1) > {_lit(op.attrs['threshold'])})[:, None, None, :]"
    return f"({table} > {_lit(op.attrs['threshold'])})"


_kind("sdpa_bool", lambda op, a, _: f"F.scaled_dot_product_attention({a[0]}, {a[1]}, {a[2]}, "
      f"attn_mask={_bool_mask(op, a[3])}, scale={_lit(op.attrs['scale'])})",
      aten=["gt", "mean", "slice", "unsqueeze", "scaled_dot_product_attention"])
_kind("masked_fill", lambda op, a, _: f"{a[0]}.masked_fill(~{_bool_mask(op, a[1])}, "
      f"{_lit(op.attrs['fill'])})", aten=["gt", "mean", "slice", "unsqueeze", "bitwise_not",
                                      "masked_fill"])
_kind("key_bias", "(1.0 - ({0}.mean(-1) > {threshold}).to({0}.dtype))[:, None, None, :] * {fill}",
      aten=["mean", "gt", "to", "rsub", "slice", "unsqueeze", "mul"])
_kind("add_causal", "{0} + torch.full(({0}.size(-2), {0}.size(-1)), {fill}, dtype={0}.dtype)"
      ".triu(1)", aten=["size", "full", "triu", "add"])
# CvT writes its attention's products as einsum (passes/decompose makes them matmuls).
_kind("einsum_scores", "torch.einsum('bhlk,bhtk->bhlt', {0}, {1})", aten=["einsum"])
_kind("einsum_values", "torch.einsum('bhlt,bhtv->bhlv', {0}, {1})", aten=["einsum"])
_kind("softmax_f32", "torch.softmax({0}, -1, dtype=torch.float32).to({1}.dtype)",
      aten=["softmax", "to"])
_kind("floor_divide", "torch.floor_divide({0}, {divisor})", exact=True)
# T5's relative-position buckets: integers made float, log, scaled, back to integers. The
# float value is a whole number at distances 8, 24, 56 and 120, where a log rounded
# otherwise than ATen's drops the bucket by one.
_kind("bucket", "(torch.log(({0} * 8).abs().long().float() / 8 + 1) / 2.772588722239781 * 8)"
      ".long().to({0}.dtype)", aten=("mul", "abs", "to", "div", "add", "log"), exact=True)
_kind("cumsum", "torch.cumsum({0}, {dim})")
_kind("flip", "torch.flip({0}, {dims})", exact=True)
_kind("max_pool2d", "F.max_pool2d({0}, {kernel}, {stride}, {padding}, {dilation}, "
      "ceil_mode={ceil_mode})", exact=True)
_kind("avg_pool2d", "F.avg_pool2d({0}, {kernel}, {stride}, {padding}, ceil_mode={ceil_mode}, "
      "count_include_pad={count_include_pad})")
_kind("adaptive_avg_pool2d", "F.adaptive_avg_pool2d({0}, {size})")
# A table resized to another grid (DINOv2's and BEiT's position tables).
_kind("resize", "F.interpolate({0}, size={size}, mode={mode}, align_corners={align_corners})",
      aten=["upsample_bilinear2d", "upsample_bicubic2d"])
_kind("permute", "{0}.permute({dims})", exact=True)
_kind("transpose", "{0}.transpose({d0}, {d1})", exact=True)
_kind("t", "{0}.t()", exact=True)
_kind("flatten", "{0}.flatten({start}, {end})", exact=True)
_kind("squeeze", "{0}.squeeze({dim})", exact=True)
_kind("unsqueeze", "{0}.unsqueeze({dim})", exact=True)
_kind("contiguous", "{0}.contiguous()", exact=True)
# Views a model takes of a result: one piece of a split (GPT-2's query, key and value), a
# narrowed or selected slice, a broadcast.
_kind("split", "{0}.split({size}, {dim})[{index}]", exact=True)
_kind("narrow", "{0}.narrow({dim}, {start}, {length})", exact=True)
# TorchScript unpacks a chunk into a fixed number of pieces (prim::ConstantChunk).
_kind("chunk", "{0}.chunk({chunks}, {dim})[{index}]", exact=True)
_kind("select", "{0}.select({dim}, {index})", exact=True)
_kind("expand", "{0}.expand({sizes})", exact=True)
_kind("to", "{0}.to({dtype})", exact=True)
_kind("matmul", "torch.matmul({0}, {1})")
_kind("mm", "torch.mm({0}, {1})")
_kind("bmm", "torch.bmm({0}, {1})")
_kind("addmm", "torch.addmm({0}, {1}, {2}, beta={beta}, alpha={alpha})")
for _n, _aten in (("conv1d", "conv1d"), ("conv2d", "conv2d"), ("conv3d", "conv3d"),
                  ("linear", "linear"), ("batch_norm", "batch_norm"),
                  ("layer_norm", "layer_norm"), ("group_norm", "group_norm")):
    _kind(_n, "{layer}({0})", aten=[_aten])
# Hugging Face's RMS normalization chain, which passes/rms_norm folds into aten::rms_norm.
_kind("rms_norm", "{layer}({0})", aten=["pow", "mean", "add", "rsqrt", "mul", "rms_norm"])
_kind("const", "{layer}", aten=[])
# Positions and a mask built from a size at run time, as Hugging Face builds them (the
# size-constant groups compute them once per profiled size).
_kind("positions", "{0} + torch.where(torch.arange({0}.size({dim})).view({view}) % {period} == 0,"
      " torch.arange({0}.size({dim})).view({view}).to({0}.dtype) * {scale},"
      " torch.zeros((), dtype={0}.dtype))",
      aten=["size", "arange", "view", "remainder", "eq", "to", "mul", "zeros", "where", "add"])
# A position table filled in place, BEiT's relative-position index: zeros from a size, a
# slice assigned, a slice filled, summed, then the whole scaled in place (the size-constant
# groups take the writes to memory they made into the value they compute once; the sum
# must see the table before the scaling).
_kind("filled_positions",
      "{0} + ((_t := torch.zeros({0}.size({dim}), dtype={0}.dtype)),"
      " _t[1:].copy_(torch.arange({0}.size({dim}) - 1).to({0}.dtype) * {scale}),"
      " _t[0:1].fill_({fill}), (_s := _t.sum()), _t.mul_({k}))[-1].view({view}) + _s",
      aten=["size", "zeros", "slice", "arange", "to", "mul", "copy_", "fill_", "sum", "mul_",
            "view", "add"])
# Swin's shifted-window mask: 0 where a constant is positive, -100 elsewhere, added to the
# scores; its softmax gives denormal probabilities (exp(-100) = 3.7e-44).
_kind("window_mask", "{0} + ({1} < 0).to({0}.dtype) * -100.0", aten=["lt", "to", "mul", "add"])
# timm's Swin: a position bias, then the window mask added over a view that splits the
# windows off the batch (here off dim {dim}), and the sum viewed back
# (passes/addend_through_views moves the mask onto the scores, and
# passes/fold_constant_addends makes the two addends one).
_kind("split_view_mask", "(({0} + {1}).view(*{0}.shape[:{dim}], -1, {windows},"
      " *{0}.shape[{dim} + 1:]) + ({2} < 0).to({0}.dtype) * -100.0).view({0}.shape)",
      aten=["add", "size", "view", "lt", "to", "mul"])
# Swin's padding to whole windows: by zero where the size divides (a copy, which joins
# the group computing its input), by amounts computed from sizes.
_kind("window_pad", "F.pad({0}, (0, 0, 0, ({windows} - {0}.size(-2) % {windows}) % {windows}))",
      aten=["size", "remainder", "rsub", "pad"])
# A constant padding of the spatial dims before a convolution (Hugging Face's EfficientNet
# pads one row and column at the end before a stride-2 convolution: the convolution takes a
# zero padding into its own).
_kind("zero_pad", "F.pad({0}, {amounts}, value={value})", aten=["pad"], exact=True)
# Swin's window partition and reversal around a projection: the windows, permuted off the
# rows and copied, as the linear's rows; its result viewed, permuted back and copied
# (passes/linear_leading_views fuses the copies with the linear).
_kind("window_linear", "F.linear({0}.view({0}.shape[0], -1, {windows}, {fin}).transpose(1, 2)"
      ".contiguous().view(-1, {fin}), {1}).view({0}.shape[0], {windows}, -1, {fout})"
      ".transpose(1, 2).contiguous().view({0}.shape[0], -1, {fout})",
      aten=["size", "view", "transpose", "contiguous", "linear"])
# A scale computed from a size as a 0-dim tensor (DeBERTa's attention scale).
_kind("size_scale", "{0} / torch.sqrt(torch.tensor({0}.size({dim}), dtype=torch.float) * {k})"
      ".to({0}.dtype)", aten=["size", "to", "mul", "sqrt", "div"])
# PT2E's per-tensor activation quantization (quantize makes a u8/s8 tensor).
for _n in ("quantize", "dequantize"):
    _kind(_n, f"torch.ops.quantized_decomposed.{_n}_per_tensor({{0}}, {{scale}}, {{zero_point}}, "
          "{qmin}, {qmax}, {qdtype})", aten=[f"{_n}_per_tensor"])
_kind("relu_", "{0}.relu_()", exact=True)
_kind("sigmoid_", "{0}.sigmoid_()")
_kind("clamp_", "{0}.clamp_({lo}, {hi})", exact=True)


def _render_mean(op: Op, args: list[str], layer: str) -> str:
    dims = op.attrs["dims"]
    return f"{args[0]}.mean()" if dims is None else \
        f"{args[0]}.mean({dims!r}, keepdim={op.attrs['keepdim']!r})"


def _render_cat(op: Op, args: list[str], layer: str) -> str:
    return f"torch.cat([{', '.join(args)}], {op.attrs['dim']})"


def _render_reshape(op: Op, args: list[str], layer: str) -> str:
    a = args[0]
    dims = [f"{a}.shape[{d[1:]}]" if isinstance(d, str) else str(d) for d in op.attrs["shape"]]
    return f"{a}.{op.attrs['method']}({', '.join(dims)})"


_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _render_binary(op: Op, args: list[str], layer: str) -> str:
    name, a, at = op.kind.rstrip("_"), args[0], op.attrs
    if op.kind.endswith("_"):
        other = repr(at["scalar"]) if "scalar" in at else args[1]
        alpha = f", alpha={at['alpha']!r}" if "alpha" in at else ""
        return f"{a}.{op.kind}({other}{alpha})"
    if "scalar" in at:
        s = repr(at["scalar"])
        return f"{s} {_SYMBOLS[name]} {a}" if at.get("reverse") else f"{a} {_SYMBOLS[name]} {s}"
    if "alpha" in at:
        return f"torch.{name}({a}, {args[1]}, alpha={at['alpha']!r})"
    return f"{a} {_SYMBOLS[name]} {args[1]}"


_kind("mean", _render_mean)
_kind("cat", _render_cat)
_kind("reshape", _render_reshape, aten=["reshape", "view"], exact=True)
for _n in ("add", "sub", "mul", "div", "add_", "mul_"):
    _kind(_n, _render_binary)

UNSUPPORTED = ("erf", "floor_divide", "cumsum", "flip")
_POW2 = (2.0, 0.5, 4.0, 0.25, 1.0, 1, 2)


def op_exact(op: Op) -> bool:
    """Whether the op's result is bit-exact in any correct implementation given
    exact inputs (no rounding; a power-of-two scale or an identity is exact)."""
    scalar = op.attrs.get("scalar")
    if op.kind in ("mul", "div", "mul_") and scalar in _POW2 and not op.attrs.get("reverse"):
        return True
    if op.kind in ("add", "sub", "add_") and scalar == 0:
        return True
    return KINDS[op.kind].exact


def render(op: Op, args: Sequence[str], index: int) -> str:
    key = op.attrs.get("reuse", index)
    layer = f"self.c{index}" if op.kind == "const" else f"self.m{key}"
    return KINDS[op.kind].render(op, list(args), layer)
