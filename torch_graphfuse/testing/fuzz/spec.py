"""What a fuzz case is, and how the generator makes its choices.

A `Case` (graph `Input`s, a list of `Op`s, the outputs, a data seed) is the
plain data every other module reads; its repr is a reproducer. The choosers
are the one source of randomness: `RandomChooser` (seeded, for the CLI) and
`DrawChooser` (hypothesis draws, so that it shrinks the program itself), both
reached only through `choice`, `chance` and `weighted`, which keeps the random
streams of a seed the same wherever the choices are made.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

T = TypeVar("T")

MAX_NUMEL = 4096  # per value: keeps a graph well under a second
MAX_INPUT_NUMEL = 1536
SPECIALS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


@dataclass
class Input:
    """A graph input: its shape at the profiled calls and (if any) at the second
    call, its memory layout (and another at the second call: `layout2`), NaN/inf
    written at flat positions (in every call, or only after profiling: `late`), and its
    shapes at the further sizes a serving stream brings (`more`, the sizes mode)."""

    shape: tuple[int, ...]
    shape2: tuple[int, ...] | None = None
    layout: str = "contiguous"
    specials: tuple[tuple[int, str], ...] = ()
    late: bool = False
    layout2: str | None = None
    more: tuple[tuple[int, ...], ...] = ()


@dataclass
class Op:
    """One op application: `kind` on the values `args` (inputs first, then one
    value per op), with attributes. Layers and constants are seeded by attrs["seed"]."""

    kind: str
    args: tuple[int, ...]
    attrs: dict[str, Any] = field(default_factory=dict)


@dataclass
class Case:
    dtype: str  # "fp32", or "bf16" (eager autocast)
    inputs: list[Input]
    ops: list[Op]
    outputs: list[int]
    data_seed: int = 0

    @property
    def has_second(self) -> bool:
        return any(i.shape2 is not None or i.layout2 is not None for i in self.inputs)

    @property
    def sizes(self) -> int:
        """The further sizes each input has (the sizes mode)."""
        return min((len(i.more) for i in self.inputs), default=0)

    def calls(self) -> list[tuple[str, int]]:
        """The calls compared with eager after profiling: (name, which shape: 0 the
        profiled, 1 the second, k >= 2 the further size k - 2). Each new size is called
        twice: a group compiles it (or fuses it again) at its first or second call."""
        calls = [("call 3", 0)]
        if self.has_second:
            calls += [("new shape", 1), ("new shape again", 1)]
        for k in range(self.sizes):
            calls += [(f"size {k + 3}", k + 2), (f"size {k + 3} again", k + 2)]
        return calls


def value_name(case_inputs: int, index: int) -> str:
    return f"x{index}" if index < case_inputs else f"v{index}"


# ------------------------------------------------------------------------ choosers

class Chooser(Protocol):
    def integer(self, lo: int, hi: int) -> int: ...


class RandomChooser:
    """Choices from a seeded `random.Random` (the CLI)."""

    def __init__(self, seed: object) -> None:
        self.rng = random.Random(str(seed))

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)


class DrawChooser:
    """Choices drawn by hypothesis, so that it shrinks the program itself."""

    def __init__(self, draw: Callable[[Any], Any]) -> None:
        from hypothesis import strategies as st
        self.draw, self.st = draw, st

    def integer(self, lo: int, hi: int) -> int:
        return int(self.draw(self.st.integers(lo, hi)))


# Everything below draws through these, so both choosers shrink/replay alike:
# the first option is the simplest (hypothesis shrinks toward it).
def choice(c: Chooser, options: Sequence[T]) -> T:
    return options[c.integer(0, len(options) - 1)]


def chance(c: Chooser, p: float) -> bool:
    return c.integer(0, 99) >= 100 - round(100 * p)


def weighted(c: Chooser, options: Sequence[tuple[T, int]]) -> T:
    r = c.integer(0, sum(w for _, w in options) - 1)
    for item, w in options:
        if r < w:
            return item
        r -= w
    raise AssertionError("unreachable")
