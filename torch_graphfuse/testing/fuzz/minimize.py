"""Shrinking a failing case while it still fails with the same cause.

`simpler` yields smaller variants (fewer outputs, ops, inputs, input
features); `still_valid` applies the generator's own checks to one, and
`minimize` keeps the first that still fails, greedily, within a time budget.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Iterator, Sequence

import torch

from torch_graphfuse.testing.fuzz.evaluate import Evaluator, admissible
from torch_graphfuse.testing.fuzz.execute import Result, check
from torch_graphfuse.testing.fuzz.inputs import make_inputs
from torch_graphfuse.testing.fuzz.program import Program
from torch_graphfuse.testing.fuzz.spec import Case, Op
from torch_graphfuse.testing.runner import precision


def _remap(case: Case, ops: Sequence[Op], remap: Callable[[int], int]) -> list[Op]:
    return [dataclasses.replace(o, args=tuple(remap(a) for a in o.args),
                                attrs={**o.attrs, "reuse": remap(o.attrs["reuse"])}
                                if "reuse" in o.attrs else o.attrs) for o in ops]


def _without_op(case: Case, i: int, sub: int | None = None) -> Case | None:
    """The case with op i removed, its uses reading `sub` instead, by default
    its first argument (an in-place op's target, a unary op's operand)."""
    removed, op = len(case.inputs) + i, case.ops[i]
    used = any(removed in o.args or o.attrs.get("reuse") == removed for o in case.ops)
    if used and not op.args:
        return None
    if sub is None:
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
    for i, op in enumerate(case.ops):
        if op.kind == "dequantize" and (q := op.args[0]) >= len(case.inputs) and \
                (c := _without_op(case, i, case.ops[q - len(case.inputs)].args[0])) is not None:
            yield c  # reads the float value quantized instead (the quantize is then unused)
        if op.attrs.get("qweight"):
            ops = list(case.ops)
            ops[i] = dataclasses.replace(op, attrs={**op.attrs, "qweight": False})
            yield dataclasses.replace(case, ops=ops)
    for i in range(len(case.inputs)):
        if (c := _without_input(case, i)) is not None:
            yield c
    for i, spec in enumerate(case.inputs):
        fewer = [spec.specials[:k] + spec.specials[k + 1:] for k in range(len(spec.specials))]
        for simpler in (dataclasses.replace(spec, shape2=None),
                        dataclasses.replace(spec, layout2=None),
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
                    if not admissible(op, args, [ev.meta[a] for a in op.args]):
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
