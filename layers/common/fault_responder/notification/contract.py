"""What delivery and the channels that send agree on: the errors a send raises, the fence that stops a send
past its delivery's lease, where a posted Slack message is, and the port every receiver kind's own client sends
through (`ReceiverChannels`: its secret by kind, a JSON POST, reading the secret again).

The channels (adapters/http.py, adapters/slack.py, adapters/pagerduty.py, adapters/notifiers.py) raise these;
delivery and the alert router catch them. Defined here, below both, so that neither imports the other's side.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "AnswerCheck",
    "DeliveryError",
    "LeaseEndingError",
    "PostAnswer",
    "ReceiverChannels",
    "SlackPostRef",
    "fence_left",
    "fenced",
]


class DeliveryError(Exception):
    """A notification could not be delivered. Its text names the service and the cause, never a secret."""

    def __init__(
        self, service: str, status: int | None, reason: str, retryable: bool, *, unknown_outcome: bool = False
    ) -> None:
        super().__init__(service, status, reason, retryable)
        self.service = service
        self.status = status
        self.reason = reason
        self.retryable = retryable
        self.unknown_outcome = unknown_outcome
        """The request may have been acted on (a read timeout): do not simply send it again."""

    def __str__(self) -> str:
        status = f"HTTP {self.status}" if self.status is not None else "no response"
        kind = "retryable" if self.retryable else "permanent"
        return f"{self.service} delivery failed ({status}, {kind}): {self.reason}"


class LeaseEndingError(DeliveryError):
    """The call was not made: the delivery's lease would end before it could, and someone else may take over."""


_fence = threading.local()


@contextlib.contextmanager
def fenced(deadline: float, *, clock: Callable[[], float] = time.time) -> Iterator[None]:
    """Every call this thread makes inside must end by `deadline` (epoch seconds: the end of the lease under
    which it delivers), or it is not made. Checked immediately before each request, after every other wait."""
    previous = getattr(_fence, "limit", None)
    _fence.limit = (deadline, clock)
    try:
        yield
    finally:
        _fence.limit = previous


def fence_left() -> float:
    limit = getattr(_fence, "limit", None)
    if limit is None:
        return math.inf
    deadline, clock = limit
    return float(deadline - clock())


@dataclass(frozen=True)
class SlackPostRef:
    channel: str
    """The channel id Slack answered with (chat.update needs the id, not the name)."""
    ts: str


@dataclass(frozen=True)
class PostAnswer:
    """An accepted answer to `ReceiverChannels.post_json`, read in full."""

    status: int
    headers: Mapping[str, str]
    """Case-insensitive, as the transport gives them."""
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


AnswerCheck = Callable[[PostAnswer], tuple[bool, str] | None]
"""Reads a 2xx answer: None when it was accepted, else (retryable, reason) of the failure it reports in its body
(e.g. an endpoint that answers 200 with an error in its text)."""


class ReceiverChannels(Protocol):
    """What the channels offer every receiver kind's own client, whatever the kind: its secret, named in the stack's
    configuration for that kind, and a JSON POST under the stack's retry policy. A kind's package reads its URL or key
    from `secret(kind)` and sends with `post_json`; nothing outside it knows the kind's secret format or its API."""

    def secret(self, kind: str) -> Mapping[str, Any]:
        """The kind's secret as parsed JSON (cached; read again after `refresh(kind)`). DeliveryError, retryable, when
        it cannot be read; permanent when the stack names no secret for the kind. Never logs or quotes a value."""
        ...

    def post_json(
        self,
        kind: str,
        url: str,
        payload: dict[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        sign: Callable[[bytes], Mapping[str, str]] | None = None,
        idempotent: bool = True,
        retryable_statuses: frozenset[int] = frozenset(),
        is_failure: AnswerCheck | None = None,
    ) -> PostAnswer:
        """POST `payload` as JSON to `url` with the stack's retries, the invocation's time budget and the delivery
        lease's fence; `kind` names the service in errors and logs. `sign` makes headers from the exact body of each
        attempt; `idempotent=False`: not sent again after an unknown outcome (a read timeout); `retryable_statuses`:
        4xx answers retried as 429 is. The accepted answer, or DeliveryError (retryable or permanent); never logs the
        URL, a header or the payload."""
        ...

    def refresh(self, kind: str) -> None:
        """Read the kind's secret again (it may have been rotated since it was cached)."""
        ...
