"""How far cuDNN gets with an IR for a GPU that is not there (cuDNN >= 9.8).

`plan_deviceless` takes a graph through every planning step for a described GPU
(device_specs.DEVICES) and says which step refused it and why: what the test
tier checks cuDNN's support with, on a machine without a GPU.

    python -m torch_graphfuse.backends.cudnn.deviceless DEVICE < irs.json

reads a JSON list of IR graphs and writes a JSON list of DevicelessResults.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from . import builder, ir
from .device_specs import DEVICES
from .frontend import load_cudnn


@dataclass
class DevicelessResult:
    """How far cuDNN got with one IR for one described GPU, and why it stopped."""

    supported: bool
    failed_step: str | None  # the frontend step that raised, None when all ran
    error: str
    plan_count: int  # execution plans the heuristics offered
    plan_bytes: int  # size of the serialized built plan
    build_seconds: float  # IR -> frontend graph -> validate()


# The frontend's steps from a graph to a serialized plan, in order.
STEPS = ("validate", "build_operation_graph", "create_execution_plans", "check_support",
         "build_plans", "serialize")


def plan_deviceless(graph: ir.Graph, device: str) -> DevicelessResult:
    """Take `graph` through every planning step for `device` with no GPU present.

    cuDNN's engine libraries load the CUDA driver library even here: on a
    machine without one, run this where a driver stand-in is on the library
    path (the test tier does, in a subprocess) or some engines are not offered."""
    cudnn = load_cudnn()
    start = time.perf_counter()
    fe = builder.build(graph, device=device).graph
    seconds = 0.0
    plan_bytes = 0
    for step in STEPS:
        try:
            if step == "create_execution_plans":
                fe.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            elif step == "serialize":
                plan_bytes = len(fe.serialize(as_bytes=True))
            else:
                getattr(fe, step)()
        except Exception as error:  # any refusal is the answer, whatever its type
            return DevicelessResult(False, step, f"{type(error).__name__}: {error}",
                                    _plan_count(fe), 0, seconds)
        if step == "validate":
            seconds = time.perf_counter() - start
    return DevicelessResult(True, None, "", _plan_count(fe), plan_bytes, seconds)


def _plan_count(fe: Any) -> int:
    try:
        return int(fe.get_execution_plan_count())
    except Exception:  # not lowered yet: no plans
        return 0


def main() -> None:
    """A JSON list of IR graphs on stdin, a JSON list of DevicelessResults on stdout."""
    if len(sys.argv) != 2 or sys.argv[1] not in DEVICES:
        # Run with -m, __name__ is "__main__"; the spec keeps the module's name.
        module = __spec__.name if __spec__ else __name__
        sys.exit(f"usage: python -m {module} {{{','.join(DEVICES)}}} < irs.json")
    graphs = [ir.Graph.from_json(json.dumps(g)) for g in json.load(sys.stdin)]
    json.dump([asdict(plan_deviceless(g, sys.argv[1])) for g in graphs], sys.stdout)


if __name__ == "__main__":
    main()
