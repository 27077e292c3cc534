"""Text the benchmarks write: progress lines, one-line failure reasons, the report's date and
Markdown tables."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Sequence


class NotInstalled(Exception):
    """An optional benchmark dependency is missing: the peer reports `not installed`."""


def progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def short(text: str) -> str:
    return text if len(text) <= 160 else text[:157] + "..."


def failure(error: Exception) -> str:
    """Why a peer failed, on one line: a cell shows its start, the failures list all of it."""
    if isinstance(error, NotInstalled):
        return f"not installed ({error}): pip install -r requirements-bench.txt"
    return short(f"{type(error).__name__}: {error}".strip().splitlines()[0])


def failed_cell(reason: str) -> str:
    """A table cell for a peer that failed: the reason's start, shortened before its `|` are
    escaped, so no `\\` is left without its `|`."""
    return "failed: " + reason[:60].replace("|", "\\|")


def ratio(value: float | None, missing: str = "-") -> str:
    """A speedup cell: "1.23x", or `missing` where either side did not run."""
    return missing if value is None else f"{value:.2f}x"


def utc_now() -> str:
    """The report's date: now in UTC, to the minute."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]
