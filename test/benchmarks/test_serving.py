"""benchmarks/serving.py on one small model, one round of two requests: its tables, every peer
measured (LLGA aside, whose C++ run may fail on its own), the ratios the targets name, and its
files. Rows and files are checked, never times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from torch_graphfuse.testing import cpp_examples, zoo

pytestmark = pytest.mark.skipif((zoo.missing() or cpp_examples.missing()) is not None,
                                reason=str(zoo.missing() or cpp_examples.missing()))

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "serving.py"


def test_one_round_writes_its_tables_and_plot(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(SCRIPT), "--models", "tv/resnet50", "--small",
                    "--rounds", "1", "--requests", "2", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=900)
    text = (tmp_path / "RESULTS_serving-quick.md").read_text()
    assert (tmp_path / "serving-quick.png").exists()
    for title in ("## First result, ms", "## Steady state, ms", "## Against the targets"):
        assert title in text
    row = next(line for line in text.splitlines() if line.startswith("| tv/resnet50 |"))
    assert "failed" not in row.split("|")[2]  # the saved model in C++
    assert "tv/resnet50, cpp:" not in text and "tv/resnet50, py_saved:" not in text
    assert "tv/resnet50, py_path:" not in text
