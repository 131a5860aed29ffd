"""PagerDuty's plans: one alert per check at a time (its dedup key is the fingerprint), triggered, sent again when its
page changes, acknowledged when someone acknowledged from Slack, resolved; the workflow's held-back notices as
change events or pages."""

from __future__ import annotations

from typing import Any

from fault_responder.core.domain import Alert, Incident
from fault_responder.incidents.record import Delivery
from fault_responder.notification.receivers.steps import FLEET_BATCH_WAIT, Step, StepKind, Told, digest, held_notes
from fault_responder.notification.render.fleet import render_fleet_trigger
from fault_responder.notification.render.pagerduty import render_trigger


def pagerduty_plan(name: str, incidents: list[Incident], alerts: list[Alert], record: Told) -> list[Step]:
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


def acknowledge_due(incident: Incident, sent: Delivery) -> bool:
    """Whether PagerDuty is still to hear of the incident's acknowledgement: one made from Slack (PagerDuty's own
    needs no echo), not sent yet for this alert."""
    acknowledged = incident.acknowledged
    return acknowledged is not None and acknowledged.via == "slack" and incident.acknowledge_key != sent.acked


def pagerduty_subject(fingerprint: str) -> str:
    return f"pd:{fingerprint}"


def fleet_page_due(incident: Incident, sent: Delivery) -> bool:
    """A fleet incident's open alert is sent again (its members, its counts) at most once a minute, or at once when
    its severity rises: a storm must not spend PagerDuty's per-key rate limit on one alert."""
    fleet = incident.fleet
    if sent.severity != incident.classification.severity.value:
        return True
    if fleet is None or fleet.as_of is None or sent.last_at is None:
        return True
    return fleet.as_of - sent.last_at >= FLEET_BATCH_WAIT


def page_digest(incident: Incident) -> str:
    """What a PagerDuty trigger says that matters to a pager: a change sends the trigger again (a fleet incident's,
    at most once a minute: fleet_page_due)."""
    drain = incident.drain.label if incident.drain is not None else None
    classification = incident.classification
    if incident.fleet is not None:
        # Grows as members join, never as they leave: a fleet's recovery does not page again.
        size = incident.fleet.total
        return digest([classification.severity.value, classification.fault_class.value, classification.xid, size])
    return digest([classification.severity.value, classification.title, drain])


def trigger_event(incident: Incident, routing_key: str) -> dict[str, Any]:
    if incident.fleet is not None:
        return render_fleet_trigger(incident, routing_key, incident.dedup_key)
    return render_trigger(incident, routing_key)


def alert_dedup_key(alert: Alert) -> str:
    return f"{alert.kind.value}/{alert.instance.cluster_name}/{alert.event_id}"[:255]
