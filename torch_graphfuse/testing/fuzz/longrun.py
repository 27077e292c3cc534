"""Long mode's workers: one graph per task in a child process.

A graph that crashes its process (a segfault in the plugin) or hangs is
reported, not fatal; a `Report` is the plain data a worker sends back.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any

from torch_graphfuse.testing import cudnn_on_cpu
from torch_graphfuse.testing.fuzz.compare import short_error
from torch_graphfuse.testing.fuzz.describe import reproducer
from torch_graphfuse.testing.fuzz.execute import check
from torch_graphfuse.testing.fuzz.generate import generate
from torch_graphfuse.testing.fuzz.minimize import minimize
from torch_graphfuse.testing.fuzz.spec import Case, RandomChooser


@dataclass
class Task:
    index: int
    dtype: str
    seed: int
    minimize_cause: str = ""
    backend: str = "onednn"  # or "cudnn": its partitioner and lowering, simulated on CPU
    quantized: bool = False  # PT2E int8 programs (fp32)
    anchor: str | None = None  # every graph starts with this block (generate.FOCUSED_ANCHORS)
    sizes: int = 0  # further sizes each graph is called at (the sizes mode)

    @property
    def mode(self) -> str:
        """What reports and the summary call the task's kind of graph."""
        return "int8" if self.quantized else self.dtype


@dataclass
class Report:
    """What a worker sends back for one graph (plain data: it crosses processes)."""

    index: int
    dtype: str  # the task's mode: fp32, bf16 or int8
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
    seed = f"{task.seed}:{task.index}:{task.mode}" + (f":{task.anchor}" if task.anchor else "")
    return generate(RandomChooser(seed), task.dtype, quantized=task.quantized,
                    anchor=task.anchor, sizes=task.sizes)


def rerun_flags(task: Task) -> str:
    flags = "--quantized" if task.mode == "int8" else f"--dtype {task.mode}"
    return flags + (f" --anchor {task.anchor}" if task.anchor else "") + \
        (f" --sizes {task.sizes}" if task.sizes else "")


def backend(name: str) -> contextlib.AbstractContextManager[None]:
    """Where fused graphs run: oneDNN, or the cuDNN backend's partitioner and
    lowering with the reference interpreter as executor (testing/cudnn_on_cpu)."""
    return cudnn_on_cpu.on_cpu() if name == "cudnn" else contextlib.nullcontext()


def run_task(task: Task) -> Report:
    with backend(task.backend):
        return _run_task(task)


def _run_task(task: Task) -> Report:
    start = time.monotonic()
    try:
        case = case_for(task)
    except Exception as e:
        return Report(task.index, task.mode, "invalid", reason=f"generator: {short_error(e)}")
    if task.minimize_cause:
        small, r = minimize(case, task.minimize_cause)
        return Report(task.index, task.mode, r.status, r.groups, r.cause,
                      minimized=reproducer(small, r))
    r = check(case)
    report = Report(task.index, task.mode, r.status, r.groups, r.cause,
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
            conn.send(Report(task.index, task.mode, "plugin", cause="exception",
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
        return Report(task.index, task.mode, "plugin", cause="exception",
                      problems=[f"[exception] process: {why}"], crashed=True,
                      text=f"# {why}\n# rerun: python -m torch_graphfuse.testing.fuzz "
                           f"--seed {task.seed} --index {task.index} {rerun_flags(task)}")

    def close(self) -> None:
        for s in self.slots:
            s["conn"].send(None)
            s["proc"].join(timeout=5)
            if s["proc"].is_alive():
                s["proc"].kill()
