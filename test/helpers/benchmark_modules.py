"""The benchmark drivers and their harness, imported as a driver run as a script sees them:
with benchmarks/ first on sys.path."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str) -> ModuleType:
    """A driver (`gpu_bench`) or a part of the harness (`harness.cpu.compare`)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
