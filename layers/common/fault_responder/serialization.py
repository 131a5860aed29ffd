"""Incidents and instance state to and from plain JSON-compatible dicts (what the store persists)."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Any

from fault_responder.domain import (
    Classification,
    DrainAttribution,
    DrainCause,
    FaultClass,
    Incident,
    InstanceRef,
    InstanceState,
    NotificationAction,
    Severity,
    SlackThread,
    TimelineEntry,
)


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def incident_to_dict(incident: Incident) -> dict[str, Any]:
    c = incident.classification
    return {
        "fingerprint": incident.fingerprint,
        "instance": asdict(incident.instance),
        "check_type": incident.check_type,
        "status": incident.status,
        "classification": {
            "fault_class": c.fault_class.value,
            "severity": c.severity.value,
            "title": c.title,
            "xid": c.xid,
            "reason": c.reason,
        },
        "opened_at": _ts(incident.opened_at),
        "phase": incident.phase,
        "last_status_change": _ts(incident.last_status_change),
        "closed_at": _ts(incident.closed_at),
        "close_reason": incident.close_reason,
        "drain": (
            {"cause": incident.drain.cause.value, "label": incident.drain.label, "reason": incident.drain.reason}
            if incident.drain
            else None
        ),
        "receivers": list(incident.receivers),
        "route": incident.route,
        "slack_threads": [asdict(thread) for thread in incident.slack_threads],
        "timeline": [_entry_to_dict(entry) for entry in incident.timeline],
        "opened_count": incident.opened_count,
        "version": incident.version,
    }


def incident_from_dict(data: dict[str, Any]) -> Incident:
    c = data["classification"]
    drain = data.get("drain")
    opened_at = _dt(data["opened_at"])
    assert opened_at is not None
    return Incident(
        fingerprint=data["fingerprint"],
        instance=InstanceRef(**data["instance"]),
        check_type=data["check_type"],
        status=data["status"],
        classification=Classification(
            fault_class=FaultClass(c["fault_class"]),
            severity=Severity(c["severity"]),
            title=c["title"],
            xid=int(c["xid"]) if c.get("xid") is not None else None,
            reason=c.get("reason"),
        ),
        opened_at=opened_at,
        phase=data["phase"],
        last_status_change=_dt(data.get("last_status_change")),
        closed_at=_dt(data.get("closed_at")),
        close_reason=data.get("close_reason"),
        drain=DrainAttribution(DrainCause(drain["cause"]), drain["label"], drain.get("reason")) if drain else None,
        receivers=list(data.get("receivers") or []),
        route=data.get("route"),
        slack_threads=[SlackThread(**thread) for thread in data.get("slack_threads") or []],
        timeline=[_entry_from_dict(entry) for entry in data.get("timeline") or []],
        opened_count=int(data.get("opened_count", 1)),
        version=int(data.get("version", 0)),
    )


def _entry_to_dict(entry: TimelineEntry) -> dict[str, Any]:
    return {
        "at": _ts(entry.at),
        "event_id": entry.event_id,
        "phase": entry.phase,
        "text": entry.text,
        "stale": entry.stale,
        "action": entry.action.value if entry.action else None,
        "page": entry.page,
    }


def _entry_from_dict(data: dict[str, Any]) -> TimelineEntry:
    at = _dt(data["at"])
    assert at is not None
    return TimelineEntry(
        at=at,
        event_id=data["event_id"],
        phase=data["phase"],
        text=data["text"],
        stale=bool(data.get("stale", False)),
        action=NotificationAction(data["action"]) if data.get("action") else None,
        page=bool(data.get("page", True)),
    )


def state_to_dict(state: InstanceState) -> dict[str, Any]:
    return {
        "container_instance_arn": state.container_instance_arn,
        "status": state.status,
        "status_version": state.status_version,
        "status_at": _ts(state.status_at),
        "last_impaired_at": _ts(state.last_impaired_at),
        "last_impaired_label": state.last_impaired_label,
        "quarantined_at": _ts(state.quarantined_at),
        "quarantine_reason": state.quarantine_reason,
        "version": state.version,
    }


def state_from_dict(data: dict[str, Any]) -> InstanceState:
    version = data.get("status_version")
    return InstanceState(
        container_instance_arn=data["container_instance_arn"],
        status=data.get("status"),
        status_version=int(version) if version is not None else None,
        status_at=_dt(data.get("status_at")),
        last_impaired_at=_dt(data.get("last_impaired_at")),
        last_impaired_label=data.get("last_impaired_label"),
        quarantined_at=_dt(data.get("quarantined_at")),
        quarantine_reason=data.get("quarantine_reason"),
        version=int(data.get("version", 0)),
    )
