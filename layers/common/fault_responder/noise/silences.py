"""Silences: for a while, incidents and notices whose labels match notify nobody. See docs/silences.md.

A silence has label matchers (fault_responder.routing.matchers, as Alertmanager writes them), a start, an end, an author
and a comment. It is *pending* before its start, *active* from its start until its end, and *expired* from its end
on: the end is excluded, so a silence expired "now" stops silencing at once. The rules for making one follow
Alertmanager's:

- at least one matcher, and at least one that does not match the empty string (`instance!=i-1` alone would
  silence every incident of every other instance);
- it ends after it starts, and not in the past; a start in the past is moved to now, so a silence never claims
  to have silenced what was already sent;
- expiring a pending silence ends it before it started (start and end both become now).

Unlike Alertmanager, expiring a silence that has already expired is an error (the CLI says so), and author and
comment are required and bounded. Silenced incidents are still recorded; only notification is held back.
"""

from __future__ import annotations

import builtins
import re
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol

from fault_responder.core.accounts import Accounts
from fault_responder.core.domain import Incident
from fault_responder.routing.matchers import Labels, Matcher, MatcherError, Op, incident_labels, matches_all

MAX_MATCHERS = 20
MAX_AUTHOR = 100
MAX_COMMENT = 500
ID_BYTES = 8
_ID = re.compile(rf"^[0-9a-f]{{{ID_BYTES * 2}}}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class SilenceError(ValueError):
    """A silence that cannot be made or changed as asked; the message says why."""


class UnknownSilenceError(LookupError):
    def __init__(self, silence_id: str) -> None:
        super().__init__(f"no silence with id {silence_id}")
        self.silence_id = silence_id


class SilenceAlreadyExpiredError(SilenceError):
    def __init__(self, silence: Silence) -> None:
        super().__init__(f"silence {silence.id} already expired at {iso(silence.ends_at)}")
        self.silence = silence


class SilenceExistsError(SilenceError):
    def __init__(self, silence_id: str) -> None:
        super().__init__(f"a silence with id {silence_id} already exists")
        self.silence_id = silence_id


class SilenceState(StrEnum):
    PENDING = "pending"
    ACTIVE = "active"
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Silence:
    id: str
    matchers: tuple[Matcher, ...]
    starts_at: datetime
    ends_at: datetime
    created_by: str
    comment: str
    created_at: datetime

    def __post_init__(self) -> None:
        check_id(self.id)
        _check_matchers(self.matchers)
        for name in ("starts_at", "ends_at", "created_at"):
            object.__setattr__(self, name, _utc(name, getattr(self, name)))
        if self.ends_at < self.starts_at:
            raise SilenceError("a silence cannot end before it starts")
        object.__setattr__(self, "created_by", _text("author", self.created_by, MAX_AUTHOR))
        object.__setattr__(self, "comment", _text("comment", self.comment, MAX_COMMENT))

    def state(self, now: datetime) -> SilenceState:
        if now < self.starts_at:
            return SilenceState.PENDING
        if now < self.ends_at:
            return SilenceState.ACTIVE
        return SilenceState.EXPIRED

    def matches(self, labels: Labels) -> bool:
        return matches_all(self.matchers, labels)

    def is_silencing(self, labels: Labels, now: datetime) -> bool:
        return self.state(now) == SilenceState.ACTIVE and self.matches(labels)

    def expired_at(self, now: datetime) -> Silence:
        """This silence ended at `now` (a pending one also starts then: it never silenced anything)."""
        state = self.state(now)
        if state == SilenceState.EXPIRED:
            raise SilenceAlreadyExpiredError(self)
        starts_at = now if state == SilenceState.PENDING else self.starts_at
        return replace(self, starts_at=starts_at, ends_at=now)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: matchers as their text (`cluster=gpu-training`), times as ISO 8601 UTC."""
        return {
            "id": self.id,
            "matchers": [str(matcher) for matcher in self.matchers],
            "starts_at": iso(self.starts_at),
            "ends_at": iso(self.ends_at),
            "created_by": self.created_by,
            "comment": self.comment,
            "created_at": iso(self.created_at),
        }


class SilenceStore(Protocol):
    """Where silences live (adapters/silence_store.py keeps them in the incidents table)."""

    def add(self, silence: Silence) -> Silence: ...

    def get(self, silence_id: str) -> Silence | None: ...

    def list(self, include_expired: bool = False, *, now: datetime | None = None) -> builtins.list[Silence]: ...

    def expire(self, silence_id: str, now: datetime) -> Silence: ...

    def active(self, now: datetime) -> builtins.list[Silence]: ...


def new_silence(
    matchers: Sequence[Matcher],
    *,
    ends_at: datetime,
    created_by: str,
    comment: str,
    now: datetime,
    starts_at: datetime | None = None,
) -> Silence:
    """A new silence with a fresh random id, by the rules for making one (see the module's docstring)."""
    now = _utc("now", now)
    start = now if starts_at is None else max(_utc("starts_at", starts_at), now)
    end = _utc("ends_at", ends_at)
    if end <= now:
        raise SilenceError(f"the end ({iso(end)}) is not in the future")
    if end <= start:
        raise SilenceError(f"the end ({iso(end)}) must be after the start ({iso(start)})")
    return Silence(new_id(), tuple(matchers), start, end, created_by, comment, now)


def silencing(silences: Iterable[Silence], labels: Labels, now: datetime) -> Silence | None:
    """The active silence matching `labels` that ends last (of two ending together, the greater id), or None."""
    matching = [silence for silence in silences if silence.is_silencing(labels, now)]
    return max(matching, key=lambda silence: (silence.ends_at, silence.id), default=None)


def sort_for_display(silences: Iterable[Silence], now: datetime) -> builtins.list[Silence]:
    """Active first (ending soonest first), then pending (starting soonest first), then expired (latest first)."""
    order = {SilenceState.ACTIVE: 0, SilenceState.PENDING: 1, SilenceState.EXPIRED: 2}

    def key(silence: Silence) -> tuple[int, float, str]:
        state = silence.state(now)
        if state == SilenceState.ACTIVE:
            moment = silence.ends_at.timestamp()
        elif state == SilenceState.PENDING:
            moment = silence.starts_at.timestamp()
        else:
            moment = -silence.ends_at.timestamp()
        return order[state], moment, silence.id

    return sorted(silences, key=key)


def new_id() -> str:
    return secrets.token_hex(ID_BYTES)


def check_id(silence_id: str) -> str:
    if not isinstance(silence_id, str) or not _ID.match(silence_id):
        raise SilenceError(f"{silence_id!r} is not a silence id ({ID_BYTES * 2} lowercase hexadecimal digits)")
    return silence_id


def matcher_to_dict(matcher: Matcher) -> dict[str, str]:
    return {"name": matcher.name, "op": matcher.op.value, "value": matcher.value}


def matcher_from_dict(data: dict[str, Any]) -> Matcher:
    try:
        return Matcher(str(data["name"]), Op(data["op"]), str(data["value"]))
    except (KeyError, ValueError) as error:
        raise MatcherError(f"a stored matcher cannot be read: {data!r} ({error})") from None


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC with a Z: `2026-11-01T08:00:00Z` (microseconds only when there are some)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _check_matchers(matchers: tuple[Matcher, ...]) -> None:
    if not isinstance(matchers, tuple) or not all(isinstance(matcher, Matcher) for matcher in matchers):
        raise SilenceError("a silence's matchers are a tuple of matchers")
    if not matchers:
        raise SilenceError("a silence needs at least one matcher")
    if len(matchers) > MAX_MATCHERS:
        raise SilenceError(f"a silence has at most {MAX_MATCHERS} matchers, not {len(matchers)}")
    if all(matcher.matches({}) for matcher in matchers):
        shown = ", ".join(str(matcher) for matcher in matchers)
        raise SilenceError(
            f"at least one matcher must not match the empty label ({shown} would silence everything"
            " that lacks those labels): add one such as cluster=NAME"
        )


def _utc(name: str, moment: datetime) -> datetime:
    if not isinstance(moment, datetime) or moment.tzinfo is None or moment.utcoffset() is None:
        raise SilenceError(f"{name} must be a timezone-aware time, not {moment!r}")
    return moment.astimezone(UTC)


def _text(name: str, value: str, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise SilenceError(f"the {name} is required")
    value = value.strip()
    if len(value) > limit:
        raise SilenceError(f"the {name} is longer than {limit} characters ({len(value)})")
    if _CONTROL.search(value):
        raise SilenceError(f"the {name} must be one line of text, without control characters")
    return value


# --- A silence across an organization's accounts ---------------------------------------------------------------------

SCOPING_LABELS = frozenset({"account", "account_name", "cluster", "instance"})
"""With the organization's bus, a silence without a matcher on one of these that narrows it (one that does not match the
empty value) mutes every account's and Region's incidents alike: it is made only when asked for (`--all-accounts`)."""


def spans_accounts(matchers: Sequence[Matcher]) -> bool:
    """Whether a silence with these matchers would hold back every account's incidents: none names an account, a cluster
    or an instance (a matcher that matches the empty value, `cluster!=x`, names none)."""
    return not any(matcher.name in SCOPING_LABELS and not matcher.matches({}) for matcher in matchers)


# --- Telling the channels a silence mutes that it started and that it ended -------------------------------------------


class Phase(StrEnum):
    """What of a silence its channels are told."""

    STARTED = "started"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class Announcement:
    """Where a silence's start (or end) is told, and how far that went (kept with the silence, see
    adapters/silence_store.py): the sweep that claims it tells each receiver once, and a sweep that takes over from one
    that died looks for what it may have posted before posting again."""

    version: int = 0
    """Moved by every write: each is conditional on the version read, so two sweeps never both own it."""
    owner: str | None = None
    until: float = 0.0
    """Epoch seconds: the owner's claim lapses then, and another sweep may take over."""
    receivers: tuple[str, ...] = ()
    """The receivers to tell, decided when it is first claimed."""
    told: tuple[str, ...] = ()
    pending: tuple[tuple[str, float], ...] = ()
    """Receiver -> when a post to it began whose outcome is not known yet (the owner died, or the post timed out)."""
    done: bool = False

    @property
    def decided(self) -> bool:
        return self.version > 0

    def left(self) -> tuple[str, ...]:
        return tuple(name for name in self.receivers if name not in self.told)

    def pending_since(self, receiver: str) -> float | None:
        return next((at for name, at in self.pending if name == receiver), None)


def due(silence: Silence, announced: dict[Phase, Announcement], now: datetime, within: timedelta) -> Phase | None:
    """What of the silence is to be told now, if anything: its start once it is active, its end once it has expired
    (having ever been active), each once, and only within `within` of happening (a start or an end older than that, a
    silence that predates the stack's announcements say, is told nobody). A silence that started and ended between two
    sweeps has only its end told (which says when it started)."""
    state = silence.state(now)
    if state == SilenceState.ACTIVE:
        told = announced.get(Phase.STARTED)
        if (told is None or not told.done) and now - silence.starts_at <= within:
            return Phase.STARTED
        return None
    if state == SilenceState.EXPIRED and silence.ends_at > silence.starts_at:
        told = announced.get(Phase.ENDED)
        if (told is None or not told.done) and now - silence.ends_at <= within:
            return Phase.ENDED
    return None


@dataclass(frozen=True, slots=True)
class Muted:
    """An open incident a silence matches: where it is, and who is told of it (its receivers)."""

    incident: str
    """Its id (an instance's incident, or a fleet incident)."""
    where: str
    """`prod-ml (111111111111), us-west-2`, or the cluster alone in a single-account stack."""
    receivers: tuple[str, ...]


def muted_by(silence: Silence, incidents: Iterable[Incident], accounts: Accounts) -> list[Muted]:
    """The open incidents the silence's matchers match now (whether it is active or not), each with where it is and who
    is told of it: what it mutes, and the channels that are told that it started and ended."""
    found: list[Muted] = []
    for incident in incidents:
        if not incident.is_open or not silence.matches(incident_labels(incident)):
            continue
        instance = incident.instance
        where = incident.where or accounts.where(instance)
        place = f"{where.account_text}, {where.region}" if where is not None else f"cluster {instance.cluster_name}"
        found.append(Muted(incident.id, place, tuple(incident.receivers)))
    return found


def by_place(muted: Iterable[Muted]) -> dict[str, list[str]]:
    """The incidents muted, by where they are (account and Region, or cluster), in the order met."""
    places: dict[str, list[str]] = {}
    for item in muted:
        places.setdefault(item.where, []).append(item.incident)
    return places
