"""The PagerDuty webhook endpoint's work: one signed v3 webhook in, at most one incident action queued, one HTTP
answer out (docs/pagerduty-sync.md).

In this order:
1. the signature (interactive.verify_pagerduty_request, any of the webhook secrets, re-read once when none
   matches: the secret may have been rotated): else 401, logged and counted;
2. the payload (a v3 webhook's `event`, with an id that fits an action's key): else 400;
3. what it says: an incident acknowledged or resolved by a person, unacknowledged, or reassigned, for an alert
   the responder raised (its `incident_key`, the dedup key): an IncidentAction on the alert queue. Anything
   else (another event type, an incident the responder did not raise, an acknowledge or resolve by a service
   or integration: the responder's own Events API calls coming back) is answered 200 and ignored, logged with
   the event id and counted.

PagerDuty wants a 2xx quickly and retries anything else, so the work is one SendMessage; the AlertRouter does
the rest. A webhook delivered twice carries the same event id, so its action's key is the same and the record
takes it once. Typed in and out; the queue is behind the ActionSink protocol (an adapter). Pure: no I/O, no
routing or lifecycle imports (the function's cold start stays small).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fault_responder.actions.function_url import Answer
from fault_responder.actions.interactive import Unauthorized, verify_pagerduty_request
from fault_responder.incidents.incident_actions import (
    MAX_BY,
    MAX_NOTE,
    ActionKind,
    BadAction,
    IncidentAction,
    Via,
    parse_action,
)
from fault_responder.notification.buttons import BadRequest

if TYPE_CHECKING:
    from fault_responder.actions.slack_actions import ActionSink

USER_AGENT = "user_reference"
"""`event.agent.type` when a person did it (in the web UI, the app, Slack's PagerDuty app, the REST API with a
user's token). The responder's own acknowledge and resolve (Events API v2) come back as a service or an
integration."""

KINDS: Mapping[str, ActionKind] = {
    "incident.acknowledged": ActionKind.ACKNOWLEDGE,
    "incident.unacknowledged": ActionKind.UNACKNOWLEDGE,
    "incident.resolved": ActionKind.RESOLVE,
    "incident.reassigned": ActionKind.REASSIGN,
}
"""The event types mirrored into Slack; every other one is ignored."""
ONLY_BY_PEOPLE = frozenset({ActionKind.ACKNOWLEDGE, ActionKind.RESOLVE})
"""Mirrored only when a person did it: the responder sends these itself, and must not hear its own echo."""
SOMEONE = "PagerDuty"
"""Who, when the event names no agent (an acknowledgement that timed out)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Reference(_Model):
    type: str | None = None
    summary: str | None = None
    id: str | None = None


class _Incident(_Model):
    id: str | None = None
    number: int | None = None
    status: str | None = None
    title: str | None = None
    incident_key: str | None = None
    html_url: str | None = None
    assignees: list[_Reference] = []


class _Event(_Model):
    id: str = Field(min_length=1, max_length=100)
    event_type: str = Field(min_length=1, max_length=100)
    resource_type: str | None = None
    occurred_at: datetime
    agent: _Reference | None = None
    data: dict[str, Any] | None = None


class _Webhook(_Model):
    event: _Event


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    """What a v3 webhook says, as far as the responder reads it."""

    event_id: str
    event_type: str
    occurred_at: datetime
    agent_type: str | None
    agent_summary: str | None
    incident_key: str | None
    incident_id: str | None
    incident_number: int | None
    assignees: tuple[str, ...]


def parse_webhook(body: bytes) -> WebhookEvent:
    """The event a signed webhook body carries, or BadRequest saying why not."""
    try:
        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadRequest("body is not JSON") from None
    try:
        webhook = _Webhook.model_validate(document)
    except ValidationError as error:
        fields = sorted({".".join(str(part) for part in e["loc"]) or "body" for e in error.errors()})
        raise BadRequest(f"not a v3 webhook: {', '.join(fields)[:200]}") from None
    event = webhook.event
    if event.occurred_at.tzinfo is None:
        raise BadRequest("not a v3 webhook: event.occurred_at has no time zone")
    incident: _Incident | None = None
    if event.event_type in KINDS:
        try:
            incident = _Incident.model_validate(event.data or {})
        except ValidationError as error:
            fields = sorted({".".join(str(part) for part in e["loc"]) for e in error.errors()})
            raise BadRequest(f"not a v3 incident webhook: event.data {', '.join(fields)[:200]}") from None
    agent = event.agent
    return WebhookEvent(
        event_id=event.id,
        event_type=event.event_type,
        occurred_at=event.occurred_at,
        agent_type=agent.type if agent else None,
        agent_summary=agent.summary if agent else None,
        incident_key=incident.incident_key if incident and incident.incident_key else None,
        incident_id=incident.id if incident else None,
        incident_number=incident.number if incident else None,
        assignees=tuple(a.summary for a in incident.assignees if a.summary) if incident else (),
    )


@dataclass(frozen=True, slots=True)
class Ignored:
    """A webhook answered 200 and not acted on, and why (counted with this reason)."""

    reason: str


def action_for(event: WebhookEvent) -> IncidentAction | Ignored:
    """The action a webhook event mirrors into Slack, or why it mirrors none."""
    kind = KINDS.get(event.event_type)
    if kind is None:
        return Ignored("event type")
    if event.incident_key is None:
        return Ignored("no incident key")
    if kind in ONLY_BY_PEOPLE and event.agent_type != USER_AGENT:
        return Ignored("not by a person")
    note = None
    if kind is ActionKind.REASSIGN:
        note = f"to {', '.join(event.assignees) or 'nobody'}"[:MAX_NOTE]
    return IncidentAction(
        key=f"pagerduty:{event.event_id}",
        kind=kind,
        via=Via.PAGERDUTY,
        by=(event.agent_summary or SOMEONE)[:MAX_BY],
        at=event.occurred_at,
        dedup_key=event.incident_key,
        note=note,
    )


class PagerDutyWebhook:
    def __init__(
        self,
        *,
        secrets: Callable[[bool], Sequence[str]],
        actions: ActionSink,
        count: Callable[[str, str, str], None] = lambda name, dimension, value: None,
        log: Callable[[str, dict[str, Any]], None] = lambda message, extra: None,
    ) -> None:
        self.secrets = secrets
        self.actions = actions
        self.count = count
        self.log = log

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer:
        try:
            self._verify(headers, body)
        except Unauthorized as refused:
            self.count("RefusedRequests", "Reason", refused.reason)
            self.log("webhook refused", {"reason": refused.reason})
            return Answer(401, "unauthorized")
        try:
            event = parse_webhook(body)
            action = action_for(event)
            if isinstance(action, IncidentAction):
                _check(action)
        except BadRequest as bad:
            self.count("RefusedRequests", "Reason", "bad request")
            self.log("webhook refused", {"reason": bad.reason})
            return Answer(400, bad.reason)
        if isinstance(action, Ignored):
            self.count("WebhooksIgnored", "Reason", action.reason)
            self.log(
                "webhook ignored",
                {"event_id": event.event_id, "event_type": event.event_type[:100], "reason": action.reason},
            )
            return Answer(200, "ignored")
        self.actions.send(action)
        self.count("ActionsQueued", "Action", f"pagerduty:{action.kind.value}")
        self.log(
            "webhook queued",
            {"event_id": event.event_id, "action": action.kind.value, "by": action.by, "key": action.key},
        )
        return Answer(200, "queued")

    def _verify(self, headers: Mapping[str, str], body: bytes) -> str:
        secrets = list(self.secrets(False))
        try:
            return verify_pagerduty_request(secrets, headers, body)
        except Unauthorized as refused:
            if refused.reason != "wrong signature":
                raise
            # The secret may have been rotated since it was cached: read it again (the reader limits how often),
            # and only if it changed, check once more.
            fresh = list(self.secrets(True))
            if fresh == secrets:
                raise
            return verify_pagerduty_request(fresh, headers, body)


def _check(action: IncidentAction) -> None:
    """Refuse here (400) what the router would dead-letter: the envelope read back as the router reads it."""
    try:
        parse_action(action.envelope("", ""))
    except BadAction as bad:
        raise BadRequest(f"not an action: {bad}") from None
