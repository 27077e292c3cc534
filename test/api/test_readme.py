"""The README's op table lists every op the mapping table takes, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from torch_graphfuse.backends.onednn.op_table import LOWERINGS

README = Path(__file__).resolve().parents[2] / "README.md"


def _documented_ops() -> set[str]:
    text = README.read_text()
    table = text.split("## Supported ops", 1)[1].split("##", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    ops = [op for cell in first_cells for op in re.findall(r"`((?:\w+::)?\w+)`", cell)]
    return {op if "::" in op else f"aten::{op}" for op in ops}


def test_readme_lists_every_mapped_op() -> None:
    assert _documented_ops() == set(LOWERINGS)


def test_readme_starts_with_the_two_commands() -> None:
    lines = README.read_text().splitlines()
    block = lines[lines.index("```sh") + 1:lines.index("```sh") + 3]
    assert [line.split()[0] for line in block] == ["scripts/demo.sh", "scripts/test.sh"]
    ci = (README.parent / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci
