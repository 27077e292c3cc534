"""The CPU reference interpreter of the cuDNN op-graph IR.

`run(graph, inputs)` executes any valid IR graph with torch ops, with the
semantics cuDNN's graph API documents, so that what a lowering means can be
checked against eager without a GPU; `executor(desc)` does the same for a
FusionGroup's JSON description, parsed once (a stand-in for the GPU runtime).

Memory is read and written as cuDNN would: every group input is read through
its IR dims and strides over the given tensor's storage, and every group output
is written into a fresh buffer with its IR dims and strides. Precision follows
cuDNN's three data types: each node computes in the graph's compute type, and
each tensor it makes is rounded to that tensor's own data type (the builder
gives every IR tensor, virtual or not, its dtype), so a HALF intermediate loses
what a HALF register would. It reads the modes, arities and attributes the
builder reads (ir.POINTWISE, ir.REDUCTION_MODES) and gives each mode its semantics
(SEMANTICS, REDUCTIONS). Anything else (a mode, an attribute, a shape rule)
raises ValueError: it never guesses. Where NVIDIA's
documentation leaves a case open (NaN through max, min and the max reduction;
the order of a sum), this is torch's behaviour: the op table maps such ops only
on inputs proven finite, and tests compare with tolerances.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from . import ir
from .ir import TORCH_DTYPES

Tensor = torch.Tensor


# -- the semantics of each mode of the IR's vocabulary (ir.POINTWISE) -----------

# A mode's result from its inputs (IN_0.., then the scalar) and its attributes, each
# given or else cuDNN's default (ir.ScalarAttr.default).
Semantics = Callable[[list[Tensor], dict[str, float | None]], Tensor]


def _relu(xs: list[Tensor], attrs: dict[str, float | None]) -> Tensor:
    # cuDNN: below lower_clip, lower_clip + slope * (x - lower_clip); above
    # upper_clip, upper_clip. The frontend asks for NaN propagation.
    x = xs[0]
    lower, slope = attrs["relu_lower_clip"], attrs["relu_lower_clip_slope"]
    upper = attrs["relu_upper_clip"]
    if upper is None:
        # The frontend's default: FLOAT's largest value when computing in
        # FLOAT, a double's otherwise (no clip in a 16-bit type).
        upper = torch.finfo(x.dtype).max if x.dtype == torch.float32 else math.inf
    # A slope of 0 clips: -inf goes to lower_clip, not to 0 * -inf.
    below = lower + slope * (x - lower) if slope else torch.full_like(x, lower)
    return torch.where(x < lower, below, torch.clamp(x, max=upper))


def _elu(xs: list[Tensor], attrs: dict[str, float | None]) -> Tensor:
    # alpha is 1: the frontend sets cuDNN's ELU_ALPHA to 1 (ir.POINTWISE).
    return torch.where(xs[0] > 0, xs[0], torch.expm1(xs[0]))


def _softplus(xs: list[Tensor], attrs: dict[str, float | None]) -> Tensor:
    # log(1 + exp(x)), beta 1 as the frontend sets it, without torch's linear threshold.
    return torch.logaddexp(torch.zeros_like(xs[0]), xs[0])


def _swish(xs: list[Tensor], attrs: dict[str, float | None]) -> Tensor:
    return xs[0] * torch.sigmoid(attrs["swish_beta"] * xs[0])


def _unary(fn: Callable[[Tensor], Tensor]) -> Semantics:
    return lambda xs, _: fn(xs[0])


def _binary(fn: Callable[[Tensor, Tensor], Tensor]) -> Semantics:
    return lambda xs, _: fn(xs[0], xs[1])


SEMANTICS: dict[str, Semantics] = {
    "add": _binary(torch.add),
    "sub": _binary(torch.sub),
    "mul": _binary(torch.mul),
    "div": _binary(torch.div),
    "max": _binary(torch.maximum),
    "min": _binary(torch.minimum),
    "pow": _binary(torch.pow),
    "identity": _unary(lambda x: x),
    "neg": _unary(torch.neg),
    "abs": _unary(torch.abs),
    "exp": _unary(torch.exp),
    "log": _unary(torch.log),
    "sqrt": _unary(torch.sqrt),
    "rsqrt": _unary(torch.rsqrt),
    "reciprocal": _unary(torch.reciprocal),
    "erf": _unary(torch.erf),
    "sin": _unary(torch.sin),
    "cos": _unary(torch.cos),
    "tan": _unary(torch.tan),
    "ceil": _unary(torch.ceil),
    "floor": _unary(torch.floor),
    "tanh_fwd": _unary(torch.tanh),
    "sigmoid_fwd": _unary(torch.sigmoid),
    "gelu_fwd": _unary(F.gelu),
    "gelu_approx_tanh_fwd": _unary(lambda x: F.gelu(x, approximate="tanh")),
    "relu_fwd": _relu,
    "swish_fwd": _swish,
    "elu_fwd": _elu,
    "softplus_fwd": _softplus,
}

# The semantics of each reduction mode (ir.REDUCTION_MODES), each over the dims
# where the output has 1 and the input not.
REDUCTIONS: dict[str, Callable[[Tensor, list[int]], Tensor]] = {
    "add": lambda x, d: x.sum(d, keepdim=True),
    "avg": lambda x, d: x.mean(d, keepdim=True),
    "max": lambda x, d: x.amax(d, keepdim=True),
    "min": lambda x, d: x.amin(d, keepdim=True),
    "amax": lambda x, d: x.abs().amax(d, keepdim=True),
    "mul": lambda x, d: _prod(x, d),
    "mul_no_zeros": lambda x, d: _prod(torch.where(x == 0, torch.ones_like(x), x), d),
    "norm1": lambda x, d: x.abs().sum(d, keepdim=True),
    "norm2": lambda x, d: x.square().sum(d, keepdim=True).sqrt(),
}


def _prod(x: Tensor, dims: list[int]) -> Tensor:
    for d in dims:  # torch.prod takes one dim at a time
        x = x.prod(d, keepdim=True)
    return x


# -- memory ---------------------------------------------------------------------


def _overlaps(dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether two indices of the view share an address (a race for a writer)."""
    span = 1
    for d, s in sorted((p for p in zip(dims, strides, strict=True) if p[0] > 1),
                       key=lambda p: p[1]):
        if s < span:
            return True
        span = s * d
    return False


def _read(spec: ir.Tensor, given: Tensor) -> Tensor:
    """The IR tensor `spec` read from `given`'s memory, as cuDNN would read it."""
    if not isinstance(given, torch.Tensor):
        raise ValueError(f"input tensor {spec.id}: got {type(given).__name__}")
    if given.dtype != TORCH_DTYPES[spec.dtype]:
        raise ValueError(f"input tensor {spec.id}: dtype {given.dtype}, the IR says {spec.dtype}")
    if any(d < 0 for d in spec.dims) or any(s < 0 for s in spec.strides):
        raise ValueError(f"input tensor {spec.id}: negative dims or strides")
    room = given.untyped_storage().nbytes() // given.element_size() - given.storage_offset()
    if ir.extent(spec.dims, spec.strides) > room:
        raise ValueError(f"input tensor {spec.id}: dims {spec.dims} strides {spec.strides} "
                         f"reach past the {room} elements of the given tensor's memory")
    return given.as_strided(spec.dims, spec.strides, given.storage_offset())


def _write(spec: ir.Tensor, value: Tensor) -> Tensor:
    """A fresh buffer laid out as the IR output `spec`, holding `value`."""
    if any(d < 0 for d in spec.dims) or any(s < 0 for s in spec.strides):
        raise ValueError(f"output tensor {spec.id}: negative dims or strides")
    if _overlaps(spec.dims, spec.strides):
        raise ValueError(f"output tensor {spec.id}: strides {spec.strides} make elements "
                         f"of dims {spec.dims} share memory")
    out = torch.empty_strided(spec.dims, spec.strides, dtype=TORCH_DTYPES[spec.dtype],
                              device=value.device)
    out.copy_(value)
    return out


# -- nodes -------------------------------------------------------------------------


def _ports(node: ir.Node, inputs: set[str], outputs: set[str]) -> None:
    if set(node.inputs) != inputs or set(node.outputs) != outputs:
        raise ValueError(f"{node.op}: ports {sorted(node.inputs)} -> {sorted(node.outputs)}, "
                         f"expected {sorted(inputs)} -> {sorted(outputs)}")


def _check_attrs(node: ir.Node, known: set[str]) -> None:
    unknown = set(node.attrs) - known
    if unknown:
        raise ValueError(f"{node.op}: unknown attributes {sorted(unknown)}")


def _check_dims(node: ir.Node, port: str, want: Sequence[int], spec: ir.Tensor) -> None:
    if list(want) != list(spec.dims):
        raise ValueError(f"{node.op}: {port} computes dims {list(want)}, the IR says {spec.dims}")


def _conv_fprop(node: ir.Node, args: dict[str, Tensor], out: ir.Tensor) -> Tensor:
    _ports(node, {"X", "W"}, {"Y"})
    _check_attrs(node, {"padding", "stride", "dilation"})
    x, w = args["X"], args["W"]
    spatial = x.dim() - 2
    if spatial not in (1, 2, 3) or w.dim() != x.dim():
        raise ValueError(f"conv_fprop: X rank {x.dim()}, W rank {w.dim()}")
    params = {}
    for name in ("padding", "stride", "dilation"):
        value = node.attrs.get(name)
        if not isinstance(value, list) or len(value) != spatial:
            raise ValueError(f"conv_fprop: {name} must list {spatial} ints, got {value!r}")
        params[name] = value
    channels, per_group = x.shape[1], w.shape[1]
    if per_group == 0 or channels % per_group or w.shape[0] % (channels // per_group):
        raise ValueError(f"conv_fprop: X has {channels} channels, W {list(w.shape)}")
    conv = (F.conv1d, F.conv2d, F.conv3d)[spatial - 1]
    # cuDNN's conv_fprop is a cross-correlation, as torch's convolution is.
    y = conv(x, w, None, params["stride"], params["padding"], params["dilation"],
             channels // per_group)
    _check_dims(node, "Y", y.shape, out)
    return y


def _matmul(node: ir.Node, args: dict[str, Tensor], out: ir.Tensor) -> Tensor:
    _ports(node, {"A", "B"}, {"C"})
    _check_attrs(node, set())
    a, b = args["A"], args["B"]
    if a.dim() != b.dim() or a.dim() < 2 or a.shape[-1] != b.shape[-2]:
        raise ValueError(f"matmul: A {list(a.shape)} and B {list(b.shape)} do not multiply")
    batch = []
    for da, db in zip(a.shape[:-2], b.shape[:-2], strict=True):
        if da != db and 1 not in (da, db):
            raise ValueError(f"matmul: batch dims of A {list(a.shape)}, B {list(b.shape)}")
        batch.append(max(da, db))
    _check_dims(node, "C", [*batch, a.shape[-2], b.shape[-1]], out)
    return torch.matmul(a, b)


def _broadcasts(small: Sequence[int], big: Sequence[int]) -> bool:
    """cuDNN's rule: equal rank, and each dim of `small` is `big`'s or 1."""
    return len(small) == len(big) and all(s in (1, b) for s, b in zip(small, big, strict=True))


def _number(what: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number, got {value!r}")
    return float(value)


def _pointwise(node: ir.Node, args: dict[str, Tensor], out: ir.Tensor) -> Tensor:
    mode, n_tensors = ir.pointwise_mode(node)
    mode_name = node.attrs["mode"]
    _ports(node, {f"IN_{i}" for i in range(n_tensors)}, {"OUT_0"})
    _check_attrs(node, {"mode", "scalar", *mode.attrs})
    xs = [args[f"IN_{i}"] for i in range(n_tensors)]
    for i, x in enumerate(xs):
        # cuDNN broadcasts an input only along its dims of 1, at equal rank.
        if not _broadcasts(list(x.shape), out.dims):
            raise ValueError(f"pointwise {mode_name}: IN_{i} dims {list(x.shape)} do not "
                             f"broadcast to OUT_0 dims {out.dims}")
    scalar = node.attrs.get("scalar")
    if scalar is not None:
        # A number operand (op_table's `scalar`) is the last input, bound by value:
        # the builder binds it as a FLOAT scalar; the node reads it in its compute type.
        bound = torch.tensor(_number(f"pointwise {mode_name}: scalar", scalar),
                             device=xs[0].device)
        xs.append(bound.to(xs[0].dtype).expand([1] * len(out.dims)))
    attrs: dict[str, float | None] = {}
    for name, attr in mode.attrs.items():
        value = node.attrs.get(name)
        # Absent or null: cuDNN's default, as the builder does.
        attrs[name] = attr.default if value is None else _number(
            f"pointwise {mode_name}: {name}", value)
    return SEMANTICS[mode_name](xs, attrs).expand(out.dims)


def _reduction(node: ir.Node, args: dict[str, Tensor], out: ir.Tensor) -> Tensor:
    _ports(node, {"X"}, {"Y"})
    _check_attrs(node, {"mode"})
    mode = REDUCTIONS.get(node.attrs.get("mode"))  # type: ignore[arg-type]
    if mode is None:
        raise ValueError(f"reduction: unknown mode {node.attrs.get('mode')!r}")
    x = args["X"]
    if not _broadcasts(out.dims, list(x.shape)):
        raise ValueError(f"reduction: X dims {list(x.shape)} do not reduce to Y dims {out.dims}")
    dims = [i for i, (d, o) in enumerate(zip(x.shape, out.dims, strict=True)) if o == 1 and d != 1]
    return mode(x, dims) if dims else x


NODE_KINDS: dict[str, Callable[[ir.Node, dict[str, Tensor], ir.Tensor], Tensor]] = {
    "conv_fprop": _conv_fprop,
    "matmul": _matmul,
    "pointwise": _pointwise,
    "reduction": _reduction,
}


# -- the graph ---------------------------------------------------------------------


def run(graph: ir.Graph, inputs: Sequence[Tensor]) -> list[Tensor]:
    """Execute `graph` on `inputs` (the group's port order); the outputs in port
    order, each laid out with its IR dims and strides."""
    ir.validate(graph)
    return _execute(graph, inputs)


def executor(desc: str) -> Callable[[Sequence[Tensor]], list[Tensor]]:
    """A FusionGroup executor over the interpreter: `desc` (the IR JSON) is
    parsed and validated once, not per call. Like cuDNN's executor with a plan
    it has not probed, it declines a run (returns no outputs, so the kernel runs
    it unfused) where an input the mapping assumes finite, one past the ports,
    is not: this computes cuDNN's semantics (a relu in float clips +inf)."""
    graph = ir.Graph.from_json(desc)
    ports = len(graph.inputs)

    def execute(inputs: Sequence[Tensor]) -> list[Tensor]:
        if not all(bool(x.isfinite().all()) for x in inputs[ports:]):
            return []
        return _execute(graph, inputs[:ports])
    return execute


def _execute(graph: ir.Graph, inputs: Sequence[Tensor]) -> list[Tensor]:
    if len(inputs) != len(graph.inputs):
        raise ValueError(f"the IR takes {len(graph.inputs)} inputs, got {len(inputs)}")
    compute = TORCH_DTYPES[graph.compute_dtype]
    specs = {t.id: t for t in graph.tensors}
    # Each tensor's value, rounded to its own dtype.
    values = {tid: _read(specs[tid], x) for tid, x in zip(graph.inputs, inputs, strict=True)}
    for node in graph.nodes:
        if len(node.outputs) != 1:
            raise ValueError(f"{node.op}: {len(node.outputs)} outputs, cuDNN's nodes have one")
        out = specs[next(iter(node.outputs.values()))]
        args = {port: values[tid].to(compute) for port, tid in node.inputs.items()}
        result = NODE_KINDS[node.op](node, args, out)
        values[out.id] = result.to(TORCH_DTYPES[out.dtype])
    return [_write(specs[tid], values[tid]) for tid in graph.outputs]
