"""What delivery and the channels that send agree on: the errors a send raises, the fence that stops a send
past its delivery's lease, and where a posted Slack message is.

The channels (adapters/http.py, adapters/slack.py, adapters/pagerduty.py) raise these; delivery and the alert
router catch them. Defined here, below both, so that neither imports the other's side.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = ["DeliveryError", "LeaseEndingError", "SlackPostRef", "fence_left", "fenced"]


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
