"""What people do to an incident outside the responder: acknowledge, resolve, reassign or silence it, from Slack's
buttons or in PagerDuty. Pure: no I/O.

The endpoints that hear of an action (SlackActionsFunction, PagerDutyWebhookFunction) authenticate it and put it on
the alert queue as an envelope of its own (source `fault-responder.actions`); the AlertRouter adds it to the
incident's record as a fact, like any ECS event's, and delivery does the rest: PagerDuty's acknowledge or resolve,
the Slack root that says who, the thread reply. So an action is retried, dead-lettered and ordered like every other
fact, and two workers never disagree about it. Only the endpoints can send it: the queue takes EventBridge's
rules and the roles that IAM lets send, and no EventBridge rule matches this source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from fault_responder.events.envelope import in_utc_range

ACTIONS_SOURCE = "fault-responder.actions"
ACTION_DETAIL_TYPE = "GPU Fault Incident Action"
MAX_BY = 120
MAX_NOTE = 300
MAX_KEY = 120
MAX_REF = 2000
"""A record ARN (an instance's is bounded at 1024 characters plus a mark; a group's at 1500 plus its prefix) or an
incident id."""
_KEY = re.compile(r"^(slack|pagerduty):[A-Za-z0-9._:-]{1,100}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class ActionKind(StrEnum):
    ACKNOWLEDGE = "acknowledge"
    UNACKNOWLEDGE = "unacknowledge"
    """PagerDuty: the acknowledgement timed out, or someone took it back."""
    RESOLVE = "resolve"
    REASSIGN = "reassign"
    """PagerDuty: the incident was reassigned (`note` names the assignees)."""
    SILENCE = "silence"
    """Slack: a silence was made for the incident's instance (`note` says until when, and its id)."""


class Via(StrEnum):
    SLACK = "slack"
    PAGERDUTY = "pagerduty"


class BadAction(ValueError):
    """An action envelope that cannot be acted on (dead-lettered with this reason)."""


@dataclass(frozen=True, slots=True)
class IncidentAction:
    """One action by one person on one incident.

    Slack's buttons name the incident (`record`: the instance record's ARN, `incident`: its id); PagerDuty's webhooks
    name only its dedup key (`dedup_key`: PagerDuty's incident_key), which the router maps to the record whose alert
    it is."""

    key: str
    """Unique per action: `slack:<digest of the request signature>`, `pagerduty:<webhook event id>`. Adding the same
    action twice changes nothing."""
    kind: ActionKind
    via: Via
    by: str
    """Who, for people: "Jane Doe (U012AB3CD)", "Tenex Engineer"."""
    at: datetime
    record: str | None = None
    incident: str | None = None
    dedup_key: str | None = None
    note: str | None = None

    def envelope(self, region: str, account: str) -> dict[str, Any]:
        """The message the alert queue carries: shaped like an EventBridge event, so the router's envelope checks
        (size, depth, id) apply to it as to any other."""
        return {
            "version": "0",
            "id": self.key,
            "source": ACTIONS_SOURCE,
            "detail-type": ACTION_DETAIL_TYPE,
            "account": account,
            "region": region,
            "time": self.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "resources": [],
            "detail": {
                "kind": self.kind.value,
                "via": self.via.value,
                "by": self.by,
                "at": self.at.astimezone(UTC).isoformat(),
                "record": self.record,
                "incident": self.incident,
                "dedup_key": self.dedup_key,
                "note": self.note,
            },
        }


def _in_range(value: datetime) -> datetime:
    """An action's time in UTC, refused (with the reason) as an event's times are when out of range."""
    return value if value.tzinfo is None else in_utc_range(value)  # a naive time is refused in parse_action


class _Detail(BaseModel):
    # defer_build: the validator is built on the first action, not on every cold start of the router.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)
    kind: ActionKind
    via: Via
    by: str = Field(min_length=1, max_length=MAX_BY)
    at: Annotated[datetime, AfterValidator(_in_range)]
    record: str | None = Field(default=None, min_length=1, max_length=MAX_REF)
    incident: str | None = Field(default=None, min_length=1, max_length=MAX_REF)
    dedup_key: str | None = Field(default=None, min_length=1, max_length=255)
    note: str | None = Field(default=None, max_length=MAX_NOTE)


def is_action(raw: dict[str, Any]) -> bool:
    return raw.get("source") == ACTIONS_SOURCE


def parse_action(raw: dict[str, Any]) -> IncidentAction:
    """The action an envelope carries, or BadAction saying why not."""
    key = raw.get("id")
    if not isinstance(key, str) or not _KEY.match(key) or len(key) > MAX_KEY:
        raise BadAction("an action's id is slack:<digest> or pagerduty:<event id>")
    if raw.get("detail-type") != ACTION_DETAIL_TYPE:
        raise BadAction(f"an action's detail-type is {ACTION_DETAIL_TYPE!r}")
    try:
        detail = _Detail.model_validate(raw.get("detail"))
    except ValidationError as error:
        fields = sorted({".".join(str(part) for part in e["loc"]) or "detail" for e in error.errors()})
        raise BadAction(f"malformed action detail: {fields}") from None
    if detail.at.tzinfo is None:
        raise BadAction("an action's time needs a time zone")
    if detail.record is None and detail.dedup_key is None:
        raise BadAction("an action names its incident (record and incident) or its dedup key")
    if detail.record is not None and detail.incident is None:
        raise BadAction("an action that names a record names its incident too")
    if not key.startswith(f"{detail.via.value}:"):
        raise BadAction("an action's id starts with where it came from")
    return IncidentAction(
        key=key,
        kind=detail.kind,
        via=detail.via,
        by=_line(detail.by, MAX_BY),
        at=detail.at.astimezone(UTC),
        record=detail.record,
        incident=detail.incident,
        dedup_key=detail.dedup_key,
        note=_line(detail.note, MAX_NOTE) if detail.note else None,
    )


def _line(text: str, limit: int) -> str:
    """One line of untrusted text: control characters become spaces (the renderers escape the rest)."""
    return _CONTROL.sub(" ", text).strip()[:limit] or "someone"
