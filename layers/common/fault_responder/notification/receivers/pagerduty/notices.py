"""The training auto-resume workflow's notices in PagerDuty: a page (an Events v2 trigger) or a Change Event, which
never pages. Pure; a summary cut to fit ends with SHORTENED, as every other PagerDuty event's does."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fault_responder.core.timefmt import iso_utc
from fault_responder.notification.receivers.kind import ResumeNotice
from fault_responder.notification.render.pagerduty import where_details

CLIENT_NAME = "GPU Fault Responder"


def render_notice_trigger(notice: ResumeNotice, routing_key: str, now: datetime, dedup_key: str) -> dict[str, Any]:
    """An Events v2 trigger: a page on `dedup_key`, the evidence in custom_details."""
    payload = {
        "summary": notice.summary,
        "source": notice.host,
        "severity": notice.severity.value,
        "timestamp": iso_utc(now),
        "component": "training-auto-resume",
        "group": notice.capacity_provider,
        "class": notice.kind,
        "custom_details": _details(notice),
    }
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": payload,
        "links": _links(notice),
        "client": CLIENT_NAME,
        "client_url": notice.instance.console_url,
    }


def render_notice_change(notice: ResumeNotice, routing_key: str, now: datetime) -> dict[str, Any]:
    """A Change Event: PagerDuty shows it next to the service's incidents, and it never pages."""
    return {
        "routing_key": routing_key,
        "payload": {
            "summary": notice.summary,
            "source": notice.host,
            "timestamp": iso_utc(now),
            "custom_details": _details(notice),
        },
        "links": _links(notice),
    }


def _details(notice: ResumeNotice) -> dict[str, Any]:
    return {"text": notice.text, **notice.details, **where_details(notice.where)}


def _links(notice: ResumeNotice) -> list[dict[str, str]]:
    instance = notice.instance
    return [{"href": instance.console_url, "text": f"ECS container instance {instance.container_instance_id}"}]
