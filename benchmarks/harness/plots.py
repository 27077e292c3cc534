"""The drawing every benchmark plot shares: speedups as grouped bars around 1x, saved as PNG."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any


def pyplot() -> ModuleType:
    """matplotlib's pyplot on the Agg backend, which needs no display. Imported here, at the
    first plot: the benchmarks run (and the GPU one reports) without matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def bars(ax: Any, series: Sequence[tuple[str, Sequence[float]]]) -> None:
    """One bar per series at each x position, side by side, and a dashed line at 1x."""
    width = 0.8 / len(series)
    for i, (label, values) in enumerate(series):
        offset = (i - (len(series) - 1) / 2) * width
        ax.bar([x + offset for x in range(len(values))], values, width, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")


def x_labels(ax: Any, labels: Sequence[str], rotation: int, fontsize: int) -> None:
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=rotation, ha="right", fontsize=fontsize)


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
