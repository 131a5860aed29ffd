"""Slack's plans: a bot-token receiver keeps one root per incident, updated in place, and its thread; an incoming
webhook (which can neither edit nor thread) gets one self-contained message per step. A fleet incident's member
updates go out in batches (FLEET_BATCH)."""

from __future__ import annotations

from dataclasses import replace

from fault_responder.core.domain import Alert, EntryKind, Incident, TimelineEntry
from fault_responder.incidents.record import Delivery
from fault_responder.noise.fleet import journal_seq
from fault_responder.notification.receivers.steps import (
    FLEET_BATCH,
    FLEET_BATCH_WAIT,
    FLEET_REPLY_MAX,
    WEBHOOK_POSTED,
    Step,
    StepKind,
    Told,
    View,
    digest,
    held_notes,
)
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.fleet import render_fleet_root, steps_that_fit
from fault_responder.notification.render.slack import render_alert, render_incident_root, render_superseded_alert

_MARKED = frozenset({StepKind.POST_ROOT, StepKind.POST_NOTICE, StepKind.REPLY, StepKind.NOTE})
"""A bot's posts that must never happen twice: each is looked for before it is made again."""


def bot_plan(
    name: str, incidents: list[Incident], alerts: list[Alert], record: Told, view: View, *, dashboard_url: str | None
) -> list[Step]:
    return [
        Step(s.kind, s.subject, s.entry, s.incident, s.batch, s.thread, s.place, marked=s.kind in _MARKED)
        for s in _bot_plan(name, incidents, alerts, record, view, dashboard_url=dashboard_url)
    ]


def _bot_plan(
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


def webhook_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
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


def root_message(incident: Incident, dashboard_url: str | None = None) -> SlackMessage:
    if incident.fleet is not None:
        return render_fleet_root(incident, dashboard_url=dashboard_url)
    return render_incident_root(incident, dashboard_url=dashboard_url)


def message_digest(message: SlackMessage) -> str:
    return digest([message.text, message.blocks])


def notice_message(alert: Alert, view: View, dashboard_url: str | None = None) -> SlackMessage:
    owner = view.incident(alert.superseded_by) if alert.superseded_by else None
    if owner is not None:
        return render_superseded_alert(alert, owner, dashboard_url=dashboard_url)
    return render_alert(alert, dashboard_url=dashboard_url)


def batch_told(sent: Delivery, batch: tuple[TimelineEntry, ...]) -> Delivery:
    """A fleet thread's batch told: its member updates move the cursor, its other steps are kept by key."""
    seqs = [seq for seq in (journal_seq(entry.key) for entry in batch) if seq is not None]
    keys = [entry.key for entry in batch if journal_seq(entry.key) is None]
    cursor = max([*seqs, sent.cursor]) if sent.cursor is not None else max(seqs, default=None)
    return replace(sent, steps=[*sent.steps, *keys], cursor=cursor)
