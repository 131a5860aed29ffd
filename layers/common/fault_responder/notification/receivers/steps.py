"""What delivery plans and every receiver kind shares: the steps, what a plan reads, and what a step's outcome
records.

A plan (each kind's, fault_responder.notification.receivers) compares what the derived incidents and notices say now
with what the receiver was already told (the record's deliveries) and lists the steps that close the gap. Each
step uses one of the verbs a receiver kind may support (`Step.verb`): open, update, thread, resolve,
acknowledge.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from fault_responder.core.domain import Alert, FleetPlace, Incident, ResumeNote, TimelineEntry
from fault_responder.incidents.record import Delivery, Pending
from fault_responder.routing.router import Receiver


class View(Protocol):
    """What was derived for one record (an instance's incidents and notices, or a group's fleet incidents)."""

    @property
    def incidents(self) -> list[Incident]: ...

    @property
    def alerts(self) -> list[Alert]: ...

    def incident(self, incident_id: str) -> Incident | None: ...


class Told(Protocol):
    """What one record's receivers were told."""

    @property
    def deliveries(self) -> dict[tuple[str, str], Delivery]: ...

    def delivery(self, receiver: str, subject: str) -> Delivery: ...


METADATA_INCIDENT = "gpu_fault_incident"
METADATA_STEP = "gpu_fault_incident_step"
METADATA_NOTICE = "gpu_fault_notice"
WEBHOOK_POSTED = "posted"
LOOKBACK = timedelta(minutes=2)
FLEET_BATCH = 50
"""A fleet incident's member updates go out together: fifty at a time, or a minute after the last batch (the next
event or the sweep sends them), or at once when one of them is pager news."""
FLEET_REPLY_MAX = 100
"""Member updates one thread reply names at most (each line is bounded, so a hundred always fit one message)."""
FLEET_BATCH_WAIT = timedelta(minutes=1)
"""A message whose post outcome is unknown is looked for from this long before the post started."""


class StepKind(StrEnum):
    POST_ROOT = "post_root"
    REPLY = "reply"
    UPDATE_ROOT = "update_root"
    POST_STEP = "post_step"
    """Webhook mode: one self-contained message per timeline step (webhooks cannot thread or edit)."""
    TRIGGER = "trigger"
    RESOLVE = "resolve"
    ACKNOWLEDGE = "acknowledge"
    """PagerDuty: someone acknowledged the incident from Slack."""
    POST_NOTICE = "post_notice"
    UPDATE_NOTICE = "update_notice"
    TRIGGER_NOTICE = "trigger_notice"
    RESOLVE_NOTICE = "resolve_notice"
    NOTE = "note"
    """A training auto-resume notice the workflow held back from this receiver, told now that nothing holds it back:
    a thread reply (the incident's, or its fleet incident's), a message of its own, a change event or a page."""

    @property
    def verb(self) -> str:
        """The verb of a receiver kind it uses (`Capability`): open, update, thread, resolve or acknowledge (a held-back
        notice: `Step.verb`)."""
        return _VERBS[self]


_VERBS = {
    StepKind.POST_ROOT: "open",
    StepKind.POST_STEP: "open",
    StepKind.POST_NOTICE: "open",
    StepKind.TRIGGER: "open",
    StepKind.TRIGGER_NOTICE: "open",
    StepKind.REPLY: "thread",
    StepKind.NOTE: "open",
    StepKind.UPDATE_ROOT: "update",
    StepKind.UPDATE_NOTICE: "update",
    StepKind.RESOLVE: "resolve",
    StepKind.RESOLVE_NOTICE: "resolve",
    StepKind.ACKNOWLEDGE: "acknowledge",
}


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    subject: str
    """What the receiver's delivery record is about: the incident id or the notice key; for PagerDuty, the
    check's alert (`pd:<fingerprint>`), since every episode of a check shares its dedup key."""
    entry: TimelineEntry | None = None
    incident: str | None = None
    """The incident to render, when it is not the subject (a PagerDuty trigger)."""
    batch: tuple[TimelineEntry, ...] = ()
    """A fleet incident's thread reply (or webhook message) names every member step since the last one."""
    thread: tuple[str, str] | None = None
    """A held-back notice's thread (channel, ts): the incident's root, or the root of the fleet incident it belongs
    to; None: a message of its own."""
    place: FleetPlace | None = None
    """A held-back notice's fleet incident, when the incident belongs to one (its page joins the fleet's alert)."""
    marked: bool = field(default=False, compare=False)
    """A post that must never happen twice: its intent is recorded before it is made, and an unknown outcome is
    looked for before it is made again (its kind's plan says which)."""

    def marker(self, receiver: Receiver) -> str | None:
        """For a post that must never happen twice (`marked`), what its metadata names (its intent is recorded
        before it is made); None for every other step. (`receiver` is the one it was planned for.)"""
        if self.marked:
            return step_marker(self.subject, self.entry)
        return None

    @property
    def verb(self) -> str:
        """The verb of a receiver kind the step uses: its kind's, but a held-back notice in a thread replies in it."""
        return "thread" if self.kind is StepKind.NOTE and self.thread is not None else self.kind.verb

    def describe(self) -> str:
        what = f" {self.entry.phase}" if self.entry is not None else ""
        return f"{self.kind.value}{what} ({self.subject})"


def held_notes(name: str, incident: Incident, sent: Delivery) -> list[tuple[TimelineEntry, FleetPlace | None]]:
    """The workflow's notices about the incident that it held back from `name`, that nothing holds back any more
    and that `name` was not told yet (`sent`: its delivery that records them), each with the fleet incident whose
    thread tells it (None: the incident's own). Held back while the incident's own silences, windows or inhibitions
    hold `name` back, and while the fleet incident's do; none for a receiver the incident is not routed to any more."""
    if name in incident.held or name not in incident.receivers:
        return []
    place = incident.fleet_place
    if place is not None and name not in place.receivers:
        place = None
    if place is not None and name in place.muted:
        return []
    return [
        (entry, place)
        for entry in incident.timeline
        if entry.note is not None and name in entry.note.held and entry.key not in sent.steps
    ]


def digest(value: Any) -> str:
    encoded = json.dumps(value, sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(encoded.encode()).hexdigest()[:20]


def step_marker(subject: str, entry: TimelineEntry | None) -> str:
    """What a post's metadata names, to find it again when its outcome is unknown."""
    return subject if entry is None else f"{subject}|{entry.key}"


def pending_since(sent: Delivery, marker: str) -> datetime | None:
    """When a post of this message started whose outcome is unknown, if one did."""
    return next((pending.at for pending in sent.pending if pending.marker == marker), None)


def with_pending(sent: Delivery, marker: str, started: datetime, owner: str) -> Delivery:
    """The intent to post, recorded before posting: if the outcome is never learned, the next worker looks."""
    return replace(sent, pending=[*without(sent.pending, marker), Pending(marker, started, owner)])


def without_pending(sent: Delivery, marker: str) -> Delivery:
    return replace(sent, pending=without(sent.pending, marker))


def as_seen_by(sent: Delivery, owner: str) -> Delivery:
    """The delivery as a worker sees it: its own intents are not unknown outcomes to look for."""
    return replace(sent, pending=[pending for pending in sent.pending if pending.owner != owner])


def without(pending: list[Pending], marker: str) -> list[Pending]:
    return [item for item in pending if item.marker != marker]


_T = TypeVar("_T")


def required(value: _T | None, problem: str) -> _T:
    if value is None:
        raise LookupError(problem)
    return value


def posted_root(sent: Delivery) -> tuple[str, str]:
    """The channel and ts of the message the delivery posted (what a reply or an update needs)."""
    if sent.channel is None or sent.ts is None:
        raise LookupError(f"{sent.receiver} has no message for {sent.subject} to reply to or update")
    return sent.channel, sent.ts


def incident_in(view: View, incident_id: str) -> Incident:
    incident = view.incident(incident_id)
    if incident is None:
        raise LookupError(f"incident {incident_id} is not in the view")
    return incident


def noted(view: View, step: Step) -> tuple[Incident, TimelineEntry, ResumeNote]:
    """A held-back notice's incident, its timeline entry and what it says."""
    incident = incident_in(view, step.incident or step.subject)
    entry = required(step.entry, "a held-back notice without its step")
    return incident, entry, required(entry.note, "a held-back notice without what it says")


def alert_in(view: View, key: str) -> Alert:
    alert = next((alert for alert in view.alerts if alert.key == key), None)
    if alert is None:
        raise LookupError(f"notice {key} is not in the view")
    return alert
