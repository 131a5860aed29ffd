"""Shared domain-object builders for the renderer and notifier tests.

One GPU instance, one XID 79 incident opened at a fixed time, and the steps that drain and resolve
it. Each builder takes keyword arguments only for the fields the tests vary; a test that depends
on a non-default value names it at the call site.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.core.domain import (
    Alert,
    Classification,
    DrainAttribution,
    DrainCause,
    EntryKind,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    Severity,
    TimelineEntry,
)
from fault_responder.routing.runbooks import runbook_for

ROUTING_KEY = "0123456789abcdef0123456789abcdef"
OPENED = datetime(2026, 4, 11, 0, 48, 53, tzinfo=UTC)
DRAINED_AT = OPENED + timedelta(minutes=1)
RESOLVED_AT = OPENED + timedelta(minutes=8, seconds=30)

INSTANCE = InstanceRef(
    region="us-west-2",
    account="123456789012",
    cluster_arn="arn:aws:ecs:us-west-2:123456789012:cluster/gpu-training",
    container_instance_arn="arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-training/a1b2c3d4e5f6",
    ec2_instance_id="i-0abcdef1234567890",
    capacity_provider="p5-training",
)
AUTO_REPAIR = DrainAttribution(DrainCause.ECS_AUTO_REPAIR, "ECS auto-repair (XID 79)", "INSTANCE_HEALTH")
MANUAL_DRAIN = DrainAttribution(DrainCause.MANUAL_OR_SCHEDULED, "Manual or scheduled drain")
XID_79_TITLE = "XID 79: GPU has fallen off the bus"
RECOVERED = TimelineEntry(
    "health:ACCELERATED_COMPUTE:OK", RESOLVED_AT, "evt-ok", "RECOVERED", "ACCELERATED_COMPUTE is OK again",
    EntryKind.RECOVERED, page=True,
)  # fmt: skip


def step(at: datetime, event_id: str, phase: str, text: str, kind: EntryKind = EntryKind.INSTANCE) -> TimelineEntry:
    """A timeline step keyed by its event and phase."""
    return TimelineEntry(f"{phase}:{event_id}", at, event_id, phase, text, kind)


def an_incident(
    *,
    reason: str = "XID_79",
    severity: Severity = Severity.CRITICAL,
    title: str = XID_79_TITLE,
    fault_class: FaultClass = FaultClass.XID_CRITICAL,
    xid: int | None = 79,
    check_type: str = "ACCELERATED_COMPUTE",
) -> Incident:
    """An open incident on INSTANCE, IMPAIRED since OPENED, with the default runbook; by default XID 79."""
    fingerprint = f"gpu-training/a1b2c3d4e5f6/{check_type}"
    return Incident(
        id=f"{fingerprint}@{OPENED.isoformat()}",
        fingerprint=fingerprint,
        instance=INSTANCE,
        check_type=check_type,
        status="OPEN",
        classification=Classification(fault_class, severity, title, xid=xid, reason=reason),
        opened_at=OPENED,
        phase="IMPAIRED",
        last_status_change=OPENED,
        timeline=[step(OPENED, "evt-impaired", "IMPAIRED", f"{check_type} IMPAIRED: {reason}", EntryKind.OPENED)],
        runbook=runbook_for(fault_class, xid),
    )


def draining(
    incident: Incident,
    drain: DrainAttribution = AUTO_REPAIR,
    *,
    at: datetime = DRAINED_AT,
    text: str = "ECS set the instance DRAINING",
) -> Incident:
    """The incident after ECS set the instance DRAINING at `at`."""
    drained = step(at, "evt-draining", "DRAINING", text)
    return dataclasses.replace(
        incident, phase="DRAINING", last_status_change=at, drain=drain, timeline=[*incident.timeline, drained]
    )


def resolved(incident: Incident, *, by: TimelineEntry = RECOVERED, reason: str = "health check OK") -> Incident:
    """The incident closed by the step `by`, at its time, for `reason`."""
    return dataclasses.replace(
        incident,
        status="CLOSED",
        phase="RESOLVED",
        last_status_change=by.at,
        closed_at=by.at,
        close_reason=reason,
        timeline=[*incident.timeline, by],
    )


def an_alert(**changes: Any) -> Alert:
    """A standalone alert on INSTANCE at OPENED: by default a manual drain, with `changes` applied and the default
    runbook of its fault class unless `changes` gives one."""
    alert = Alert(
        key="drain:evt-manual",
        event_id="evt-manual",
        kind=EventKind.INSTANCE_STATE,
        instance=INSTANCE,
        severity=Severity.INFO,
        title="Instance draining (manual or scheduled)",
        text="The container instance was set to DRAINING with no health fault before it.",
        at=OPENED,
        fault_class=FaultClass.INSTANCE_LIFECYCLE,
        drain=MANUAL_DRAIN,
    )
    changed = dataclasses.replace(alert, **changes)
    return changed if "runbook" in changes else dataclasses.replace(changed, runbook=runbook_for(changed.fault_class))
