"""On a GPU: does every engine cuDNN offers keep eager's NaN and infinities?

    python -m torch_graphfuse.backends.cudnn.special_values [--json FILE]

The ops that take extrema (relu, clamp, amax) map only where their input is proven
finite, and the check that proves it reads back to the host (waits for the GPU) on
every run, unless the plan is known to keep NaN and infinities as eager does. Whether cuDNN
propagates NaN through them as ATen does (relu(NaN) = NaN, clamp(NaN) = NaN, a max
reduction over a NaN is NaN) depends on the engine's code, which the API does not
document: an epilogue may compute max(x, 0) with fmaxf, which returns 0 for NaN.

This runs small groups of the lowering's shapes, each on inputs that put NaN, +inf and
-inf into the anchor's result, with every plan of the heuristics' list (modes A and
FALLBACK), and compares each result with eager PyTorch on the same GPU: NaN where eager
has NaN, the same infinities, finite values within 16-bit rounding. It prints one line
per (group, plan) and exits non-zero only where nothing could run at all; a mismatch is
a finding to act on, not a failure of this check.

The runtime asks the same of each plan it uses (`keeps_special_values`), once, on
probe inputs, where the answer can hold for every input (`probe_decides`: the only
extremum a relu whose 16-bit result is an output): a plan that keeps them needs no
finiteness check of its inputs per run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from . import builder, interpreter, ir
from .frontend import load_cudnn
from .ir_maker import Maker, nhwc

M, K, N = 64, 32, 48
IMAGE = [2, 16, 8, 8]  # N, C, H, W; 16 output channels, 3x3 kernel, padding 1
CONV_ATTRS = {"padding": [1, 1], "stride": [1, 1], "dilation": [1, 1]}
DTYPES = {"half": torch.float16, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Case:
    """One group: its IR made from the io dtype, its inputs, and eager's result."""

    name: str
    graph: Callable[[str], ir.Graph]
    inputs: Callable[[torch.dtype], list[torch.Tensor]]
    eager: Callable[[list[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Finding:
    case: str
    dtype: str
    plan: int
    engine: str
    ran: bool
    nan_lost: int = 0  # eager NaN, cuDNN not
    nan_made: int = 0  # cuDNN NaN, eager not
    inf_differs: int = 0
    finite_differs: int = 0
    largest_finite_error: float = 0.0
    error: str = ""

    @property
    def exact(self) -> bool:
        return self.ran and not (self.nan_lost or self.nan_made or self.inf_differs
                                 or self.finite_differs)


# -- the groups ----------------------------------------------------------------------------


def _matmul_then(*epilogue: tuple[str, dict[str, object]]) -> Callable[[str], ir.Graph]:
    """matmul [1, M, K] x [1, K, N], then pointwise modes, the last one the output."""
    def make(io: str) -> ir.Graph:
        m = Maker(io)
        a, b = m.input([1, M, K]), m.input([1, K, N])
        y = m.result("matmul", {"A": a, "B": b}, [1, M, N])
        for i, (mode, attrs) in enumerate(epilogue):
            y = m.result("pointwise", {"IN_0": y}, [1, M, N], out=i == len(epilogue) - 1,
                         mode=mode, **attrs)
        return m.graph
    return make


def _matmul_row_max(io: str) -> ir.Graph:
    m = Maker(io)
    a, b = m.input([1, M, K]), m.input([1, K, N])
    y = m.result("matmul", {"A": a, "B": b}, [1, M, N])
    # A reduction writes float, whatever the io type (cuDNN refuses a 16-bit one).
    m.result("reduction", {"X": y}, [1, M, 1], out=True, dtype="float", mode="max")
    return m.graph


def _conv_bias_relu(io: str) -> ir.Graph:
    m = Maker(io)
    x = m.input(IMAGE, nhwc(IMAGE))
    w = m.input([16, 16, 3, 3], nhwc([16, 16, 3, 3]))
    bias = m.input([1, 16, 1, 1])
    y = m.result("conv_fprop", {"X": x, "W": w}, IMAGE, strides=nhwc(IMAGE), **CONV_ATTRS)
    y = m.result("pointwise", {"IN_0": y, "IN_1": bias}, IMAGE, strides=nhwc(IMAGE),
                 mode="add")
    m.result("pointwise", {"IN_0": y}, IMAGE, strides=nhwc(IMAGE), out=True, mode="relu_fwd")
    return m.graph


# -- inputs with special values in the anchor's result ---------------------------------


def _matmul_inputs(dtype: torch.dtype) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(1, M, K, generator=generator) * 0.5
    b = torch.randn(1, K, N, generator=generator) * 0.5
    b[0, 0] = b[0, 0].abs() + 0.1  # row 0 of B positive: an infinity in A's column 0 keeps its sign
    b[0, 1, ::7] = 0.0  # inf * 0 in some columns: NaN there only
    a[0, 0, 0] = float("nan")  # row 0: NaN everywhere
    a[0, 1, 0] = float("inf")  # row 1: +inf everywhere
    a[0, 2, 0] = float("-inf")  # row 2: -inf everywhere
    a[0, 3, 1] = float("inf")  # row 3: +-inf by B's sign, NaN where B is 0
    a[0, 4, 1] = float("-inf")
    return [a.to("cuda", dtype), b.to("cuda", dtype)]


def _conv_inputs(dtype: torch.dtype, special: bool = True) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(IMAGE, generator=generator)
    w = torch.randn(16, 16, 3, 3, generator=generator) * 0.2
    w[:, 0] = w[:, 0].abs() + 0.05  # input channel 0 positive: its infinities keep their sign
    bias = torch.randn(1, 16, 1, 1, generator=generator)
    if special:
        x[0, 0, 2, 2] = float("nan")
        x[1, 0, 5, 5] = float("inf")
        x[1, 0, 1, 1] = float("-inf")
        x[0, 1, 6, 6] = float("inf")  # mixed signs across output channels
    return [x.to("cuda", dtype, memory_format=torch.channels_last),
            w.to("cuda", dtype, memory_format=torch.channels_last), bias.to("cuda", dtype)]


def _mm(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.matmul(xs[0], xs[1])


CASES = [
    Case("matmul+relu", _matmul_then(("relu_fwd", {})), _matmul_inputs,
         lambda xs: torch.relu(_mm(xs))),
    Case("matmul+clamp(0,6)", _matmul_then(("max", {"scalar": 0.0}), ("min", {"scalar": 6.0})),
         _matmul_inputs, lambda xs: torch.clamp(_mm(xs), 0.0, 6.0)),
    Case("matmul+clamp_min(0)", _matmul_then(("max", {"scalar": 0.0})), _matmul_inputs,
         lambda xs: torch.clamp_min(_mm(xs), 0.0)),
    Case("matmul+relu6", _matmul_then(("relu_fwd", {"relu_upper_clip": 6.0})), _matmul_inputs,
         lambda xs: F.relu6(_mm(xs))),
    Case("matmul+gelu", _matmul_then(("gelu_fwd", {})), _matmul_inputs,
         lambda xs: F.gelu(_mm(xs))),
    Case("matmul+gelu_tanh", _matmul_then(("gelu_approx_tanh_fwd", {})), _matmul_inputs,
         lambda xs: F.gelu(_mm(xs), approximate="tanh")),
    Case("matmul+sigmoid", _matmul_then(("sigmoid_fwd", {})), _matmul_inputs,
         lambda xs: torch.sigmoid(_mm(xs))),
    Case("matmul+tanh", _matmul_then(("tanh_fwd", {})), _matmul_inputs,
         lambda xs: torch.tanh(_mm(xs))),
    Case("matmul+silu", _matmul_then(("swish_fwd", {})), _matmul_inputs,
         lambda xs: F.silu(_mm(xs))),
    Case("matmul+row amax", _matmul_row_max, _matmul_inputs,
         lambda xs: torch.amax(_mm(xs), -1, keepdim=True)),
    Case("conv+bias+relu NHWC", _conv_bias_relu, _conv_inputs,
         lambda xs: torch.relu(F.conv2d(xs[0], xs[1], xs[2].flatten(), padding=1))),
    # The same without special values: what differs here is rounding, not NaN handling.
    Case("conv+bias+relu finite", _conv_bias_relu, lambda dtype: _conv_inputs(dtype, False),
         lambda xs: torch.relu(F.conv2d(xs[0], xs[1], xs[2].flatten(), padding=1))),
]


# -- one plan, as the runtime asks --------------------------------------------------------

# Where a node differs from ATen on NaN or infinity by cuDNN's own definition, whatever the
# engine: max/min and the max reductions lose NaN (every engine measured), and relu_fwd
# clips +inf to FLT_MAX when it computes in float (its default upper clip).
_NAN_LOSING = {("pointwise", "max"), ("pointwise", "min"), ("reduction", "max"),
               ("reduction", "min"), ("reduction", "amax")}
_SIXTEEN_BIT = ("half", "bfloat16")


def probe_decides(graph: ir.Graph) -> bool:
    """Whether a probe of a plan of `graph` can show it gives eager's NaN and infinities on
    every input: where each extremum is a plain relu whose result is a 16-bit group output
    that no node reads. FLT_MAX rounds to inf in half and bfloat16, so there the clip is
    invisible, while a node reading the clipped value (FLT_MAX - inf is -inf, eager's
    inf - inf is NaN) or a float output would differ on some input the probe never tries.
    What is left to the engine, NaN through relu and the rounding of the clip, the probe
    tries."""
    read = {tid for node in graph.nodes for tid in node.inputs.values()}
    for node in graph.nodes:
        mode = node.attrs.get("mode")
        if (node.op, mode) in _NAN_LOSING:
            return False
        if node.op == "pointwise" and mode == "relu_fwd":
            out = graph.tensor(next(iter(node.outputs.values())))
            clipped = any(node.attrs.get(name) is not None for name in
                          ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope"))
            if clipped or out.virtual or out.id in read or out.dtype not in _SIXTEEN_BIT:
                return False
    return True


def probe_inputs(like: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Tensors laid out as `like` (sizes, strides, dtype, device; each over a memory of its
    own, as long as the memory after `like`'s data, which a plan may read through its own
    strides), holding values in [-1, 1] and, among the elements `like` views, a NaN, a +inf
    and a -inf in each floating one, at places that differ from port to port (a NaN in two
    operands at one place would hide an op that loses one)."""
    generator = torch.Generator().manual_seed(0)
    made = []
    for port, x in enumerate(like):
        if not x.is_floating_point() or x.numel() == 0:
            made.append(x)
            continue
        span = 1 + sum((size - 1) * stride for size, stride in zip(x.shape, x.stride(),
                                                                   strict=True))
        room = x.untyped_storage().nbytes() // x.element_size() - x.storage_offset()
        values = torch.rand(max(span, room), generator=generator) * 2 - 1
        for k, special in enumerate((math.nan, math.inf, -math.inf)):
            values[((2 * k + 1) * span // 7 + port * span // 11) % span] = special
        made.append(values.to(x.device, x.dtype).as_strided(x.shape, x.stride()))
    return made


def keeps_special_values(graph: ir.Graph, execute: Callable[[list[torch.Tensor]],
                                                            list[torch.Tensor]],
                         like: Sequence[torch.Tensor]) -> bool:
    """Whether `execute`, a plan of `graph`, puts NaN and infinities where eager does, on
    probe_inputs(like), for a graph probe_decides takes (where the interpreter's relu is
    eager's). False where it does not, and where the interpreter gives no reference or
    the reference holds no NaN or no +inf: the probe then proves nothing. What `execute`
    raises, the plan's failure, is raised."""
    if not probe_decides(graph):
        return False
    try:
        inputs = probe_inputs(like)
        want = interpreter.run(graph, inputs)
    except Exception:  # no reference, no proof: the inputs get checked per run
        return False
    if not (any(bool(w.isnan().any()) for w in want)
            and any(bool((w == math.inf).any()) for w in want)):
        return False
    got = execute(inputs)
    for g, w in zip(got, want, strict=True):
        found = compare(g.float(), w.float())
        if found["nan_lost"] or found["nan_made"] or found["inf_differs"]:
            return False
    return True


# -- the sweep ----------------------------------------------------------------------------


def compare(got: torch.Tensor, want: torch.Tensor) -> dict[str, float]:
    """Where `got` departs from eager's `want`, counted by kind."""
    got, want = got.float(), want.float()
    got_nan, want_nan = got.isnan(), want.isnan()
    infinite = (got.isinf() | want.isinf()) & ~got_nan & ~want_nan
    finite = got.isfinite() & want.isfinite()
    close = torch.isclose(got, want, rtol=2e-2, atol=2e-2)
    error = (got - want).abs()[finite]
    return {"nan_lost": int((want_nan & ~got_nan).sum()),
            "nan_made": int((got_nan & ~want_nan).sum()),
            "inf_differs": int((infinite & (got != want)).sum()),
            "finite_differs": int((finite & ~close).sum()),
            "largest_finite_error": float(error.max()) if error.numel() else 0.0}


def sweep_case(case: Case, io: str, handle: object) -> list[Finding]:
    cudnn = load_cudnn()
    dtype = DTYPES[io]
    graph = case.graph(io)
    inputs = case.inputs(dtype)
    want = case.eager(inputs)
    out = graph.tensor(graph.outputs[0])
    try:
        fe = builder.build(graph, handle=handle).graph
        fe.validate()
        fe.build_operation_graph()
        fe.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        fe.check_support()
    except Exception as error:
        return [Finding(case.name, io, -1, "", False, error=f"{type(error).__name__}: {error}")]
    pack = {builder.uid(tid): x for tid, x in zip(graph.inputs, inputs, strict=True)}
    found = []
    for index in range(fe.get_execution_plan_count()):
        engine = fe.get_plan_name_at_index(index)
        try:
            fe.build_plan_at_index(index)
            got = torch.empty_strided(out.dims, out.strides, dtype=ir.TORCH_DTYPES[out.dtype],
                                      device="cuda").fill_(12345.0)
            pack[builder.uid(out.id)] = got
            workspace = torch.empty(fe.get_workspace_size_plan_at_index(index),
                                    dtype=torch.uint8, device="cuda")
            fe.execute_plan_at_index(pack, workspace, index, handle)
            torch.cuda.synchronize()
        except Exception as error:
            found.append(Finding(case.name, io, index, engine, False,
                                 error=f"{type(error).__name__}: {str(error)[:160]}"))
            continue
        found.append(Finding(case.name, io, index, engine, True,
                             **compare(got.reshape(want.shape), want)))
    return found


def verdict(f: Finding) -> str:
    if not f.ran:
        return f"did not run: {f.error}"
    if f.exact:
        return "as eager"
    return (f"DIFFERS: nan_lost={f.nan_lost} nan_made={f.nan_made} "
            f"inf_differs={f.inf_differs} finite_differs={f.finite_differs} "
            f"(largest finite error {f.largest_finite_error:.3g})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="also write the findings to this file, one per line")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("special_values: torch sees no CUDA GPU", file=sys.stderr)
        return 1
    cudnn = load_cudnn()
    handle = cudnn.create_handle()
    cudnn.set_stream(handle, torch.cuda.current_stream().cuda_stream)
    print(f"special_values: {torch.cuda.get_device_name()}, cuDNN {cudnn.backend_version()}")
    # Each finding is printed (and written) as it comes: plans built by NVRTC take seconds
    # each, and a sweep stopped by a time limit still reports what it saw.
    ran = False
    with open(args.json or os.devnull, "w") as out:
        for case in CASES:
            for io in DTYPES:
                for f in sweep_case(case, io, handle):
                    ran = ran or f.ran
                    print(f"{f.case:24} {f.dtype:9} plan {f.plan:2} {f.engine:28} "
                          f"{verdict(f)}", flush=True)
                    out.write(json.dumps(asdict(f)) + "\n")
                    out.flush()
    return 0 if ran else 1


if __name__ == "__main__":
    sys.exit(main())
