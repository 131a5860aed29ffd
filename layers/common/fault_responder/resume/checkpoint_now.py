"""Ask a running training job to save a checkpoint now, and tell which checkpoint answers (docs/checkpoint-contract.md).

The request is one small JSON object at the root of the job's checkpoint prefix, `_CHECKPOINT_NOW`, beside the
step folders (discovery lists folders only, so it is never mistaken for one). The training helper reads it every N
steps (one conditional GetObject: nothing is transferred while it is unchanged), saves at its next step boundary
with the request's id in the manifest (`answers`), and, when asked, holds there until the job is stopped, so
that a move right after the save loses no step.

A complete checkpoint answers a request only when it names the request, wherever its commit marker can: a
`_COMPLETE` manifest answers when its `answers` is the request's id, and never by its time, so a periodic save
finished during the wait (by a job that ignores the request and trains on) is not taken for the answer. The time
rule is only for the markers that cannot carry an id (DCP's `.metadata`, a `COMPLETED` file, Megatron's tracker):
one of those answers when it was written after the request was stored, in a later second (S3 keeps these times to
the second), as a save finished after the request holds everything trained before it. Both times are S3's own (the
request object's and the marker's LastModified), so no clock of ours is compared with S3's.

Domain only: reading and writing the request is `fault_responder.adapters.s3_checkpoints.S3CheckpointRequests`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from fault_responder.resume.checkpoints import (
    REQUEST_ID_RE,
    Checkpoint,
    CheckpointSearch,
    MarkerKind,
    S3Location,
    parse_checkpoint_uri,
)
from fault_responder.resume.config import _Payload
from fault_responder.resume.jobs import CHECKPOINT_URI_TAG, JOB_ID_TAG

REQUEST_NAME = "_CHECKPOINT_NOW"
REQUEST_FORMAT = "fault-responder-checkpoint-request/1"
MAX_REQUEST_BYTES = 4096
"""A request is a few hundred bytes; a bigger object at that key is not ours and is not read further."""
MAX_WAIT = timedelta(hours=24)
MAX_TEXT = 256
"""`reason` and `requested_by`: one line for people, refused (not clipped) when longer."""


def valid_request_id(value: Any) -> bool:
    """An id the contract allows: 1 to 128 characters of letters, digits and `._:-`."""
    return isinstance(value, str) and REQUEST_ID_RE.fullmatch(value) is not None


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    """What `_CHECKPOINT_NOW` holds: save before `deadline`; then hold until `hold_until`, if set."""

    id: str
    requested_at: datetime
    deadline: datetime
    hold_until: datetime | None
    reason: str
    requested_by: str

    def pending(self, now: datetime) -> bool:
        """Whether a job that has not answered it yet should still save for it."""
        return now < self.deadline

    def to_json(self) -> bytes:
        document = {
            "format": REQUEST_FORMAT,
            "id": self.id,
            "requested_at": _iso(self.requested_at),
            "deadline": _iso(self.deadline),
            "hold_until": _iso(self.hold_until) if self.hold_until else None,
            "reason": self.reason,
            "requested_by": self.requested_by,
        }
        return json.dumps(document, indent=1).encode()


def request_location(location: S3Location) -> tuple[str, str]:
    """The bucket and key of the request object of a checkpoint prefix."""
    return location.bucket, location.prefix + REQUEST_NAME


def new_request(
    now: datetime,
    *,
    wait: timedelta,
    hold: timedelta | None = None,
    reason: str = "",
    requested_by: str = "",
    token: str | None = None,
) -> CheckpointRequest:
    """A request made at `now`, to be answered within `wait`; with `hold`, the job then waits that long (from
    now) at the saved step for its stop. Raises ValueError for a wait or hold out of bounds, or text too long."""
    if now.tzinfo is None:
        raise ValueError("now must carry a UTC offset")
    if not timedelta(0) < wait <= MAX_WAIT:
        raise ValueError(f"wait must be longer than nothing and at most {MAX_WAIT}")
    if hold is not None and not wait <= hold <= MAX_WAIT:
        raise ValueError(f"hold must be at least the wait ({wait}) and at most {MAX_WAIT}")
    for name, text in (("reason", reason), ("requested_by", requested_by)):
        if len(text) > MAX_TEXT or any(ch in text for ch in "\r\n"):
            raise ValueError(f"{name} must be one line of at most {MAX_TEXT} characters")
    at = now.astimezone(UTC)
    suffix = token if token is not None else secrets.token_hex(4)
    request_id = f"cn-{at:%Y%m%dT%H%M%SZ}-{suffix}"
    if not valid_request_id(request_id):
        raise ValueError(f"token {suffix!r} makes an invalid request id")
    return CheckpointRequest(
        id=request_id,
        requested_at=at,
        deadline=at + wait,
        hold_until=at + hold if hold is not None else None,
        reason=reason,
        requested_by=requested_by,
    )


def parse_request(raw: bytes | None) -> CheckpointRequest | str:
    """The request, or why the object is not one (one line of text; the object is untrusted)."""
    if raw is None:
        return "there is no request"
    if len(raw) > MAX_REQUEST_BYTES:
        return f"{REQUEST_NAME} is over {MAX_REQUEST_BYTES} bytes"
    try:
        document = json.loads(raw)
    except ValueError:
        return f"{REQUEST_NAME} is not JSON"
    if not isinstance(document, dict) or document.get("format") != REQUEST_FORMAT:
        return f"{REQUEST_NAME} is not a {REQUEST_FORMAT} request"
    if not valid_request_id(document.get("id")):
        return f"{REQUEST_NAME} has no valid id"
    # As strict as the training helper's reading: a request the job would ignore is not one to wait for.
    try:
        requested_at = _moment(document.get("requested_at"))
        deadline = _moment(document.get("deadline"))
        hold = document.get("hold_until")
        hold_until = _moment(hold) if hold is not None else None
        reason, requested_by = (_text(document.get(name), name) for name in ("reason", "requested_by"))
    except ValueError as error:
        return f"{REQUEST_NAME}: {error}"
    return CheckpointRequest(
        id=document["id"],
        requested_at=requested_at,
        deadline=deadline,
        hold_until=hold_until,
        reason=reason,
        requested_by=requested_by,
    )


NAMING_MARKERS = frozenset({MarkerKind.MANIFEST})
"""The commit markers a save can name a request in: `_COMPLETE`, whose `answers` the responder reads. The others
cannot carry an id: DCP's `.metadata` is torch's own serialised metadata, never read (only its size is checked); a
`COMPLETED` file may be empty and is never read; Megatron's tracker holds an iteration number only."""


def answers(checkpoint: Checkpoint | None, request: CheckpointRequest, stored_at: datetime | None) -> bool:
    """Whether `checkpoint` (the newest complete one) answers `request`, stored by S3 at `stored_at` (its
    LastModified; the request's own time when unknown): by naming it, where its marker can name it (NAMING_MARKERS),
    else by its marker's time."""
    if checkpoint is None:
        return False
    if checkpoint.marker in NAMING_MARKERS:
        # A manifest that does not name the request is a save the job made for itself (a periodic one), however
        # recent: the job did not answer, so it did not hold either, and trained on after it.
        return checkpoint.answers == request.id
    since = stored_at or request.requested_at
    # Strictly later: S3 keeps these times to the second, and a marker of the same second may predate the request.
    return checkpoint.written_at is not None and checkpoint.written_at > since


@dataclass(frozen=True, slots=True)
class Answer:
    """How a request ended: the checkpoint that answered it, or none by the deadline (then `newest` is what a
    move falls back to)."""

    request: CheckpointRequest
    answered_by: Checkpoint | None
    before: Checkpoint | None
    """The newest complete checkpoint when the request was made."""
    newest: Checkpoint | None
    """The newest complete checkpoint when the wait ended."""
    searches: int
    waited: timedelta

    @property
    def steps_gained(self) -> int | None:
        """Steps the answering checkpoint holds beyond the one before the request (None without both)."""
        if self.answered_by is None or self.before is None:
            return None
        return self.answered_by.step - self.before.step


def wait_for_answer(
    request: CheckpointRequest,
    *,
    stored_at: datetime | None,
    before: Checkpoint | None,
    search: Callable[[], CheckpointSearch],
    now: Callable[[], datetime],
    sleep: Callable[[float], None],
    poll_seconds: float,
    until: datetime | None = None,
) -> Answer:
    """Search for the newest complete checkpoint every `poll_seconds` until one answers `request` or `until`
    (default: the request's deadline) has passed; the last search is made at or after that moment."""
    if poll_seconds <= 0:
        raise ValueError("poll_seconds must be positive")
    end = min(until or request.deadline, request.deadline)
    started = now()
    searches = 0
    while True:
        found = search().checkpoint
        searches += 1
        moment = now()
        answered = found if answers(found, request, stored_at) else None
        if answered is not None or moment >= end:
            return Answer(request, answered, before, found, searches, moment - started)
        sleep(max(0.0, min(poll_seconds, (end - moment).total_seconds())))


@dataclass(frozen=True, slots=True)
class StoredRequest:
    """The object at a prefix's `_CHECKPOINT_NOW`, as S3 holds it."""

    body: bytes
    etag: str
    stored_at: datetime | None
    """S3's LastModified: the time a checkpoint's marker is compared with."""


@dataclass(frozen=True, slots=True)
class Placed:
    """The request to wait for: the one just stored, or one already pending that was joined."""

    request: CheckpointRequest
    stored: StoredRequest
    joined: bool


class MoveAsk(StrEnum):
    """Where a move's checkpoint-now request stands (the workflow's `Plan.checkpoint_now`)."""

    SKIPPED = "skipped"
    """Not asked: the fault leaves the job unable to save, the stack asks never, or the job is a retry's."""
    ASKED = "asked"
    """Waiting for the answer (or the deadline)."""
    ANSWERED = "answered"
    TIMED_OUT = "timed_out"
    """No answer by the deadline: the move falls back to the newest complete checkpoint."""
    FAILED = "failed"
    """The request could not be written (S3 refused it): the move goes on without waiting."""


class MoveCheckpoint(_Payload):
    """A move's checkpoint-now request, as it travels between the workflow's states (bounded: ids, times, steps)."""

    state: MoveAsk
    detail: str = ""
    """Why it was skipped or failed, in one line."""
    request_id: str | None = None
    joined: bool = False
    """The request was already pending (an operator asked first): the move waits for that one."""
    requested_at: datetime | None = None
    deadline: datetime | None = None
    hold_until: datetime | None = None
    stored_at: datetime | None = None
    """S3's time of the request object (what a marker without an id is compared with)."""
    before_step: int | None = None
    """The newest complete checkpoint's step when the request was made."""
    before_at: datetime | None = None
    """When that checkpoint was saved (Checkpoint.saved: the manifest's time, else S3's): with the one a move
    resumes from, the job's pace."""
    answered_step: int | None = None
    answered_uri: str | None = None
    answered_named: bool | None = None
    """Whether the answer named the request (a manifest's `answers`); False: a marker that cannot, taken by its
    time, after which the job may have trained on."""
    waited_seconds: float | None = None
    """From the request to the answer, or to the deadline."""
    searches: int = 0

    def request(self) -> CheckpointRequest:
        if self.request_id is None or self.requested_at is None or self.deadline is None:
            raise ValueError(f"a checkpoint-now request in state {self.state} names no request")
        return CheckpointRequest(self.request_id, self.requested_at, self.deadline, self.hold_until, "", "")


def skip_reason(fault_class: str, fault_label: str, wait_seconds: int, faults: Iterable[str]) -> str | None:
    """Why a move after this fault does not ask the job to save first (None: it asks)."""
    if wait_seconds <= 0:
        return "CheckpointNowSeconds is 0: moves never ask"
    if fault_class not in set(faults):
        return f"after {fault_label} ({fault_class}) the job cannot be expected to save: moved at once"
    return None


def judge_answer(
    asked: MoveCheckpoint, newest: Checkpoint | None, now: datetime
) -> tuple[MoveCheckpoint, Checkpoint | None]:
    """After one search: the request answered (by `newest`), still pending, or timed out at its deadline. Returns
    the request's new state and the checkpoint a move should resume from when it ended (None while pending)."""
    request = asked.request()
    total = asked.searches + 1
    waited = (now - request.requested_at).total_seconds()
    if answers(newest, request, asked.stored_at) and newest is not None:
        update = {
            "answered_step": newest.step,
            "answered_uri": newest.uri,
            "answered_named": newest.marker in NAMING_MARKERS,
            "waited_seconds": waited,
        }
        return asked.model_copy(update={"state": MoveAsk.ANSWERED, "searches": total, **update}), newest
    if now >= request.deadline:
        update = {"state": MoveAsk.TIMED_OUT, "searches": total, "waited_seconds": waited}
        return asked.model_copy(update=update), newest
    return asked.model_copy(update={"searches": total}), None


@dataclass(frozen=True, slots=True)
class JobPrefixes:
    """Which checkpoint prefix to ask, per job, from its tasks' tags; and the jobs that cannot be asked."""

    prefixes: dict[str, str]
    """Job id -> its checkpoint URI, normalised."""
    problems: dict[str, str]
    """Job id -> why it cannot be asked (its tasks disagree on the URI, or it is not a valid one)."""


def job_prefixes(tasks_tags: Iterable[Mapping[str, str]], *, job: str | None = None) -> JobPrefixes:
    """The checkpoint prefix of each job among these tasks (only `job`'s, when given): a job's tasks must agree
    on `fault-responder:checkpoint-uri`, as the resume workflow requires before it touches a job."""
    uris: dict[str, set[str]] = {}
    for tags in tasks_tags:
        job_id, uri = tags.get(JOB_ID_TAG), tags.get(CHECKPOINT_URI_TAG)
        if job_id and uri and (job is None or job_id == job):
            uris.setdefault(job_id, set()).add(uri)
    prefixes: dict[str, str] = {}
    problems: dict[str, str] = {}
    for job_id, found in sorted(uris.items()):
        if len(found) > 1:
            problems[job_id] = f"its tasks disagree on {CHECKPOINT_URI_TAG}: {', '.join(sorted(found))}"
            continue
        try:
            prefixes[job_id] = parse_checkpoint_uri(found.pop()).uri
        except ValueError as error:
            problems[job_id] = f"{CHECKPOINT_URI_TAG}: {error}"
    return JobPrefixes(prefixes, problems)


def _moment(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"expected an ISO 8601 time, got {type(value).__name__}")
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        raise ValueError(f"{value[:40]!r} has no UTC offset")
    return moment


def _text(value: Any, name: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{name} is not text")
    return value if len(value) <= MAX_TEXT else f"{value[:MAX_TEXT]}... ({len(value) - MAX_TEXT} more characters)"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")
