"""Running a measurement in a child process of its own, so that what one model or peer leaves
behind (compile caches, memory, a crash) cannot reach the next. Two ways back: a JSON file the
child writes, for children whose output the user watches, and a result line on the child's
stdout, for children run quietly that may crash or hang."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from .text import progress, short

T = TypeVar("T")

RESULT_MARKER = "GPU_BENCH_RESULT "  # starts the child's result line: libraries print too


def json_child(command: Callable[[Path], Sequence[str]], env: Mapping[str, str] | None = None,
               timeout: float | None = None) -> Any:
    """Run the child that `command` gives for a JSON file's path, with the terminal as its
    output, and read what it wrote there. Raises subprocess.TimeoutExpired past `timeout`,
    and subprocess.CalledProcessError where it failed or wrote nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "result.json"
        done = subprocess.run(command(path), env=env, timeout=timeout)
        if done.returncode or not path.exists():
            raise subprocess.CalledProcessError(done.returncode, done.args)
        return json.loads(path.read_text())


def json_child_or_why(command: Callable[[Path], Sequence[str]], timeout: float) -> Any:
    """json_child's result, with a child's {"failure": why} as `why`; or why it gave none."""
    try:
        data = json_child(command, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"stopped after {timeout:.0f} s"
    except subprocess.CalledProcessError as error:
        return f"its process failed (exit {error.returncode})"
    return data["failure"] if isinstance(data, dict) and "failure" in data else data


def encode(result: Any) -> str:
    """A result line's JSON: the measurement's fields, or why it failed."""
    return json.dumps({"failed": result} if isinstance(result, str) else dataclasses.asdict(result))


def print_result(result: Any) -> None:
    """The child's side: its result as the line the parent looks for."""
    # On a line of its own even after a library's output that did not end its line.
    print("\n" + RESULT_MARKER + encode(result), flush=True)


def parse_output(stdout: str, kind: type[T]) -> T | str | None:
    """The result on a child's last result line, a `kind` or why it failed; None where it
    printed none."""
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARKER)]
    if not lines:
        return None
    try:
        data = json.loads(lines[-1][len(RESULT_MARKER):])
        return str(data["failed"]) if "failed" in data else kind(**data)
    except (ValueError, TypeError) as error:
        return short(f"unreadable result line: {error}")


def _crash(returncode: int, stderr: str) -> str:
    """Why a child printed no result: its exit status and its last line on stderr."""
    if returncode < 0:
        try:
            what = f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            what = f"killed by signal {-returncode}"
    else:
        what = f"exit code {returncode}"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return short(f"{what}: {last}" if last else f"{what}, no result line")


def _kill_group(process: subprocess.Popen[str]) -> None:
    """The child and whatever it started (inductor's compile workers): a session of their own."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_child(command: Sequence[str], timeout_s: float, kind: type[T]) -> T | str:
    """Run one child: the `kind` on its result line, or why there is none. A result line
    counts even when the child crashes afterwards, in teardown: the measurement was complete."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            out, err = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            return f"timed out after {timeout_s:g} s"
        except BaseException:  # Ctrl-C: the child, in its own session, did not get it
            _kill_group(process)
            raise
    result = parse_output(out, kind)
    if result is None:
        result = _crash(process.returncode, err)
        for line in err.splitlines()[-20:]:  # the cell keeps one line of it
            progress(f"    | {line}")
    return result
