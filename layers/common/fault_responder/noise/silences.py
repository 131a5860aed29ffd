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
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from fault_responder.routing.matchers import Labels, Matcher, MatcherError, Op, matches_all

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
