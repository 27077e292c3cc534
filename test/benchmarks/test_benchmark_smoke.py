"""The benchmarks' quick runs complete and write their tables and plots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_modules import BENCHMARKS

from torch_graphfuse.testing import zoo

BENCH = BENCHMARKS / "bench.py"


def test_quick_benchmark_writes_results(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(BENCH), "--quick", "--models", "mlp", "--out",
                    str(tmp_path)], check=True, capture_output=True, text=True, timeout=600)
    results = (tmp_path / "RESULTS.md").read_text()
    assert "| MLP | 1 | fp32 |" in results and "| MLP | 1 | bf16 |" in results
    assert "failed" not in results
    assert (tmp_path / "speedup.png").stat().st_size > 0


@pytest.mark.skipif(zoo.missing() is not None, reason=str(zoo.missing()))
def test_lengths_benchmark_writes_results(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(BENCHMARKS / "lengths.py"), "--small", "--models",
                    "hf/bert", "--lengths", "5,9", "--rounds", "3", "--out", str(tmp_path)],
                   check=True, capture_output=True, text=True, timeout=600)
    results = (tmp_path / "RESULTS_lengths.md").read_text()
    assert results.count("| hf/bert |") == 2 and "Results off eager: none." in results
    assert "failed" not in results and "did not run" not in results
    assert (tmp_path / "lengths.png").stat().st_size > 0
