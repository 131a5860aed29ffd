"""Checkpoint now, the domain: the request object, which checkpoint answers it, and the bounded wait
(fault_responder.resume.checkpoint_now)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from fault_responder.resume.checkpoint_now import (
    MAX_REQUEST_BYTES,
    MAX_TEXT,
    REQUEST_FORMAT,
    Answer,
    CheckpointRequest,
    answers,
    new_request,
    parse_request,
    wait_for_answer,
)
from fault_responder.resume.checkpoints import Checkpoint, CheckpointSearch, MarkerKind

NOW = datetime(2026, 12, 2, 15, 4, 5, 123000, tzinfo=UTC)
URI = "s3://training-checkpoints/runs/demo/"


def checkpoint(step: int, written_at: datetime | None, answers: str | None = None) -> Checkpoint:
    return Checkpoint(
        uri=f"{URI}step-{step:06d}/",
        step=step,
        marker=MarkerKind.MANIFEST if answers else MarkerKind.DCP_METADATA,
        written_at=written_at,
        file_count=3,
        total_bytes=300,
        answers=answers,
    )


def search(found: Checkpoint | None) -> CheckpointSearch:
    return CheckpointSearch(
        uri=URI,
        checkpoint=found,
        skipped=(),
        folders_seen=1,
        folders_ignored=0,
        candidates_examined=1,
        unexamined=0,
        tracker_step=None,
        notes=(),
    )


def test_a_request_round_trips_through_its_json_and_names_its_time_in_its_id() -> None:
    # Given a request made now, to be answered within 5 minutes and held for 10
    request = new_request(
        NOW, wait=timedelta(minutes=5), hold=timedelta(minutes=10), reason="drain", requested_by="me", token="3f9a1c2e"
    )

    # When it is written and read back
    document = json.loads(request.to_json())
    parsed = parse_request(request.to_json())

    # Then the object is the contract's and reads back as the same request
    assert document["format"] == REQUEST_FORMAT
    assert document["id"] == "cn-20261202T150405Z-3f9a1c2e"
    assert (document["deadline"], document["hold_until"]) == (
        "2026-12-02T15:09:05.123+00:00",
        "2026-12-02T15:14:05.123+00:00",
    )
    assert parsed == request
    assert len(request.to_json()) < MAX_REQUEST_BYTES


def test_two_requests_of_the_same_second_have_different_ids() -> None:
    first, second = (new_request(NOW, wait=timedelta(minutes=1)) for _ in range(2))

    assert first.id != second.id
    assert first.hold_until is None


@pytest.mark.parametrize(
    ("wait", "hold", "reason", "problem"),
    [
        (timedelta(0), None, "", "wait"),
        (timedelta(hours=25), None, "", "wait"),
        (timedelta(minutes=5), timedelta(minutes=4), "", "hold"),
        (timedelta(minutes=5), timedelta(hours=25), "", "hold"),
        (timedelta(minutes=5), None, "x" * (MAX_TEXT + 1), "reason"),
        (timedelta(minutes=5), None, "two\nlines", "reason"),
    ],
)
def test_a_request_out_of_bounds_is_refused_with_what_is_wrong(
    wait: timedelta, hold: timedelta | None, reason: str, problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        new_request(NOW, wait=wait, hold=hold, reason=reason)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (None, "no request"),
        (b"x" * (MAX_REQUEST_BYTES + 1), "over"),
        (b"{not json", "not JSON"),
        (b"[]", "not a fault-responder"),
        (json.dumps({"format": "other/1", "id": "a"}).encode(), "not a fault-responder"),
        (json.dumps({"format": REQUEST_FORMAT, "id": "has space"}).encode(), "no valid id"),
        (json.dumps({"format": REQUEST_FORMAT, "id": "a" * 129}).encode(), "no valid id"),
        (json.dumps({"format": REQUEST_FORMAT, "id": "a", "requested_at": 5}).encode(), "ISO 8601"),
        (
            json.dumps(
                {"format": REQUEST_FORMAT, "id": "a", "requested_at": "2026-12-02T15:04:05", "deadline": "x"}
            ).encode(),
            "no UTC offset",
        ),
        (
            json.dumps(
                {"format": REQUEST_FORMAT, "id": "a", "requested_at": "2026-12-02T15:04:05Z", "deadline": "soon"}
            ).encode(),
            "not an ISO 8601 time",
        ),
        (
            json.dumps(
                {
                    "format": REQUEST_FORMAT,
                    "id": "a",
                    "requested_at": "2026-12-02T15:04:05Z",
                    "deadline": "2026-12-02T15:05:05Z",
                    "reason": 5,
                }
            ).encode(),
            "reason is not text",
        ),
    ],
)
def test_an_object_that_is_not_a_request_says_why(raw: bytes | None, why: str) -> None:
    found = parse_request(raw)

    assert isinstance(found, str)
    assert why in found


def test_a_request_from_another_writer_keeps_its_fields_and_marks_clipped_text() -> None:
    # Given a request written by someone else's tool: no hold, an unknown field, a very long reason
    raw = json.dumps(
        {
            "format": REQUEST_FORMAT,
            "id": "ops:move.42",
            "requested_at": "2026-12-02T15:04:05Z",
            "deadline": "2026-12-02T15:05:05Z",
            "reason": "r" * (MAX_TEXT + 10),
            "priority": "high",
        }
    ).encode()

    found = parse_request(raw)

    assert isinstance(found, CheckpointRequest)
    assert (found.id, found.hold_until, found.requested_by) == ("ops:move.42", None, "")
    assert found.reason.endswith("... (10 more characters)")
    assert found.pending(datetime(2026, 12, 2, 15, 5, 4, tzinfo=UTC))
    assert not found.pending(datetime(2026, 12, 2, 15, 5, 5, tzinfo=UTC))


def test_a_checkpoint_answers_by_naming_the_request_or_by_finishing_in_a_later_second() -> None:
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000001")
    stored_at = NOW.replace(microsecond=0)  # S3's time of the request object, to the second

    # A manifest naming the request answers it, whenever it was written
    assert answers(checkpoint(120, stored_at - timedelta(seconds=1), answers=request.id), request, stored_at)
    # A manifest naming another request, written before, does not
    assert not answers(checkpoint(120, stored_at, answers="cn-other"), request, stored_at)
    # A marker without an id answers when written in a later second; the same second is not enough
    assert answers(checkpoint(120, stored_at + timedelta(seconds=1)), request, stored_at)
    assert not answers(checkpoint(120, stored_at), request, stored_at)
    # Without S3's time of the request, the request's own time is used
    assert not answers(checkpoint(120, NOW), request, None)
    assert answers(checkpoint(120, NOW + timedelta(milliseconds=1)), request, None)
    # No checkpoint, or one without a time, answers nothing
    assert not answers(None, request, stored_at)
    assert not answers(checkpoint(120, None), request, stored_at)


def marked(step: int, written_at: datetime, marker: MarkerKind, answers: str | None = None) -> Checkpoint:
    """A complete checkpoint committed by `marker` (only a manifest can carry `answers`)."""
    return checkpoint(step, written_at).model_copy(update={"marker": marker, "answers": answers})


def test_a_periodic_manifest_that_names_no_request_never_answers_however_late() -> None:
    # Given a request, and a job that ignores it but keeps saving with the helper (a manifest without `answers`)
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000005")
    stored_at = NOW.replace(microsecond=0)

    # Then none of its saves answers, from the same second to long after the request
    for later in (0, 1, 2, 60, 299):
        periodic = marked(120 + later, stored_at + timedelta(seconds=later), MarkerKind.MANIFEST)
        assert not answers(periodic, request, stored_at), later
        assert not answers(periodic, request, None), later


def test_a_manifest_naming_the_request_answers_it_and_one_naming_another_does_not() -> None:
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000006")
    stored_at = NOW.replace(microsecond=0)
    later = stored_at + timedelta(seconds=30)

    # A manifest naming the request answers, even of the request's own second (S3's second may round it down)
    assert answers(marked(130, later, MarkerKind.MANIFEST, answers=request.id), request, stored_at)
    assert answers(marked(130, stored_at, MarkerKind.MANIFEST, answers=request.id), request, stored_at)
    # One naming another request (an operator's, answered before) does not, however much later it was written
    assert not answers(marked(130, later, MarkerKind.MANIFEST, answers="cn-20261202T150000Z-0000000a"), request, None)
    assert not answers(marked(130, later, MarkerKind.MANIFEST, answers="cn-other"), request, stored_at)


@pytest.mark.parametrize("marker", [MarkerKind.DCP_METADATA, MarkerKind.COMPLETED_FILE, MarkerKind.MEGATRON_TRACKER])
def test_a_marker_that_cannot_name_the_request_answers_by_its_time(marker: MarkerKind) -> None:
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000007")
    stored_at = NOW.replace(microsecond=0)

    # Written in a later second than the request was stored: it holds everything trained before the request
    assert answers(marked(140, stored_at + timedelta(seconds=1), marker), request, stored_at)
    # Of the same second, or before: it may predate the request
    assert not answers(marked(140, stored_at, marker), request, stored_at)
    assert not answers(marked(140, stored_at - timedelta(seconds=5), marker), request, stored_at)


class Clock:
    """A clock that only moves when the wait sleeps, and a job that saves at a chosen moment."""

    def __init__(self, saves_after: float | None, request: CheckpointRequest) -> None:
        self.now = NOW
        self.saves_after = saves_after
        self.request = request
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += timedelta(seconds=seconds)

    def wait(self, *, before: Checkpoint | None = None, until: datetime | None = None) -> Answer:
        """The wait, as the command runs it, on this clock, for a request stored at NOW, polled every 5 s."""
        return wait_for_answer(
            self.request,
            stored_at=NOW,
            before=before,
            search=self.search,
            now=lambda: self.now,
            sleep=self.sleep,
            poll_seconds=5,
            until=until,
        )

    def search(self) -> CheckpointSearch:
        elapsed = (self.now - NOW).total_seconds()
        if self.saves_after is not None and elapsed >= self.saves_after:
            return search(checkpoint(125, self.now, answers=self.request.id))
        return search(checkpoint(120, NOW - timedelta(minutes=9)))


def test_the_wait_ends_at_the_first_search_that_finds_the_answer() -> None:
    # Given a job that saves 12 s after the request, polled every 5 s
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000002")
    clock = Clock(saves_after=12, request=request)
    before = clock.search().checkpoint

    # When the command waits
    answer = clock.wait(before=before)

    # Then the fourth search (at 15 s) finds step 125, five steps past the checkpoint before the request
    assert answer.answered_by is not None
    assert (answer.answered_by.step, answer.searches, answer.waited) == (125, 4, timedelta(seconds=15))
    assert answer.steps_gained == 5
    assert clock.slept == [5, 5, 5]


def test_a_request_not_answered_ends_at_its_deadline_with_the_newest_complete_checkpoint() -> None:
    # Given a job that never saves, a 12 s wait polled every 5 s
    request = new_request(NOW, wait=timedelta(seconds=12), token="00000003")
    clock = Clock(saves_after=None, request=request)

    answer = clock.wait()

    # Then the last search is made at the deadline (not a poll later), and step 120 is what a move falls back to
    assert answer.answered_by is None
    assert answer.newest is not None
    assert answer.newest.step == 120
    assert clock.slept == [5, 5, 2]
    assert answer.waited == timedelta(seconds=12)
    assert answer.steps_gained is None


def test_a_wait_shorter_than_the_request_s_deadline_ends_first() -> None:
    request = new_request(NOW, wait=timedelta(minutes=5), token="00000004")
    clock = Clock(saves_after=None, request=request)

    answer = clock.wait(until=NOW + timedelta(seconds=7))

    assert answer.waited == timedelta(seconds=7)
    assert answer.answered_by is None
