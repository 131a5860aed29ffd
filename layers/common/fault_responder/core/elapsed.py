"""The clock of the product's timers: how much time passed between two calls, and nothing else.

Every timer that decides by time passed across calls (how old a cached copy is, whether a refresh is due, a rate
limit on forced reads) reads `monotonic()` here, never `time.monotonic` or `time.perf_counter` itself. It is
`time.monotonic` plus the time `skip` said passed at once: the sandbox's clock (sandbox/run.py, `SandboxClock`)
skips a scenario step's delay here as it moves the wall clock on, so a cache four seconds older on the wall clock
is four seconds older here too. On Lambda nothing skips, and it is `time.monotonic`.

What stays on `time.monotonic` is real time that bounds one call while it waits: an invocation's budget, a deadline
paired with a real `time.sleep`. tests/unit/test_elapsed_clock.py names each of those and fails on any other read.

Like any monotonic clock it never goes back: a skip is never undone.
"""

from __future__ import annotations

import threading
import time


class _Skipped:
    seconds = 0.0
    lock = threading.Lock()


def monotonic() -> float:
    """Seconds, monotonic: only differences mean anything."""
    return time.monotonic() + _Skipped.seconds


def skip(seconds: float) -> None:
    """`seconds` (>= 0) passed at once."""
    if not seconds >= 0:  # (NaN too)
        raise ValueError(f"time cannot go back or skip {seconds!r} seconds")
    with _Skipped.lock:
        _Skipped.seconds += seconds


def skipped() -> float:
    """The seconds skipped so far."""
    return _Skipped.seconds
