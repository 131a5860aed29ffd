"""PagerDuty Events API v2 payloads for incidents and standalone alerts.

Pure functions, no I/O. The dedup key is the incident fingerprint, so every step of one incident
lands on the same PagerDuty alert and the resolve closes it (it must go through the same routing
key as the trigger, or PagerDuty drops it). Untrusted strings are clipped so one long reason cannot
push the event over PagerDuty's size limit; PagerDuty shows text as plain text, so nothing is escaped.
"""

from __future__ import annotations

from typing import Any

from fault_responder.domain import Alert, DrainAttribution, Incident, InstanceRef, Runbook, TimelineEntry
from fault_responder.timefmt import iso_utc

CLIENT_NAME = "GPU Fault Responder"
MAX_SUMMARY = 1024
MAX_DEDUP_KEY = 255
ELLIPSIS = "…"
# Enough history to triage from the page without opening Slack; the full timeline is in the thread.
TIMELINE_ENTRIES_IN_DETAILS = 5
_MAX_DETAIL_TEXT = 1024
# Keeps a standalone alert far below PagerDuty's 512 KB event limit whatever the event carried.
_MAX_ALERT_DETAILS = 50
_DRAIN_PHASES = frozenset({"DRAINING", "DEREGISTERING", "INACTIVE"})


def render_trigger(incident: Incident, routing_key: str) -> dict[str, Any]:
    """A trigger for the incident's current state; repeated triggers append to the open alert."""
    instance = incident.instance
    classification = incident.classification
    payload: dict[str, Any] = {
        "summary": _clip(_incident_summary(incident), MAX_SUMMARY),
        "source": _source(instance),
        "severity": classification.severity.value,
        "timestamp": iso_utc(incident.last_status_change or incident.opened_at),
        "component": incident.check_type,
        "group": instance.capacity_provider,
        "class": classification.fault_class.value,
        "custom_details": _incident_details(incident),
    }
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": _checked_dedup_key(incident.dedup_key),
        "payload": _without_none(payload),
        **_context(instance, incident.runbook),
    }


def render_resolve(dedup_key: str, routing_key: str) -> dict[str, Any]:
    """Resolve an alert; PagerDuty needs only the key pair, it ignores any payload."""
    return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": _checked_dedup_key(dedup_key)}


def render_acknowledge(dedup_key: str, routing_key: str) -> dict[str, Any]:
    """Acknowledge an open alert (someone is on it: Slack's Acknowledge); PagerDuty needs only the key pair."""
    return {"routing_key": routing_key, "event_action": "acknowledge", "dedup_key": _checked_dedup_key(dedup_key)}


def render_alert_trigger(alert: Alert, routing_key: str, dedup_key: str) -> dict[str, Any]:
    """A trigger for a standalone alert; the caller picks the dedup key (usually from the event id)."""
    instance = alert.instance
    summary = f"{alert.title} on {_source(instance)} in cluster {instance.cluster_name}"
    payload: dict[str, Any] = {
        "summary": _clip(summary, MAX_SUMMARY),
        "source": _source(instance),
        "severity": alert.severity.value,
        "timestamp": iso_utc(alert.at),
        "component": alert.kind.value,
        "group": instance.capacity_provider,
        "class": alert.fault_class.value,
        "custom_details": _alert_details(alert),
    }
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": _checked_dedup_key(dedup_key),
        "payload": _without_none(payload),
        **_context(instance, alert.runbook),
    }


def _incident_summary(incident: Incident) -> str:
    instance = incident.instance
    phase = incident.phase
    if phase in _DRAIN_PHASES and incident.drain is not None:
        phase = f"{phase}, {incident.drain.label}"
    if instance.is_alarm:
        cluster = f" in cluster {instance.cluster_name}" if instance.cluster_name else ""
        return f"{incident.classification.title}: alarm {instance.container_instance_id}{cluster} ({phase})"
    return f"{incident.classification.title} on {_source(instance)} in cluster {instance.cluster_name} ({phase})"


def _incident_details(incident: Incident) -> dict[str, Any]:
    classification = incident.classification
    details: dict[str, Any] = {
        "what_to_do": incident.runbook.action if incident.runbook else None,
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "xid": classification.xid,
        "reason": classification.reason,
        "fault_class": classification.fault_class.value,
        "check_type": incident.check_type,
        "status": incident.status,
        "phase": incident.phase,
        **_instance_details(incident.instance),
        **_drain_details(incident.drain),
        "opened_at": iso_utc(incident.opened_at),
        "last_status_change": iso_utc(incident.last_status_change) if incident.last_status_change else None,
        "opened_count": incident.opened_count,
        "found": incident.found,
        "timeline": [_timeline_item(entry) for entry in incident.timeline[-TIMELINE_ENTRIES_IN_DETAILS:]],
    }
    return _without_none(_clipped(details))


def _alert_details(alert: Alert) -> dict[str, Any]:
    details: dict[str, Any] = {
        "what_to_do": alert.runbook.action if alert.runbook else None,
        "event_id": alert.event_id,
        "kind": alert.kind.value,
        "text": alert.text,
        "fault_class": alert.fault_class.value,
        **_instance_details(alert.instance),
        **_drain_details(alert.drain),
        "at": iso_utc(alert.at),
        "details": dict(list(alert.details.items())[:_MAX_ALERT_DETAILS]) or None,
    }
    return _without_none(_clipped(details))


def _instance_details(instance: InstanceRef) -> dict[str, Any]:
    return {
        "region": instance.region,
        "account": instance.account,
        "cluster_arn": instance.cluster_arn,
        "container_instance_arn": instance.container_instance_arn,
        "ec2_instance_id": instance.ec2_instance_id,
        "capacity_provider": instance.capacity_provider,
    }


def _drain_details(drain: DrainAttribution | None) -> dict[str, Any]:
    if drain is None:
        return {}
    return {"drain_cause": drain.cause.value, "drain_label": drain.label, "drain_reason": drain.reason}


def _timeline_item(entry: TimelineEntry) -> dict[str, Any]:
    return {"at": iso_utc(entry.at), "phase": entry.phase, "text": entry.text}


def _context(instance: InstanceRef, runbook: Runbook | None) -> dict[str, Any]:
    label = (
        f"CloudWatch alarm {instance.container_instance_id}"
        if instance.is_alarm
        else f"ECS container instance {instance.container_instance_id} in cluster {instance.cluster_name}"
    )
    links = [{"href": instance.console_url, "text": _clip(label, MAX_SUMMARY)}]
    if runbook is not None:
        links.append({"href": runbook.url, "text": _clip(runbook.link_text, MAX_SUMMARY)})
    return {
        "links": links,
        "client": CLIENT_NAME,
        "client_url": instance.console_url,
    }


def _source(instance: InstanceRef) -> str:
    return instance.ec2_instance_id or instance.container_instance_id


def _checked_dedup_key(key: str) -> str:
    # Truncating would merge different incidents into one alert; refusing is the only safe answer.
    if not key or len(key) > MAX_DEDUP_KEY:
        raise ValueError(f"PagerDuty dedup_key must be 1 to {MAX_DEDUP_KEY} characters, got {len(key)}")
    return key


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _clipped(value: Any) -> Any:
    if isinstance(value, str):
        return _clip(value, _MAX_DETAIL_TEXT)
    if isinstance(value, dict):
        return {key: _clipped(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item) for item in value]
    return value


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(ELLIPSIS)] + ELLIPSIS
