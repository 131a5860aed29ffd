"""What each receiver still needs to be told, and telling it: where a page is sent.

Delivery is a reconciliation, not a reaction to one event. For one receiver of one instance, `plan` compares
what the derived incidents and notices say now with what that receiver was already told (the record's
deliveries) and lists the steps that close the gap: post a root, reply in its thread, update it, trigger or
resolve a PagerDuty alert, correct a notice in place. A `Courier` performs one step and returns what the
receiver now knows; the service records it after every step, under the receiver's lease, so a retried or
concurrent worker continues where the last one stopped instead of starting over.

Never twice: a Slack post whose outcome is unknown (a read timeout, a worker that died) is marked pending and
looked for, by the metadata every message carries, before anything is posted again. PagerDuty events are
idempotent per dedup key, and per receiver they go out in order (resolves of past episodes before the trigger
of a new one), because one worker at a time holds the receiver's lease.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from fault_responder.core.domain import Alert, EntryKind, FleetPlace, Incident, ResumeNote, TimelineEntry
from fault_responder.incidents.record import Delivery, Pending
from fault_responder.noise.fleet import journal_seq
from fault_responder.notification.contract import DeliveryError, SlackPostRef
from fault_responder.notification.render.fleet import (
    render_fleet_root,
    render_fleet_steps,
    render_fleet_trigger,
    steps_that_fit,
)
from fault_responder.notification.render.notes import (
    render_note_change,
    render_note_message,
    render_note_reply,
    render_note_trigger,
)
from fault_responder.notification.render.pagerduty import (
    render_acknowledge,
    render_alert_trigger,
    render_resolve,
    render_trigger,
)
from fault_responder.notification.render.slack import (
    SlackMessage,
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
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

    def marker(self, receiver: Receiver) -> str | None:
        """For a Slack post that must never happen twice, what its metadata names (its intent is recorded
        before it is made); None for every other step."""
        bot = receiver.slack is not None and receiver.slack.channel is not None
        if bot and self.kind in (StepKind.POST_ROOT, StepKind.POST_NOTICE, StepKind.REPLY, StepKind.NOTE):
            return step_marker(self.subject, self.entry)
        return None

    def describe(self) -> str:
        what = f" {self.entry.phase}" if self.entry is not None else ""
        return f"{self.kind.value}{what} ({self.subject})"


# --- Planning (pure) ----------------------------------------------------------------------------------


def plan(name: str, receiver: Receiver, view: View, record: Told, *, dashboard_url: str | None = None) -> list[Step]:
    """The steps that bring receiver `name` up to date with the view, in the order they must go out. Root messages
    are compared as the Courier renders them: with the same `dashboard_url`."""
    incidents = [
        incident
        for incident in view.incidents
        if name in incident.receivers or (name, incident.id) in record.deliveries
    ]
    alerts = [alert for alert in view.alerts if name in alert.receivers or (name, alert.key) in record.deliveries]
    if receiver.pagerduty is not None:
        return _pagerduty_plan(name, incidents, alerts, record)
    if receiver.slack is not None and receiver.slack.channel is not None:
        return _slack_plan(name, incidents, alerts, record, view, dashboard_url=dashboard_url)
    return _webhook_plan(name, incidents, alerts, record)


def _pagerduty_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
    """One PagerDuty alert per check at a time (its dedup key is the fingerprint): open while an incident of
    the check is open and pages here, showing that incident; resolved when none is."""
    resolves: list[Step] = []
    triggers: list[Step] = []
    acks: list[Step] = []
    by_check: dict[str, list[Incident]] = {}
    for incident in incidents:
        by_check.setdefault(incident.fingerprint, []).append(incident)
    for fingerprint, episodes in by_check.items():
        subject = pagerduty_subject(fingerprint)
        sent = record.delivery(name, subject)
        current = next((i for i in episodes if i.is_open and name in i.receivers), None)
        paged = next((i for i in episodes if i.id == sent.incident), None)
        if current is None:
            if sent.alert == "trigger":
                resolves.append(Step(StepKind.RESOLVE, subject, incident=sent.incident))
            continue
        if sent.alert == "trigger" and sent.incident == current.id and acknowledge_due(current, sent):
            acks.append(Step(StepKind.ACKNOWLEDGE, subject, incident=current.id))
        if name in current.muted:
            continue  # nothing new for this receiver now; an alert it already has stays open until resolved
        merged = paged is not None and paged.merged_into == current.id
        if (
            sent.alert == "trigger"
            and paged is not current
            and paged is not None
            and name in paged.receivers
            and not merged
        ):
            # The alert was for an earlier fault of the check that is over: it is resolved, and the new fault
            # is a new alert. (If that fault no longer pages here, a late event showed that what paged belongs
            # to the open one: the open alert carries on with it.)
            resolves.append(Step(StepKind.RESOLVE, subject, incident=sent.incident))
            triggers.append(Step(StepKind.TRIGGER, subject, incident=current.id))
        elif sent.alert != "trigger" or sent.incident != current.id:
            # A fault learned when already over never pages; an open one pages, and again when its page changes.
            triggers.append(Step(StepKind.TRIGGER, subject, incident=current.id))
        elif sent.digest != page_digest(current) and (current.fleet is None or fleet_page_due(current, sent)):
            triggers.append(Step(StepKind.TRIGGER, subject, incident=current.id))
    for alert in alerts:
        sent = record.delivery(name, alert.key)
        if alert.superseded_by is not None:
            if sent.alert == "trigger":
                resolves.append(Step(StepKind.RESOLVE_NOTICE, alert.key))
        elif sent.alert is None and name in alert.receivers and name not in alert.muted:
            triggers.append(Step(StepKind.TRIGGER_NOTICE, alert.key))
    notes: list[Step] = []
    for incident in incidents:
        subject = pagerduty_subject(incident.fingerprint)
        for entry, place in held_notes(name, incident, record.delivery(name, subject)):
            if entry.note is not None and entry.note.pagerduty:
                notes.append(Step(StepKind.NOTE, subject, entry, incident=incident.id, place=place))
    # Resolves first: a new alert on the same dedup key opens only once the old one is closed; an acknowledge only
    # for the alert as triggered.
    return resolves + triggers + acks + notes


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


def acknowledge_due(incident: Incident, sent: Delivery) -> bool:
    """Whether PagerDuty is still to hear of the incident's acknowledgement: one made from Slack (PagerDuty's own
    needs no echo), not sent yet for this alert."""
    acknowledged = incident.acknowledged
    return acknowledged is not None and acknowledged.via == "slack" and incident.acknowledge_key != sent.acked


def pagerduty_subject(fingerprint: str) -> str:
    return f"pd:{fingerprint}"


def _slack_plan(
    name: str, incidents: list[Incident], alerts: list[Alert], record: Told, view: View, *, dashboard_url: str | None
) -> list[Step]:
    steps: list[Step] = []
    for incident in incidents:
        sent = record.delivery(name, incident.id)
        muted = name in incident.muted
        for entry, place in held_notes(name, incident, sent):
            if place is not None:
                thread = place.threads.get(name)
                if thread is not None:  # (else the fleet incident's root is not posted yet: it is, then this)
                    steps.append(Step(StepKind.NOTE, incident.id, entry, thread=thread, place=place))
            elif sent.ts is not None and sent.channel is not None:
                steps.append(Step(StepKind.NOTE, incident.id, entry, thread=(sent.channel, sent.ts)))
            elif muted:
                steps.append(Step(StepKind.NOTE, incident.id, entry))  # no root to reply to comes: its own message
            # (else the incident's root goes first, below, and the notice into its thread after it)
        if sent.ts is None:
            if name in incident.receivers and not muted:
                steps.append(Step(StepKind.POST_ROOT, incident.id))
            continue
        unsent = [entry for entry in replies(incident) if not told(entry, sent, incident) and not muted]
        if incident.fleet is not None:
            due = fleet_batch_due(incident, unsent, sent) or not incident.is_open
            if unsent and due:
                batch = fleet_batch(unsent)
                steps.append(Step(StepKind.REPLY, incident.id, batch[0], batch=batch))
            if not due:
                continue  # the root is brought up to date with the next batch
        else:
            steps.extend(Step(StepKind.REPLY, incident.id, entry) for entry in unsent)
        if sent.digest != message_digest(root_message(incident, dashboard_url)):
            steps.append(Step(StepKind.UPDATE_ROOT, incident.id))
    for alert in alerts:
        sent = record.delivery(name, alert.key)
        if sent.ts is None:
            if alert.superseded_by is None and name in alert.receivers and name not in alert.muted:
                steps.append(Step(StepKind.POST_NOTICE, alert.key))
        elif sent.digest != message_digest(notice_message(alert, view, dashboard_url)):
            steps.append(Step(StepKind.UPDATE_NOTICE, alert.key))
    return steps


def _webhook_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
    steps: list[Step] = []
    for incident in incidents:
        sent = record.delivery(name, incident.id)
        steps.extend(Step(StepKind.NOTE, incident.id, entry) for entry, _ in held_notes(name, incident, sent))
        if (name not in incident.receivers and not sent.steps) or name in incident.muted:
            continue
        unsent = [
            entry
            for entry in incident.timeline
            if entry.kind != EntryKind.NOTICE and not told(entry, sent, incident) and entry.muted is None
        ]
        if incident.fleet is not None:
            if unsent and fleet_batch_due(incident, unsent, sent):
                batch = fleet_batch(unsent)
                steps.append(Step(StepKind.POST_STEP, incident.id, batch[0], batch=batch))
        else:
            steps.extend(Step(StepKind.POST_STEP, incident.id, entry) for entry in unsent)
    for alert in alerts:
        sent = record.delivery(name, alert.key)
        muted = name in alert.muted
        if alert.superseded_by is None and name in alert.receivers and WEBHOOK_POSTED not in sent.steps and not muted:
            steps.append(Step(StepKind.POST_NOTICE, alert.key))
    return steps


def fleet_page_due(incident: Incident, sent: Delivery) -> bool:
    """A fleet incident's open alert is sent again (its members, its counts) at most once a minute, or at once when
    its severity rises: a storm must not spend PagerDuty's per-key rate limit on one alert."""
    fleet = incident.fleet
    if sent.severity != incident.classification.severity.value:
        return True
    if fleet is None or fleet.as_of is None or sent.last_at is None:
        return True
    return fleet.as_of - sent.last_at >= FLEET_BATCH_WAIT


def fleet_batch_due(incident: Incident, unsent: list[TimelineEntry], sent: Delivery) -> bool:
    """Whether a fleet incident's waiting member updates (and its root's update) go out now: ten of them, pager
    news, a person's action, or a minute since the last batch (as of the derivation: the next event or the sweep
    sends them)."""
    fleet = incident.fleet
    if (
        not unsent
        or len(unsent) >= FLEET_BATCH
        or any(entry.page or entry.kind == EntryKind.ACTION for entry in unsent)
    ):
        return True  # a person's action shows at once: they are waiting to see it
    if fleet is None or fleet.as_of is None or sent.last_at is None:
        return True
    return fleet.as_of - sent.last_at >= FLEET_BATCH_WAIT


def fleet_batch(unsent: list[TimelineEntry]) -> tuple[TimelineEntry, ...]:
    """The member steps one reply names: the oldest untold, member updates in their journal's order, as many as
    fit one message (the rest go in the next)."""
    ordered = sorted(unsent, key=lambda e: (journal_seq(e.key) is None, journal_seq(e.key) or 0, e.at, e.key))
    batch = tuple(ordered[:FLEET_REPLY_MAX])
    return batch[: max(1, steps_that_fit(batch))]


def told(entry: TimelineEntry, sent: Delivery, incident: Incident) -> bool:
    """Whether the receiver was told this step: a fleet incident's member updates by their journal number (the
    thread's cursor), every other step by its key."""
    seq = journal_seq(entry.key) if incident.fleet is not None else None
    if seq is None:
        return entry.key in sent.steps
    cursor = sent.cursor if sent.cursor is not None else incident.fleet.thread_from if incident.fleet else 0
    return seq <= cursor


def replies(incident: Incident) -> list[TimelineEntry]:
    """The steps that go into the incident's thread: all but the first (the root shows it) and the notices
    (the resume workflow posts those itself)."""
    return [entry for entry in incident.timeline[1:] if entry.kind != EntryKind.NOTICE and entry.muted is None]


def page_digest(incident: Incident) -> str:
    """What a PagerDuty trigger says that matters to a pager: a change sends the trigger again (a fleet incident's,
    at most once a minute: fleet_page_due)."""
    drain = incident.drain.label if incident.drain is not None else None
    classification = incident.classification
    if incident.fleet is not None:
        # Grows as members join, never as they leave: a fleet's recovery does not page again.
        size = incident.fleet.total
        return _digest([classification.severity.value, classification.fault_class.value, classification.xid, size])
    return _digest([classification.severity.value, classification.title, drain])


def root_message(incident: Incident, dashboard_url: str | None = None) -> SlackMessage:
    if incident.fleet is not None:
        return render_fleet_root(incident, dashboard_url=dashboard_url)
    return render_incident_root(incident, dashboard_url=dashboard_url)


def trigger_event(incident: Incident, routing_key: str) -> dict[str, Any]:
    if incident.fleet is not None:
        return render_fleet_trigger(incident, routing_key, incident.dedup_key)
    return render_trigger(incident, routing_key)


def message_digest(message: SlackMessage) -> str:
    return _digest([message.text, message.blocks])


def notice_message(alert: Alert, view: View, dashboard_url: str | None = None) -> SlackMessage:
    owner = view.incident(alert.superseded_by) if alert.superseded_by else None
    if owner is not None:
        return render_superseded_alert(alert, owner, dashboard_url=dashboard_url)
    return render_alert(alert, dashboard_url=dashboard_url)


def _digest(value: Any) -> str:
    encoded = json.dumps(value, sort_keys=True, default=str, ensure_ascii=True)
    return hashlib.sha256(encoded.encode()).hexdigest()[:20]


def step_marker(subject: str, entry: TimelineEntry | None) -> str:
    """What a post's metadata names, to find it again when its outcome is unknown."""
    return subject if entry is None else f"{subject}|{entry.key}"


# --- Performing a step ----------------------------------------------------------------------------------


class SlackApi(Protocol):
    def post_message(
        self, channel: str, message: SlackMessage, thread_ts: str | None = None, metadata: dict[str, Any] | None = None
    ) -> SlackPostRef: ...

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None: ...

    def find_message(
        self, channel: str, event_type: str, marker: str, oldest: datetime, thread_ts: str | None = None
    ) -> SlackPostRef | None: ...


class SlackHook(Protocol):
    def post(self, message: SlackMessage) -> None: ...


class PagerDuty(Protocol):
    def send(self, event: dict[str, object]) -> str: ...


class ChangeEvents(Protocol):
    """PagerDuty's Change Events: informational, they never page."""

    def send(self, event: dict[str, Any]) -> None: ...


class Channels(Protocol):
    """Clients with their secrets resolved; fetched lazily so an unused channel needs no secret."""

    def slack_api(self) -> SlackApi: ...

    def slack_webhook(self, name: str) -> SlackHook: ...

    def pagerduty(self) -> PagerDuty: ...

    def pagerduty_changes(self) -> ChangeEvents: ...

    def routing_key(self, service: str) -> str: ...

    def refresh(self, service: str) -> None:
        """Read the service's secret again (it may have been rotated since it was cached)."""
        ...


AUTH_FAILURES = frozenset({"invalid_auth", "token_revoked", "token_expired", "account_inactive", "not_authed"})


class Courier:
    """Performs one step for one receiver and returns the receiver's delivery record afterwards. Every message
    that stands at the top of a channel (a root, a notice, a webhook message) links to `dashboard_url`, if any."""

    def __init__(self, channels: Channels, clock: Callable[[], datetime], dashboard_url: str | None = None) -> None:
        self.channels = channels
        self.clock = clock
        self.dashboard_url = dashboard_url or None

    def perform(self, name: str, receiver: Receiver, step: Step, view: View, sent: Delivery) -> Delivery:
        if receiver.pagerduty is not None:
            service = receiver.pagerduty.service
            return self._once_more_if_rotated("pagerduty", lambda: self._pagerduty(service, step, view, sent))
        slack = _required(receiver.slack, f"receiver {name} has no target")
        if slack.channel is not None:
            channel = slack.channel
            return self._once_more_if_rotated("slack", lambda: self._slack(channel, step, view, sent))
        webhook = _required(slack.webhook, f"receiver {name} has no channel or webhook")
        return self._once_more_if_rotated("slack", lambda: self._webhook(webhook, step, view, sent))

    def _once_more_if_rotated(self, service: str, attempt: Callable[[], Delivery]) -> Delivery:
        """A revoked token or an unknown routing key may be a secret rotated since it was cached: read the
        secret again and try once more before failing."""
        try:
            return attempt()
        except DeliveryError as error:
            if not _is_auth_failure(error):
                raise
        self.channels.refresh(service)
        return attempt()

    # --- Slack (bot token) ---

    def _slack(self, channel: str, step: Step, view: View, sent: Delivery) -> Delivery:
        api = self.channels.slack_api()
        if step.kind == StepKind.POST_ROOT:
            incident = _incident(view, step.subject)
            return self._post(api, channel, root_message(incident, self.dashboard_url), step, sent, thread_ts=None)
        if step.kind == StepKind.REPLY:
            incident = _incident(view, step.subject)
            entry = _required(step.entry, "a reply without its step")
            channel, ts = _posted_root(sent)
            message = render_fleet_steps(incident, step.batch) if step.batch else render_timeline_reply(incident, entry)
            return self._post(api, channel, message, step, sent, thread_ts=ts)
        if step.kind == StepKind.UPDATE_ROOT:
            message = root_message(_incident(view, step.subject), self.dashboard_url)
            api.update_message(*_posted_root(sent), message)
            return replace(sent, digest=message_digest(message))
        if step.kind == StepKind.NOTE:
            incident, entry, note = _noted(view, step)
            if step.thread is None:
                message = render_note_message(incident, entry, note, dashboard_url=self.dashboard_url)
                return self._post(api, channel, message, step, sent, thread_ts=None)
            thread_channel, ts = step.thread
            return self._post(api, thread_channel, render_note_reply(incident, entry, note), step, sent, thread_ts=ts)
        alert = _alert(view, step.subject)
        message = notice_message(alert, view, self.dashboard_url)
        if step.kind == StepKind.UPDATE_NOTICE:
            api.update_message(*_posted_root(sent), message)
            return replace(sent, digest=message_digest(message))
        return self._post(api, channel, message, step, sent, thread_ts=None)

    def _post(
        self, api: SlackApi, channel: str, message: SlackMessage, step: Step, sent: Delivery, *, thread_ts: str | None
    ) -> Delivery:
        """Post, unless an earlier post of the same message whose outcome was unknown is found first."""
        marker = step_marker(step.subject, step.entry)
        event_type = _event_type(step)
        since = pending_since(sent, marker)
        if since is not None:
            found = api.find_message(sent.channel or channel, event_type, marker, since - LOOKBACK, thread_ts)
            if found is not None:
                return _posted(sent, step, found, message, marker, now=self.clock())
        metadata = {"event_type": event_type, "event_payload": {"id": marker}}
        ref = api.post_message(channel, message, thread_ts, metadata=metadata)
        return _posted(sent, step, ref, message, marker, now=self.clock())

    # --- Slack (incoming webhook) ---

    def _webhook(self, webhook: str, step: Step, view: View, sent: Delivery) -> Delivery:
        hook = self.channels.slack_webhook(webhook)
        if step.kind == StepKind.NOTE:
            incident, entry, note = _noted(view, step)
            hook.post(render_note_message(incident, entry, note, dashboard_url=self.dashboard_url))
            return replace(sent, steps=[*sent.steps, entry.key])
        if step.kind == StepKind.POST_STEP:
            incident = _incident(view, step.subject)
            entry = _required(step.entry, "a webhook step without its step")
            link = self.dashboard_url
            if step.batch:
                hook.post(render_fleet_steps(incident, step.batch, dashboard_url=link))
                return replace(_batch_told(sent, step.batch), last_at=self.clock())
            hook.post(
                render_fleet_steps(incident, (entry,), dashboard_url=link)
                if incident.fleet
                else render_webhook_step(incident, entry, dashboard_url=link)
            )
            return replace(sent, steps=[*sent.steps, entry.key])
        hook.post(render_alert(_alert(view, step.subject), dashboard_url=self.dashboard_url))
        return replace(sent, steps=[*sent.steps, WEBHOOK_POSTED])

    # --- PagerDuty ---

    def _pagerduty(self, service: str, step: Step, view: View, sent: Delivery) -> Delivery:
        key = self.channels.routing_key(service)
        if step.kind == StepKind.NOTE:
            return self._note_to_pagerduty(key, step, view, sent)
        events = self.channels.pagerduty()
        if step.kind == StepKind.RESOLVE:
            events.send(render_resolve(step.subject.removeprefix("pd:"), key))
            return replace(sent, alert="resolve", incident=None, acked=None)
        if step.kind == StepKind.TRIGGER:
            incident = _incident(view, step.incident or "")
            events.send(trigger_event(incident, key))
            return replace(
                sent,
                alert="trigger",
                digest=page_digest(incident),
                incident=incident.id,
                last_at=self.clock(),
                severity=incident.classification.severity.value,
                acked=sent.acked if sent.incident == incident.id else None,
            )
        if step.kind == StepKind.ACKNOWLEDGE:
            incident = _incident(view, step.incident or "")
            events.send(render_acknowledge(step.subject.removeprefix("pd:"), key))
            return replace(sent, acked=incident.acknowledge_key)
        alert = _alert(view, step.subject)
        if step.kind == StepKind.RESOLVE_NOTICE:
            events.send(render_resolve(alert_dedup_key(alert), key))
            return replace(sent, alert="resolve")
        events.send(render_alert_trigger(alert, key, alert_dedup_key(alert)))
        return replace(sent, alert="trigger")

    def _note_to_pagerduty(self, key: str, step: Step, view: View, sent: Delivery) -> Delivery:
        """A held-back notice: a change event, or a page (on the alert of the fleet incident it belongs to while that is
        open, as the workflow's pages about a fleet's members are; else on the one the workflow named)."""
        incident, entry, note = _noted(view, step)
        place = step.place
        fleet = (place.incident, place.dedup_key) if place is not None else None
        if note.pagerduty == "trigger":
            dedup_key = place.dedup_key if place is not None and place.is_open else note.dedup_key
            event = render_note_trigger(incident, entry, note, key, dedup_key or incident.dedup_key, fleet=fleet)
            self.channels.pagerduty().send(event)
        else:
            self.channels.pagerduty_changes().send(render_note_change(incident, entry, note, key, fleet=fleet))
        return replace(sent, steps=[*sent.steps, entry.key])


def alert_dedup_key(alert: Alert) -> str:
    return f"{alert.kind.value}/{alert.instance.cluster_name}/{alert.event_id}"[:255]


def _posted(
    sent: Delivery, step: Step, ref: SlackPostRef, message: SlackMessage, marker: str, *, now: datetime
) -> Delivery:
    pending = _without(sent.pending, marker)
    if step.batch:
        return replace(_batch_told(sent, step.batch), pending=pending, last_at=now)
    if step.entry is not None:
        return replace(sent, steps=[*sent.steps, step.entry.key], pending=pending, last_at=now)
    return replace(sent, channel=ref.channel, ts=ref.ts, digest=message_digest(message), pending=pending)


def _batch_told(sent: Delivery, batch: tuple[TimelineEntry, ...]) -> Delivery:
    """A fleet thread's batch told: its member updates move the cursor, its other steps are kept by key."""
    seqs = [seq for seq in (journal_seq(entry.key) for entry in batch) if seq is not None]
    keys = [entry.key for entry in batch if journal_seq(entry.key) is None]
    cursor = max([*seqs, sent.cursor]) if sent.cursor is not None else max(seqs, default=None)
    return replace(sent, steps=[*sent.steps, *keys], cursor=cursor)


def pending_since(sent: Delivery, marker: str) -> datetime | None:
    """When a post of this message started whose outcome is unknown, if one did."""
    return next((pending.at for pending in sent.pending if pending.marker == marker), None)


def with_pending(sent: Delivery, marker: str, started: datetime, owner: str) -> Delivery:
    """The intent to post, recorded before posting: if the outcome is never learned, the next worker looks."""
    return replace(sent, pending=[*_without(sent.pending, marker), Pending(marker, started, owner)])


def without_pending(sent: Delivery, marker: str) -> Delivery:
    return replace(sent, pending=_without(sent.pending, marker))


def as_seen_by(sent: Delivery, owner: str) -> Delivery:
    """The delivery as a worker sees it: its own intents are not unknown outcomes to look for."""
    return replace(sent, pending=[pending for pending in sent.pending if pending.owner != owner])


def _without(pending: list[Pending], marker: str) -> list[Pending]:
    return [item for item in pending if item.marker != marker]


def _event_type(step: Step) -> str:
    if step.entry is not None:
        return METADATA_STEP
    return METADATA_NOTICE if step.kind == StepKind.POST_NOTICE else METADATA_INCIDENT


def _is_auth_failure(error: DeliveryError) -> bool:
    if error.service == "slack":
        return error.reason in AUTH_FAILURES
    return error.status == 400 and "routing key" in error.reason.lower()


_T = TypeVar("_T")


def _required(value: _T | None, problem: str) -> _T:
    if value is None:
        raise LookupError(problem)
    return value


def _posted_root(sent: Delivery) -> tuple[str, str]:
    """The channel and ts of the message the delivery posted (what a reply or an update needs)."""
    if sent.channel is None or sent.ts is None:
        raise LookupError(f"{sent.receiver} has no message for {sent.subject} to reply to or update")
    return sent.channel, sent.ts


def _incident(view: View, incident_id: str) -> Incident:
    incident = view.incident(incident_id)
    if incident is None:
        raise LookupError(f"incident {incident_id} is not in the view")
    return incident


def _noted(view: View, step: Step) -> tuple[Incident, TimelineEntry, ResumeNote]:
    """A held-back notice's incident, its timeline entry and what it says."""
    incident = _incident(view, step.incident or step.subject)
    entry = _required(step.entry, "a held-back notice without its step")
    return incident, entry, _required(entry.note, "a held-back notice without what it says")


def _alert(view: View, key: str) -> Alert:
    alert = next((alert for alert in view.alerts if alert.key == key), None)
    if alert is None:
        raise LookupError(f"notice {key} is not in the view")
    return alert
