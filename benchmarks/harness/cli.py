"""The drivers' shared command-line pieces: comma-separated options, the zoo models named, the
command for the report, and the output folder."""

from __future__ import annotations

import sys
from pathlib import Path


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def zoo_models(text: str) -> list[str]:
    """The zoo models a --models option names; exits with the reason where the zoo's libraries
    are missing or a name is not in it."""
    from torch_graphfuse.testing import zoo

    if zoo.missing():
        raise SystemExit(zoo.missing())
    from torch_graphfuse.testing import wider_zoo

    names = comma_list(text)
    unknown = set(names) - set(zoo.MODELS) - set(wider_zoo.MODELS)
    if unknown:
        raise SystemExit(f"not in the zoo: {', '.join(sorted(unknown))}")
    return names


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
