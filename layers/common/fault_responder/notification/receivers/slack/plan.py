"""Slack's plans: a bot-token receiver keeps one root per incident, updated in place, and its thread; an incoming
webhook (which can neither edit nor thread) gets one self-contained message per step. A fleet incident's member
updates go out in batches (FLEET_BATCH)."""

from __future__ import annotations

from dataclasses import replace

from fault_responder.core.domain import Alert, Incident
from fault_responder.notification.receivers.steps import Step, StepKind, Told, View, digest, held_notes
from fault_responder.notification.receivers.timeline import fleet_batch, fleet_batch_due, post_only_plan, replies, told
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.fleet import render_fleet_root, steps_that_fit
from fault_responder.notification.render.slack import render_alert, render_incident_root, render_superseded_alert

_MARKED = frozenset({StepKind.POST_ROOT, StepKind.POST_NOTICE, StepKind.REPLY, StepKind.NOTE})
"""A bot's posts that must never happen twice: each is looked for before it is made again."""


def bot_plan(
    name: str, incidents: list[Incident], alerts: list[Alert], record: Told, view: View, *, dashboard_url: str | None
) -> list[Step]:
    """A bot's plan: its posts marked, to be looked for before they are made again (`Step.marker`)."""
    steps = _bot_plan(name, incidents, alerts, record, view, dashboard_url=dashboard_url)
    return [replace(step, marked=step.kind in _MARKED) for step in steps]


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
                batch = fleet_batch(unsent, steps_that_fit)
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


def webhook_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
    """An incoming webhook can only post: one message per step, a fleet's member updates as many as fit one."""
    return post_only_plan(name, incidents, alerts, record, fits=steps_that_fit)
