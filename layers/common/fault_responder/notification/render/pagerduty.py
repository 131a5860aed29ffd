"""PagerDuty Events API v2 payloads for incidents and standalone alerts.

Pure functions, no I/O. The dedup key is the incident fingerprint, so every step of one incident
lands on the same PagerDuty alert and the resolve closes it (it must go through the same routing
key as the trigger, or PagerDuty drops it). PagerDuty shows text as plain text, so nothing is escaped.

Nothing exceeds a limit and nothing is left out in silence: the summary keeps to 1,024 characters by
shortening the fault's title (custom_details.title has it), a string cut to fit ends with SHORTENED, a
list cut short (the timeline, a notice's details) is followed by a key counting what it left out and
saying where to see it, and an event that would still pass 512 KB is built again with shorter strings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from fault_responder.core.domain import (
    Alert,
    DrainAttribution,
    Incident,
    InstanceRef,
    Runbook,
    TimelineEntry,
    Where,
)
from fault_responder.core.timefmt import iso_utc
from fault_responder.incidents.alarms import shown
from fault_responder.notification.render import drill
from fault_responder.notification.render.marks import SHORTENED

CLIENT_NAME = "GPU Fault Responder"
MAX_SUMMARY = 1024
MAX_DEDUP_KEY = 255
MAX_EVENT_BYTES = 512 * 1024
"""PagerDuty refuses an event larger than 512 KB, as sent: JSON with every non-ASCII character escaped."""
# Enough history to triage from the page without opening Slack; the full timeline is in the thread.
TIMELINE_ENTRIES_IN_DETAILS = 5
# Strings in custom_details: this long at first, shorter (each a quarter of the one before) while the event is
# still over MAX_EVENT_BYTES, which only text of many escaped characters in every field can make it.
_DETAIL_TEXT_LIMITS = (1024, 256, 64)
# Names PagerDuty groups and filters by (source, component, group, class): identifiers, never prose.
_MAX_NAME = 255
# As long as a runbook's URL may be (runbooks.MAX_URL); a console URL is far shorter unless its names are absurd.
_MAX_URL = 2048
# Keeps a standalone alert far below PagerDuty's 512 KB event limit whatever the event carried.
_MAX_ALERT_DETAILS = 50
_DRAIN_PHASES = frozenset({"DRAINING", "DEREGISTERING", "INACTIVE"})
# A summary shortens its title to no less than this; past that, the whole summary is cut at its end.
_MIN_SUMMARY_TITLE = 100


def render_trigger(incident: Incident, routing_key: str) -> dict[str, Any]:
    """A trigger for the incident's current state; repeated triggers append to the open alert."""
    instance = incident.instance
    classification = incident.classification
    dedup_key = _checked_dedup_key(incident.dedup_key)

    def event(limit: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "summary": _incident_summary(incident),
            "source": _name(_source(instance)),
            "severity": classification.severity.value,
            "timestamp": iso_utc(incident.last_status_change or incident.opened_at),
            "component": _name(incident.check_type),
            "group": _name(instance.capacity_provider),
            "class": classification.fault_class.value,
            "custom_details": _incident_details(incident, limit),
        }
        return {
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": dedup_key,
            "payload": _without_none(payload),
            **_context(instance, incident.runbook),
        }

    return _within_size(event)


def render_resolve(dedup_key: str, routing_key: str) -> dict[str, Any]:
    """Resolve an alert; PagerDuty needs only the key pair, it ignores any payload."""
    return {"routing_key": routing_key, "event_action": "resolve", "dedup_key": _checked_dedup_key(dedup_key)}


def render_acknowledge(dedup_key: str, routing_key: str) -> dict[str, Any]:
    """Acknowledge an open alert (someone is on it: Slack's Acknowledge); PagerDuty needs only the key pair."""
    return {"routing_key": routing_key, "event_action": "acknowledge", "dedup_key": _checked_dedup_key(dedup_key)}


def render_alert_trigger(alert: Alert, routing_key: str, dedup_key: str) -> dict[str, Any]:
    """A trigger for a standalone alert; the caller picks the dedup key (usually from the event id)."""
    instance = alert.instance
    checked_key = _checked_dedup_key(dedup_key)

    def event(limit: int) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "summary": _summary(
                alert.title, f" on {_source(instance)} in cluster {instance.cluster_name}{where_text(alert.where)}"
            ),
            "source": _name(_source(instance)),
            "severity": alert.severity.value,
            "timestamp": iso_utc(alert.at),
            "component": alert.kind.value,
            "group": _name(instance.capacity_provider),
            "class": alert.fault_class.value,
            "custom_details": _alert_details(alert, limit),
        }
        return {
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": checked_key,
            "payload": _without_none(payload),
            **_context(instance, alert.runbook),
        }

    return _within_size(event)


def _incident_summary(incident: Incident) -> str:
    instance = incident.instance
    phase = incident.phase
    if phase in _DRAIN_PHASES and incident.drain is not None:
        phase = f"{phase}, {incident.drain.label}"
    if instance.is_alarm:
        # A contributor's title names its cluster already.
        cluster = f" in cluster {instance.cluster_name}" if instance.cluster_name and not incident.reading else ""
        place = (
            f"{cluster}{where_text(incident.where)}" if cluster or incident.where is None else f" in {incident.where}"
        )
        return _summary(incident.classification.title, f": alarm {instance.container_instance_id}{place} ({phase})")
    where = f" on {_source(instance)} in cluster {instance.cluster_name}{where_text(incident.where)} ({phase})"
    if drill.is_drill(incident):
        # Its title begins with DRILL; what follows says nobody is to act, and who started it when.
        started = f"started by {drill.author(incident)} at {iso_utc(incident.opened_at)}"
        where += f" — {drill.NO_ACTION_SHORT}, {started}"
    return _summary(incident.classification.title, where)


def _summary(title: str, rest: str) -> str:
    """`title` + `rest` in PagerDuty's 1,024 characters: the title is shortened first (custom_details.title has it
    whole), so the page still says where and in what state; only an absurd `rest` is cut itself."""
    if len(title) + len(rest) <= MAX_SUMMARY:
        return title + rest
    room = MAX_SUMMARY - len(rest)
    if room >= _MIN_SUMMARY_TITLE:
        return _clip(title, room) + rest
    return _clip(title + rest, MAX_SUMMARY)


def _incident_details(incident: Incident, limit: int) -> dict[str, Any]:
    classification = incident.classification
    timeline = incident.timeline[-TIMELINE_ENTRIES_IN_DETAILS:]
    earlier = len(incident.timeline) - len(timeline)
    details: dict[str, Any] = {
        **_drill_details(incident),
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "title": classification.title,
        "xid": classification.xid,
        "reason": classification.reason,
        "fault_class": classification.fault_class.value,
        "check_type": incident.check_type,
        "status": incident.status,
        "phase": incident.phase,
        **_instance_details(incident.instance),
        **where_details(incident.where),
        **_reading_details(incident),
        **_drain_details(incident.drain),
        "opened_at": iso_utc(incident.opened_at),
        "last_status_change": iso_utc(incident.last_status_change) if incident.last_status_change else None,
        "opened_count": incident.opened_count,
        "found": incident.found,
        "timeline": [_timeline_item(entry) for entry in timeline],
        "timeline_not_listed": f"{_count(earlier, 'earlier step')}: the Slack thread has each one" if earlier else None,
    }
    return _without_none(_clipped(details, limit))


def _drill_details(incident: Incident) -> dict[str, Any]:
    """What to do, first: a drill's details begin with DRILL and no action needed, who started it, when and what
    ends it, and frame its runbook's action as a real fault's."""
    action = incident.runbook.action if incident.runbook else None
    if not drill.is_drill(incident):
        return {"what_to_do": action}
    return {
        "drill": drill.NO_ACTION,
        "drill_started_by": drill.author(incident),
        "drill_started_at": iso_utc(incident.opened_at),
        "drill_how_it_ends": drill.HOW_IT_ENDS,
        "in_a_real_fault": action,
    }


def _alert_details(alert: Alert, limit: int) -> dict[str, Any]:
    listed = list(alert.details.items())[:_MAX_ALERT_DETAILS]
    left_out = len(alert.details) - len(listed)
    details: dict[str, Any] = {
        "what_to_do": alert.runbook.action if alert.runbook else None,
        "event_id": alert.event_id,
        "kind": alert.kind.value,
        "title": alert.title,
        "text": alert.text,
        "fault_class": alert.fault_class.value,
        **_instance_details(alert.instance),
        **where_details(alert.where),
        **_drain_details(alert.drain),
        "at": iso_utc(alert.at),
        "details": _keyed(listed, limit) or None,
        "details_not_listed": (
            f"{_count(left_out, 'more detail')}, left out to keep the event small: ECS event {alert.event_id} has them"
            if left_out
            else None
        ),
    }
    return _without_none(_clipped(details, limit))


def _keyed(items: list[tuple[str, str]], limit: int) -> dict[str, str]:
    """The items as a dict, each key cut to `limit`: two keys that cut to the same text both stay, numbered."""
    keyed: dict[str, str] = {}
    for key, value in items:
        name = _clip(key, limit)
        number = 1
        while name in keyed:
            number += 1
            name = f"{_clip(key, limit - 8)} #{number}"
        keyed[name] = value
    return keyed


def _instance_details(instance: InstanceRef) -> dict[str, Any]:
    return {
        "region": instance.region,
        "account": instance.account,
        "cluster_arn": instance.cluster_arn,
        "container_instance_arn": instance.container_instance_arn,
        "ec2_instance_id": instance.ec2_instance_id,
        "capacity_provider": instance.capacity_provider,
    }


def where_text(where: Where | None) -> str:
    """`, account prod-ml (111111111111), us-west-2` after a cluster's name, in organization mode; else nothing."""
    return "" if where is None else f", {where}"


def where_details(where: Where | None) -> dict[str, Any]:
    """In organization mode, the account's name beside its id and Region (which every page's details carry)."""
    if where is None:
        return {}
    named = {"account_name": where.name} if where.name else {}
    return {"account": where.account, **named, "region": where.region}


def _reading_details(incident: Incident) -> dict[str, Any]:
    """An alarm contributor's: its cluster, the value against the threshold, its id and attributes (bounded where
    its record keeps them, fault_responder.incidents.alarms), and the alarm in the CloudWatch console."""
    found = incident.reading
    if found is None:
        return {}
    instance = incident.instance
    return {
        "cluster": found.cluster or None,
        "value": shown(found.value, found.unit),
        "threshold": shown(found.threshold, found.unit),
        "contributor_id": found.contributor_id,
        "attributes": dict(instance.attributes) or None,
        "link": instance.console_url if len(instance.console_url) <= _MAX_URL else None,
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
    context: dict[str, Any] = {"links": links, "client": CLIENT_NAME, "client_url": instance.console_url}
    if len(instance.console_url) > _MAX_URL:
        # Only absurd names make the console's URL this long: linking it cannot help, the details name the instance.
        context["links"] = links[1:]
        del context["client_url"]
    return context


def _within_size(event: Callable[[int], dict[str, Any]]) -> dict[str, Any]:
    """The event built with the longest detail strings that keep it within MAX_EVENT_BYTES. With the shortest,
    every string of the event is bounded and it is at most about 200 KB, whatever the ECS event carried."""
    for limit in _DETAIL_TEXT_LIMITS[:-1]:
        built = event(limit)
        if len(json.dumps(built).encode()) <= MAX_EVENT_BYTES:
            return built
    return event(_DETAIL_TEXT_LIMITS[-1])


def _source(instance: InstanceRef) -> str:
    # PagerDuty refuses a blank source, and an ARN ending in "/" passes the event's validation with an empty id.
    return instance.ec2_instance_id or instance.container_instance_id or instance.container_instance_arn


def _checked_dedup_key(key: str) -> str:
    # Truncating would merge different incidents into one alert; refusing is the only safe answer.
    if not key or len(key) > MAX_DEDUP_KEY:
        raise ValueError(f"PagerDuty dedup_key must be 1 to {MAX_DEDUP_KEY} characters, got {len(key)}")
    return key


def _without_none(values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if value is not None}


def _clipped(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        return _clip(value, limit)
    if isinstance(value, dict):
        return {key: _clipped(item, limit) for key, item in value.items()}
    if isinstance(value, list):
        return [_clipped(item, limit) for item in value]
    return value


def _name(text: str | None) -> str | None:
    return None if text is None else _clip(text, _MAX_NAME)


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def clip_text(text: str, limit: int) -> str:
    """`text`, or its start ending with SHORTENED when it is longer than `limit`."""
    return _clip(text, limit)


def _clip(text: str, limit: int) -> str:
    """`text`, or its start ending with SHORTENED when it is longer than `limit`."""
    return text if len(text) <= limit else text[: limit - len(SHORTENED)] + SHORTENED
