"""Channels that record what would be sent instead of sending it (routecheck, tests).

They answer like the real APIs where the delivery code depends on the answer (a Slack post returns a channel
id and a ts), so everything upstream runs exactly as it does against Slack and PagerDuty. Every other kind's client
(through the ReceiverChannels port) reads a placeholder secret, which answers any key, and its posts are recorded
with their payload and answered 202 Accepted: a dry run never reads a real secret nor sends anything.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import AnswerCheck, PostAnswer, SlackPostRef
from fault_responder.notification.delivery import Courier, Step, View
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.routing.router import Receiver

DRY_RUN_CHANNEL = "C0DRYRUN00"
DRY_RUN_HOST = "dry-run.invalid"
"""Where a placeholder secret's URLs point (.invalid: never resolved)."""
_TEXT_KEYS = ("text", "title", "summary")


class Placeholder(str, Mapping[str, Any]):
    """A secret's stand-in in a dry run: a URL (a str) that answers any key with a longer one (`secret["webhook_urls"]
    ["oncall"]` is `https://teams.dry-run.invalid/webhook_urls/oncall`), and lists no keys."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Placeholder:
        return Placeholder(f"{self}/{key}")

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __contains__(self, key: object) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Sent:
    service: str
    """slack, webhook or pagerduty; any other kind's key for what its client posted (`post_json`)."""
    action: str
    """post, reply, update; trigger, resolve, change."""
    target: str
    """The Slack channel (or webhook name), or the PagerDuty dedup key."""
    text: str
    severity: str | None = None
    ts: str | None = None
    thread_ts: str | None = None
    receiver: str | None = None
    """The routing file's receiver, when the courier said which (see ReceiverCourier)."""
    body: str = ""
    """Every text in the message's blocks (Slack), or its custom details as JSON (PagerDuty), or the payload as JSON
    (any other kind)."""
    payload: dict[str, Any] | None = field(default=None, compare=False)
    """What another kind's client posted (`post_json`), as it would have gone out."""


@dataclass
class RecordingChannels:
    """The delivery Channels; `sent` lists every call in order."""

    sent: list[Sent] = field(default_factory=list)
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _current: threading.local = field(default_factory=threading.local)

    def slack_api(self) -> RecordingChannels:
        return self

    def slack_webhook(self, name: str) -> _Hook:
        return _Hook(self, name)

    def pagerduty(self) -> RecordingChannels:
        return self

    def pagerduty_changes(self) -> _Changes:
        return _Changes(self)

    def routing_key(self, service: str) -> str:
        return f"{service:0<32}"[:32]

    def refresh(self, service: str) -> None:
        return None

    # --- Every other kind (ReceiverChannels) ---

    def secret(self, kind: str) -> Mapping[str, Any]:
        """A placeholder that answers any key, each answer a placeholder URL that answers any key in turn."""
        return Placeholder(f"https://{kind}.{DRY_RUN_HOST}")

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
        body = json.dumps(payload, sort_keys=True, default=str)
        found = _payload_texts(payload)
        text = found[0] if found else ""
        self._record(Sent(kind, "post", str(url), text, body=body, payload=payload))
        return PostAnswer(status=202, headers={}, body=b"")

    def _record(self, sent: Sent) -> None:
        with self._lock:
            self.sent.append(replace(sent, receiver=getattr(self._current, "receiver", None)))

    # --- Slack Web API ---

    def post_message(
        self, channel: str, message: SlackMessage, thread_ts: str | None = None, metadata: dict[str, Any] | None = None
    ) -> SlackPostRef:
        with self._lock:
            ts = f"{next(self._ts)}.000000"
        action = "reply" if thread_ts else "post"
        self._record(Sent("slack", action, channel, message.text, ts=ts, thread_ts=thread_ts, body=_texts(message)))
        return SlackPostRef(channel=DRY_RUN_CHANNEL, ts=ts)

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None:
        self._record(Sent("slack", "update", channel, message.text, ts=ts, body=_texts(message)))

    def find_message(
        self, channel: str, event_type: str, marker: str, oldest: datetime, thread_ts: str | None = None
    ) -> SlackPostRef | None:
        return None

    # --- PagerDuty ---

    def send(self, event: dict[str, Any]) -> str:
        payload = event.get("payload") or {}
        action, key = str(event["event_action"]), str(event["dedup_key"])
        details = json.dumps(payload.get("custom_details") or {}, sort_keys=True, default=str)
        summary = str(payload.get("summary", ""))
        self._record(Sent("pagerduty", action, key, summary, severity=payload.get("severity"), body=details))
        return key


@dataclass
class _Changes:
    channels: RecordingChannels

    def send(self, event: dict[str, Any]) -> None:
        payload = event.get("payload") or {}
        details = json.dumps(payload.get("custom_details") or {}, sort_keys=True, default=str)
        self.channels._record(Sent("pagerduty", "change", "", str(payload.get("summary", "")), body=details))


@dataclass
class _Hook:
    channels: RecordingChannels
    name: str

    def post(self, message: SlackMessage) -> None:
        self.channels._record(Sent("webhook", "post", self.name, message.text, body=_texts(message)))


class ReceiverCourier(Courier):
    """A Courier over RecordingChannels that tags each recorded call with its receiver."""

    def __init__(
        self,
        channels: RecordingChannels,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        dashboard_url: str | None = None,
    ) -> None:
        super().__init__(channels, clock=clock, dashboard_url=dashboard_url)
        self.recording = channels

    def perform(self, name: str, receiver: Receiver, step: Step, view: View, sent: Delivery) -> Delivery:
        self.recording._current.receiver = name
        try:
            return super().perform(name, receiver, step, view, sent)
        finally:
            self.recording._current.receiver = None


def _payload_texts(payload: Any) -> list[str]:
    """The strings under "text", "title" or "summary" keys of a payload, in document order (its first: what a route
    check shows of the post)."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in _TEXT_KEYS and isinstance(item, str) and item:
                    found.append(item)
                elif isinstance(item, dict | list):
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(payload)
    return found


def _texts(message: SlackMessage) -> str:
    """Every text of a Block Kit message, one per line."""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("text"), str):
                found.append(value["text"])
            for item in value.values():
                if isinstance(item, dict | list):
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(message.blocks)
    return "\n".join(found)
