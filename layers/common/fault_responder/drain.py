"""Why an instance is draining.

AWS documents no drain reason code (ECS_EVENTS.md §2.4). We read whatever reason the event carries,
and attribute the cause from what we know, in this order:
1. this app quarantined the instance (the resume workflow records that before it drains);
2. the instance was IMPAIRED recently (an open incident, or one within the window) -> ECS auto-repair;
3. ECS said something about it -> reported by ECS, with its words;
4. nothing -> a manual or scheduled drain, no health fault.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from fault_responder.domain import DrainAttribution, DrainCause, Incident, InstanceState


def attribute_drain(
    *,
    at: datetime,
    reason: str | None,
    state: InstanceState,
    incidents: Iterable[Incident],
    window: timedelta,
) -> DrainAttribution:
    reason = (reason or "").strip() or None
    if state.quarantined_at is not None and at - state.quarantined_at <= window:
        detail = f": {state.quarantine_reason}" if state.quarantine_reason else ""
        return DrainAttribution(DrainCause.FAULT_RESPONDER_QUARANTINE, f"fault-responder quarantine{detail}", reason)
    fault = _recent_fault(at, state, incidents, window)
    if fault is not None:
        return DrainAttribution(DrainCause.ECS_AUTO_REPAIR, f"ECS auto-repair ({fault})", reason)
    if reason is not None:
        return DrainAttribution(DrainCause.ECS_REPORTED, f"reported by ECS: {reason}", reason)
    return DrainAttribution(DrainCause.MANUAL_OR_SCHEDULED, "manual or scheduled drain (no health fault)", None)


def _recent_fault(at: datetime, state: InstanceState, incidents: Iterable[Incident], window: timedelta) -> str | None:
    """The label of the newest fault that is open or ended within the window, if any."""
    candidates: list[tuple[datetime, str]] = []
    for incident in incidents:
        if incident.classification.severity.rank == 0:
            continue
        ended = incident.closed_at if not incident.is_open else None
        if ended is None or at - ended <= window:
            candidates.append((incident.opened_at, fault_label(incident)))
    if state.last_impaired_at is not None and at - state.last_impaired_at <= window and state.last_impaired_label:
        candidates.append((state.last_impaired_at, state.last_impaired_label))
    return max(candidates)[1] if candidates else None


def fault_label(incident: Incident) -> str:
    """A short name for the fault: "XID 79", or the check type when there is no XID."""
    xid = incident.classification.xid
    return f"XID {xid}" if xid is not None else incident.check_type
