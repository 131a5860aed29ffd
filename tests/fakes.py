"""In-memory Slack and PagerDuty that keep what on-call would see, for tests that run thousands of events.

They implement the delivery Channels protocol directly (no HTTP), with the state the real services keep:
Slack messages with their metadata, threads and edits; PagerDuty alerts per (routing key, dedup key),
opened by a trigger, appended to by later triggers, closed by a resolve. The HTTP stand-ins
(sandbox/standins.py) check payloads the way the real APIs do; these check the outcome.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fault_responder.notification.contract import SlackPostRef
from fault_responder.notification.render.blocks import SlackMessage

CHANNEL_ID = "C0FAKE0001"


@dataclass
class FakeMessage:
    ts: str
    text: str
    blocks: list[dict[str, Any]]
    thread_ts: str | None
    metadata: dict[str, Any] | None
    edits: int = 0

    @property
    def marker(self) -> str | None:
        payload = (self.metadata or {}).get("event_payload") or {}
        return payload.get("id")

    @property
    def kind(self) -> str | None:
        return (self.metadata or {}).get("event_type")


@dataclass
class FakeAlert:
    dedup_key: str
    incident: str | None
    status: str = "triggered"
    triggers: int = 1


@dataclass
class FakeWorld:
    """Slack and PagerDuty as on-call sees them; implements the delivery Channels protocol."""

    messages: list[FakeMessage] = field(default_factory=list)
    alerts: list[FakeAlert] = field(default_factory=list)
    _ts: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- Channels ---

    def slack_api(self) -> FakeWorld:
        return self

    def slack_webhook(self, name: str) -> Any:
        raise AssertionError("the tests' routing uses no webhook")

    def pagerduty(self) -> FakeWorld:
        return self

    def routing_key(self, service: str) -> str:
        return "r" * 32

    def refresh(self, service: str) -> None:
        return None

    def secret(self, kind: str) -> Any:
        raise AssertionError("the tests' routing names only Slack and PagerDuty receivers")

    def post_json(self, kind: str, url: str, payload: dict[str, Any], **options: Any) -> Any:
        raise AssertionError("the tests' routing names only Slack and PagerDuty receivers")

    # --- Slack ---

    def post_message(
        self, channel: str, message: SlackMessage, thread_ts: str | None = None, metadata: dict[str, Any] | None = None
    ) -> SlackPostRef:
        with self._lock:
            ts = f"{next(self._ts)}.000000"
            self.messages.append(FakeMessage(ts, message.text, message.blocks, thread_ts, metadata))
        return SlackPostRef(CHANNEL_ID, ts)

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None:
        with self._lock:
            found = next(m for m in self.messages if m.ts == ts)
            found.text, found.blocks, found.edits = message.text, message.blocks, found.edits + 1

    def find_message(
        self, channel: str, event_type: str, marker: str, oldest: datetime, thread_ts: str | None = None
    ) -> SlackPostRef | None:
        with self._lock:
            for message in self.messages:
                if message.kind == event_type and message.marker == marker and message.thread_ts == thread_ts:
                    return SlackPostRef(CHANNEL_ID, message.ts)
        return None

    # --- PagerDuty ---

    def send(self, event: dict[str, Any]) -> str:
        key = str(event["dedup_key"])
        with self._lock:
            current = next((a for a in self.alerts if a.dedup_key == key and a.status == "triggered"), None)
            if event["event_action"] == "trigger":
                if current is None:
                    details = event["payload"].get("custom_details") or {}
                    self.alerts.append(FakeAlert(key, details.get("incident")))
                else:
                    current.triggers += 1
            elif current is not None:
                current.status = "resolved"
        return key

    # --- What on-call sees ---

    def roots(self) -> dict[str, FakeMessage]:
        """Incident root messages by incident id (the metadata every root carries)."""
        roots: dict[str, FakeMessage] = {}
        for message in self.messages:
            if message.kind == "gpu_fault_incident" and message.thread_ts is None and message.marker:
                assert message.marker not in roots, f"two roots for incident {message.marker}"
                roots[message.marker] = message
        return roots

    def replies(self, root: FakeMessage) -> list[str]:
        return sorted(m.text for m in self.messages if m.thread_ts == root.ts)

    def open_alerts(self) -> set[str]:
        return {alert.dedup_key for alert in self.alerts if alert.status == "triggered"}
