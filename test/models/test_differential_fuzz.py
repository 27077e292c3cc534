"""Differential fuzzing: random module DAGs run fused and eager must agree.

A fixed-seed slice of torch_graphfuse.testing.fuzz's generator runs in the normal
test suite, and smaller ones of its quantized mode (PT2E int8 programs) and of graphs
that start with multi-head attention, and of graphs called at several sizes (a serving
stream); `GRAPHFUSE_FUZZ_EXAMPLES=N`, `GRAPHFUSE_FUZZ_QUANTIZED_EXAMPLES=N`,
`GRAPHFUSE_FUZZ_ATTENTION_EXAMPLES=N` and `GRAPHFUSE_FUZZ_SIZES_EXAMPLES=N` raise the
number of graphs per dtype (the CLI, `python -m torch_graphfuse.testing.fuzz
[--quantized]`, is the long mode). A failure
reports the program as Python, its inputs and what differed, as drawn and as
the fuzzer's minimizer reduced it; each kind of difference is reported on its
own. `GRAPHFUSE_FUZZ_SHRINK=1` has hypothesis draw every choice of the
generator and shrink the program (smaller reproducers, minutes per failure).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st
from hypothesis.control import current_build_context

from torch_graphfuse.testing import fuzz

EXAMPLES = int(os.environ.get("GRAPHFUSE_FUZZ_EXAMPLES", "800"))
QUANTIZED_EXAMPLES = int(os.environ.get("GRAPHFUSE_FUZZ_QUANTIZED_EXAMPLES", "60"))
ATTENTION_EXAMPLES = int(os.environ.get("GRAPHFUSE_FUZZ_ATTENTION_EXAMPLES", "80"))
SIZES_EXAMPLES = int(os.environ.get("GRAPHFUSE_FUZZ_SIZES_EXAMPLES", "60"))
# Seeds by default: hypothesis shrinks a seed in a few steps (what it reports is
# then reduced by the fuzzer's minimizer); its shrink phase also keeps it looking
# for other kinds of failure after the first.
SHRINK = os.environ.get("GRAPHFUSE_FUZZ_SHRINK") == "1"
SUPPORTED_OPS = Path(__file__).resolve().parents[2] / "docs" / "supported_ops.md"


class FusedMismatch(AssertionError):
    """The fused model differs from eager where unfused TorchScript does not."""


# One exception type per cause, so that hypothesis shrinks and reports each
# kind of failure on its own instead of only the first it met.
MISMATCH = {cause: type(f"Fused{cause.title()}Mismatch", (FusedMismatch,), {})
            for cause in fuzz.CAUSES}


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@settings(derandomize=True, max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fused_matches_eager(dtype: str, data: st.DataObject) -> None:
    check_drawn(data.draw(fuzz.cases(dtype, structural=SHRINK), label="case"))


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@settings(derandomize=True, max_examples=ATTENTION_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fused_attention_blocks_match_eager(dtype: str, data: st.DataObject) -> None:
    """Graphs that start with multi-head attention: every mask and bias form, GQA, causal,
    the softmax in fp32 under autocast (the CLI's --anchor attention)."""
    check_drawn(data.draw(fuzz.cases(dtype, structural=SHRINK, anchor="attention"),
                          label="case"))


@pytest.mark.parametrize("anchor", [None, "attention"])
@settings(derandomize=True, max_examples=SIZES_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fused_matches_eager_at_every_size_of_a_stream(anchor: str | None,
                                                       data: st.DataObject) -> None:
    """Each graph called at its second shape and three further sizes (batch sizes, lengths,
    image sizes), each twice (the CLI's --sizes 3)."""
    check_drawn(data.draw(fuzz.cases("fp32", structural=SHRINK, anchor=anchor, sizes=3),
                          label="case"))


@settings(derandomize=True, max_examples=QUANTIZED_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fused_int8_matches_eager_within_a_step(data: st.DataObject) -> None:
    check_drawn(data.draw(fuzz.cases("fp32", structural=SHRINK, quantized=True), label="case"))


def check_drawn(case: fuzz.Case) -> None:
    result = fuzz.check(case)
    event(f"status: {result.status}")
    event(f"fused: {'yes' if result.groups else 'no'}")
    if result.status == "invalid":
        note(f"invalid graph: {result.reason}")
    if result.torchscript:
        note("unfused TorchScript differs from eager too (not a failure):\n"
             + "\n".join(str(p) for p in result.torchscript))
    if result.status == "plugin":
        raise MISMATCH[result.cause](f"\n{fuzz.reproducer(case, result)}\n\n"
                                     f"minimized:\n{minimized(case, result.cause)}")


def minimized(case: fuzz.Case, cause: str) -> str:
    """The minimizer's reduction, on the run hypothesis reports only (it takes seconds)."""
    if not current_build_context().is_final:
        return "(on the reported run)"
    small, result = fuzz.minimize(case, cause, budget=20.0)
    return fuzz.reproducer(small, result)


# -- the fuzzer itself ---------------------------------------------------------------

# Names tracing produces from the ops the generator writes (conv2d -> _convolution, ...).
TRACED_ALIASES = {"_convolution", "convolution", "_softmax", "_log_softmax", "concat"}


def documented_ops() -> set[str]:
    """The aten ops of the "Supported ops" table (docs/supported_ops.md)."""
    table = SUPPORTED_OPS.read_text().split("## Supported ops")[1].split("\n## ")[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    return {op for row in rows for op in re.findall(r"`(\w+)`", row.split("|")[1])}


def test_generator_covers_every_documented_op() -> None:
    generated = {aten for kind in fuzz.KINDS.values() for aten in kind.aten}
    assert documented_ops() - TRACED_ALIASES - generated == set()


def test_generator_emits_every_kind() -> None:
    seen: set[str] = set()
    for i in range(420):  # then 60 in quantized mode, and 60 starting with attention
        quantized = 300 <= i < 360
        anchor = "attention" if i >= 360 else None
        dtype = "fp32" if quantized else ("fp32", "bf16")[i % 2]
        case = fuzz.generate(fuzz.RandomChooser(f"coverage:{i}"), dtype, quantized=quantized,
                             anchor=anchor)
        seen |= {op.kind for op in case.ops}
        assert fuzz.still_valid(case), fuzz.describe(case)
    assert set(fuzz.KINDS) - seen == set()


def test_cases_replay_identically() -> None:
    a, b = (fuzz.generate(fuzz.RandomChooser("replay"), "bf16") for _ in range(2))
    assert a == b
    assert eval(repr(a), vars(fuzz)) == a  # the printed case is a reproducer


def _outcome(outputs: list[torch.Tensor], inputs: list[torch.Tensor]) -> fuzz.Outcome:
    return fuzz.Outcome(outputs, False, inputs)


def test_checker_flags_each_cause() -> None:
    x = torch.randn(2, 3)
    ref = _outcome([x + 1], [x])
    meta = [fuzz.Meta(exact=False)]

    def causes(got: fuzz.Outcome) -> set[str]:
        return {p.cause for p in fuzz.compare_call("call 3", got, ref, meta, meta)}
    assert causes(_outcome([x + 1 + 1e-7], [x])) == set()  # within fp32 tolerance
    assert causes(_outcome([x + 1.01], [x])) == {"values"}
    nan = (x + 1).clone()
    nan[0, 0] = math.nan
    assert causes(_outcome([nan], [x])) == {"nan"}
    assert causes(_outcome([(x + 1).bfloat16()], [x])) == {"dtype"}
    assert causes(_outcome([(x + 1)[:1]], [x])) == {"shape"}
    assert causes(_outcome([x], [x])) == {"values", "aliasing"}  # x * 1.0 returned x itself
    assert causes(fuzz.Outcome(error="RuntimeError: std::bad_alloc")) == {"exception"}
    assert causes(fuzz.Outcome([x + 1, x + 1], True, [x])) == {"structure"}


def test_exact_values_must_match_bit_for_bit() -> None:
    x = torch.randn(4, 8)
    exact = [fuzz.Meta(exact=True)]
    truncated = (x.view(torch.int32) & ~0xFFFF).view(torch.float32).bfloat16()
    ref = _outcome([x.bfloat16()], [x])
    problems = fuzz.compare_call("call 3", _outcome([truncated], [x]), ref, exact, exact)
    assert {p.cause for p in problems} == {"values"}


def test_minimizer_keeps_cases_valid() -> None:
    case = fuzz.generate(fuzz.RandomChooser("minimize"), "fp32")
    for smaller in fuzz.simpler(case):
        if fuzz.still_valid(smaller):
            assert len(smaller.ops) <= len(case.ops)
            fuzz.build_program(smaller)(*fuzz.make_inputs(smaller))


def test_values_eager_rounded_through_bf16_must_stay_on_its_grid() -> None:
    x = torch.randn(4, 8)
    rounded = x.bfloat16().float()
    meta, input_meta = [fuzz.Meta(exact=False, lowp=True, grid=True)], [fuzz.Meta()]
    ref = _outcome([rounded], [x])
    unrounded = _outcome([rounded + rounded * 2 ** -10], [x])  # within bf16 tolerance
    problems = fuzz.compare_call("call 3", unrounded, ref, meta, input_meta)
    assert {p.cause for p in problems} == {"values"}
    assert fuzz.compare_call("call 3", _outcome([rounded], [x]), ref, meta, input_meta) == []


def test_quantized_outputs_may_differ_by_their_bound_only() -> None:
    x = torch.randn(4, 8)
    q = torch.ops.quantized_decomposed.quantize_per_tensor(x, 0.03, 128, 0, 255, torch.uint8)
    bound = torch.zeros(4, 8, dtype=torch.float64)
    bound[0, 0] = 1  # eager's value there lies at a rounding boundary
    meta = [fuzz.Meta(exact=False, bound=bound)]
    ref = _outcome([q], [x])
    flipped = q.clone()
    flipped[0, 0] += 1
    assert fuzz.compare_call("call 3", _outcome([flipped], [x]), ref, meta, [fuzz.Meta()]) == []
    flipped[1, 1] += 1  # no boundary near: a flip here is the plugin's
    problems = fuzz.compare_call("call 3", _outcome([flipped], [x]), ref, meta, [fuzz.Meta()])
    assert {p.cause for p in problems} == {"values"}


def test_quantize_bound_is_one_step_at_a_boundary_and_none_elsewhere() -> None:
    case = fuzz.Case("fp32", [fuzz.Input((1, 4))], [fuzz.Op("quantize", (0,), {
        "scale": 0.5, "zero_point": 0, "qmin": -128, "qmax": 127, "qdtype": torch.int8})], [1])
    program = fuzz.build_program(case)
    x = torch.tensor([[0.25, 0.3, 1.0, 100.0]])  # at a boundary, near none, saturated
    ev = fuzz.Evaluator(program, [x])
    ev.run(case.ops[0])
    assert ev.meta[1].bound.tolist() == [[1.0, 0.0, 0.0, 0.0]]


def test_quantized_cases_are_in_pt2e_form() -> None:
    kinds: set[str] = set()
    quantized_weights = 0
    for i in range(20):
        case = fuzz.generate(fuzz.RandomChooser(f"int8:{i}"), "fp32", quantized=True)
        kinds |= {op.kind for op in case.ops}
        quantized_weights += any(op.attrs.get("qweight") for op in case.ops)
        assert fuzz.still_valid(case), fuzz.describe(case)
    assert {"quantize", "dequantize", "add", "matmul"} <= kinds
    assert quantized_weights >= 10
