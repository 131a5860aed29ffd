"""Silences: state over time, matching incidents' and notices' labels, the rules for making one, and which
silence silences a label set."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta, timezone

import pytest

from fault_responder.core.domain import Severity
from fault_responder.noise.silences import (
    MAX_AUTHOR,
    MAX_COMMENT,
    MAX_MATCHERS,
    Silence,
    SilenceAlreadyExpiredError,
    SilenceError,
    SilenceState,
    check_id,
    new_id,
    new_silence,
    silencing,
    sort_for_display,
)
from fault_responder.routing.matchers import alert_labels, incident_labels, parse_matcher, parse_matchers
from tests.builders import an_alert, an_incident

NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def a_silence(
    *matchers: str,
    starts: datetime = NOW,
    ends: datetime = NOW + HOUR,
    silence_id: str | None = None,
    comment: str = "driver rollout",
) -> Silence:
    return Silence(
        silence_id or new_id(),
        parse_matchers(matchers or ("cluster=gpu-training",)),
        starts,
        ends,
        "alice",
        comment,
        NOW - HOUR,
    )


# --- State --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("at", "state"),
    [
        (NOW - timedelta(seconds=1), SilenceState.PENDING),
        (NOW, SilenceState.ACTIVE),  # the start is included
        (NOW + HOUR - timedelta(microseconds=1), SilenceState.ACTIVE),
        (NOW + HOUR, SilenceState.EXPIRED),  # the end is not
        (NOW + 2 * HOUR, SilenceState.EXPIRED),
    ],
)
def test_a_silence_is_pending_then_active_then_expired(at: datetime, state: SilenceState) -> None:
    assert a_silence().state(at) == state


def test_expiring_an_active_silence_ends_it_now() -> None:
    # Given a silence active since NOW
    silence = a_silence()

    # When it is expired ten minutes in
    expired = silence.expired_at(NOW + timedelta(minutes=10))

    # Then it ended then, started when it did, and silences nothing from then on
    assert (expired.starts_at, expired.ends_at) == (NOW, NOW + timedelta(minutes=10))
    assert expired.state(NOW + timedelta(minutes=10)) == SilenceState.EXPIRED
    assert expired.id == silence.id


def test_expiring_a_pending_silence_ends_it_before_it_ever_started() -> None:
    pending = a_silence(starts=NOW + HOUR, ends=NOW + 2 * HOUR)

    expired = pending.expired_at(NOW)

    assert (expired.starts_at, expired.ends_at) == (NOW, NOW)
    assert expired.state(NOW) == SilenceState.EXPIRED


def test_expiring_an_expired_silence_is_an_error_that_says_when_it_ended() -> None:
    with pytest.raises(SilenceAlreadyExpiredError, match="already expired at 2026-11-01T09:00:00Z"):
        a_silence().expired_at(NOW + 2 * HOUR)


# --- Matching -----------------------------------------------------------------------------------------


def test_a_silence_matches_an_incidents_labels() -> None:
    # Given the labels of an XID 79 incident on cluster gpu-training
    labels = incident_labels(an_incident())

    # Then a silence on that cluster and XID matches, one on another XID does not
    assert a_silence("cluster=gpu-training", "xid=79").matches(labels)
    assert a_silence("capacity_provider=~p5-.*", "severity=critical").matches(labels)
    assert not a_silence("cluster=gpu-training", "xid=48").matches(labels)


def test_a_silence_matches_a_notices_labels() -> None:
    labels = alert_labels(an_alert())

    assert a_silence("kind=instance_state", "drain_attribution=manual_or_scheduled").matches(labels)
    assert not a_silence("kind=health_impaired", "cluster=gpu-training").matches(labels)


def test_only_an_active_matching_silence_silences() -> None:
    labels = incident_labels(an_incident())
    silence = a_silence("xid=79", starts=NOW + HOUR, ends=NOW + 2 * HOUR)

    assert not silence.is_silencing(labels, NOW)  # pending
    assert silence.is_silencing(labels, NOW + HOUR)
    assert not silence.is_silencing(labels, NOW + 2 * HOUR)  # expired


def test_silencing_picks_the_active_matching_silence_that_ends_last() -> None:
    labels = incident_labels(an_incident())
    short = a_silence("xid=79", ends=NOW + HOUR)
    long = a_silence("cluster=gpu-training", ends=NOW + 3 * HOUR)
    not_matching = a_silence("xid=48", ends=NOW + 5 * HOUR)
    pending = a_silence("xid=79", starts=NOW + HOUR, ends=NOW + 6 * HOUR)

    assert silencing([short, long, not_matching, pending], labels, NOW) == long
    assert silencing([short, not_matching], labels, NOW + 2 * HOUR) is None


def test_silencing_breaks_a_tie_by_id_whatever_the_order() -> None:
    labels = incident_labels(an_incident())
    first = a_silence("xid=79", silence_id="0000000000000001")
    second = a_silence("xid=79", silence_id="00000000000000ff")

    assert silencing([first, second], labels, NOW) == second
    assert silencing([second, first], labels, NOW) == second


def test_a_silence_of_a_warning_leaves_the_critical_incident_alone() -> None:
    incident = an_incident(severity=Severity.WARNING, xid=13, reason="XID_13")
    silence = a_silence("severity=warning")

    assert silencing([silence], incident_labels(incident), NOW) == silence
    assert silencing([silence], incident_labels(an_incident()), NOW) is None


# --- Making one ---------------------------------------------------------------------------------------


def test_a_new_silence_starts_now_with_a_random_hex_id() -> None:
    silence = new_silence(
        parse_matchers(["cluster=gpu-training"]), ends_at=NOW + HOUR, created_by=" alice ", comment="x", now=NOW
    )
    other = new_silence(silence.matchers, ends_at=NOW + HOUR, created_by="alice", comment="x", now=NOW)

    assert silence.starts_at == NOW and silence.created_at == NOW
    assert silence.created_by == "alice"
    assert check_id(silence.id) == silence.id and len(silence.id) == 16
    assert silence.id != other.id


def test_a_start_in_the_past_is_moved_to_now() -> None:
    silence = new_silence(
        parse_matchers(["xid=79"]), starts_at=NOW - HOUR, ends_at=NOW + HOUR, created_by="a", comment="c", now=NOW
    )

    assert silence.starts_at == NOW


def test_times_are_kept_in_utc() -> None:
    plus_two = timezone(timedelta(hours=2))
    silence = new_silence(
        parse_matchers(["xid=79"]),
        starts_at=datetime(2026, 11, 1, 12, 0, tzinfo=plus_two),
        ends_at=datetime(2026, 11, 1, 13, 0, tzinfo=plus_two),
        created_by="a",
        comment="c",
        now=NOW,
    )

    assert (silence.starts_at, silence.ends_at) == (NOW + 2 * HOUR, NOW + 3 * HOUR)
    assert silence.starts_at.tzinfo is UTC
    assert silence.to_dict()["starts_at"] == "2026-11-01T10:00:00Z"


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"ends_at": NOW}, "not in the future"),
        ({"ends_at": NOW - HOUR}, "not in the future"),
        ({"starts_at": NOW + 2 * HOUR}, "must be after the start"),
        ({"matchers": ()}, "at least one matcher"),
        ({"matchers": parse_matchers(['xid=""'])}, "must not match the empty label"),
        ({"matchers": parse_matchers(["instance!=abc", "xid=~.*"])}, "must not match the empty label"),
        ({"matchers": parse_matchers(["xid=79"] * (MAX_MATCHERS + 1))}, f"at most {MAX_MATCHERS} matchers"),
        ({"created_by": ""}, "author is required"),
        ({"created_by": "   "}, "author is required"),
        ({"comment": ""}, "comment is required"),
        ({"comment": "x" * (MAX_COMMENT + 1)}, f"longer than {MAX_COMMENT}"),
        ({"created_by": "x" * (MAX_AUTHOR + 1)}, f"longer than {MAX_AUTHOR}"),
        ({"comment": "two\nlines"}, "one line"),
        ({"ends_at": datetime(2026, 11, 1, 10, 0)}, "timezone-aware"),  # naive: refused
    ],
)
def test_a_silence_that_breaks_a_rule_is_refused_with_the_reason(changes: dict[str, object], says: str) -> None:
    arguments: dict[str, object] = {
        "matchers": parse_matchers(["cluster=gpu-training"]),
        "ends_at": NOW + HOUR,
        "created_by": "alice",
        "comment": "driver rollout",
        "now": NOW,
        **changes,
    }

    with pytest.raises(SilenceError, match=says):
        new_silence(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["", "ABCDEF0123456789", "0123", "0123456789abcdefg", "../../etc/passwd"])
def test_an_id_that_is_not_sixteen_hex_digits_is_refused(bad: str) -> None:
    with pytest.raises(SilenceError, match="not a silence id"):
        check_id(bad)


def test_a_stored_silence_may_have_equal_start_and_end_but_never_end_first() -> None:
    expired_while_pending = a_silence(starts=NOW, ends=NOW)
    assert expired_while_pending.state(NOW) == SilenceState.EXPIRED

    with pytest.raises(SilenceError, match="cannot end before it starts"):
        dataclasses.replace(expired_while_pending, ends_at=NOW - HOUR)


# --- Listing ------------------------------------------------------------------------------------------


def test_silences_are_listed_active_then_pending_then_expired() -> None:
    active_long = a_silence(ends=NOW + 3 * HOUR, comment="active long")
    active_short = a_silence(ends=NOW + HOUR, comment="active short")
    pending_late = a_silence(starts=NOW + 2 * HOUR, ends=NOW + 3 * HOUR, comment="pending late")
    pending_soon = a_silence(starts=NOW + HOUR, ends=NOW + 3 * HOUR, comment="pending soon")
    expired_long_ago = a_silence(starts=NOW - 3 * HOUR, ends=NOW - 2 * HOUR, comment="expired long ago")
    expired_recently = a_silence(starts=NOW - 3 * HOUR, ends=NOW - HOUR, comment="expired recently")

    shown = sort_for_display(
        [expired_long_ago, pending_late, active_long, expired_recently, pending_soon, active_short], NOW
    )

    assert [silence.comment for silence in shown] == [
        "active short",
        "active long",
        "pending soon",
        "pending late",
        "expired recently",
        "expired long ago",
    ]


def test_a_silence_prints_its_matchers_as_they_are_written() -> None:
    silence = a_silence("cluster=gpu-training", 'severity=~"critical|error"')

    assert silence.to_dict()["matchers"] == ["cluster=gpu-training", 'severity=~"critical|error"']
    assert parse_matcher(silence.to_dict()["matchers"][1]) == silence.matchers[1]
