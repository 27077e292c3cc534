"""A case as text: the readable reproducer printed with a failure.
"""

from __future__ import annotations

from torch_graphfuse.testing.fuzz.execute import Result
from torch_graphfuse.testing.fuzz.inputs import describe_input
from torch_graphfuse.testing.fuzz.program import build_program
from torch_graphfuse.testing.fuzz.spec import Case


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
