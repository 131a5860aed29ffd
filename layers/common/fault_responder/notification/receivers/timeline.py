"""Telling an incident's timeline step by step (Capability.TIMELINE): which steps a receiver was told, a fleet
incident's member updates in batches, and the plan of a kind that can only post (no edit, no thread: an incoming
webhook, a Teams workflow), one self-contained message per step.
"""

from __future__ import annotations

from collections.abc import Callable
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
    held_notes,
)

Fits = Callable[[tuple[TimelineEntry, ...]], int]
"""How many of a batch's first member steps fit one message of the kind (at least one is always sent)."""


def post_only_plan(
    name: str, incidents: list[Incident], alerts: list[Alert], record: Told, *, fits: Fits
) -> list[Step]:
    """One message per step not told yet (a fleet incident's member updates in batches of what `fits` one message),
    one per notice, and the workflow's held-back notices, each a message of its own. A step told is recorded by its
    key (a notice by WEBHOOK_POSTED), a batch by the journal's cursor."""
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
                batch = fleet_batch(unsent, fits)
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


def fleet_batch(unsent: list[TimelineEntry], fits: Fits) -> tuple[TimelineEntry, ...]:
    """The member steps one reply names: the oldest untold, member updates in their journal's order, as many as
    fit one message (the rest go in the next)."""
    ordered = sorted(unsent, key=lambda e: (journal_seq(e.key) is None, journal_seq(e.key) or 0, e.at, e.key))
    batch = tuple(ordered[:FLEET_REPLY_MAX])
    return batch[: max(1, fits(batch))]


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


def batch_told(sent: Delivery, batch: tuple[TimelineEntry, ...]) -> Delivery:
    """A fleet thread's batch told: its member updates move the cursor, its other steps are kept by key."""
    seqs = [seq for seq in (journal_seq(entry.key) for entry in batch) if seq is not None]
    keys = [entry.key for entry in batch if journal_seq(entry.key) is None]
    cursor = max([*seqs, sent.cursor]) if sent.cursor is not None else max(seqs, default=None)
    return replace(sent, steps=[*sent.steps, *keys], cursor=cursor)
