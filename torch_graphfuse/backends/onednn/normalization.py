"""Normalizations, softmax and attention."""

from __future__ import annotations

import math

import torch

from ...passes.defer_size_check import size_source
from . import speed_trial
from .convolution import CONVOLUTIONS
from .graph_desc import BACKEND_DTYPES, BackendOp
from .lowering import Lowering, Unsupported, lowering
from .workarounds import CHANNEL_OPERAND_OVER_BATCH, SizeVerdict, channel_operand_over_batch

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
    if _scale_and_shift(lo):
        return
    inputs = [lo.input(i) for i in range(5)]
    lo.emit("BatchNormInference", inputs, [lo.output()], epsilon=float(lo.const(7)),
            data_format="NCX")


# Single-input elementwise ops a convolution's or matmul's post-op chain passes through.
_ACTIVATIONS = frozenset(f"aten::{kind}" for kind in (
    "relu", "relu6", "gelu", "silu", "hardswish", "hardsigmoid", "hardtanh", "sigmoid", "tanh",
    "elu", "leaky_relu", "mish", "softplus"))
_CONTRACTIONS = frozenset(
    (*CONVOLUTIONS, "aten::linear", "aten::matmul", "aten::mm", "aten::addmm"))


def _after_activation_of_contraction(value: torch._C.Value) -> bool:
    """Whether the value is a convolution's or matmul's result through one or more
    activations (ConvMixer's conv -> GELU -> BatchNorm)."""
    node, activations = value.node(), 0
    while node.kind() in _ACTIVATIONS:
        node, activations = node.inputsAt(0).node(), activations + 1
    return activations > 0 and node.kind() in _CONTRACTIONS


def _scale_and_shift(lo: Lowering) -> bool:
    """A frozen float32 BatchNorm after a convolution's activation as ATen's CPU kernel
    computes it: x * alpha + beta, with alpha = weight / sqrt(var + eps) and
    beta = bias - mean * alpha per channel, in float32. oneDNN 3.12 has no pattern for a
    BatchNormInference after an activation: it stood alone, a lone op ATen runs as fast
    (ConvMixer's 65 a call), where a multiply and an add join the convolution's post-ops
    (ConvMixer-768/32: 1.01x -> 1.34x frozen TorchScript, AMD Zen 4)."""
    x = lo.input(0)
    params = [lo.node.inputsAt(i) for i in (1, 2, 3, 4)]
    if (lo.graph.tensors[x].dtype != "f32"
            or not _after_activation_of_contraction(lo.node.inputsAt(0))
            or any(p.node().kind() != "prim::Constant" for p in params)):
        return False
    weight, bias, mean, var = (p.toIValue() for p in params)
    if any(t.dtype != torch.float32 or t.dim() != 1 for t in (weight, bias, mean, var)):
        return False
    alpha = weight * (1 / torch.sqrt(var + float(lo.const(7))))
    beta = bias - mean * alpha
    per_channel = [-1] + [1] * (lo.rank(0) - 2)
    alpha, beta = alpha.reshape(per_channel), beta.reshape(per_channel)
    out = lo.output()
    verdict = channel_operand_over_batch([1, *alpha.shape], lo.sizes(0))
    if verdict is SizeVerdict.REFUSE:
        raise Unsupported(CHANNEL_OPERAND_OVER_BATCH)
    if verdict is SizeVerdict.PIN:
        lo.pin_shapes()
    scaled = lo.temp(x)
    lo.emit("Multiply", [x, lo.constant(alpha)], [scaled], auto_broadcast="numpy")
    lo.emit("Add", [scaled, lo.constant(beta)], [out], auto_broadcast="numpy")
    return True


@lowering("aten::layer_norm", worth_alone=True)
def layer_norm(lo: Lowering) -> None:
    # (input, normalized_shape, weight?, bias?, eps, cudnn_enable)
    normalized = lo.const(1)
    if len(normalized) != 1:
        # oneDNN 3.12 takes one normalized dim only (v3.2 normalized the last
        # whatever begin_norm_axis said): the reason, rather than "not supported".
        raise Unsupported("layer_norm over more than one dim")
    inputs = [lo.input(0)]
    if not (lo.is_none(2) and lo.is_none(3)):
        # oneDNN takes both or neither. A missing weight is ones and a missing bias -0.0
        # (ModernBERT's layer norms have no bias): x * 1 and x + -0.0 are x, -0.0 included.
        given = lo.input(2) if not lo.is_none(2) else lo.input(3)
        spec = lo.graph.tensors[given]
        dtype = next(t for t, name in BACKEND_DTYPES.items() if name == spec.dtype)
        inputs += [given if not lo.is_none(2) else
                   lo.constant(torch.ones(spec.sizes or [1], dtype=dtype)),
                   lo.input(3) if not lo.is_none(3) else
                   lo.constant(torch.full(spec.sizes or [1], -0.0, dtype=dtype))]
    lo.emit("LayerNorm", inputs, [lo.output()], begin_norm_axis=-len(normalized),
            epsilon=float(lo.const(4)), keep_stats=False, use_affine=len(inputs) == 3)


@lowering("aten::rms_norm", worth_alone=True)
def rms_norm(lo: Lowering) -> None:
    # (input, normalized_shape, weight?, eps?)
    x, out = lo.input(0), lo.output()
    own_size = _last_size_of_input(lo)
    if len(lo.shape(1, pin=not own_size)) != 1:
        raise Unsupported("rms_norm over more than one dim")
    if not own_size or not lo.is_none(2):
        # oneDNN normalizes the last dim whatever its size (and see GAMMA_SIZE); eager
        # checks it against a shape given otherwise, or broadcasts a weight over it.
        lo.pin_last_dim(x)
    dtype = lo.graph.tensors[x].dtype
    inputs = [x] if lo.is_none(2) else [x, lo.input(2)]
    if any(lo.graph.tensors[t].dtype != dtype for t in (*inputs, out)):
        raise Unsupported("rms_norm with a weight or result of another dtype than its input")
    eps = (torch.finfo(torch.float32 if dtype == "f32" else torch.bfloat16).eps
           if lo.is_none(3) else float(lo.const(3)))
    lo.emit("RMSNorm", inputs, [out], begin_norm_axis=-1, epsilon=eps)


def _last_size_of_input(lo: Lowering) -> bool:
    """Whether the normalized shape is [x.size(-1)] of input x (or of a tensor of x's
    sizes, where defer_size_check moved the read), read by this node alone: right at any
    size, so nothing is pinned."""
    shape = lo.node.inputsAt(1)
    listed = shape.node()
    if listed.kind() != "prim::ListConstruct" or listed.inputsSize() != 1:
        return False
    size = listed.inputsAt(0).node()
    rank = lo.rank(0)
    return (size.kind() == "aten::size" and size.inputsSize() == 2
            and size_source(size.inputsAt(0)).unique() == size_source(lo.node.inputsAt(0)).unique()
            and size.inputsAt(1).node().kind() == "prim::Constant"
            and size.inputsAt(1).toIValue() in (-1, rank - 1)
            and len(shape.uses()) == 1 and len(size.output().uses()) == 1)


# Measured on oneDNN 3.12: RMSNorm reads as many gammas as it has, whatever the size of
# the normalized dim, with no error; eager broadcasts a weight over a dim of size 1 (or
# fails). The group's guard checks the input's last size against the profiled one.
GAMMA_SIZE = "oneDNN's RMSNorm does not check its gamma's size against the input's"


def gamma_of_rms_norm(lo: Lowering, a: int, b: int, out: int) -> bool:
    """A multiply of an RMSNorm's result by a constant vector over the last dim: the
    RMSNorm takes the vector as its gamma and computes the product, and the multiply joins
    it, where nothing else reads the result (passes/rms_norm leaves the weight out, as its
    dtype may differ at other calls; the group's guard pins the profiled ones, and its
    unfused run keeps eager's two ops)."""
    for side, gamma in ((0, b), (1, a)):
        norm = _gammaless_norm(lo, lo.node.inputsAt(side))
        if norm is not None and _gamma_for(lo, lo.node.inputsAt(1 - side)):
            norm.inputs.append(gamma)
            norm.outputs = [out]
            lo.joins = norm
            lo.pin_last_dim(norm.inputs[0])  # see GAMMA_SIZE
            return True
    return False


def _gammaless_norm(lo: Lowering, value: torch._C.Value) -> BackendOp | None:
    """The RMSNorm without gamma computing `value` (through same-dtype casts the graph maps
    as its tensor), if every step is read by one node only."""
    norm = lo.graph.producer(lo.graph.resolve(value.unique()))
    if norm is None or norm.kind != "RMSNorm" or len(norm.inputs) != 1:
        return None
    while len(value.uses()) == 1:
        if value.unique() == norm.outputs[0]:
            return norm
        if lo.graph.resolve(value.unique()) != norm.outputs[0]:
            return None
        value = value.node().inputsAt(0)
    return None


def _gamma_for(lo: Lowering, value: torch._C.Value, node: torch._C.Node | None = None) -> bool:
    """Whether `value`, read by `node` (this one by default), is a constant vector over the
    last dim of the node's result, of its dtype."""
    result = (node or lo.node).output().type()
    t = value.type()
    if not (value.node().kind() == "prim::Constant" and isinstance(t, torch._C.TensorType)
            and isinstance(result, torch._C.TensorType) and t.dtype() == result.dtype()):
        return False
    try:
        return t.sizes() == result.sizes()[-1:]
    except RuntimeError:  # sizes the profiling did not fix
        return False


@lowering("aten::group_norm")
def group_norm(lo: Lowering) -> None:
    # Measured on oneDNN 3.12 (channels-last, the one layout it runs without its reference
    # implementation): its group normalization takes the variance as E[x^2] - mean^2, which
    # cancels where the mean is large against the spread. Off by 6e-04 at mean 100, std 1,
    # and 0.14 at mean 1000 (ATen's moments: rounding only), where layer_norm is off by
    # 4e-06 and 3e-05.
    raise Unsupported("oneDNN's group_norm computes the variance in one pass, which loses "
                      "the precision ATen keeps where the mean is large against the spread")


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
    trials = speed_trial.mode()
    if trials == "aten":
        raise Unsupported(f"attention, left with ATen ({speed_trial.ENV}=aten)")
    if not all(lo.finite(i) for i in (0, 1, 2)):
        raise Unsupported(f"{SOFTMAX_OF_NONFINITE}, and its inputs are not proven finite")
    given_scale = None if lo.n_inputs() < 7 or lo.is_none(6) else float(lo.const(6))
    scale = given_scale
    if scale is None:
        scale = 1.0 / math.sqrt(qs[3])
        lo.pin_last_dim(q)  # the scale of the profiled head size: other lengths keep it
    start = len(lo.graph.ops)
    # Eager keeps the scores in float32 for bf16 inputs.
    scores = [lo.temp(q, qs[:3] + [ks[2]], "f32") for _ in range(3)]
    lo.emit("MatMul", [q, k], [scores[0]], transpose_b=True)
    lo.emit("Multiply", [scores[0], lo.constant(torch.tensor([scale]))], [scores[1]],
            auto_broadcast="numpy")
    masked, mask = scores[1], None
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
    if trials == "measure":
        # Which kernel is faster depends on the CPU (speed_trial): in bf16, oneDNN's took
        # 0.90-1.00x ATen's time on a Zen 4 EPYC, 0.28-0.38x on a Zen 5.
        trial = speed_trial.trial(
            lo.graph, lo.graph.ops[start:], [out],
            {lo.graph.resolve(c.unique()): c.toIValue() for c in lo.constants},
            lambda t: torch.ops.aten.scaled_dot_product_attention(
                t[q], t[k], t[v], None if mask is None else t[mask], 0.0, False,
                scale=given_scale))
        if not trial.fused:
            raise Unsupported(f"attention, left with ATen by its speed trial: {trial.verdict()}")
