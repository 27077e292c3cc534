"""Differential fuzzer: random module DAGs, fused vs eager PyTorch.

A `Case` is a small program (a list of `Op`s, each applied to earlier values) over
one to three graph inputs, plus how the inputs are laid out (contiguous,
channels_last, transposed, offset, strided; NaN/inf at given positions) and a
second input shape. `generate(chooser, dtype)` builds a valid case: it runs every
candidate op eagerly on the case's own inputs as it goes, so shapes, dtypes and
in-place legality are those of real execution, and it keeps an op only where its
result is numerically well-conditioned (see `admissible`). `check_case(case)`
traces and freezes the program, runs it twice to profile with torch_graphfuse
on, and compares the third call and a call at the second shape with eager:
output structure, shapes, dtypes, values, NaN/inf positions, storage aliasing
and the inputs after the call. A difference the unfused TorchScript shows too is
TorchScript's, not the plugin's.

Quantized mode (`generate(..., quantized=True)`, fp32) writes programs in
PT2E's int8 form: activations quantized per tensor (u8/s8, full range, scale
and zero point from the value's eager range) and dequantized before
conv/linear/matmul, per-channel s8 weights dequantized in forward from module
buffers, residual adds, activations, shared dequantizes, outputs requantized
or kept quantized. The reference is the same program run eagerly (fake-quant
semantics). The verdict at an output past a quantize is elementwise: a
quantized (integer) output may differ from eager's by the integer bound, a
float one by the float bound that `quantized` propagates from eager's own
values: a quantize may flip only where eager's pre-rounding value lies within
its input's error of a rounding boundary (so by at most one step when the
input is exact), and that step travels on through |W|, the adds and the
Lipschitz or monotone ops after it; float rounding adds each op's fp32
tolerance. Where nothing is near a boundary that is the plain fp32
tolerance; the structure, shapes, dtypes, NaN/inf positions and aliasing
are compared as always, and values with no quantize on their way as above.

Long mode (the CLI; failures minimized and printed with a reproducer):

    python -m torch_graphfuse.testing.fuzz --graphs 5000 --seed 0 --dtype both
    python -m torch_graphfuse.testing.fuzz --graphs 1500 --seed 1 --quantized
    python -m torch_graphfuse.testing.fuzz --graphs 2000 --seed 2 --anchor attention

(`--anchor attention` starts every graph with a multi-head attention block.)

The modules: `spec` (the case, the choosers), `ops` (op kinds, rendering),
`program` (the case as an nn.Module), `inputs`, `evaluate` (eager metas,
conditioning), `quantized` (quantized mode's error bounds), `builder`,
`propose_layers`, `propose_attention`, `propose_pointwise` and
`propose_quantized` (the generator's proposers), `generate`, `compare`, `execute` (compile, run,
verdict), `describe`, `minimize`, `longrun` and `summary` (long mode's workers
and report), `__main__` (the CLI).
"""

# torch is exported too: a printed Case names torch dtypes (torch.float32), and
# its repr is replayed with `from torch_graphfuse.testing.fuzz import *`.
import torch

from torch_graphfuse.testing.fuzz.compare import (
    CAUSES,
    Outcome,
    Problem,
    compare_call,
    compare_tensor,
    outcome,
    tolerance,
)
from torch_graphfuse.testing.fuzz.describe import describe, reproducer
from torch_graphfuse.testing.fuzz.evaluate import Evaluator, Meta, admissible
from torch_graphfuse.testing.fuzz.execute import (
    Reference,
    Result,
    check,
    check_case,
    compile_program,
    problems,
    reference,
    run_compiled,
)
from torch_graphfuse.testing.fuzz.generate import FOCUSED_ANCHORS, cases, generate
from torch_graphfuse.testing.fuzz.inputs import make_inputs
from torch_graphfuse.testing.fuzz.minimize import minimize, simpler, still_valid
from torch_graphfuse.testing.fuzz.ops import KINDS, UNSUPPORTED
from torch_graphfuse.testing.fuzz.program import Program, build_program
from torch_graphfuse.testing.fuzz.spec import (
    Case,
    Chooser,
    DrawChooser,
    Input,
    Op,
    RandomChooser,
)

__all__ = [
    "CAUSES", "FOCUSED_ANCHORS", "KINDS", "UNSUPPORTED", "Case", "Chooser",
    "DrawChooser", "Evaluator",
    "Input", "Meta", "Op", "Outcome", "Problem", "Program", "RandomChooser", "Reference",
    "Result", "admissible", "build_program", "cases", "check", "check_case", "compare_call",
    "compare_tensor", "compile_program", "describe", "generate", "make_inputs", "minimize",
    "outcome", "problems", "reference", "reproducer", "run_compiled", "simpler", "still_valid",
    "tolerance", "torch",
]
