"""The benchmark's --quick smoke run completes and writes its table and plot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmark_modules import BENCHMARKS

BENCH = BENCHMARKS / "bench.py"


def test_quick_benchmark_writes_results(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(BENCH), "--quick", "--models", "mlp", "--out",
                    str(tmp_path)], check=True, capture_output=True, text=True, timeout=600)
    results = (tmp_path / "RESULTS.md").read_text()
    assert "| MLP | 1 | fp32 |" in results and "| MLP | 1 | bf16 |" in results
    assert "failed" not in results
    assert (tmp_path / "speedup.png").stat().st_size > 0
