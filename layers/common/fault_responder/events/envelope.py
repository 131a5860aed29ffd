"""An SQS message body read into an EventBridge envelope, whatever the body holds.

EventBridge can deliver any JSON object up to 256 KB, and the router must process it or refuse it with a
reason at once, never crash on it in a retry loop. So before anything parses, copies or stores the event:
its size is checked, NaN and Infinity (not JSON) are refused, its nesting is bounded (deeply nested JSON
makes recursive code, Powertools' idempotency copy included, raise RecursionError), and text that cannot be
encoded as UTF-8 (lone surrogates, which JSON allows as escapes) is replaced, so no later write or print can
fail on it.

The bounds every time and number of an event is read within are here too (the models apply them as they parse,
fault_responder.events.ecs; docs/reliability.md has the table): nothing outside them reaches arithmetic,
ordering or storage.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_BODY_BYTES = 256 * 1024
MAX_DEPTH = 32
"""ECS events nest 6 levels deep; this leaves room for any field AWS adds."""
MAX_ID = 256

EARLIEST = datetime(2015, 1, 1, tzinfo=UTC)
"""No time an event carries is older (ECS's first events are from 2016). Keeps out Go's zero time (0001-01-01,
what a Go service writes for "no time"), the Unix epoch, and every date whose arithmetic could overflow."""
AHEAD = timedelta(days=1)
"""How far an event's `time` may be past the moment it is received, and a time in its detail past the event's `time`:
clock skew, never more. Relative to the event's own time, so replaying an old event reads it the same way."""
MAX_COUNT = 2**53 - 1
"""Versions and counts are whole numbers 0..2**53-1: exact in JSON, in a float and in a DynamoDB number (38 digits)."""
EXIT_CODES = (-(2**31), 2**32 - 1)
"""A container's exit code: a signed or unsigned 32-bit number (Linux gives 0..255, Windows 32-bit codes)."""


def in_utc_range(moment: datetime) -> datetime:
    """`moment` (with a zone) in UTC, or ValueError saying why not: UTC cannot hold it, or it is before EARLIEST."""
    try:
        utc = moment.astimezone(UTC)
    except OverflowError:
        # 0001-01-01T00:00:00+01:00 is in the year 0 in UTC.
        raise ValueError("the time is out of range in UTC") from None
    if utc < EARLIEST:
        raise ValueError(f"{utc.isoformat()} is before {EARLIEST.date().isoformat()}, the earliest time read")
    return utc


class RejectedEvent(Exception):
    """The body can never be processed; it is dead-lettered at once with `reason`."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.event_id = event_id


def read_envelope(body: str) -> dict[str, Any]:
    """The envelope as a dict with an `id`, or RejectedEvent saying why not."""
    size = len(body.encode("utf-8", "surrogatepass"))
    if size > MAX_BODY_BYTES:
        raise RejectedEvent(f"body is {size} bytes; an EventBridge event is at most {MAX_BODY_BYTES} bytes")
    try:
        document = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise RejectedEvent(f"body nests too deeply to parse (more than {MAX_DEPTH} levels allowed)") from None
    except ValueError as error:
        raise RejectedEvent(f"body is not JSON: {str(error)[:200]}") from None
    if not isinstance(document, dict):
        raise RejectedEvent(f"body is a JSON {type(document).__name__}, not an object")
    event_id = document.get("id")
    shown_id = _text(event_id)[:MAX_ID] if isinstance(event_id, str) else None
    depth = _depth(document)
    if depth > MAX_DEPTH:
        raise RejectedEvent(f"event nests more than {MAX_DEPTH} levels deep", shown_id)
    if not isinstance(event_id, str) or not event_id.strip():
        raise RejectedEvent("event has no id (a non-empty string)")
    cleaned: dict[str, Any] = _clean(document)
    return cleaned


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _depth(document: Any) -> int:
    """How deeply containers nest, computed without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:
                stack.extend((item, depth + 1) for item in value)
    return deepest


def _clean(value: Any) -> Any:
    """Strings made encodable (lone surrogates replaced); everything else as it is. Depth is bounded already."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, dict):
        return {_text(key): _clean(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clean(item) for item in value]
    return value


def _text(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return value
