"""Finiteness: which values hold only finite numbers when the graph's inputs do.

oneDNN 3.12 computes some ops differently from eager on NaN or infinity
(relu, clamp and max pooling lose NaN, exp makes it +inf, ...), and
exactly on finite numbers. Those ops take their fast mapping only where this
analysis proves the input finite; the proof may assume that some of the
graph's floating-point inputs are finite, and the finite_guard pass then
checks exactly those inputs once per call (else the groups relying on them
run unfused).

A value is proven finite, with the set of graph inputs it assumes, when it is
- a constant holding only finite numbers, or of a type with no NaN (ints,
  bools, integer tensors),
- a floating-point graph input, or one of unknown dtype, that nothing writes in
  place (assumed), or
- the result of an op in FINITE_PRESERVING whose inputs are all proven, but
  those that only select its elements (SELECTORS: indices, conditions).
An op that can make NaN or infinity out of finite numbers (division by a
tensor, log, sqrt, exp, ...) is not in the table, nor is a value any node
writes in place. Overflow past the dtype's largest number is taken as
rounding: whether it happens there depends on summation order, which eager
itself does not fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from .. import log
from .graph_utils import all_nodes, constant_number, written_values

NAME = log.module_name(__file__)

# Value id -> the graph input offsets its finiteness assumes; no entry: not proven.
Facts = dict[int, frozenset[int]]

_FLOATING = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _positive_constant(index: int) -> Callable[[torch._C.Node], bool]:
    """A side condition: input `index` is a constant number above 0 (an eps)."""
    def holds(node: torch._C.Node) -> bool:
        value = constant_number(node.inputsAt(index))
        return value is not None and value > 0
    return holds


def _nonzero_divisor(node: torch._C.Node) -> bool:
    value = constant_number(node.inputsAt(1))
    return value is not None and value != 0 and (node.inputsSize() < 3
                                                 or node.inputsAt(2).node().mustBeNone())


def _small_int_exponent(node: torch._C.Node) -> bool:
    """x ** 0 to 3 (x * x * x, as mul is taken; GPT-2's tanh GELU cubes its input): a
    higher power overflows from values a model can hold (x ** 10 at 1e4)."""
    value = constant_number(node.inputsAt(1))
    return isinstance(value, (int, float)) and value in (0, 1, 2, 3)


def _constant_nonnegative_variance(node: torch._C.Node) -> bool:
    var = node.inputsAt(4)
    if var.node().kind() != "prim::Constant":
        return False
    t = var.toIValue()
    return isinstance(t, torch.Tensor) and bool((t >= 0).all()) and _positive_constant(7)(node)


def _always(node: torch._C.Node) -> bool:
    return True


def _keeps_range(node: torch._C.Node) -> bool:
    """A cast into a dtype whose largest finite number is no smaller: float16
    overflows at 65504, where float32 and bfloat16 go on to 3.4e38."""
    t = node.output().type()
    return isinstance(t, torch._C.TensorType) and t.dtype() != torch.float16


# Ops whose results are finite when all their inputs are (and the side
# condition holds), up to overflow.
FINITE_PRESERVING: dict[str, Callable[[torch._C.Node], bool]] = {
    **dict.fromkeys([
        # compute
        "aten::_convolution", "aten::convolution", "aten::conv1d", "aten::conv2d",
        "aten::conv3d", "aten::linear", "aten::matmul", "aten::mm", "aten::bmm", "aten::addmm",
        "aten::add", "aten::sub", "aten::rsub", "aten::mul", "aten::neg", "aten::abs",
        "aten::square", "aten::maximum", "aten::minimum", "aten::sum", "aten::mean",
        # integers times a finite constant scale
        "quantized_decomposed::dequantize_per_tensor",
        "quantized_decomposed::dequantize_per_channel",
        # activations
        "aten::relu", "aten::leaky_relu", "aten::elu", "aten::gelu", "aten::silu",
        "aten::tanh", "aten::sigmoid", "aten::hardswish", "aten::hardsigmoid",
        "aten::hardtanh", "aten::relu6", "aten::clamp", "aten::clamp_min", "aten::clamp_max",
        "aten::softplus", "aten::mish", "aten::erf", "aten::round", "aten::floor",
        "aten::ceil", "aten::softmax", "aten::_softmax", "aten::log_softmax",
        "aten::_log_softmax", "aten::sin", "aten::cos",
        # weighted means of the values' rows (0 where the mask hides a whole row)
        "aten::scaled_dot_product_attention",
        # pooling
        "aten::max_pool1d", "aten::max_pool2d", "aten::max_pool3d", "aten::avg_pool1d",
        "aten::avg_pool2d", "aten::avg_pool3d", "aten::adaptive_avg_pool1d",
        "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d",
        "aten::adaptive_max_pool2d",
        # data movement
        "aten::reshape", "aten::view", "aten::flatten", "aten::squeeze", "aten::unsqueeze",
        "aten::permute", "aten::transpose", "aten::t", "aten::contiguous", "aten::expand",
        "aten::expand_as", "aten::slice", "aten::select", "aten::narrow", "aten::cat",
        "aten::concat", "aten::stack", "aten::chunk", "aten::split", "aten::split_with_sizes",
        "aten::tensor_split", "aten::unsafe_split", "aten::unsafe_chunk", "aten::unbind",
        "aten::movedim", "aten::swapaxes", "aten::clone",
        "aten::detach", "aten::embedding",
        "aten::index_select", "aten::index", "aten::gather", "aten::constant_pad_nd",
        "aten::pad",
        "aten::roll", "aten::flip", "aten::repeat", "aten::where", "aten::masked_fill",
        "aten::upsample_nearest2d", "aten::pixel_shuffle", "aten::__getitem__",
        "prim::ListConstruct", "prim::ListUnpack", "prim::TupleConstruct",
        "prim::TupleUnpack", "prim::TupleIndex", "prim::NumToTensor",
        # TorchScript's chunk into a known number of pieces (ShuffleNet's branch split)
        "prim::ConstantChunk",
        # weighted sums of neighbours (position tables resized to the image)
        "aten::upsample_bilinear2d", "aten::upsample_bicubic2d",
        # new tensors: arange raises on a NaN or infinite bound; bitwise_not takes only
        # integers and bools
        "aten::arange", "aten::zeros", "aten::ones", "aten::zeros_like", "aten::ones_like",
        "aten::bitwise_not",
        # clamped to the integer range, dequantized (passes/int8_as_float)
        "graphfuse::fake_quantize_per_tensor",
    ], _always),
    "aten::to": _keeps_range,
    "aten::type_as": _keeps_range,
    "aten::div": _nonzero_divisor,
    "aten::floor_divide": _nonzero_divisor,
    "aten::pow": _small_int_exponent,
    "aten::layer_norm": _positive_constant(4),
    # x * rsqrt(mean(x * x) + eps): the rsqrt is at most 1 / sqrt(eps), and 0 where the
    # mean overflows to inf.
    "aten::rms_norm": _positive_constant(3),
    "aten::group_norm": _positive_constant(4),
    "aten::batch_norm": _constant_nonnegative_variance,
}


# Inputs that only choose which elements the result holds (indices, conditions, masks):
# their values never reach it, so they need no proof (T5's position bias is an embedding
# of bucket indices an in-place add computes).
SELECTORS: dict[str, frozenset[int]] = {
    "aten::embedding": frozenset({1}),
    "aten::index_select": frozenset({2}),
    "aten::index": frozenset({1}),
    "aten::gather": frozenset({2}),
    "aten::where": frozenset({0}),
    "aten::masked_fill": frozenset({1}),
}


def _finite_type(value: torch._C.Value) -> bool:
    """A value whose type holds no NaN or infinity."""
    t = value.type()
    if isinstance(t, torch._C.TensorType):
        return t.dtype() is not None and not t.dtype().is_floating_point \
            and not t.dtype().is_complex
    return isinstance(t, (torch._C.IntType, torch._C.BoolType, torch._C.StringType,
                          torch._C.DeviceObjType, torch._C.NoneType)) or (
        isinstance(t, torch._C.ListType)
        and isinstance(t.getElementType(), (torch._C.IntType, torch._C.BoolType)))


def _finite_constant(value: torch._C.Value) -> bool:
    v = value.toIValue()
    if isinstance(v, torch.Tensor):
        # aminmax propagates NaN, and reads the tensor once: 20x faster than isfinite's
        # mask on a 768x3072 weight.
        return not v.is_floating_point() or v.numel() == 0 or all(
            math.isfinite(x) for x in torch.aminmax(v))
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, (list, tuple)):
        return all(not isinstance(x, float) or math.isfinite(x) for x in v)
    return True


def _allocated_here(value: torch._C.Value) -> bool:
    """Whether the value is, or views, a tensor an op of the graph returned as new memory
    (its schema's result has no alias set: `zeros`, `arange`, `mul`): no graph input can
    share it. Alias analysis counts graph inputs and every tensor put in a list (index
    arguments) as wildcards that may alias each other: BEiT writes its relative position
    index, a `zeros`, in place, which made its pixel input unproven."""
    for _ in range(64):
        node = value.node()
        if node.kind() in ("prim::Param", "prim::Constant") or node.schema() == "(no schema)":
            return False
        schema = torch._C.parse_schema(node.schema())
        index = next(i for i, v in enumerate(node.outputs()) if v.unique() == value.unique())
        if index >= len(schema.returns):
            return False
        result = schema.returns[index].alias_info
        if result is None:
            return True
        base = next((v for v, arg in zip(node.inputs(), schema.arguments, strict=False)
                     if arg.alias_info is not None
                     and arg.alias_info.before_set & result.before_set), None)
        if base is None:
            return False
        value = base
    return False


def _written(graph: torch._C.Graph) -> list[torch._C.Value] | None:
    """Every value some node may write in place; None: any value."""
    written: list[torch._C.Value] = []
    for node in all_nodes(graph.block()):
        w = written_values(node)
        if w is None:
            return None
        written += w
    return written


def analyze(graph: torch._C.Graph) -> Facts:
    written = _written(graph)
    if written is None:
        return {}
    alias_db = graph.alias_db() if written else None

    def untouched(v: torch._C.Value, writes: list[torch._C.Value] = written) -> bool:
        return alias_db is None or not any(alias_db.may_contain_alias(v, w) for w in writes)

    # What a graph input could share: none of the tensors the graph allocates.
    outside = [w for w in written if not _allocated_here(w)]

    facts: Facts = {}
    for offset, v in enumerate(graph.inputs()):
        if _finite_type(v):
            facts[v.unique()] = frozenset()
        # A tensor input of unknown dtype (the profiler records types only where the op
        # tables look: wav2vec2's waveform goes to a slice first) is assumed too: the
        # guard's check passes a tensor of any other dtype.
        elif (isinstance(v.type(), torch._C.TensorType)
              and (v.type().dtype() is None or v.type().dtype() in _FLOATING)
              and untouched(v, outside)):
            facts[v.unique()] = frozenset({offset})
    for node in all_nodes(graph.block()):
        if node.kind() == "prim::Constant":
            if _finite_constant(node.output()):
                facts[node.output().unique()] = frozenset()
            continue
        condition = FINITE_PRESERVING.get(node.kind())
        selectors = SELECTORS.get(node.kind(), frozenset())
        values = [v for i, v in enumerate(node.inputs()) if i not in selectors]
        proven = (condition is not None and not list(node.blocks())
                  and all(v.unique() in facts for v in values) and condition(node))
        assumed = frozenset().union(*(facts[v.unique()] for v in values)) \
            if proven else frozenset()
        for out in node.outputs():
            if _finite_type(out):
                facts[out.unique()] = frozenset()
            elif proven and untouched(out):
                facts[out.unique()] = assumed
    log.update(NAME, lambda: f"{len(facts)} values proven finite")
    return facts
