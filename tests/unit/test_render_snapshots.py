"""Reviewed snapshots of every rendered Slack and PagerDuty payload: a formatting change is a diff.

Regenerate with `UPDATE_SNAPSHOTS=1 pytest tests/unit/test_render_snapshots.py`, then read the diff
as a reviewer would: these files are what on-call sees.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fault_responder.domain import (
    Alert,
    Classification,
    DrainAttribution,
    DrainCause,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    Notification,
    NotificationAction,
    Severity,
    TimelineEntry,
)
from fault_responder.render.pagerduty import render_alert_trigger, render_resolve, render_trigger
from fault_responder.render.slack import (
    SlackMessage,
    render_alert,
    render_incident_root,
    render_timeline_reply,
    render_webhook_message,
)

SNAPSHOTS = Path(__file__).resolve().parents[1] / "snapshots" / "render"
ROUTING_KEY = "0123456789abcdef0123456789abcdef"
T0 = datetime(2026, 4, 11, 0, 48, 53, tzinfo=UTC)

INSTANCE = InstanceRef(
    region="us-west-2",
    account="123456789012",
    cluster_arn="arn:aws:ecs:us-west-2:123456789012:cluster/gpu-training",
    container_instance_arn="arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-training/a1b2c3d4e5f6",
    ec2_instance_id="i-0abcdef1234567890",
    capacity_provider="p5-training",
)


def an_incident(check_type: str, classification: Classification) -> Incident:
    opened = TimelineEntry(T0, "evt-impaired", "IMPAIRED", f"{check_type} IMPAIRED: {classification.reason}")
    return Incident(
        fingerprint=f"gpu-training/a1b2c3d4e5f6/{check_type}",
        instance=INSTANCE,
        check_type=check_type,
        status="OPEN",
        classification=classification,
        opened_at=T0,
        phase="IMPAIRED",
        last_status_change=T0,
        timeline=[opened],
    )


def xid79_opened() -> Incident:
    classification = Classification(
        FaultClass.XID_CRITICAL, Severity.CRITICAL, "XID 79: GPU has fallen off the bus", xid=79, reason="XID_79"
    )
    return an_incident("ACCELERATED_COMPUTE", classification)


def xid79_draining() -> Incident:
    incident = xid79_opened()
    at = T0 + timedelta(minutes=1, seconds=4)
    step = TimelineEntry(at, "evt-draining", "DRAINING", "ECS set the instance DRAINING; tasks are being stopped")
    return dataclasses.replace(
        incident,
        phase="DRAINING",
        last_status_change=at,
        drain=DrainAttribution(DrainCause.ECS_AUTO_REPAIR, "ECS auto-repair (XID 79)", "INSTANCE_HEALTH"),
        timeline=[*incident.timeline, step],
    )


def xid79_resolved() -> Incident:
    incident = xid79_draining()
    at = T0 + timedelta(minutes=8, seconds=30)
    step = TimelineEntry(at, "evt-inactive", "INACTIVE", "The instance left the cluster; a replacement is running")
    return dataclasses.replace(
        incident,
        status="CLOSED",
        phase="RESOLVED",
        last_status_change=at,
        closed_at=at,
        close_reason="instance replaced by ECS auto-repair",
        timeline=[*incident.timeline, step],
    )


def manual_drain() -> Alert:
    return Alert(
        event_id="evt-manual-drain",
        kind=EventKind.INSTANCE_STATE,
        instance=INSTANCE,
        severity=Severity.INFO,
        title="Instance draining (manual or scheduled)",
        text="The container instance was set to DRAINING with no health fault before it.",
        at=T0,
        fault_class=FaultClass.INSTANCE_LIFECYCLE,
        drain=DrainAttribution(DrainCause.MANUAL_OR_SCHEDULED, "Manual or scheduled drain"),
        details={"status": "DRAINING", "running tasks": "3"},
    )


def slack(message: SlackMessage) -> dict[str, Any]:
    return {"text": message.text, "blocks": message.blocks}


def incident_payloads(incident: Incident, action: NotificationAction) -> dict[str, Any]:
    step = incident.timeline[-1]
    notification = Notification(action, step.event_id, incident=incident, entry=step)
    pagerduty = render_trigger(incident, ROUTING_KEY) if incident.is_open else render_resolve(incident, ROUTING_KEY)
    return {
        "slack_root": slack(render_incident_root(incident)),
        "slack_thread_reply": slack(render_timeline_reply(incident, step)),
        "slack_webhook": slack(render_webhook_message(notification)),
        "pagerduty": pagerduty,
    }


def open_payloads(check_type: str, classification: Classification) -> dict[str, Any]:
    return incident_payloads(an_incident(check_type, classification), NotificationAction.OPEN)


def alert_payloads(alert: Alert) -> dict[str, Any]:
    notification = Notification(NotificationAction.STANDALONE, alert.event_id, alert=alert)
    return {
        "slack_alert": slack(render_alert(alert)),
        "slack_webhook": slack(render_webhook_message(notification)),
        "pagerduty": render_alert_trigger(alert, ROUTING_KEY, f"standalone/{alert.event_id}"),
    }


CASES: dict[str, Callable[[], dict[str, Any]]] = {
    "xid79_opened": lambda: incident_payloads(xid79_opened(), NotificationAction.OPEN),
    "xid79_draining_auto_repair": lambda: incident_payloads(xid79_draining(), NotificationAction.UPDATE),
    "xid79_resolved": lambda: incident_payloads(xid79_resolved(), NotificationAction.RESOLVE),
    "manual_drain_alert": lambda: alert_payloads(manual_drain()),
    "xid13_restart_app_warning": lambda: open_payloads(
        "ACCELERATED_COMPUTE",
        Classification(
            FaultClass.XID_RESTART_APP,
            Severity.WARNING,
            "XID 13: Graphics Engine Exception (restart the application)",
            xid=13,
            reason="XID_13",
        ),
    ),
    "xid999_unknown": lambda: open_payloads(
        "ACCELERATED_COMPUTE",
        Classification(FaultClass.XID_UNKNOWN, Severity.ERROR, "XID 999: unknown XID", xid=999, reason="XID_999"),
    ),
    "daemon_unhealthy": lambda: open_payloads(
        "DAEMON",
        Classification(
            FaultClass.DAEMON,
            Severity.ERROR,
            "Daemon task unhealthy",
            reason="Daemon task: EXAMPLE-4af2-4b3c-b9c1-EXAMPLEb2bbf is unhealthy",
        ),
    ),
}


def updating() -> bool:
    return os.environ.get("UPDATE_SNAPSHOTS") == "1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendering_matches_the_reviewed_snapshot(case: str) -> None:
    # Given a fixed domain object, When it is rendered for Slack and PagerDuty
    rendered = json.loads(json.dumps(CASES[case]()))
    path = SNAPSHOTS / f"{case}.json"

    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rendered, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    # Then it is exactly what was reviewed
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}: run with UPDATE_SNAPSHOTS=1 and review the new file")
    assert rendered == json.loads(path.read_text(encoding="utf-8"))


def test_every_snapshot_file_belongs_to_a_case() -> None:
    orphans = sorted(path.stem for path in SNAPSHOTS.glob("*.json") if path.stem not in CASES)

    assert orphans == [], f"snapshots with no case (delete them or add the case): {orphans}"
