"""The drivers' shared command-line pieces: comma-separated options, the command for the
report, and the output folder."""

from __future__ import annotations

import sys
from pathlib import Path


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def command_line() -> str:
    """This run's command, as the report shows it."""
    return " ".join(["python", *sys.argv])


def output_folder(out: Path | None, quick: bool, default: Path) -> tuple[Path, str]:
    """The folder the results go to, made if missing, and the suffix of their file names:
    a --quick run into the default folder writes *-quick files beside the full run's."""
    suffix = "-quick" if quick and out is None else ""
    folder = out or default
    folder.mkdir(parents=True, exist_ok=True)
    return folder, suffix
