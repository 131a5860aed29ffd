"""A scenario's delay passes at once when nothing runs: the whole process's clock moves on, and so does the product's
elapsed-time clock (fault_responder.core.elapsed); time.monotonic does not."""

from __future__ import annotations

import time
from datetime import UTC, datetime

from fault_responder.core import elapsed
from sandbox.run import SandboxClock


def test_an_idle_delay_moves_the_clock_on_at_once_and_the_run_ends_on_the_real_time() -> None:
    clock = SandboxClock()
    wall, moment, monotonic = time.time(), datetime.now(UTC), time.monotonic()
    try:
        # When a delay of an hour passes with nothing running
        clock.wait(3600, idle=True)

        # Then the clock (time.time and datetime.now alike) is an hour on, and no hour was waited
        assert 3600 <= time.time() - wall < 3660
        assert 3600 <= (datetime.now(UTC) - moment).total_seconds() < 3660
        assert time.monotonic() - monotonic < 60
        clock.wait(60, idle=True)
        assert 3660 <= time.time() - wall < 3720
        assert clock.skipped_seconds == 3660
    finally:
        clock.stop()

    # And once the run ends the clock is the real one again
    assert abs(time.time() - wall) < 60


def test_a_delay_while_an_execution_runs_is_waited() -> None:
    clock = SandboxClock()
    started, wall = time.monotonic(), time.time()
    clock.wait(0.3, idle=False)
    assert time.monotonic() - started >= 0.3
    assert time.time() - wall < 60
    assert clock.skipped_seconds == 0
    clock.stop()


def test_an_idle_delay_moves_the_products_elapsed_clock_on_too_and_never_back() -> None:
    clock = SandboxClock()
    before, monotonic = elapsed.monotonic(), time.monotonic()
    try:
        # When a delay of an hour passes with nothing running
        clock.wait(3600, idle=True)

        # Then every product timer (caches, refreshes, rate limits) sees an hour gone; the run's own
        # timeouts (time.monotonic) do not
        assert 3600 <= elapsed.monotonic() - before < 3660
        assert time.monotonic() - monotonic < 60
    finally:
        clock.stop()

    # And once the run ends it stays ahead: a monotonic clock never goes back
    assert elapsed.monotonic() - before >= 3600


def test_a_delay_waited_moves_the_products_elapsed_clock_as_it_moves_by_itself() -> None:
    clock = SandboxClock()
    before = elapsed.monotonic()
    clock.wait(0.3, idle=False)
    assert 0.3 <= elapsed.monotonic() - before < 60
    clock.stop()
