"""Normalizations, softmax and attention."""

from __future__ import annotations

import math

import torch

from .lowering import Lowering, Unsupported, lowering

# Why oneDNN's softmax is right on finite inputs only (measured on oneDNN 3.12).
SOFTMAX_OF_NONFINITE = ("oneDNN's softmax gives NaN only at a row's NaN or +inf and 0 elsewhere, "
                        "where eager makes the whole row NaN")


@lowering("aten::batch_norm")
def batch_norm(lo: Lowering) -> None:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
    if lo.const(5):
        raise Unsupported("batch_norm in training mode")
    if any(lo.is_none(i) for i in (1, 2, 3, 4)):
        raise Unsupported("batch_norm without affine parameters or running stats")
    inputs = [lo.input(i) for i in range(5)]
    lo.emit("BatchNormInference", inputs, [lo.output()], epsilon=float(lo.const(7)),
            data_format="NCX")


@lowering("aten::layer_norm", worth_alone=True)
def layer_norm(lo: Lowering) -> None:
    # (input, normalized_shape, weight?, bias?, eps, cudnn_enable)
    normalized = lo.const(1)
    if len(normalized) != 1:
        # oneDNN 3.12 takes one normalized dim only (v3.2 normalized the last
        # whatever begin_norm_axis said): the reason, rather than "not supported".
        raise Unsupported("layer_norm over more than one dim")
    if lo.is_none(2) != lo.is_none(3):
        raise Unsupported("layer_norm with only one of weight and bias")
    inputs = [lo.input(0)]
    if not lo.is_none(2):
        inputs += [lo.input(2), lo.input(3)]
    lo.emit("LayerNorm", inputs, [lo.output()], begin_norm_axis=-len(normalized),
            epsilon=float(lo.const(4)), keep_stats=False, use_affine=len(inputs) == 3)


def _channels_last(sizes: list[int], strides: list[int]) -> bool:
    """A 4-d or 5-d tensor dense with its channels innermost."""
    if len(sizes) not in (4, 5) or len(strides) != len(sizes):
        return False
    order = [0, *range(2, len(sizes)), 1]
    expected = 1
    for d in reversed(order):
        if sizes[d] != 1 and strides[d] != expected:
            return False
        expected *= sizes[d]
    return True


@lowering("aten::group_norm", worth_alone=True)
def group_norm(lo: Lowering) -> None:
    # (input, num_groups, weight?, bias?, eps, cudnn_enable)
    if lo.is_none(2) != lo.is_none(3):
        raise Unsupported("group_norm with only one of weight and bias")
    x = lo.graph.tensors[lo.input(0)]
    if not _channels_last(x.sizes or [], x.strides or []):
        # Measured on oneDNN 3.12: its group normalization is ref:any on plain layouts.
        raise Unsupported("group_norm of a tensor not in channels-last layout (oneDNN runs "
                          "that with its reference implementation)")
    inputs = [lo.input(0)]
    if not lo.is_none(2):
        inputs += [lo.input(2), lo.input(3)]
    lo.emit("GroupNorm", inputs, [lo.output()], groups=int(lo.const(1)),
            epsilon=float(lo.const(4)), keep_stats=False, use_affine=len(inputs) == 3,
            data_format="NCX")


@lowering("aten::softmax", "aten::_softmax", finite_only=SOFTMAX_OF_NONFINITE)
def softmax(lo: Lowering) -> None:
    # softmax(self, dim, dtype?) / _softmax(self, dim, half_to_float)
    if lo.n_inputs() > 2 and not lo.is_none(2) and lo.const(2) not in (False, None):
        raise Unsupported("softmax with a dtype")
    lo.emit("SoftMax", [lo.input(0)], [lo.output()], axis=int(lo.const(1)))


@lowering("aten::scaled_dot_product_attention", worth_alone=True)
def scaled_dot_product_attention(lo: Lowering) -> None:
    """MatMul -> Multiply (scale) -> Add or Select (mask) -> SoftMax -> MatMul, the pattern
    oneDNN compiles as one attention kernel. The softmax zeroes a row that the mask hides
    whole (`inf_as_zero`), as eager's attention does where a plain softmax gives NaN."""
    # (query, key, value, attn_mask?, dropout_p, is_causal, scale?, enable_gqa)
    if lo.const(4) != 0:
        raise Unsupported("attention with dropout")
    if lo.const(5):
        raise Unsupported("causal attention (is_causal=True)")
    if lo.n_inputs() > 7 and lo.const(7):
        raise Unsupported("grouped-query attention (enable_gqa=True)")
    q, k, v, out = lo.input(0), lo.input(1), lo.input(2), lo.output()
    qs, ks, vs = lo.sizes(0), lo.sizes(1), lo.sizes(2)
    if not (len(qs) == len(ks) == len(vs) == 4 and qs[:2] == ks[:2] == vs[:2]
            and qs[3] == ks[3] and ks[2] == vs[2]):
        raise Unsupported("attention over other than [batch, heads, sequence, dim] of one "
                          "batch and head count")
    dtype = lo.graph.tensors[q].dtype
    if any(lo.graph.tensors[t].dtype != dtype for t in (k, v, out)):
        raise Unsupported("query, key, value and result of different dtypes")
    if dtype == "f32":
        # Measured alone, 12 heads of 64, 2 threads of an AVX-512 EPYC: ATen's flash
        # attention took 0.60-0.92x oneDNN's time in fp32 from 64 to 1500 tokens; in bf16
        # oneDNN's took 1.00x (128 tokens) to 0.90x (1500) of ATen's.
        raise Unsupported("fp32 attention, which ATen's flash kernel runs faster than oneDNN's")
    if not all(lo.finite(i) for i in (0, 1, 2)):
        raise Unsupported(f"{SOFTMAX_OF_NONFINITE}, and its inputs are not proven finite")
    scale = None if lo.n_inputs() < 7 or lo.is_none(6) else float(lo.const(6))
    if scale is None:
        scale = 1.0 / math.sqrt(qs[3])
        lo.pin_shapes()  # the scale of the profiled head size
    # Eager keeps the scores in float32 for bf16 inputs.
    scores = [lo.temp(q, qs[:3] + [ks[2]], "f32") for _ in range(3)]
    lo.emit("MatMul", [q, k], [scores[0]], transpose_b=True)
    lo.emit("Multiply", [scores[0], lo.constant(torch.tensor([scale]))], [scores[1]],
            auto_broadcast="numpy")
    masked = scores[1]
    if not lo.is_none(3):
        mask = lo.mask_input(3)
        if lo.rank(3) > 4:
            raise Unsupported("a mask of rank above 4")
        masked = scores[2]
        if lo.graph.tensors[mask].dtype == "bool":
            hidden = lo.constant(torch.tensor([-math.inf]))
            lo.emit("Select", [mask, scores[1], hidden], [masked], auto_broadcast="numpy")
        else:
            if lo.graph.tensors[mask].dtype != dtype:
                raise Unsupported("a mask of another dtype than the query")
            if not lo.finite(3):
                # -inf is fine (the softmax's zero rows); NaN or +inf is not proven absent.
                raise Unsupported("a float mask not proven finite")
            lo.emit("Add", [scores[1], mask], [masked], auto_broadcast="numpy")
    weights = lo.temp(q, qs[:3] + [ks[2]])
    lo.emit("SoftMax", [masked], [weights], axis=-1, mode="inf_as_zero")
    lo.emit("MatMul", [weights, v], [out])
