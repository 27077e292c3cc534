"""Differential fuzzer: random module DAGs, fused vs eager PyTorch.

A `Case` is a small program (a list of `Op`s, each applied to earlier values) over
one to three graph inputs, plus how the inputs are laid out (contiguous,
channels_last, transposed, offset, strided; NaN/inf at given positions) and a
second input shape. `generate(chooser, dtype)` builds a valid case: it runs every
candidate op eagerly on the case's own inputs as it goes, so shapes, dtypes and
in-place legality are those of real execution, and it keeps an op only where its
result is numerically well-conditioned (see `_admissible`). `check_case(case)`
traces and freezes the program, runs it twice to profile with torch_graphfuse
on, and compares the third call and a call at the second shape with eager:
output structure, shapes, dtypes, values, NaN/inf positions, storage aliasing
and the inputs after the call. A difference the unfused TorchScript shows too is
TorchScript's, not the plugin's.

Long mode (the CLI; failures minimized and printed with a reproducer):

    python -m torch_graphfuse.testing.fuzz --graphs 5000 --seed 0 --dtype both
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import math
import multiprocessing
import random
import re
import resource
import sys
import time
import traceback
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.runner import precision

T = TypeVar("T")
Tensor = torch.Tensor

MAX_NUMEL = 4096  # per value: keeps a graph well under a second
MAX_INPUT_NUMEL = 1536
SPECIALS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
CAUSES = ("exception", "structure", "shape", "dtype", "nan", "aliasing", "values")
CAUSE_TITLES = {"exception": "exception", "structure": "output structure", "shape": "shape",
                "dtype": "dtype", "nan": "NaN/inf positions", "aliasing": "aliasing",
                "values": "values"}


# --------------------------------------------------------------------------- spec

@dataclass
class Input:
    """A graph input: its shape at the profiled calls and (if any) at the call
    with a new shape, its memory layout, and NaN/inf written at flat positions
    (in every call, or only in the calls after profiling: `late`)."""

    shape: tuple[int, ...]
    shape2: tuple[int, ...] | None = None
    layout: str = "contiguous"
    specials: tuple[tuple[int, str], ...] = ()
    late: bool = False


@dataclass
class Op:
    """One op application: `kind` on the values `args` (inputs first, then one
    value per op), with attributes. Layers and constants are seeded by attrs["seed"]."""

    kind: str
    args: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    dtype: str  # "fp32", or "bf16" (eager autocast)
    inputs: list[Input]
    ops: list[Op]
    outputs: list[int]
    data_seed: int = 0

    @property
    def has_second(self) -> bool:
        return any(i.shape2 is not None for i in self.inputs)


def value_name(case_inputs: int, index: int) -> str:
    return f"x{index}" if index < case_inputs else f"v{index}"


# ------------------------------------------------------------------------ choosers

class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """Choices from a seeded `random.Random` (the CLI)."""

    def __init__(self, seed: object) -> None:
        self.rng = random.Random(str(seed))

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class DrawChooser:
    """Choices drawn by hypothesis, so that it shrinks the program itself."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st
        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(self.st.integers(lo, hi)))


# Everything below draws through these, so both choosers shrink/replay alike:
# the first option is the simplest (hypothesis shrinks toward it).
def choice(c: Chooser, options: Sequence[T]) -> T:
    return options[c.integer(0, len(options) - 1)]


def chance(c: Chooser, p: float) -> bool:
    return c.integer(0, 99) >= 100 - round(100 * p)


def weighted(c: Chooser, options: Sequence[tuple[T, int]]) -> T:
    r = c.integer(0, sum(w for _, w in options) - 1)
    for item, w in options:
        if r < w:
            return item
        r -= w
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------ op kinds

@dataclass(frozen=True)
class Kind:
    render: Callable[[Op, list[str], str], str]  # (op, arg names, layer name) -> expression
    aten: tuple[str, ...]  # the aten ops it traces to (README coverage)
    exact: bool = False  # bit-exact in any correct implementation, given exact inputs
    inplace: bool = False


KINDS: dict[str, Kind] = {}


_DTYPE_NAMES = {torch.bfloat16: "torch.bfloat16", torch.float32: "torch.float32"}


def _lit(v: object) -> str:
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
           "reciprocal", "erf"):
    _kind(_n, f"torch.{_n}({{0}})", exact=_n in ("relu", "abs", "round"))
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
_kind("floor_divide", "torch.floor_divide({0}, {divisor})", exact=True)
_kind("cumsum", "torch.cumsum({0}, {dim})")
_kind("flip", "torch.flip({0}, {dims})", exact=True)
_kind("max_pool2d", "F.max_pool2d({0}, {kernel}, {stride}, {padding}, {dilation}, "
      "ceil_mode={ceil_mode})", exact=True)
_kind("avg_pool2d", "F.avg_pool2d({0}, {kernel}, {stride}, {padding}, ceil_mode={ceil_mode}, "
      "count_include_pad={count_include_pad})")
_kind("adaptive_avg_pool2d", "F.adaptive_avg_pool2d({0}, {size})")
_kind("permute", "{0}.permute({dims})", exact=True)
_kind("transpose", "{0}.transpose({d0}, {d1})", exact=True)
_kind("t", "{0}.t()", exact=True)
_kind("flatten", "{0}.flatten({start}, {end})", exact=True)
_kind("squeeze", "{0}.squeeze({dim})", exact=True)
_kind("unsqueeze", "{0}.unsqueeze({dim})", exact=True)
_kind("contiguous", "{0}.contiguous()", exact=True)
_kind("to", "{0}.to({dtype})", exact=True)
_kind("matmul", "torch.matmul({0}, {1})")
_kind("mm", "torch.mm({0}, {1})")
_kind("bmm", "torch.bmm({0}, {1})")
_kind("addmm", "torch.addmm({0}, {1}, {2}, beta={beta}, alpha={alpha})")
for _n, _aten in (("conv1d", "conv1d"), ("conv2d", "conv2d"), ("conv3d", "conv3d"),
                  ("linear", "linear"), ("batch_norm", "batch_norm"),
                  ("layer_norm", "layer_norm")):
    _kind(_n, "{layer}({0})", aten=[_aten])
_kind("const", "{layer}", aten=[])
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


# -------------------------------------------------------------------------- layers

def _fill(module: nn.Module, seed: int, fan_in: int) -> None:
    """Seeded weights (the global RNG is left alone), scaled to keep magnitudes ~1."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * fan_in ** -0.5)


def _batch_norm(a: dict[str, Any]) -> nn.Module:
    bn = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[a["rank"]]
    m = bn(a["channels"])
    g = torch.Generator().manual_seed(a["seed"])
    c = a["channels"]
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(c, generator=g))
        m.bias.copy_(0.3 * torch.randn(c, generator=g))
        m.running_mean.copy_(0.5 * torch.randn(c, generator=g))
        m.running_var.copy_(0.5 + torch.rand(c, generator=g))
    return m


def make_layer(op: Op) -> nn.Module | None:
    a = op.attrs
    if op.kind.startswith("conv"):
        conv = {"conv1d": nn.Conv1d, "conv2d": nn.Conv2d, "conv3d": nn.Conv3d}[op.kind]
        m = conv(a["cin"], a["cout"], a["kernel"], a["stride"], a["padding"], a["dilation"],
                 a["groups"], a["bias"])
        _fill(m, a["seed"], a["cin"] // a["groups"] * math.prod(a["kernel"]))
        return m
    if op.kind == "linear":
        m = nn.Linear(a["fin"], a["fout"], a["bias"])
        _fill(m, a["seed"], a["fin"])
        return m
    if op.kind == "batch_norm":
        return _batch_norm(a)
    if op.kind == "layer_norm":
        m = nn.LayerNorm(a["dim"], elementwise_affine=a["affine"])
        if a["affine"]:
            _fill(m, a["seed"], 1)
            with torch.no_grad():
                m.weight.add_(1.0)
        return m
    return None


def make_constant(op: Op) -> Tensor:
    """Away from zero (a divisor must be) with both signs."""
    g = torch.Generator().manual_seed(op.attrs["seed"])
    shape = op.attrs["shape"]
    sign = torch.randint(0, 2, shape, generator=g) * 2 - 1
    return sign * (0.5 + torch.rand(shape, generator=g))


_GLOBALS = {"torch": torch, "F": F}


class Program(nn.Module):
    """The case as an nn.Module: forward runs each op's Python expression in order."""

    def __init__(self, n_inputs: int, ops: Sequence[Op] = (), outputs: Sequence[int] = ()) -> None:
        super().__init__()
        self.n_inputs = n_inputs
        self.lines: list[tuple[str, str, Any]] = []  # (name, source, code)
        self.outputs = list(outputs)
        for op in ops:
            self.add_op(op)

    def name(self, index: int) -> str:
        return value_name(self.n_inputs, index)

    def add_op(self, op: Op) -> str:
        index = self.n_inputs + len(self.lines)
        if op.kind == "const":
            self.register_buffer(f"c{index}", make_constant(op))
        elif "reuse" not in op.attrs and (layer := make_layer(op)) is not None:
            self.add_module(f"m{index}", layer)
        src = render(op, [self.name(i) for i in op.args], index)
        self.lines.append((self.name(index), src, compile(src, f"<{self.name(index)}>", "eval")))
        return src

    def pop_op(self) -> None:
        name = self.lines.pop()[0]
        for attr in (f"c{name[1:]}", f"m{name[1:]}"):
            if hasattr(self, attr):
                delattr(self, attr)

    def step(self, env: dict[str, Any], i: int) -> Tensor:
        name, _, code = self.lines[i]
        env[name] = eval(code, _GLOBALS, env)
        return env[name]

    def forward(self, *xs: Tensor) -> Tensor | tuple[Tensor, ...]:
        env: dict[str, Any] = {self.name(i): x for i, x in enumerate(xs)}
        env["self"] = self
        for i in range(len(self.lines)):
            self.step(env, i)
        outs = tuple(env[self.name(v)] for v in self.outputs)
        return outs[0] if len(outs) == 1 else outs

    def source(self) -> str:
        args = ", ".join(self.name(i) for i in range(self.n_inputs))
        lines = [f"def forward(self, {args}):"]
        for name, src, _ in self.lines:
            lines.append(f"    {name} = {src}")
        lines.append(f"    return {', '.join(self.name(v) for v in self.outputs)}")
        return "\n".join(lines)


def build_program(case: Case) -> Program:
    return Program(len(case.inputs), case.ops, case.outputs).eval()


# -------------------------------------------------------------------------- inputs

def _base(shape: tuple[int, ...], layout: str, g: torch.Generator) -> Tensor:
    if layout == "channels_last" and len(shape) == 4:
        return torch.randn(shape, generator=g).contiguous(memory_format=torch.channels_last)
    if layout == "transposed" and len(shape) >= 2:
        swapped = (*shape[:-2], shape[-1], shape[-2])
        return torch.randn(swapped, generator=g).transpose(-1, -2)
    if layout == "offset":
        n = math.prod(shape)
        return torch.randn(n + 3, generator=g)[3:].view(shape)
    if layout == "strided" and len(shape) >= 1:
        return torch.randn((*shape[:-1], 2 * shape[-1]), generator=g)[..., ::2]
    return torch.randn(shape, generator=g)


def make_input(spec: Input, second: bool, seed: int, profiling: bool = False) -> Tensor:
    shape = spec.shape2 if second and spec.shape2 is not None else spec.shape
    t = _base(tuple(shape), spec.layout, torch.Generator().manual_seed(seed))
    n = t.numel()
    for pos, what in spec.specials:
        if n and not (profiling and spec.late):
            idx = torch.unravel_index(torch.tensor(pos % n), t.shape) if t.dim() else ()
            t[tuple(int(i) for i in idx)] = SPECIALS[what]
    return t


def make_inputs(case: Case, second: bool = False, profiling: bool = False) -> list[Tensor]:
    """Fresh inputs, identical each time (each call mutates its own copy)."""
    return [make_input(spec, second, case.data_seed * 16 + i + (8 if second else 0), profiling)
            for i, spec in enumerate(case.inputs)]


def describe_input(spec: Input) -> str:
    text = f"{tuple(spec.shape)} {spec.layout}"
    if spec.specials:
        text += ", " + ", ".join(f"{w} at flat {p}" for p, w in spec.specials)
        if spec.late:
            text += " (after profiling)"
    if spec.shape2 is not None:
        text += f"; new shape {tuple(spec.shape2)}"
    return text


# ------------------------------------------------------------------ eager evaluation

@dataclass
class Meta:
    """What the comparison needs to know of a value: bit-exact, touched by bf16,
    the largest finite magnitude on its way (absolute error scales with it) and
    how many rounding ops it went through."""

    exact: bool = True
    lowp: bool = False
    scale: float = 1.0
    depth: int = 0
    dep: bool = True  # depends on a graph input
    grid: bool = False  # eager rounded it to bf16 and changed it only exactly since

    def merge(self, other: Meta) -> Meta:
        return Meta(self.exact and other.exact, self.lowp or other.lowp,
                    max(self.scale, other.scale), max(self.depth, other.depth),
                    self.dep or other.dep, self.grid and other.grid)


def finite_max(t: Tensor) -> float:
    if not t.is_floating_point() or t.numel() == 0:
        return 0.0
    a = t.detach().float().abs()
    a = a[torch.isfinite(a)]
    return float(a.max()) if a.numel() else 0.0


def storage(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


class Evaluator:
    """Runs a program op by op on concrete inputs, keeping a `Meta` per value."""

    def __init__(self, program: Program, inputs: list[Tensor]) -> None:
        self.program = program
        self.env: dict[str, Any] = {program.name(i): x for i, x in enumerate(inputs)}
        self.env["self"] = program
        self.values: list[Tensor] = list(inputs)
        self.meta = [Meta(scale=max(1.0, finite_max(x))) for x in inputs]
        self.const_storages: set[int] = set()

    def run(self, op: Op) -> Tensor:
        """Apply the program's next op (already added to it); raises if eager
        does or if the result is not a floating tensor of bounded size."""
        i = len(self.values) - self.program.n_inputs
        out = self.program.step(self.env, i)
        if not isinstance(out, Tensor) or not out.is_floating_point():
            raise ValueError("not a floating tensor")
        if out.numel() > MAX_NUMEL or out.numel() == 0:
            raise ValueError("size out of bounds")
        args = [self.meta[a] for a in op.args]
        exact = op_exact(op)
        meta = Meta(exact and all(m.exact for m in args),
                    out.dtype == torch.bfloat16 or any(m.lowp for m in args),
                    max([max(1.0, finite_max(out))] + [m.scale for m in args]),
                    max([m.depth for m in args], default=0) + (not exact),
                    any(m.dep for m in args),
                    out.dtype == torch.bfloat16 or (exact and op.kind != "floor_divide"
                                                    and bool(args) and all(m.grid for m in args)))
        self.values.append(out)
        self.meta.append(meta)
        if op.kind == "const":
            self.const_storages.add(storage(out))
        if KINDS[op.kind].inplace:
            self._merge_aliases(out, meta)
        return out

    def _merge_aliases(self, out: Tensor, meta: Meta) -> None:
        """An in-place op changed every value sharing its storage."""
        s = storage(out)
        for j, v in enumerate(self.values):
            if storage(v) == s:
                self.meta[j] = self.meta[j].merge(meta)

    def pop(self) -> None:
        self.values.pop()
        self.meta.pop()




# ----------------------------------------------------------------- conditioning

# Thresholds against the error a correct fused result may carry (relative to
# `Meta.scale`): an op whose result jumps or blows up within that error of its
# input would turn legitimate rounding differences into false failures.
_MARGIN = {False: 1e-2, True: 0.25}
_NEAR_ZERO = ("log", "sqrt", "reciprocal")


def _margin(m: Meta) -> float:
    return _MARGIN[m.lowp] * m.scale


def _min_abs(t: Tensor) -> float:
    a = t.detach().float().abs()
    a = a[torch.isfinite(a)]
    return float(a.min()) if a.numel() else math.inf


def _away_from_zero(t: Tensor, m: Meta) -> bool:
    return m.exact or _min_abs(t) >= _margin(m)


def _softplus_ok(op: Op, x: Tensor, m: Meta) -> bool:
    beta, threshold = op.attrs["beta"], op.attrs["threshold"]
    if m.exact or math.log1p(math.exp(-threshold)) / beta < 1e-6:
        return True
    return _min_abs(x - threshold / beta) >= _margin(m)


def _layer_norm_ok(x: Tensor, m: Meta) -> bool:
    """1/std amplifies the input's error: rows must not be near-constant."""
    if x.shape[-1] < 2:
        return False
    xf = x.detach().float()
    xf = torch.where(torch.isfinite(xf), xf, 0.0)
    return float(xf.std(-1).min()) >= _margin(m)


def _admissible(op: Op, args: list[Tensor], metas: list[Meta]) -> bool:
    """Whether the op, applied to these concrete values, is well-conditioned."""
    k, a = op.kind, op.attrs
    if k in ("round", "floor_divide"):
        return metas[0].exact
    if k in _NEAR_ZERO or (k == "pow" and float(a["exponent"]) not in (1.0, 2.0, 3.0)):
        return _away_from_zero(args[0], metas[0])
    if k in ("div", "div_") and "scalar" not in a:
        return _away_from_zero(args[1], metas[1])
    if k == "div" and a.get("reverse"):
        return _away_from_zero(args[0], metas[0])
    if k == "exp":
        return metas[0].exact or float(args[0].float().nan_to_num(0, 0, 0).max()) <= 10
    if k == "pow":
        return finite_max(args[0]) <= 30
    if k == "softplus":
        return _softplus_ok(op, args[0], metas[0])
    if k == "layer_norm":
        return _layer_norm_ok(args[0], metas[0])
    return True


# ------------------------------------------------------------------------ generator

class Reject(Exception):
    """The candidate op does not fit: the generator picks another."""


class Gen:
    """Builds a case op by op, running each candidate on the concrete inputs at
    both shapes and keeping it only if eager accepts it and it is admissible."""

    def __init__(self, c: Chooser, dtype: str) -> None:
        self.c, self.dtype = c, dtype
        self.inputs = gen_inputs(c)
        self.data_seed = c.integer(0, 1 << 16)
        self.ops: list[Op] = []
        self._restart()

    # -- evaluation ---------------------------------------------------------
    def _case(self, outputs: Sequence[int] = ()) -> Case:
        return Case(self.dtype, self.inputs, list(self.ops), list(outputs), self.data_seed)

    def _restart(self) -> None:
        case = self._case()
        self.program = Program(len(self.inputs))
        seconds = [False, True] if case.has_second else [False]
        self.evals = [Evaluator(self.program, make_inputs(case, s)) for s in seconds]
        for op in self.ops:
            self.program.add_op(op)
            for ev in self.evals:
                ev.run(op)

    def emit(self, op: Op) -> int | None:
        """Append the op if it runs and is admissible at both shapes; its value id."""
        self.program.add_op(op)
        ran = 0
        try:
            for ev in self.evals:
                args = [ev.values[a] for a in op.args]
                if not _admissible(op, args, [ev.meta[a] for a in op.args]):
                    raise Reject()
                if KINDS[op.kind].inplace and self._inplace_forbidden(ev, args[0]):
                    raise Reject()
                ran += 1
                ev.run(op)
        except Exception:
            self.program.pop_op()
            if KINDS[op.kind].inplace and ran:
                self._restart()  # a partial in-place run changed the environment
            else:
                for ev in self.evals[:ran]:
                    if len(ev.values) > len(self.inputs) + len(self.ops):
                        ev.pop()
            return None
        self.ops.append(op)
        return len(self.inputs) + len(self.ops) - 1

    def _inplace_forbidden(self, ev: Evaluator, target: Tensor) -> bool:
        """Writing into a module constant would change the model between calls."""
        return storage(target) in ev.const_storages

    # -- looking at values --------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.inputs) + len(self.ops)

    def shape(self, v: int) -> tuple[int, ...]:
        return tuple(self.evals[0].values[v].shape)

    def shapes(self, v: int) -> list[tuple[int, ...]]:
        return [tuple(ev.values[v].shape) for ev in self.evals]

    def meta(self, v: int) -> Meta:
        return self.evals[0].meta[v]

    def dtype_of(self, v: int) -> torch.dtype:
        return self.evals[0].values[v].dtype

    def pick(self, pred: Callable[[int], bool] = lambda v: True, dep: bool = True) -> int | None:
        """A value satisfying `pred`, most often one of the latest (chains), else any."""
        cands = [v for v in range(self.n) if (self.meta(v).dep or not dep) and pred(v)]
        if not cands:
            return None
        if chance(self.c, 0.6):
            return cands[-1 - self.c.integer(0, min(2, len(cands) - 1))]
        return choice(self.c, cands)

    def all_finite(self, v: int) -> bool:
        return all(bool(torch.isfinite(ev.values[v]).all()) for ev in self.evals)

    def layer_ok(self, v: int) -> bool:
        """Layers hold fp32 weights: fp32 activations, or anything under autocast."""
        return self.dtype == "bf16" or self.dtype_of(v) == torch.float32

    def seed(self) -> int:
        return self.c.integer(0, 9999)

    def const(self, shape: Sequence[int]) -> int | None:
        return self.emit(Op("const", (), {"shape": tuple(shape), "seed": self.seed()}))


# -- inputs ------------------------------------------------------------------------

def _main_shape(c: Chooser) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    family = weighted(c, [("image", 6), ("seq", 3), ("flat", 2), ("volume", 1), ("vector", 1),
                          ("any", 2)])
    n = c.integer(1, 3)
    if family == "image":
        shape = (n, choice(c, [3, 1, 2, 4, 6, 8]), c.integer(1, 9), c.integer(1, 9))
    elif family == "seq":
        shape = (n, c.integer(1, 8), choice(c, [4, 1, 3, 5, 8, 16]))
    elif family == "flat":
        shape = (n, choice(c, [8, 1, 3, 5, 16, 32]))
    elif family == "volume":
        shape = (n, c.integer(1, 3), c.integer(1, 4), c.integer(1, 5), c.integer(1, 5))
    elif family == "vector":
        shape = (c.integer(1, 16),)
    else:
        shape = tuple(c.integer(1, 6) for _ in range(c.integer(1, 5)))
    if math.prod(shape) > MAX_INPUT_NUMEL:
        shape = (1, *shape[1:])
    return shape, _second_shape(c, shape, family)


def _second_shape(c: Chooser, shape: tuple[int, ...], family: str) -> tuple[int, ...] | None:
    """Another batch size, or for images another spatial size too."""
    if len(shape) < 2 or not chance(c, 0.7):
        return None
    new = list(shape)
    new[0] = choice(c, [x for x in (1, 2, 3, 4) if x != shape[0]])
    if family == "image" and chance(c, 0.4):
        new[2], new[3] = c.integer(1, 9), c.integer(1, 9)
    return tuple(new) if math.prod(new) <= MAX_INPUT_NUMEL else None


def _variant(c: Chooser, shape: tuple[int, ...], shape2: tuple[int, ...] | None
             ) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """A shape that broadcasts with the main input's: the same, some dims 1, a suffix."""
    keep = [True] * len(shape)
    if chance(c, 0.6):
        keep = [not chance(c, 0.4) for _ in shape]
    drop = c.integer(0, len(shape) - 1) if chance(c, 0.3) else 0
    a = tuple(s if k else 1 for s, k in zip(shape, keep, strict=True))[drop:]
    b = None if shape2 is None else \
        tuple(s if k else 1 for s, k in zip(shape2, keep, strict=True))[drop:]
    return a, b


def _layout(c: Chooser, rank: int) -> str:
    options = [("contiguous", 5), ("offset", 2), ("strided", 1)]
    if rank >= 2:
        options.append(("transposed", 2))
    if rank == 4:
        options.append(("channels_last", 3))
    return weighted(c, options)


def gen_inputs(c: Chooser) -> list[Input]:
    shape, shape2 = _main_shape(c)
    shapes = [(shape, shape2)]
    for _ in range(weighted(c, [(0, 5), (1, 4), (2, 1)])):
        shapes.append(_variant(c, shape, shape2))
    inputs = []
    for s, s2 in shapes:
        specials: tuple[tuple[int, str], ...] = ()
        late = False
        if chance(c, 0.3):
            at = {c.integer(0, math.prod(s) - 1): choice(c, list(SPECIALS))
                  for _ in range(c.integer(1, 3))}
            specials = tuple(sorted(at.items()))
            # Profiled on finite numbers, called with NaN/inf: what a
            # mapping that assumes finite inputs must notice.
            late = chance(c, 0.5)
        inputs.append(Input(s, s2, _layout(c, len(s)), specials, late))
    return inputs


# -- proposers: each emits one or a few ops, or returns None -----------------------

def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _maybe_tuple(c: Chooser, values: list[int]) -> int | tuple[int, ...]:
    return values[0] if len(set(values)) == 1 and chance(c, 0.7) else tuple(values)


def p_conv(g: Gen) -> int | None:
    # Eager's own bf16 convolution spreads NaN/inf past the windows holding them
    # (in about one random conv in eight), so there the positions are no contract.
    x = g.pick(lambda v: 3 <= len(g.shape(v)) <= 5 and g.layer_ok(v)
               and (g.dtype == "fp32" or g.all_finite(v)))
    if x is None:
        return None
    shape = g.shape(x)
    nd, cin, c = len(shape) - 2, shape[1], g.c
    groups = choice(c, [1, 1, 1] + _divisors(cin)[1:])
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
    attrs = {"cin": cin, "cout": groups * choice(c, [1, 2, 3, 4] if groups > 1 else [4, 2, 8]),
             "kernel": tuple(kernel), "stride": _maybe_tuple(c, stride),
             "padding": _maybe_tuple(c, padding), "dilation": _maybe_tuple(c, dilation),
             "groups": groups, "bias": chance(c, 0.6), "seed": g.seed()}
    return g.emit(Op(f"conv{nd}d", (x,), attrs))


def p_linear(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1 and g.layer_ok(v))
    if x is None:
        return None
    attrs = {"fin": g.shape(x)[-1], "fout": choice(g.c, [8, 1, 3, 4, 16]),
             "bias": chance(g.c, 0.7), "seed": g.seed()}
    return g.emit(Op("linear", (x,), attrs))


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
    """q @ k^T * scale (+ mask) -> softmax -> @ v, with q, k, v linear projections."""
    x = g.pick(lambda v: len(g.shape(v)) in (3, 4) and g.layer_ok(v))
    if x is None:
        return None
    d = choice(g.c, [4, 8, 3])
    q, k, v = (g.emit(Op("linear", (x,), {"fin": g.shape(x)[-1], "fout": d, "bias": True,
                                           "seed": g.seed()})) for _ in range(3))
    if None in (q, k, v):
        return None
    kt = g.emit(Op("transpose", (k,), {"d0": -2, "d1": -1}))
    s = None if kt is None else g.emit(Op("matmul", (q, kt)))
    if s is None:
        return None
    s = g.emit(Op(choice(g.c, ["div", "mul"]), (s,), {"scalar": choice(g.c, [2.0, 0.5, 0.35])}))
    if s is not None and chance(g.c, 0.5):
        mask = g.const((1,) * (len(g.shape(s)) - 1) + (g.shape(s)[-1],))
        s = None if mask is None else g.emit(Op("add", (s, mask)))
    p = None if s is None else g.emit(Op("softmax", (s,), {"dim": -1}))
    return None if p is None else g.emit(Op("matmul", (p, v)))


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
    return g.emit(Op("layer_norm", (x,), attrs))


def p_diamond(g: Gen) -> int | None:
    """y = conv(x); bn(y) + y, or bn(conv(x)) + conv(x) (the same conv twice)."""
    y = p_conv(g)
    if y is None:
        return None
    b = g.emit(Op("batch_norm", (y,), {"channels": g.shape(y)[1], "rank": len(g.shape(y)),
                                        "seed": g.seed()}))
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
        sizes = [choice(g.c, [s, 1, *_divisors(s), s + 1]) for s in (h, w)]
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


_UNARY: list[tuple[str, Callable[[Chooser], dict[str, Any]]]] = [
    ("relu", lambda c: {}), ("sigmoid", lambda c: {}), ("tanh", lambda c: {}),
    ("exp", lambda c: {}), ("log", lambda c: {}), ("sqrt", lambda c: {}), ("abs", lambda c: {}),
    ("square", lambda c: {}), ("round", lambda c: {}), ("reciprocal", lambda c: {}),
    ("hardswish", lambda c: {}), ("mish", lambda c: {}), ("relu6", lambda c: {}),
    ("hardsigmoid", lambda c: {}), ("silu", lambda c: {}),
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
    if out is None and (kind in _NEAR_ZERO or kind == "pow") and chance(g.c, 0.7):
        p = _positive(g, x)
        out = None if p is None else g.emit(dataclasses.replace(op, args=(p,)))
    return out


def p_softmax(g: Gen) -> int | None:
    x = g.pick(lambda v: len(g.shape(v)) >= 1)
    if x is None:
        return None
    rank = len(g.shape(x))
    kind = choice(g.c, ["softmax", "log_softmax"])
    return g.emit(Op(kind, (x,), {"dim": g.c.integer(-rank, rank - 1)}))


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
    return all(_away_from_zero(ev.values[v], ev.meta[v]) for ev in g.evals)


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
    ks = [k for k in _divisors(shape[i]) if 1 < k < shape[i]]
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
                                        "squeeze", "unsqueeze", "contiguous"]))


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
    return None


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


PROPOSERS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_unary, 16), (p_binary, 14), (p_conv, 9), (p_linear, 5), (p_matmul, 4), (p_addmm, 2),
    (p_attention, 1), (p_batch_norm, 3), (p_layer_norm, 3), (p_diamond, 2), (p_pool, 5),
    (p_mean, 3), (p_cat, 3), (p_softmax, 3), (p_shape, 8), (p_identity, 3), (p_cast, 3),
    (p_inplace, 7), (p_unsupported, 4),
]


def _sinks(g: Gen) -> list[int]:
    used = {a for op in g.ops for a in op.args}
    return [v for v in range(len(g.inputs), g.n) if v not in used and g.meta(v).dep]


def _outputs(g: Gen) -> list[int]:
    """The last value, more sinks, sometimes an intermediate (views and identities too)."""
    cands = [v for v in range(len(g.inputs), g.n) if g.meta(v).dep]
    if not cands:
        return []
    sinks = _sinks(g) or [cands[-1]]
    outs = [sinks[-1]]
    for _ in range(g.c.integer(0, 2)):
        outs.append(choice(g.c, sinks) if chance(g.c, 0.6) else choice(g.c, cands))
    return list(dict.fromkeys(outs))


ANCHORS: list[tuple[Callable[[Gen], int | None], int]] = [
    (p_conv, 5), (p_linear, 3), (p_matmul, 2), (p_addmm, 1), (p_attention, 1), (p_pool, 2),
    (p_batch_norm, 1), (p_layer_norm, 1), (p_diamond, 2), (p_binary, 3),
]


def generate(c: Chooser, dtype: str = "fp32", max_steps: int = 10) -> Case:
    """A random valid case (a program with at least one op, on input-dependent outputs).
    It starts with an op that fusion groups form around more often than not."""
    with torch.no_grad(), precision(dtype), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = Gen(c, dtype)
        for step in range(c.integer(1, max_steps)):
            table = ANCHORS if step == 0 and chance(c, 0.6) else PROPOSERS
            for _attempt in range(4):
                if weighted(c, table)(g) is not None:
                    break
        outputs = _outputs(g)
        if not outputs:  # nothing input-dependent fitted: a relu always does
            outputs = [g.emit(Op("relu", (0,)))]  # type: ignore[list-item]
        return g._case(outputs)


def cases(dtype: str, structural: bool = False, max_steps: int = 10) -> Any:
    """A hypothesis strategy over the same generator: by default a drawn seed for
    the CLI's chooser (the CLI's mix of graphs); structural, every choice is
    drawn, so that hypothesis shrinks the program itself (its bias toward small
    draws makes smaller graphs that fuse less often)."""
    from hypothesis import strategies as st

    @st.composite  # hypothesis prints what a composite returns: the Case
    def strategy(draw: Callable[[Any], Any]) -> Case:
        c: Chooser = DrawChooser(draw) if structural else \
            RandomChooser(f"hypothesis:{draw(st.integers(0, 2**32 - 1))}:{dtype}")
        return generate(c, dtype, max_steps)
    return strategy()


# -------------------------------------------------------------------------- checker

@dataclass
class Problem:
    cause: str  # one of CAUSES
    where: str  # "call 3 output 0", "new shape input 1", ...
    detail: str

    def key(self) -> tuple[str, str]:
        return self.cause, self.where

    def __str__(self) -> str:
        return f"[{self.cause}] {self.where}: {self.detail}"


@dataclass
class Result:
    status: str  # "pass", "plugin" (a failure), "torchscript" (only), "invalid"
    groups: int = 0
    problems: list[Problem] = field(default_factory=list)  # the plugin's
    torchscript: list[Problem] = field(default_factory=list)  # unfused TorchScript's too
    reason: str = ""  # why invalid
    warnings: list[str] = field(default_factory=list)

    @property
    def cause(self) -> str:
        causes = {p.cause for p in self.problems}
        return next((c for c in CAUSES if c in causes), "")


@dataclass
class Outcome:
    """One call: the outputs and the inputs afterwards, or the error."""

    outputs: list[Tensor] | None = None
    tuple_out: bool = False
    inputs: list[Tensor] = field(default_factory=list)
    error: str = ""


def _outcome(fn: Callable[..., Any], inputs: list[Tensor]) -> Outcome:
    try:
        out = fn(*inputs)
    except Exception as e:
        return Outcome(error=_short_error(e))
    outs = list(out) if isinstance(out, tuple) else [out]
    return Outcome(outs, isinstance(out, tuple), inputs)


def _short_error(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    # TorchScript errors carry the whole traceback; the last line says what failed.
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:400]


def tolerance(meta: Meta) -> tuple[float, float]:
    """(rtol, atol) for a value; none for a bit-exact one.

    fp32: rtol 1e-4, atol 1e-5 times the largest magnitude on the value's way
    (after a cancellation the absolute error is relative to the operands, not
    to the result), widened by an eighth per rounding op on the way (oneDNN sums
    in another order and keeps fused intermediates in registers). bf16 (the
    value or one on its way was bf16): 2e-2 of the same, widened by a quarter
    per op (each bf16 rounding adds up to 2^-8, and oneDNN keeps fused
    intermediates in fp32 where eager rounds each)."""
    if meta.exact:
        return 0.0, 0.0
    if meta.lowp:
        slack = 1 + meta.depth / 4
        return 2e-2 * slack, 2e-2 * slack * meta.scale
    slack = 1 + meta.depth / 8
    return 1e-4 * slack, 1e-5 * slack * meta.scale


def _first_index(mask: Tensor) -> list[int]:
    return [int(i) for i in mask.nonzero()[0]] if mask.any() else []


def compare_tensor(where: str, got: Tensor, ref: Tensor, meta: Meta) -> list[Problem]:
    if not isinstance(got, Tensor):
        return [Problem("structure", where, f"{type(got).__name__} instead of a tensor")]
    if tuple(got.shape) != tuple(ref.shape):
        return [Problem("shape", where, f"{tuple(got.shape)} vs eager {tuple(ref.shape)}")]
    if got.dtype != ref.dtype:
        return [Problem("dtype", where, f"{got.dtype} vs eager {ref.dtype}")]
    g, r = got.detach().double(), ref.detach().double()
    problems = []
    for name, fn in (("NaN", torch.isnan), ("+inf", torch.isposinf), ("-inf", torch.isneginf)):
        diff = fn(g) != fn(r)
        if diff.any():
            i = _first_index(diff)
            problems.append(Problem("nan", where, f"{name} at {int(diff.sum())} positions "
                                    f"differ, first {i}: got {g[tuple(i)].item()}, eager "
                                    f"{r[tuple(i)].item()}"))
    if meta.grid and got.dtype == torch.float32:
        problems += _off_grid(where, got)
    rtol, atol = tolerance(meta)
    finite = torch.isfinite(g) & torch.isfinite(r)
    err = torch.where(finite, (g - r).abs() - (atol + rtol * r.abs()), 0.0)
    if (err > 0).any():
        i = _first_index(err == err.max())
        problems.append(Problem("values", where, f"{int((err > 0).sum())} of {g.numel()} beyond "
                                f"rtol={rtol:.1e} atol={atol:.1e}; worst at {i}: got "
                                f"{g[tuple(i)].item():.6g}, eager {r[tuple(i)].item():.6g}"))
    return problems


def _off_grid(where: str, got: Tensor) -> list[Problem]:
    """Eager rounded this fp32 value through bf16 (then only exact ops): a fused
    result must be on the bf16 grid too. Half a bf16 ulp of missed rounding is
    inside any bf16 tolerance; this catches it exactly."""
    g = got.detach()
    off = (g.bfloat16().float() != g) & ~torch.isnan(g)
    if not off.any():
        return []
    i = _first_index(off)
    return [Problem("values", where, f"{int(off.sum())} values not representable in bf16 "
                    f"(eager rounds them through bf16), first {i}: {g[tuple(i)].item():.9g}")]


def _aliasing(o: Outcome) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Per output, the inputs and the earlier outputs it shares storage with."""
    ins = [storage(x) for x in o.inputs]
    outs = [storage(t) if isinstance(t, Tensor) else -1 for t in o.outputs or []]
    return [(tuple(i for i, s in enumerate(ins) if s == p),
             tuple(j for j, s in enumerate(outs[:k]) if s == p)) for k, p in enumerate(outs)]


def compare_call(where: str, got: Outcome, ref: Outcome, out_meta: list[Meta],
                 in_meta: list[Meta]) -> list[Problem]:
    if got.error:
        return [Problem("exception", where, got.error)]
    assert got.outputs is not None and ref.outputs is not None
    if got.tuple_out != ref.tuple_out or len(got.outputs) != len(ref.outputs):
        return [Problem("structure", where, f"{len(got.outputs)} outputs "
                        f"(tuple: {got.tuple_out}) vs eager {len(ref.outputs)} "
                        f"(tuple: {ref.tuple_out})")]
    problems = []
    for j, (a, b) in enumerate(zip(got.outputs, ref.outputs, strict=True)):
        problems += compare_tensor(f"{where} output {j}", a, b, out_meta[j])
    for i, (a, b) in enumerate(zip(got.inputs, ref.inputs, strict=True)):
        problems += compare_tensor(f"{where} input {i} after the call", a, b, in_meta[i])
    if (ga := _aliasing(got)) != (ra := _aliasing(ref)):
        problems.append(Problem("aliasing", where, f"(inputs, earlier outputs) each output "
                                f"shares storage with: {ga} vs eager {ra}"))
    return problems


CALLS = (("call 3", False), ("new shape", True))


@dataclass
class Reference:
    outcomes: list[Outcome]
    out_meta: list[list[Meta]]
    in_meta: list[list[Meta]]


def _reference(case: Case, program: Program) -> Reference:
    """Eager outputs from the nn.Module itself, and each value's Meta."""
    calls = CALLS if case.has_second else CALLS[:1]
    outcomes, out_meta, in_meta = [], [], []
    for _, second in calls:
        with torch.no_grad(), precision(case.dtype):
            o = _outcome(program, make_inputs(case, second))
            if o.error:
                raise RuntimeError(o.error)
            ev = Evaluator(program, make_inputs(case, second))
            for op in case.ops:
                ev.run(op)
        outcomes.append(o)
        out_meta.append([ev.meta[v] for v in case.outputs])
        in_meta.append(ev.meta[:len(case.inputs)])
    return Reference(outcomes, out_meta, in_meta)


def compile_program(case: Case, program: Program) -> torch.jit.ScriptModule:
    with torch.no_grad(), precision(case.dtype), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(program, tuple(make_inputs(case)), check_trace=False)
        return torch.jit.freeze(traced.eval())


@contextlib.contextmanager
def memory_cap(extra: int = 4 << 30) -> Iterator[None]:
    """A fused call that allocates without bound raises (std::bad_alloc) instead
    of taking the machine's memory: address space capped at its current size + extra."""
    status = open("/proc/self/status").read()
    vm = int(re.search(r"VmSize:\s+(\d+)", status).group(1)) * 1024  # type: ignore[union-attr]
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def run_compiled(case: Case, module: torch.jit.ScriptModule, enabled: bool
                 ) -> tuple[list[Outcome], int, list[str]]:
    """Two profiling runs, the third call, a call at the new shape (fusion on or
    off throughout); the outcomes, the fusion groups formed, the warnings."""
    outcomes, groups = [], 0
    with torch.no_grad(), precision(case.dtype), torch_graphfuse.fuser(enabled), \
            memory_cap(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(runner.PROFILING_RUNS):
            o = _outcome(module, make_inputs(case, profiling=True))
            if o.error:
                return [dataclasses.replace(o, error=f"profiling run: {o.error}")], 0, []
        for name, second in CALLS if case.has_second else CALLS[:1]:
            outcomes.append(_outcome(module, make_inputs(case, second)))
            if name == "call 3":
                groups = len(runner.fusion_groups(torch.jit.last_executed_optimized_graph()))
    return outcomes, groups, sorted({str(w.message)[:200] for w in caught
                                     if "graphfuse" in str(w.message).lower()})


def _problems(ref: Reference, outcomes: list[Outcome]) -> list[Problem]:
    problems = []
    for k, o in enumerate(outcomes):
        problems += compare_call(CALLS[k][0], o, ref.outcomes[k], ref.out_meta[k],
                                 ref.in_meta[k])
    return problems


def check_case(case: Case) -> Result:
    """Fused vs eager; a difference the unfused TorchScript shows too is not the plugin's."""
    program = build_program(case)
    try:
        ref = _reference(case, program)
    except Exception as e:
        return Result("invalid", reason=f"eager: {_short_error(e)}")
    try:
        module = compile_program(case, program)
    except Exception as e:
        return Result("invalid", reason=f"trace: {_short_error(e)}")
    outcomes, groups, warned = run_compiled(case, module, True)
    del module
    fused = _problems(ref, outcomes)
    if not fused:
        return Result("pass", groups, warnings=warned)
    plain, _, _ = run_compiled(case, compile_program(case, program), False)
    unfused = _problems(ref, plain)
    excused = {p.key() for p in unfused}
    failed_calls = {p.where for p in unfused if p.cause == "exception"}
    plugin = [p for p in fused if p.key() not in excused
              and not any(p.where.startswith(w) for w in failed_calls)]
    status = "plugin" if plugin else "torchscript"
    return Result(status, groups, plugin, [p for p in fused if p not in plugin], warnings=warned)


def check(case: Case) -> Result:
    """check_case, then give the plugin's pooled buffers back."""
    try:
        return check_case(case)
    finally:
        torch_graphfuse.release_buffers()


# ------------------------------------------------------------------------ reporting

def describe(case: Case) -> str:
    """A readable reproducer: the forward as Python, layers, inputs."""
    program = build_program(case)
    lines = [f"# dtype {case.dtype}" + (" (eager autocast)" if case.dtype == "bf16" else "")]
    for i, spec in enumerate(case.inputs):
        lines.append(f"# x{i}: {describe_input(spec)}")
    for name, module in program.named_children():
        lines.append(f"# self.{name} = {module}")
    for name, buf in program.named_buffers():
        if "." not in name:
            lines.append(f"# self.{name}: constant {tuple(buf.shape)}")
    lines.append(program.source())
    return "\n".join(lines)


def reproducer(case: Case, result: Result | None = None) -> str:
    text = describe(case)
    if result is not None:
        text += "\n" + "\n".join(f"# {p}" for p in result.problems)
    return (text + '\n# replay: python -c "from torch_graphfuse.testing.fuzz import *; '
            f'print(check_case({case!r}))"')


# ------------------------------------------------------------------------ minimizer

def _remap(case: Case, ops: Sequence[Op], remap: Callable[[int], int]) -> list[Op]:
    return [dataclasses.replace(o, args=tuple(remap(a) for a in o.args),
                                attrs={**o.attrs, "reuse": remap(o.attrs["reuse"])}
                                if "reuse" in o.attrs else o.attrs) for o in ops]


def _without_op(case: Case, i: int) -> Case | None:
    """The case with op i removed, its uses reading its first argument instead
    (an in-place op's target, a unary op's operand)."""
    removed, op = len(case.inputs) + i, case.ops[i]
    used = any(removed in o.args or o.attrs.get("reuse") == removed for o in case.ops)
    if used and not op.args:
        return None
    sub = op.args[0] if op.args else removed

    def remap(v: int) -> int:
        v = sub if v == removed else v
        return v - 1 if v > removed else v
    outs = list(dict.fromkeys(remap(v) for v in case.outputs))
    if any(v < len(case.inputs) for v in outs) or \
            any(o.attrs.get("reuse") == removed for o in case.ops):
        return None
    ops = _remap(case, [o for j, o in enumerate(case.ops) if j != i], remap)
    return dataclasses.replace(case, ops=ops, outputs=outs)


def _without_input(case: Case, i: int) -> Case | None:
    if len(case.inputs) == 1 or any(i in op.args for op in case.ops):
        return None

    def remap(v: int) -> int:
        return v - 1 if v > i else v
    ops = _remap(case, case.ops, remap)
    return dataclasses.replace(case, inputs=[x for j, x in enumerate(case.inputs) if j != i],
                               ops=ops, outputs=[remap(v) for v in case.outputs])


def simpler(case: Case) -> Iterator[Case]:
    """Smaller variants of a case, the biggest cuts first."""
    for v in case.outputs:
        if len(case.outputs) > 1:
            yield dataclasses.replace(case, outputs=[v])
    for i in reversed(range(len(case.ops))):
        if (c := _without_op(case, i)) is not None:
            yield c
    for i in range(len(case.inputs)):
        if (c := _without_input(case, i)) is not None:
            yield c
    for i, spec in enumerate(case.inputs):
        fewer = [spec.specials[:k] + spec.specials[k + 1:] for k in range(len(spec.specials))]
        for simpler in (dataclasses.replace(spec, shape2=None),
                        dataclasses.replace(spec, specials=()),
                        *(dataclasses.replace(spec, specials=f) for f in fewer),
                        dataclasses.replace(spec, layout="contiguous")):
            if simpler != spec:
                inputs = list(case.inputs)
                inputs[i] = simpler
                yield dataclasses.replace(case, inputs=inputs)


def still_valid(case: Case) -> bool:
    """The generator's own checks (eager runs, every op admissible) on a variant."""
    if not case.ops:
        return False
    try:
        with torch.no_grad(), precision(case.dtype), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = Program(len(case.inputs))
            for second in [False, True] if case.has_second else [False]:
                ev = Evaluator(program, make_inputs(case, second))
                for k, op in enumerate(case.ops):
                    if len(program.lines) <= k:
                        program.add_op(op)
                    args = [ev.values[a] for a in op.args]
                    if not _admissible(op, args, [ev.meta[a] for a in op.args]):
                        return False
                    ev.run(op)
            return all(ev.meta[v].dep for v in case.outputs)
    except Exception:
        return False


def minimize(case: Case, cause: str, budget: float = 60.0) -> tuple[Case, Result]:
    """Greedily drop outputs, ops, inputs and input features while the plugin
    still fails with the same cause."""
    best, result = case, check(case)
    deadline = time.monotonic() + budget
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for cand in simpler(best):
            if time.monotonic() > deadline:
                break
            if not still_valid(cand):
                continue
            r = check(cand)
            if r.status == "plugin" and r.cause == cause:
                best, result, improved = cand, r, True
                break
    return best, result


# ---------------------------------------------------------------------------- CLI

@dataclass
class Task:
    index: int
    dtype: str
    seed: int
    minimize_cause: str = ""


@dataclass
class Report:
    """What a worker sends back for one graph (plain data: it crosses processes)."""

    index: int
    dtype: str
    status: str
    groups: int = 0
    cause: str = ""
    problems: list[str] = field(default_factory=list)
    torchscript: list[str] = field(default_factory=list)
    reason: str = ""
    warnings: list[str] = field(default_factory=list)
    text: str = ""  # the reproducer
    minimized: str = ""
    seconds: float = 0.0
    crashed: bool = False  # the worker died or hung on it


def case_for(task: Task) -> Case:
    return generate(RandomChooser(f"{task.seed}:{task.index}:{task.dtype}"), task.dtype)


def run_task(task: Task) -> Report:
    start = time.monotonic()
    try:
        case = case_for(task)
    except Exception as e:
        return Report(task.index, task.dtype, "invalid", reason=f"generator: {_short_error(e)}")
    if task.minimize_cause:
        small, r = minimize(case, task.minimize_cause)
        return Report(task.index, task.dtype, r.status, r.groups, r.cause,
                      minimized=reproducer(small, r))
    r = check(case)
    report = Report(task.index, task.dtype, r.status, r.groups, r.cause,
                    [str(p) for p in r.problems], [str(p) for p in r.torchscript], r.reason,
                    r.warnings, seconds=time.monotonic() - start)
    if r.status in ("plugin", "torchscript"):
        report.text = reproducer(case, r)
    if task.index % 50 == 0:
        gc.collect()
    return report


def _worker(conn: Connection) -> None:
    while (task := conn.recv()) is not None:
        try:
            conn.send(run_task(task))
        except Exception:
            conn.send(Report(task.index, task.dtype, "plugin", cause="exception",
                             problems=[f"[exception] fuzzer: {traceback.format_exc()[-400:]}"]))


class Pool:
    """Worker processes, each running one graph at a time: a graph that crashes
    the process (a segfault in the plugin) or hangs is reported, not fatal."""

    def __init__(self, jobs: int, timeout: float, recycle: int) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.timeout, self.recycle = timeout, recycle
        self.slots: list[dict[str, Any]] = [self._spawn() for _ in range(jobs)]

    def _spawn(self) -> dict[str, Any]:
        parent, child = self.ctx.Pipe()
        proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
        proc.start()
        child.close()
        return {"proc": proc, "conn": parent, "task": None, "since": 0.0, "done": 0}

    def _restart(self, k: int) -> None:
        old = self.slots[k]
        old["proc"].kill()
        old["proc"].join()
        self.slots[k] = self._spawn()

    def run(self, tasks: list[Task], on_report: Callable[[Report], None]) -> None:
        pending = list(reversed(tasks))
        while pending or any(s["task"] for s in self.slots):
            for s in self.slots:
                if s["task"] is None and pending:
                    s["task"], s["since"] = pending.pop(), time.monotonic()
                    s["conn"].send(s["task"])
            busy = [s["conn"] for s in self.slots if s["task"]]
            ready = wait(busy, timeout=1.0)
            for k, s in enumerate(self.slots):
                if s["task"] is None:
                    continue
                report = self._collect(k, s, s["conn"] in ready)
                if report is not None:
                    on_report(report)

    def _collect(self, k: int, s: dict[str, Any], ready: bool) -> Report | None:
        task: Task = s["task"]
        if ready:
            try:
                report: Report = s["conn"].recv()
            except EOFError:
                report = self._lost(k, task, "the process died (crash)")
            else:
                s["task"], s["done"] = None, s["done"] + 1
                if s["done"] >= self.recycle:  # TorchScript keeps every traced type
                    self._restart(k)
            return report
        if time.monotonic() - s["since"] > self.timeout:
            return self._lost(k, task, f"no result within {self.timeout:.0f} s (hang)")
        return None

    def _lost(self, k: int, task: Task, why: str) -> Report:
        self._restart(k)
        return Report(task.index, task.dtype, "plugin", cause="exception",
                      problems=[f"[exception] process: {why}"], crashed=True,
                      text=f"# {why}\n# rerun: python -m torch_graphfuse.testing.fuzz "
                           f"--seed {task.seed} --index {task.index} --dtype {task.dtype}")

    def close(self) -> None:
        for s in self.slots:
            s["conn"].send(None)
            s["proc"].join(timeout=5)
            if s["proc"].is_alive():
                s["proc"].kill()


class Summary:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.reports: list[Report] = []
        self.start = time.monotonic()

    def add(self, r: Report) -> None:
        self.reports.append(r)

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.reports)

    def progress(self, total: int) -> str:
        rs = self.reports
        return (f"[{len(rs)}/{total}] {time.monotonic() - self.start:.0f} s: "
                f"{sum(r.groups for r in rs)} groups, {sum(r.groups > 0 for r in rs)} fused, "
                f"{self.count('plugin')} failures, {self.count('torchscript')} torchscript, "
                f"{self.count('invalid')} invalid")

    def failures(self) -> dict[str, list[Report]]:
        by: dict[str, list[Report]] = defaultdict(list)
        for r in self.reports:
            if r.status == "plugin":
                by[r.cause].append(r)
        return by

    def render(self, minimized: dict[tuple[str, int], str]) -> str:
        rs = self.reports
        out = [
            "=" * 78,
            f"graphs run: {len(rs)} (seed {self.seed}; "
            + ", ".join(f"{d} {sum(r.dtype == d for r in rs)}" for d in ("fp32", "bf16")) + ")",
            f"fusion groups formed: {sum(r.groups for r in rs)}",
            f"graphs with at least one fusion group: {sum(r.groups > 0 for r in rs)}",
            f"invalid graphs (eager or tracing failed; skipped): {self.count('invalid')}",
            f"TorchScript-only differences (unfused differs from eager too; not failures): "
            f"{self.count('torchscript')}",
            f"plugin failures: {self.count('plugin')}"
            + "".join(f", {CAUSE_TITLES[c]} {len(g)}" for c, g in sorted(
                self.failures().items(), key=lambda item: CAUSES.index(item[0]))),
        ]
        reasons = Counter(r.reason.split(":")[0] + ": " + r.reason[:90]
                          for r in rs if r.status == "invalid")
        out += [f"  invalid x{n}: {why}" for why, n in reasons.most_common(5)]
        out += [f"  torchscript {r.dtype}:{r.index}: {r.torchscript[0][:150]}"
                for r in rs if r.status == "torchscript" and r.torchscript][:10]
        warned = Counter(w for r in rs for w in r.warnings)
        out += [f"  plugin warning x{n}: {w}" for w, n in warned.most_common(5)]
        for cause in CAUSES:
            group = self.failures().get(cause, [])
            if group:
                out += self._render_cause(cause, group, minimized)
        return "\n".join(out)

    def _render_cause(self, cause: str, group: list[Report],
                      minimized: dict[tuple[str, int], str]) -> list[str]:
        out = ["", "-" * 78, f"{CAUSE_TITLES[cause]}: {len(group)} graphs: "
               + " ".join(f"{r.dtype}:{r.index}" for r in group),
               f"(one in detail: python -m torch_graphfuse.testing.fuzz --seed {self.seed} "
               f"--dtype DTYPE --index INDEX)", "-" * 78]
        for r in group:
            out.append(f"# graph {r.index} ({r.dtype}), seed {self.seed}: "
                       + "; ".join(p[:160] for p in r.problems[:3]))
        for r in group:
            small = minimized.get((r.dtype, r.index))
            if small:
                out += [f"## minimized from graph {r.index} ({r.dtype}):", small, ""]
        if not any(minimized.get((r.dtype, r.index)) for r in group):
            out += [f"## graph {group[0].index} ({group[0].dtype}):", group[0].text]
        return out


def _tasks(args: argparse.Namespace) -> list[Task]:
    dtypes = ["fp32", "bf16"] if args.dtype == "both" else [args.dtype]
    indices = [args.index] if args.index is not None else \
        range(args.start, args.start + args.graphs)
    return [Task(i, dtypes[i % len(dtypes)], args.seed) for i in indices]


def _single(task: Task) -> int:
    """--index: one graph in this process, everything printed."""
    case = case_for(task)
    print(describe(case))
    r = check(case)
    print(f"status: {r.status}, {r.groups} fusion groups {r.reason}")
    for p in r.problems:
        print(f"plugin: {p}")
    for p in r.torchscript:
        print(f"torchscript too: {p}")
    return 1 if r.status == "plugin" else 0


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torch_graphfuse.testing.fuzz",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dtype", choices=["fp32", "bf16", "both"], default="both")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--start", type=int, default=0, help="first graph index")
    ap.add_argument("--index", type=int, help="run one graph here and print it")
    ap.add_argument("--minimize", type=int, default=2, help="graphs minimized per cause")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per graph")
    ap.add_argument("--recycle", type=int, default=300, help="graphs per worker process")
    args = ap.parse_args(argv)
    if args.index is not None:
        return _single(_tasks(args)[0])
    tasks = _tasks(args)
    summary = Summary(args.seed)
    pool = Pool(args.jobs, args.timeout, args.recycle)
    every = max(1, min(50, len(tasks) // 20))

    def on_report(r: Report) -> None:
        summary.add(r)
        if r.status == "plugin":
            print(f"FAIL graph {r.index} ({r.dtype}) [{r.cause}] {(r.problems or [''])[0][:150]}",
                  flush=True)
        if len(summary.reports) % every == 0:
            print(summary.progress(len(tasks)), flush=True)
    try:
        pool.run(tasks, on_report)
        minimized = _minimize_some(pool, summary, args.minimize)
    finally:
        pool.close()
    print(summary.render(minimized))
    return 1 if summary.count("plugin") else 0


def _minimize_some(pool: Pool, summary: Summary, per_cause: int) -> dict[tuple[str, int], str]:
    """Minimize the first `per_cause` failures of each cause (not crashes: each
    candidate would take a worker down)."""
    tasks = [Task(r.index, r.dtype, summary.seed, cause)
             for cause, group in summary.failures().items()
             for r in [r for r in group if not r.crashed][:per_cause]]
    found: dict[tuple[str, int], str] = {}
    if tasks:
        print(f"minimizing {len(tasks)} failures...", flush=True)
    pool.run(tasks, lambda r: found.__setitem__((r.dtype, r.index), r.minimized))
    return found


if __name__ == "__main__":
    sys.exit(main())
