"""Running a case: eager reference, TorchScript compile, fused runs, verdict.

`check_case` traces and freezes the program, runs it twice to profile with
torch_graphfuse on, compares the third call and two calls at the second shape (and at
each further size, in the sizes mode) with eager, and excuses the differences the
unfused TorchScript shows too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import resource
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

import torch_graphfuse
from torch_graphfuse.testing import runner
from torch_graphfuse.testing.fuzz.compare import (
    CAUSES,
    Outcome,
    Problem,
    compare_call,
    outcome,
    short_error,
)
from torch_graphfuse.testing.fuzz.evaluate import Evaluator, Meta
from torch_graphfuse.testing.fuzz.inputs import make_inputs
from torch_graphfuse.testing.fuzz.program import Program, build_program
from torch_graphfuse.testing.fuzz.spec import Case
from torch_graphfuse.testing.runner import precision


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
class Reference:
    outcomes: list[Outcome]
    out_meta: list[list[Meta]]
    in_meta: list[list[Meta]]


def reference(case: Case, program: Program) -> Reference:
    """Eager outputs from the nn.Module itself, and each value's Meta."""
    outcomes, out_meta, in_meta = [], [], []
    for _, call in case.calls():
        with torch.no_grad(), precision(case.dtype):
            o = outcome(program, make_inputs(case, call))
            if o.error:
                raise RuntimeError(o.error)
            ev = Evaluator(program, make_inputs(case, call))
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
    """Two profiling runs, the third call, two calls at the new shape (fusion on or
    off throughout); the outcomes, the fusion groups formed, the warnings."""
    outcomes, groups = [], 0
    with torch.no_grad(), precision(case.dtype), torch_graphfuse.fuser(enabled), \
            memory_cap(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(runner.PROFILING_RUNS):
            o = outcome(module, make_inputs(case, profiling=True))
            if o.error:
                return [dataclasses.replace(o, error=f"profiling run: {o.error}")], 0, []
        for name, call in case.calls():
            outcomes.append(outcome(module, make_inputs(case, call)))
            if name == "call 3":
                groups = len(runner.fusion_groups(torch.jit.last_executed_optimized_graph()))
    return outcomes, groups, sorted({str(w.message)[:200] for w in caught
                                     if "graphfuse" in str(w.message).lower()})


def problems(case: Case, ref: Reference, outcomes: list[Outcome]) -> list[Problem]:
    problems = []
    for (name, _), o, *expected in zip(case.calls(), outcomes, ref.outcomes, ref.out_meta,
                                       ref.in_meta, strict=False):
        problems += compare_call(name, o, *expected)
    return problems


def with_valid_sizes(case: Case, program: Program) -> Case:
    """The case without the further sizes at which eager itself fails (a view of sizes
    the program fixed): those are no stream a model meets."""
    if not case.sizes:
        return case
    keep = []
    for k in range(case.sizes):
        with torch.no_grad(), precision(case.dtype):
            if not outcome(program, make_inputs(case, k + 2)).error:
                keep.append(k)
    inputs = [dataclasses.replace(i, more=tuple(i.more[k] for k in keep)) for i in case.inputs]
    return dataclasses.replace(case, inputs=inputs)


def check_case(case: Case) -> Result:
    """Fused vs eager; a difference the unfused TorchScript shows too is not the plugin's."""
    program = build_program(case)
    case = with_valid_sizes(case, program)
    try:
        ref = reference(case, program)
    except Exception as e:
        return Result("invalid", reason=f"eager: {short_error(e)}")
    try:
        module = compile_program(case, program)
    except Exception as e:
        return Result("invalid", reason=f"trace: {short_error(e)}")
    outcomes, groups, warned = run_compiled(case, module, True)
    del module
    fused = problems(case, ref, outcomes)
    if not fused:
        return Result("pass", groups, warnings=warned)
    plain, _, _ = run_compiled(case, compile_program(case, program), False)
    unfused = problems(case, ref, plain)
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
