"""What people did to an incident (fault_responder.incidents.incident_actions), applied to the incident derived from
its facts. Pure: no I/O. Shared by the instance lifecycle and fleet incidents."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from fault_responder.core.domain import EntryKind, Incident, PersonAction, TimelineEntry
from fault_responder.incidents.record import ActionFact, incident_anchor, incident_series

MAX_TIMELINE = 100

VIA = {"slack": "from Slack", "pagerduty": "in PagerDuty"}
_ACTION_PHASES = {
    "acknowledge": "ACKNOWLEDGED",
    "unacknowledge": "UNACKNOWLEDGED",
    "resolve": "RESOLVED",
    "reassign": "REASSIGNED",
    "silence": "SILENCED",
}


def apply_actions(incident: Incident, actions: Iterable[ActionFact], *, may_close: bool = True) -> None:
    """What people did to the incident, in time order: the actions about it (`about`), whatever order they and the
    facts arrived in. A PagerDuty resolve that echoes the responder's own (the fault had ended) tells nobody anything.

    Resolve closes the incident at that moment (a manual resolve): what ECS reports later about the same fault goes
    into its thread, and the check's next fault, after it is OK again, is a new incident. Acknowledge says who is
    on it, until PagerDuty's acknowledgement times out or is taken back (unacknowledge)."""
    ends = incident.closed_at
    mine = sorted((a for a in actions if about(a, incident, ends)), key=lambda a: (a.at, a.key))
    if not mine:
        return
    entries: list[TimelineEntry] = []
    for action in mine:
        if incident.closed_at is not None and action.at >= incident.closed_at:
            continue
        person = PersonAction(action.by, action.at, action.via, action.note)
        where = VIA.get(action.via, action.via)
        text: str | None = None
        if action.kind == "resolve" and not may_close:
            # A fleet incident closes when its members recover: closing it by hand would let each member page.
            text = f"Resolved {where} by {action.by}: the fleet stays open here while its members are faulting"
        elif action.kind == "resolve":
            incident.status, incident.phase = "CLOSED", "RESOLVED"
            incident.closed_at = action.at
            incident.close_reason = f"resolved by {action.by} {where}"
            incident.resolved_by, incident.resolves_at = person, None
            text = f"Resolved by {action.by} {where}: a manual resolve"
        elif action.kind == "acknowledge":
            if incident.acknowledged is None or incident.acknowledged.by != action.by:
                text = f"Acknowledged by {action.by} {where}"
            incident.acknowledged, incident.acknowledge_key = person, action.key
        elif action.kind == "unacknowledge" and incident.acknowledged is not None:
            incident.acknowledged, incident.acknowledge_key = None, None
            text = f"No longer acknowledged {where}" + (f" ({action.by})" if action.by else "")
        elif action.kind == "reassign":
            incident.assigned = person
            text = f"Reassigned {where}" + (f" {action.note}" if action.note else "") + f" by {action.by}"
        elif action.kind == "silence":
            text = f"Silenced by {action.by} {where}" + (f" {action.note}" if action.note else "")
        if text is not None:
            key = f"action:{action.key}"
            phase = _ACTION_PHASES.get(action.kind, action.kind.upper())
            entries.append(TimelineEntry(key, action.at, key, phase, text, EntryKind.ACTION))
    if entries:
        timeline = sorted([*incident.timeline, *entries], key=lambda e: (e.at, KIND_ORDER.get(e.kind, 9), e.key))
        incident.timeline = (
            timeline if len(timeline) <= MAX_TIMELINE else [timeline[0], *timeline[-(MAX_TIMELINE - 1) :]]
        )


def about(action: ActionFact, incident: Incident, ends: datetime | None) -> bool:
    """Whether an action is about the incident: it names the incident's alert, and was taken while the incident was
    open (`ends`: its end as its facts make it, before any action). An alert's incidents never overlap in time, so an
    action is about one of them at most, and about none when it was taken while none was open (a webhook about an
    earlier fault, arriving after the next one opened, is about the earlier one).

    PagerDuty names the alert (its dedup key, the incidents' fingerprint). A Slack button names the incident (its
    id): the action is about the incident whose reports contain the id's anchor (a relapse learned late may have made
    two incidents one), and only while that incident was open, never about a later one pressed on an old root."""
    if action.at < incident.opened_at or (ends is not None and action.at >= ends):
        return False
    if action.dedup_key is not None:
        return action.dedup_key == incident.fingerprint
    named = action.incident
    if named is None or incident_series(named) != incident_series(incident.id):
        return False
    if action.via == "pagerduty":
        return True
    anchor = incident_anchor(named)
    if anchor is not None and ends is not None and anchor > ends:
        # A report after the incident ended (the instance had already left) names it in the orders of arrival where
        # that report came first and anchored the incident: whatever the order, a press on it is about no incident.
        return False
    return named == incident.id or (anchor is not None and incident.opened_at <= anchor)


KIND_ORDER = {
    EntryKind.OPENED: 0,
    EntryKind.CHANGED: 1,
    EntryKind.INSTANCE: 2,
    EntryKind.TASK: 3,
    EntryKind.NOTICE: 4,
    EntryKind.ACTION: 5,
    EntryKind.RECOVERED: 6,
}
"""How entries of one moment are ordered (the lifecycle's order)."""
