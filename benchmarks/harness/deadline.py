"""A time limit on a block of Python in the main thread: a peer's build (inductor took over 10
minutes on Hugging Face's Swin), which should cost the table that peer's cell, not the model's
row. The limit raises in the block when SIGALRM arrives, which the interpreter delivers between
bytecodes and in the waits it retries (a compile worker's result, a sleep)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


class Overrun(TimeoutError):
    """The block ran past its limit."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise Overrun in the block once it has run `seconds` (no limit for None)."""
    if seconds is None:
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Overrun(f"ran past {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def overran(error: BaseException) -> Overrun | None:
    """The Overrun behind `error`, if any: a compiler re-raises what interrupted it as its
    own error (inductor: InductorError), with the Overrun as its cause or context."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, Overrun):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None
