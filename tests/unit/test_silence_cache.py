"""The router's copy of the silences (noise/policy.py `SilenceCache`, docs/silences.md): a silence holds something
back only by a copy read at most `SilenceRefreshSeconds` ago, whatever the copy held; what no silence holds back is
told at once, never waiting for a read; a read that fails lets through what it would have had to confirm."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core import elapsed
from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy, SilenceCache
from fault_responder.noise.silences import Silence, new_id
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.matchers import Labels, parse_matchers
from fault_responder.routing.router import Router, load_routing
from tests.unit.test_fleet import START, Clock, report

REFRESH = 2.0
LABELS: Labels = {"cluster": "my-cluster", "instance": "1"}


class Elapsed:
    """The product's elapsed-time clock (fault_responder.core.elapsed), moved by hand."""

    def __init__(self) -> None:
        self.seconds = 1000.0

    def __call__(self) -> float:
        return self.seconds


class Book:
    """The silences as the store holds them now. Counts its reads; a read takes what the store holds when it starts,
    and may fail, or wait at `gate` until the test lets it finish; with `slow_in_background`, a read made in the
    cache's background thread ends only when the test ends (the worst case: a read slower than the event)."""

    def __init__(self, *silences: Silence) -> None:
        self.silences = list(silences)
        self.reads = 0
        self.failing = False
        self.gate: threading.Event | None = None
        self.reading = threading.Event()
        self.slow_in_background = False
        self.ended = threading.Event()
        self._lock = threading.Lock()

    def __call__(self) -> tuple[Silence, ...]:
        with self._lock:
            self.reads += 1
            held = tuple(self.silences)
            failing, gate = self.failing, self.gate
        self.reading.set()
        if self.slow_in_background and threading.current_thread().name == "silences":
            self.ended.wait(10)
        if gate is not None:
            assert gate.wait(10), "the test never let the read finish"
        if failing:
            raise ConnectionError("the silence store cannot be reached")
        return held


def a_silence(comment: str = "driver rollout") -> Silence:
    return Silence(
        new_id(),
        parse_matchers(["cluster=my-cluster"]),
        START - timedelta(hours=1),
        START + timedelta(hours=1),
        "ops",
        comment,
        START - timedelta(hours=1),
    )


NOW = START + timedelta(minutes=5)


def expire(book: Book) -> None:
    """`fault-responder silence expire`: the store's silences end now."""
    book.silences = [silence.expired_at(NOW) for silence in book.silences]


@pytest.fixture
def clock() -> Elapsed:
    return Elapsed()


@pytest.fixture
def book() -> Book:
    return Book(a_silence())


@pytest.fixture
def cache(book: Book, clock: Elapsed) -> Iterator[SilenceCache]:
    cache = SilenceCache(book, refresh_seconds=REFRESH, clock=clock)
    yield cache
    book.ended.set()
    if book.gate is not None:
        book.gate.set()


# --- The fault that follows an expired silence -------------------------------------------------------


class Responder:
    """The alert service with the router's policy (silences from `cache`), in memory, telling recording channels."""

    def __init__(self, cache: SilenceCache) -> None:
        self.channels = RecordingChannels()
        store = MemoryInstanceStore()
        self.service = AlertService(
            StorePorts(store, store, store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels, clock=Clock()),
            lifecycle.Settings(),
            clock=Clock(),
            policy=Policy(silencer=cache.silencer),
        )

    def fault(self, number: int) -> None:
        """Instance `number`'s XID 79, on my-cluster."""
        self.service.handle(report(number, "IMPAIRED", START))

    def pages(self, number: int) -> int:
        key = f"{number:032x}"
        return sum(
            1 for s in self.channels.sent if s.service == "pagerduty" and s.action == "trigger" and key in s.target
        )

    def roots(self) -> int:
        return sum(1 for s in self.channels.sent if s.service == "slack" and s.action == "post" and s.thread_ts is None)


@pytest.mark.parametrize("idle", [REFRESH + 0.001, 4.0, 3600.0])
def test_an_expired_silence_still_in_a_stale_copy_never_holds_a_fault_back(
    cache: SilenceCache, book: Book, clock: Elapsed, idle: float
) -> None:
    # Given a fault held back by an active silence: the router's copy holds the silence
    responder = Responder(cache)
    responder.fault(1)
    assert (responder.pages(1), responder.roots()) == (0, 0)

    # When the silence is expired, and a new fault arrives longer than SilenceRefreshSeconds later (a read in the
    # background, if one started, would not end before the event is handled)
    expire(book)
    clock.seconds += idle
    book.slow_in_background = True
    reads = book.reads
    responder.fault(2)

    # Then the router read the silences again before holding it back, once, and it pages
    assert book.reads == reads + 1
    assert (responder.pages(2), responder.roots()) == (1, 1)


def test_within_silence_refresh_seconds_the_copy_still_holds_back(
    cache: SilenceCache, book: Book, clock: Elapsed
) -> None:
    # (What docs/silences.md allows: an expired silence may hold back for up to SilenceRefreshSeconds.)
    responder = Responder(cache)
    responder.fault(1)
    expire(book)
    clock.seconds += REFRESH
    reads = book.reads

    responder.fault(2)

    assert book.reads == reads
    assert (responder.pages(2), responder.roots()) == (0, 0)


# --- Holding back -------------------------------------------------------------------------------------


def test_a_fresh_copy_holds_back_without_reading(cache: SilenceCache, book: Book, clock: Elapsed) -> None:
    assert cache.silencer(LABELS, NOW) is not None
    assert book.reads == 1  # (the first read, before the first event)
    clock.seconds += REFRESH / 2

    reason = cache.silencer(LABELS, NOW)

    assert reason is not None and reason.startswith(f"silenced by {book.silences[0].id} (ops: driver rollout)")
    assert book.reads == 1


def test_a_stale_copy_whose_silence_is_still_active_is_read_once_and_holds_back(
    cache: SilenceCache, book: Book, clock: Elapsed
) -> None:
    cache.silencer(LABELS, NOW)
    clock.seconds += 60

    assert cache.silencer(LABELS, NOW) is not None
    assert cache.silencer(LABELS, NOW) is not None  # (the copy just read is fresh)
    assert book.reads == 2


def test_a_silence_added_since_the_copy_lets_a_page_through_until_the_next_read(clock: Elapsed) -> None:
    book = Book()
    cache = SilenceCache(book, refresh_seconds=REFRESH, clock=clock)
    assert cache.silencer(LABELS, NOW) is None
    book.silences = [a_silence()]

    assert cache.silencer(LABELS, NOW) is None  # (documented: a new silence may let a page through)
    cache.refresh()
    assert cache.silencer(LABELS, NOW) is not None


def test_what_no_silence_holds_back_never_waits_for_a_read(cache: SilenceCache, book: Book, clock: Elapsed) -> None:
    other: Labels = {"cluster": "another-cluster"}
    cache.silencer(other, NOW)
    clock.seconds += 60
    book.gate, book.reading = threading.Event(), threading.Event()

    # When the copy is due and the read takes its time, what the copy does not silence is answered at once
    assert cache.silencer(other, NOW) is None

    # (the read was started in the background, and is still under way)
    assert book.reading.wait(10)
    assert book.reads == 2
    book.gate.set()


@pytest.mark.parametrize("refresh", [REFRESH, 30.0, 600.0])
def test_a_copy_holds_back_until_it_is_older_than_the_refresh_interval(refresh: float, clock: Elapsed) -> None:
    book = Book(a_silence())
    cache = SilenceCache(book, refresh_seconds=refresh, clock=clock)
    cache.silencer(LABELS, NOW)
    expire(book)

    clock.seconds += refresh
    assert cache.silencer(LABELS, NOW) is not None
    clock.seconds += 0.001
    assert cache.silencer(LABELS, NOW) is None


def test_with_no_refresh_interval_the_silences_are_read_before_an_event_at_most_once_a_second(clock: Elapsed) -> None:
    book = Book(a_silence())
    cache = SilenceCache(book, refresh_seconds=0, clock=clock)
    assert cache.silencer(LABELS, NOW) is not None
    expire(book)

    clock.seconds += 0.5
    assert cache.silencer(LABELS, NOW) is not None
    assert cache.silencer({"cluster": "another-cluster"}, NOW) is None
    assert book.reads == 1
    clock.seconds += 0.5
    assert cache.silencer(LABELS, NOW) is None
    assert book.reads == 2


# --- Reads that fail, overlap, or are asked for at once ----------------------------------------------


def test_a_read_that_fails_lets_through_what_a_stale_copy_would_hold_back_and_says_so(
    cache: SilenceCache, book: Book, clock: Elapsed, caplog: pytest.LogCaptureFixture
) -> None:
    cache.silencer(LABELS, NOW)
    book.failing = True
    clock.seconds += REFRESH + 1

    with caplog.at_level(logging.WARNING, logger="fault_responder.noise.policy"):
        assert cache.silencer(LABELS, NOW) is None

    assert book.reads == 2
    assert any("cannot be read now: let through" in message for message in caplog.messages)
    assert any(book.silences[0].id in message for message in caplog.messages)


def test_a_read_that_failed_leaves_the_copy_as_old_as_it_was(cache: SilenceCache, book: Book, clock: Elapsed) -> None:
    # Given a copy holding an active silence, and a sweep whose read fails after the copy went stale
    cache.silencer(LABELS, NOW)
    clock.seconds += REFRESH + 1
    book.failing = True
    cache.refresh_or_keep()

    # Then the copy does not pass for fresh: holding back needs a read, and while none succeeds nothing is held
    assert cache.silencer(LABELS, NOW) is None
    book.failing = False
    clock.seconds += 1.0
    assert cache.silencer(LABELS, NOW) is not None


def test_a_failed_read_is_tried_again_on_the_way_to_holding_back_at_most_once_a_second(
    cache: SilenceCache, book: Book, clock: Elapsed
) -> None:
    cache.silencer(LABELS, NOW)
    clock.seconds += REFRESH + 1
    book.failing = True
    assert cache.silencer(LABELS, NOW) is None
    reads = book.reads

    clock.seconds += 0.5
    assert cache.silencer(LABELS, NOW) is None
    assert book.reads == reads

    clock.seconds += 0.5
    assert cache.silencer(LABELS, NOW) is None
    assert book.reads == reads + 1


def test_the_first_read_failing_holds_nothing_back(clock: Elapsed) -> None:
    book = Book(a_silence())
    book.failing = True
    cache = SilenceCache(book, refresh_seconds=REFRESH, clock=clock)

    assert cache.silencer(LABELS, NOW) is None
    with pytest.raises(ConnectionError):
        cache.refresh()


def test_a_read_that_started_earlier_and_ends_later_never_replaces_a_newer_copy(
    cache: SilenceCache, book: Book, clock: Elapsed
) -> None:
    # Given a background read that starts while the silence is active, and takes its time
    other: Labels = {"cluster": "another-cluster"}
    cache.silencer(other, NOW)
    clock.seconds += REFRESH
    book.gate, book.reading = threading.Event(), threading.Event()
    cache.silencer(other, NOW)
    assert book.reading.wait(10)
    background = book.gate

    # When the silence is expired, and a read made at once (a sweep's) sees it so
    expire(book)
    book.gate = None
    clock.seconds += 1
    cache.refresh()

    # And only then does the older read end, with the silence still active in what it read
    background.set()
    for thread in threading.enumerate():
        if thread.name == "silences":
            thread.join(10)

    # Then the copy is the newer one: nothing is held back, and no read was needed to know it
    reads = book.reads
    assert cache.silencer(LABELS, NOW) is None
    assert book.reads == reads


def test_threads_that_would_hold_back_by_a_stale_copy_at_once_share_one_read(
    cache: SilenceCache, book: Book, clock: Elapsed
) -> None:
    cache.silencer(LABELS, NOW)
    expire(book)
    clock.seconds += REFRESH + 1
    book.gate = threading.Event()
    answers: list[str | None] = []
    threads = [threading.Thread(target=lambda: answers.append(cache.silencer(LABELS, NOW))) for _ in range(8)]
    for thread in threads:
        thread.start()
    assert book.reading.wait(10)
    book.gate.set()
    for thread in threads:
        thread.join(10)

    assert answers == [None] * 8
    assert book.reads == 2


# --- The clock ------------------------------------------------------------------------------------------


def test_by_default_ages_are_measured_on_the_products_elapsed_clock(book: Book) -> None:
    # (the clock the sandbox moves on with a scenario's delay: sandbox/run.py, SandboxClock)
    cache = SilenceCache(book, refresh_seconds=REFRESH)
    cache.silencer(LABELS, NOW)
    expire(book)

    elapsed.skip(REFRESH + 1)

    assert cache.silencer(LABELS, NOW) is None
    assert book.reads == 2
