"""A training auto-resume notice the workflow held back (a silence, a maintenance window, an inhibition), as the router
tells it once nothing holds it back: a thread reply (the incident's, or the fleet incident's it belongs to), a message
of its own (no thread to reply in, or a webhook), a PagerDuty change event, or a page.

The workflow tells its notices itself when nothing holds them back (fault_responder.resume.notify); what it held back
is kept with the incident's facts (core.domain.ResumeNote, bounded) and rendered here from that, with the same parts:
the notice, its buttons (an approval request's), and the job, host and incident it is about. Pure functions.
"""

from __future__ import annotations

from typing import Any

from fault_responder.core.domain import Incident, ResumeNote, TimelineEntry
from fault_responder.core.timefmt import iso_utc
from fault_responder.notification.render.blocks import SlackMessage, escape_mrkdwn, root_context
from fault_responder.notification.render.pagerduty import where_details
from fault_responder.notification.render.slack import SEVERITY_EMOJI, approval_buttons

CLIENT_NAME = "GPU Fault Responder"
COMPONENT = "training-auto-resume"
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
MAX_SUMMARY = 1024
MAX_NAME = 255


def render_note_reply(incident: Incident, entry: TimelineEntry, note: ResumeNote) -> SlackMessage:
    """A reply in a thread (the incident's, or its fleet incident's): the notice, its buttons, what it is about."""
    headline = f"{SEVERITY_EMOJI[note.severity]} *{escape_mrkdwn(note.title)}*\n{escape_mrkdwn(note.text)}"
    blocks = [_section(headline), *approval_buttons(note.approval_id), _context(_about(incident, entry, note))]
    return SlackMessage(text=_clip(escape_mrkdwn(note.title), MAX_SECTION_TEXT), blocks=blocks)


def render_note_message(
    incident: Incident, entry: TimelineEntry, note: ResumeNote, *, dashboard_url: str | None = None
) -> SlackMessage:
    """The same notice as a message of its own (no thread to reply in, or a webhook): a root, which links to the
    dashboard."""
    instance = incident.instance
    header = _clip(f"{SEVERITY_EMOJI[note.severity]} Training auto-resume · {note.title}", MAX_HEADER_TEXT)
    account = (
        f"  *Account:* {escape_mrkdwn(incident.where.account_text)}  *Region:* {escape_mrkdwn(incident.where.region)}"
        if incident.where is not None
        else ""
    )
    where = (
        f"*Cluster:* {escape_mrkdwn(instance.cluster_name)}{account}  *Instance:* {escape_mrkdwn(host(incident))}  "
        f"*Capacity provider:* {escape_mrkdwn(instance.capacity_provider or '-')}  "
        f"*Fault:* {escape_mrkdwn(incident.classification.title)}"
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
        _section(escape_mrkdwn(note.text)),
        _section(where),
        *approval_buttons(note.approval_id),
        root_context([_about(incident, entry, note)], dashboard_url),
    ]
    place = instance.cluster_name + (f", {incident.where}" if incident.where is not None else "")
    fallback = f"Training auto-resume · {note.title} · {host(incident)} ({place})"
    return SlackMessage(text=_clip(escape_mrkdwn(fallback), MAX_SECTION_TEXT), blocks=blocks)


def render_note_change(
    incident: Incident, entry: TimelineEntry, note: ResumeNote, routing_key: str, *, fleet: tuple[str, str] | None
) -> dict[str, Any]:
    """A Change Event (it never pages); `fleet`: the id and dedup key of the fleet incident it belongs to."""
    return {
        "routing_key": routing_key,
        "payload": {
            "summary": _clip(note.summary, MAX_SUMMARY),
            "source": _clip(host(incident), MAX_NAME),
            "timestamp": iso_utc(entry.at),
            "custom_details": _details(incident, entry, note, fleet),
        },
        "links": _links(incident),
    }


def render_note_trigger(
    incident: Incident,
    entry: TimelineEntry,
    note: ResumeNote,
    routing_key: str,
    dedup_key: str,
    *,
    fleet: tuple[str, str] | None,
) -> dict[str, Any]:
    """An Events v2 trigger (a page) on `dedup_key`: the job's own alert, or the fleet incident's it belongs to."""
    instance = incident.instance
    payload = {
        "summary": _clip(note.summary, MAX_SUMMARY),
        "source": _clip(host(incident), MAX_NAME),
        "severity": note.severity.value,
        "timestamp": iso_utc(entry.at),
        "component": COMPONENT,
        "group": _clip(instance.capacity_provider or instance.cluster_name, MAX_NAME),
        "class": "training_resume",
        "custom_details": _details(incident, entry, note, fleet),
    }
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key,
        "payload": payload,
        "links": _links(incident),
        "client": CLIENT_NAME,
        "client_url": instance.console_url,
    }


def host(incident: Incident) -> str:
    instance = incident.instance
    return instance.ec2_instance_id or instance.container_instance_id


def _about(incident: Incident, entry: TimelineEntry, note: ResumeNote) -> str:
    parts = ["Training auto-resume"]
    if note.job_id:
        parts.append(f"job `{escape_mrkdwn(note.job_id)}`")
    parts.append(f"host `{escape_mrkdwn(host(incident))}`")
    parts.append(f"incident `{escape_mrkdwn(incident.fingerprint)}`")
    parts.append(f"held back at {entry.at:%H:%M:%S} UTC, told once nothing held it back")
    return " · ".join(parts)


def _details(
    incident: Incident, entry: TimelineEntry, note: ResumeNote, fleet: tuple[str, str] | None
) -> dict[str, Any]:
    details: dict[str, Any] = {
        "text": note.text,
        "job_id": note.job_id,
        "host": host(incident),
        "incident": incident.id,
        **where_details(incident.where),
        "held_back_at": iso_utc(entry.at),
    }
    if fleet is not None:
        details["fleet_incident"], details["fleet_dedup_key"] = fleet
    return details


def _links(incident: Incident) -> list[dict[str, str]]:
    instance = incident.instance
    return [{"href": instance.console_url, "text": f"ECS container instance {instance.container_instance_id}"}]


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [_mrkdwn(text)]}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text, MAX_SECTION_TEXT), "verbatim": True}


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    # Escaped text: never leave half an entity (`&am`) at the cut.
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"
