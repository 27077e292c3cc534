"""The aten -> oneDNN Graph op table: `LOWERINGS`, every op's entry.

Adding an op is one entry: a row in UNARY / BINARY for ops that map one to one, or a
function decorated with `@lowering(...)` (lowering.py) for ops with attributes or
conditions: the elementwise ones here, the others in their family's module
(convolution, normalization, pooling, layout, quantization), which this module loads.
Where oneDNN differs from eager on NaN or infinity, the reason stands next to the
entries it justifies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

# The families' entries register as their modules load.
from . import convolution, layout, normalization, pooling, quantization, speed_trial  # noqa: F401
from .lowering import LOWERINGS, Entry, Lower, Lowering, Unsupported, lowering
from .workarounds import CHANNEL_OPERAND_OVER_BATCH, SizeVerdict, channel_operand_over_batch

# Ops left with ATen on purpose, and why (the fusion report gives the reason).
NOT_MAPPED: dict[str, str] = {
    **dict.fromkeys(
        ["aten::log_softmax", "aten::_log_softmax"],
        # oneDNN 3.12 gives NaN at the NaN or +inf of a row and -inf elsewhere in it;
        # eager makes the whole row NaN. Rare in inference graphs: not worth a guard.
        "oneDNN's log_softmax keeps a row holding NaN or +inf finite where it is not"),
    **dict.fromkeys(
        ["aten::softplus", "aten::mish"],
        # Measured on oneDNN 3.12: softplus(-10, beta=2) = -9.5e-7 against ATen's
        # 1.0e-9, so softplus(x) / softplus(x) was NaN; beta * x overflows past 1.7e38.
        "oneDNN's SoftPlus (and Mish, built on it) is 1e-6 off in absolute terms: 0 or "
        "negative where ATen's result is tiny and positive"),
}


# ---------------------------------------------------------------------------
# One-to-one ops: aten kind -> backend kind (plus fixed attributes).

# Why oneDNN's op for an aten op is right on finite inputs only (each measured again on
# oneDNN 3.12, in every kernel it picks: conv, matmul and binary post-ops, NCHW and NHWC).
CLAMP_LOSES_NAN = "oneDNN's clamp returns a bound for NaN"
EXP_LOSES_NAN = "oneDNN's exp returns +inf for NaN"
LOGISTIC_LOSES_NAN = "oneDNN's logistic returns 0 for NaN in some of its kernels"

UNARY: dict[str, tuple[str, dict[str, Any]]] = {
    "aten::tanh": ("Tanh", {}),
    "aten::log": ("Log", {}),
    "aten::sqrt": ("Sqrt", {}),
    "aten::abs": ("Abs", {}),
    "aten::square": ("Square", {}),
    "aten::hardswish": ("HardSwish", {}),
    "aten::reciprocal": ("Reciprocal", {}),
    "aten::round": ("Round", {}),
}

# One-to-one ops right on finite inputs only: aten kind -> (backend kind, attributes, why).
UNARY_FINITE_ONLY: dict[str, tuple[str, dict[str, Any], str]] = {
    "aten::exp": ("Exp", {}, EXP_LOSES_NAN),
    "aten::sigmoid": ("Sigmoid", {}, LOGISTIC_LOSES_NAN),
    "aten::relu6": ("Clamp", {"min": 0.0, "max": 6.0}, CLAMP_LOSES_NAN),
    "aten::hardsigmoid": ("HardSigmoid", {"alpha": 1.0 / 6.0, "beta": 0.5}, CLAMP_LOSES_NAN),
}

BINARY: dict[str, str] = {
    "aten::add": "Add",
    "aten::sub": "Subtract",
    "aten::mul": "Multiply",
    "aten::div": "Divide",
}


def _unary(kind: str, attrs: dict[str, Any]) -> Lower:
    def lower(lo: Lowering) -> None:
        x, out = lo.input(0), lo.output()
        if lo.graph.tensors[x].dtype != lo.graph.tensors[out].dtype:
            raise Unsupported("output dtype differs from input dtype")
        lo.emit(kind, [x], [out], **attrs)
    return lower


def _binary(kind: str) -> Lower:
    def lower(lo: Lowering) -> None:
        # Scalar operands were turned into tensors by prepare_binary; an
        # `alpha` other than 1 was split off there too.
        # prepare_binary cast tensor operands to the result dtype already.
        a, b, out = lo.input(0), lo.input(1), lo.output()
        if len({lo.graph.tensors[t].dtype for t in (a, b, out)}) != 1:
            raise Unsupported("operands of another dtype than the result")
        if lo.node.kind() in ("aten::add", "aten::sub") and lo.n_inputs() > 2 and lo.const(2) != 1:
            raise Unsupported("alpha != 1")
        if lo.node.kind() == "aten::div" and lo.n_inputs() > 2 and lo.const(2) is not None:
            raise Unsupported("div with a rounding mode")
        if kind == "Multiply" and normalization.gamma_of_rms_norm(lo, a, b, out):
            return
        if _channel_broadcast_hazard(lo, a, b, out):
            lo.pin_shapes()
        lo.emit(kind, [a, b], [out], auto_broadcast="numpy")
    return lower


def _channel_broadcast_hazard(lo: Lowering, a: int, b: int, out: int) -> bool:
    """Whether the binary op meets oneDNN's broadcast defect at other sizes than the
    profiled ones (workarounds.channel_operand_over_batch): the group is then pinned to
    them, and refused if they are the case."""
    result = lo.graph.tensors[out].sizes or []
    # numpy broadcasting: a lower-rank operand gains leading size-1 dims.
    operands = [[1] * (len(result) - len(sizes)) + sizes
                for sizes in (lo.graph.tensors[t].sizes or [] for t in (a, b))]
    # A batch of constants fixes the result's batch: an input operand meeting
    # it may be the (1, C, 1, ...) case at a call with batch 1 (found by the fuzzer).
    fixed = [_constant_derived(lo.node.inputsAt(i)) for i in (0, 1)]
    if any(fix and not other and len(sizes) >= 3 and sizes[0] > 1 and sizes[1] > 1
           and all(d == 1 for d in sizes[2:])
           for fix, other, sizes in zip(fixed, fixed[::-1], operands, strict=True)):
        return True
    verdicts = {channel_operand_over_batch(sizes, result) for sizes in operands}
    if SizeVerdict.REFUSE in verdicts:
        raise Unsupported(CHANNEL_OPERAND_OVER_BATCH)
    return SizeVerdict.PIN in verdicts


def _constant_derived(value: torch._C.Value, depth: int = 4) -> bool:
    """Whether a value is computed from constants only (within a few ops)."""
    node = value.node()
    if node.kind() == "prim::Constant":
        return True
    if depth == 0 or node.kind() == "prim::Param" or list(node.blocks()):
        return False
    return all(_constant_derived(v, depth - 1) for v in node.inputs())


for _kind, (_backend, _attrs) in UNARY.items():
    LOWERINGS[_kind] = Entry(_unary(_backend, _attrs))
for _kind, (_backend, _attrs, _why) in UNARY_FINITE_ONLY.items():
    LOWERINGS[_kind] = Entry(_unary(_backend, _attrs), finite_only=_why)
for _kind, _backend in BINARY.items():
    LOWERINGS[_kind] = Entry(_binary(_backend))


# ---------------------------------------------------------------------------
# Elementwise ops with attributes.

GELU_OF_INF = ("ATen's gelu gives NaN for +-inf in its AVX-512 kernel, oneDNN's GELU NaN or "
               "+inf by kernel")


@lowering("aten::gelu")
def gelu(lo: Lowering) -> None:
    approximate = lo.const(1) if lo.n_inputs() > 1 else "none"
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"gelu approximate={approximate!r}")
    # The tanh form gives eager's NaN, +inf and NaN for NaN, +inf and -inf in every
    # kernel oneDNN 3.12 picks; the erf form does not.
    if approximate == "none" and not lo.finite(0):
        raise Unsupported(f"{GELU_OF_INF}, and its input is not proven finite")
    start = len(lo.graph.ops)
    lo.emit("GELU", [lo.input(0)], [lo.output()],
            mode="gelu_erf" if approximate == "none" else "gelu_tanh")
    _post_op_trial(lo, start, "gelu", lambda y: F.gelu(y, approximate=approximate))


@lowering("aten::silu")
def silu(lo: Lowering) -> None:
    # x * sigmoid(x): oneDNN fuses the pair as a swish post-op.
    x, out = lo.input(0), lo.output()
    gate = lo.temp(out)
    start = len(lo.graph.ops)
    lo.emit("Sigmoid", [x], [gate])
    lo.emit("Multiply", [x, gate], [out], auto_broadcast="numpy")
    _post_op_trial(lo, start, "silu", F.silu)


def _post_op_trial(lo: Lowering, start: int, name: str,
                   activation: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """An activation of a linear's result, which oneDNN makes the matmul's post-op, kept
    only where a speed trial on this CPU finds the pair faster than ATen's linear and
    activation (speed_trial). On a Zen 3 EPYC (AVX2), oneDNN 3.12's matmul took 1.3-1.5 ms
    longer with a GELU (erf or tanh) or swish post-op than without, at 128 x 768 x 3072
    (0.77x ATen's linear and activation), where a ReLU or sigmoid post-op cost nothing.
    Left with ATen, the activation runs after the fused linear."""
    x = lo.graph.ops[start].inputs[0]
    producer = lo.graph.producer(x)
    trials = speed_trial.mode()
    if (trials == "fuse" or producer is None or producer.kind != "MatMul"
            or producer.node is None or producer.node.kind() != "aten::linear"):
        return
    if trials == "aten":
        raise Unsupported(f"{name} of a linear, left with ATen ({speed_trial.ENV}=aten)")
    source, weight, *bias = producer.inputs
    # The weights' values do not change the time: random ones make one trial per shape.
    trial = speed_trial.trial(
        lo.graph, [producer, *lo.graph.ops[start:]], [lo.output()], {},
        lambda t: activation(F.linear(t[source], t[weight], t[bias[0]] if bias else None)))
    if not trial.fused:
        raise Unsupported(f"{name} of a linear, left with ATen by its speed trial: "
                          f"{trial.verdict()}")


# oneDNN has no negation. x * -1 gives -x for every number, +-0 and +-inf included, but a
# NaN operand comes out of x86's multiply with its own sign bit, which neg flips.
NEG_KEEPS_NAN_SIGN = "x * -1 keeps the sign bit of a NaN, which neg flips"


@lowering("aten::neg", finite_only=NEG_KEEPS_NAN_SIGN)
def neg(lo: Lowering) -> None:
    x, out = lo.input(0), lo.output()
    if lo.graph.tensors[x].dtype != lo.graph.tensors[out].dtype:
        raise Unsupported("output dtype differs from input dtype")
    minus_one = torch.tensor([-1.0], dtype=lo.node.inputsAt(0).type().dtype())
    lo.emit("Multiply", [x, lo.constant(minus_one)], [out], auto_broadcast="numpy")


@lowering("aten::relu")
def relu(lo: Lowering) -> None:
    x, out = lo.input(0), lo.output()
    if lo.finite(0):
        lo.emit("ReLU", [x], [out])
        return
    # oneDNN's ReLU (and Clamp) take max(x, 0) with an instruction that
    # returns 0 for NaN. Elu with alpha 0 keeps NaN and gives x for x > 0 and
    # 0 * (exp(x) - 1) = -0.0 below; Abs turns that into eager's +0.0. Both
    # fuse as post-ops, but oneDNN matches none of its residual-block
    # patterns (conv + bn + add + relu) with them.
    gated = lo.temp(out)
    lo.emit("Elu", [x], [gated], alpha=0.0)
    lo.emit("Abs", [gated], [out])


def _clamp(lo: Lowering, low: Any, high: Any) -> None:
    bounds = [b for b in (low, high) if b is not None]
    if any(not isinstance(b, (int, float)) or isinstance(b, bool) for b in bounds):
        raise Unsupported("clamp bounds that are not numbers")
    if any(not math.isfinite(b) for b in bounds):
        raise Unsupported("a clamp bound that is not finite")
    lo.emit("Clamp", [lo.input(0)], [lo.output()],
            min=float("-inf") if low is None else float(low),
            max=float("inf") if high is None else float(high))


@lowering("aten::clamp", "aten::hardtanh", finite_only=CLAMP_LOSES_NAN)
def clamp(lo: Lowering) -> None:
    # clamp(self, min?, max?) / hardtanh(self, min_val, max_val)
    _clamp(lo, lo.const(1), lo.const(2))


@lowering("aten::clamp_min", finite_only=CLAMP_LOSES_NAN)
def clamp_min(lo: Lowering) -> None:
    _clamp(lo, lo.const(1), None)


@lowering("aten::clamp_max", finite_only=CLAMP_LOSES_NAN)
def clamp_max(lo: Lowering) -> None:
    _clamp(lo, None, lo.const(1))


@lowering("aten::leaky_relu")
def leaky_relu(lo: Lowering) -> None:
    lo.emit("LeakyReLU", [lo.input(0)], [lo.output()], alpha=float(lo.const(1)))


@lowering("aten::elu")
def elu(lo: Lowering) -> None:
    # (self, alpha, scale, input_scale)
    if lo.n_inputs() > 2 and (lo.const(2) != 1 or lo.const(3) != 1):
        raise Unsupported("elu with scale or input_scale != 1")
    lo.emit("Elu", [lo.input(0)], [lo.output()], alpha=float(lo.const(1)))


@lowering("aten::pow")
def pow_scalar(lo: Lowering) -> None:
    exponent = lo.const(1)
    if not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        raise Unsupported("pow with a tensor exponent")
    x, out = lo.input(0), lo.output()
    if exponent == 3 and lo.graph.tensors[x].dtype == "f32":
        # ATen's pow kernel computes (x * x) * x for the exponent 3, so two products are
        # eager's result to the bit; oneDNN 3.12 offers a lone Pow no partition, while the
        # products join the elementwise chain around them (GPT-2's written-out tanh GELU).
        # bf16 keeps Pow: ATen rounds its cube once, a bf16 product in between would twice.
        square = lo.temp(x)
        lo.emit("Multiply", [x, x], [square])
        lo.emit("Multiply", [square, x], [out])
    elif exponent == 2:
        lo.emit("Square", [x], [out])
    elif exponent == 0.5:
        lo.emit("Sqrt", [x], [out])
    else:
        lo.emit("Pow", [x], [out], beta=float(exponent))

