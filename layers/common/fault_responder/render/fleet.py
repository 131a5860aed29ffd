"""Slack and PagerDuty messages for fleet incidents: one root and one alert for many instances.

The root lists the members (the first MEMBERS_IN_ROOT; the thread names every one as it joins and leaves), the
counts, first and last seen, and what ECS's repair limit means for recovery; PagerDuty's custom details carry
every member. Untrusted text is escaped and clipped exactly as for single incidents (render/slack.py).
"""

from __future__ import annotations

from typing import Any

from fault_responder.domain import FleetMember, Incident, TimelineEntry
from fault_responder.fleet import group_arn, member_name, repair_rounds
from fault_responder.render import slack as blocks
from fault_responder.render.slack import SEVERITY_EMOJI, SlackMessage, escape_mrkdwn
from fault_responder.timefmt import iso_utc

MEMBERS_IN_ROOT = 40
MEMBERS_IN_PAGE = 300
"""Members listed in a PagerDuty event: about 60 KB, far below its 512 KB limit."""
_LINES_PER_SECTION = 20


def render_fleet_root(incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    fleet = _fleet(incident)
    members = sorted(fleet.members, key=lambda m: (not m.is_open, m.opened_at, member_name(m)))
    if incident.is_open:
        severity = incident.classification.severity
        header = blocks._header(
            SEVERITY_EMOJI[severity], f"{severity.value.upper()} FLEET", incident.classification.title
        )
    else:
        header = blocks._header(blocks.RESOLVED_EMOJI, "RESOLVED FLEET", incident.classification.title)
    result: list[dict[str, Any]] = [
        header,
        *blocks._runbook_sections(incident.runbook, with_action=incident.is_open),
        *blocks._field_sections(_fields(incident)),
    ]
    if incident.is_open:
        result.append(blocks._section(_repair_note(len(fleet.open_members))))
    else:
        result.append(blocks._section(blocks._resolution_line(incident)))
    lines = [_member_line(member) for member in members[:MEMBERS_IN_ROOT]]
    for start in range(0, len(lines), _LINES_PER_SECTION):
        title = "*Members*\n" if start == 0 else ""
        result.append(blocks._section(title + "\n".join(lines[start : start + _LINES_PER_SECTION])))
    if len(members) > MEMBERS_IN_ROOT:
        rest = len(members) - MEMBERS_IN_ROOT
        result.append(blocks._section(f"…and {rest} more: the thread names each one as it joins and leaves."))
    result.extend(blocks.incident_buttons(incident, fleet_record=group_arn(fleet.group)))
    result.append(blocks.root_context(_context(incident), dashboard_url))
    fallback = f"{_state(incident)} · {escape_mrkdwn(incident.classification.title)}"
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def render_fleet_steps(
    incident: Incident, entries: tuple[TimelineEntry, ...], *, dashboard_url: str | None = None
) -> SlackMessage:
    """One thread reply (or webhook message) for several member steps at once. A webhook message stands in the
    channel on its own: it gets the `dashboard_url` link, a thread reply does not."""
    lines = [blocks._step_line(entry) for entry in entries]
    result = [blocks._section(f"*{len(entries)} updates*")]
    for start in range(0, len(lines), _LINES_PER_SECTION):
        result.append(blocks._section("\n".join(lines[start : start + _LINES_PER_SECTION])))
    result.append(blocks.root_context([f"Fleet incident `{escape_mrkdwn(incident.fingerprint)}`"], dashboard_url))
    fallback = f"{escape_mrkdwn(incident.classification.title)}: " + "; ".join(
        escape_mrkdwn(entry.text) for entry in entries[:20]
    )
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def render_fleet_trigger(incident: Incident, routing_key: str, dedup_key: str) -> dict[str, Any]:
    fleet = _fleet(incident)
    where = incident.instance
    source = where.capacity_provider or where.cluster_name
    titles = {member.title for member in fleet.members}
    fault = titles.pop() if len(titles) == 1 else f"{incident.check_type} faults"
    summary = (
        f"[FLEET] {len(fleet.open_members)} of {len(fleet.members)} instances of {source} "
        f"(cluster {where.cluster_name}) failing {incident.check_type}: {fault}"
    )
    members = sorted(fleet.members, key=lambda m: (not m.is_open, m.opened_at, member_name(m)))
    details: dict[str, Any] = {
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "group": dict(fleet.group),
        "members_total": len(members),
        "members_open": len(fleet.open_members),
        "first_seen": iso_utc(min(m.opened_at for m in members)),
        "last_seen": iso_utc(max(m.closed_at or m.opened_at for m in members)),
        "grouped_when": f"{fleet.threshold} or more faults within {fleet.window_minutes} min",
        "ecs_repair": _repair_note(len(fleet.open_members), markdown=False),
        "members": [_member_detail(member) for member in members[:MEMBERS_IN_PAGE]],
    }
    if len(members) > MEMBERS_IN_PAGE:
        details["members_not_listed"] = len(members) - MEMBERS_IN_PAGE
    payload = {
        "summary": summary[:1024],
        "source": source[:255],
        "severity": incident.classification.severity.value,
        "timestamp": iso_utc(incident.last_status_change or incident.opened_at),
        "component": incident.check_type,
        "group": where.capacity_provider or where.cluster_name,
        "class": incident.classification.fault_class.value,
        "custom_details": details,
    }
    links = [{"href": incident.runbook.url, "text": incident.runbook.link_text}] if incident.runbook else []
    if incident.runbook is not None:
        details = {"what_to_do": incident.runbook.action, **details}
        payload["custom_details"] = details
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger", "dedup_key": dedup_key}
    event["payload"] = payload
    if links:
        event["links"] = links
    return event


def _fleet(incident: Incident) -> Any:
    if incident.fleet is None:
        raise ValueError(f"{incident.id} is not a fleet incident")
    return incident.fleet


def _fields(incident: Incident) -> list[tuple[str, str]]:
    fleet = _fleet(incident)
    members = fleet.members
    where = incident.instance
    return [
        ("Cluster", escape_mrkdwn(where.cluster_name)),
        ("Capacity provider", escape_mrkdwn(where.capacity_provider or "—")),
        ("Check", escape_mrkdwn(incident.check_type)),
        ("Members", f"{len(fleet.open_members)} impaired of {len(members)}"),
        ("First seen", blocks._slack_time(min(m.opened_at for m in members))),
        ("Last change", blocks._slack_time(max(m.closed_at or m.opened_at for m in members))),
        *blocks.people_fields(incident),
    ]


def _member_line(member: FleetMember) -> str:
    instance = member.instance
    name = blocks._link(instance.console_url, member_name(member))
    state = escape_mrkdwn(member.phase) if member.is_open else "recovered or left"
    title = blocks._clip(escape_mrkdwn(member.title), 120)
    return f"• {name} · {title} · {state} since {blocks._slack_time(member.closed_at or member.opened_at)}"


def _member_detail(member: FleetMember) -> dict[str, Any]:
    return {
        "container_instance_arn": member.instance.container_instance_arn[:300],
        "ec2_instance_id": member.instance.ec2_instance_id,
        "title": member.title[:200],
        "xid": member.xid,
        "phase": member.phase if member.is_open else "RESOLVED",
        "opened_at": iso_utc(member.opened_at),
        "closed_at": iso_utc(member.closed_at) if member.closed_at else None,
    }


def _repair_note(impaired: int, *, markdown: bool = True) -> str:
    rounds = repair_rounds(impaired)
    limit = "at most 20 % of a capacity provider's instances at a time (one at a time below nine instances)"
    text = (
        f"ECS auto-repair drains and replaces {limit}. If these {impaired} impaired instances were the whole "
        f"provider, that is at least {rounds} round{'s' if rounds != 1 else ''} of drain and replace; a larger "
        "provider recovers in fewer. Where auto-repair is off, replace them yourself."
    )
    return f"*Recovery:* {text}" if markdown else text


def _context(incident: Incident) -> list[str]:
    fleet = _fleet(incident)
    grouped = ", ".join(escape_mrkdwn(name) for name, _ in fleet.group)
    elements = [
        f"Fleet incident `{escape_mrkdwn(incident.fingerprint)}`",
        f"Grouped by {grouped}: {fleet.threshold} or more faults within {fleet.window_minutes} min",
    ]
    if incident.route:
        elements.append(f"Route `{escape_mrkdwn(incident.route)}`")
    for reason in sorted(set(incident.muted.values())):
        elements.append(f"Quiet: {escape_mrkdwn(reason)}")
    return elements


def _state(incident: Incident) -> str:
    if incident.is_open:
        return f"{incident.classification.severity.value.upper()} FLEET"
    return "RESOLVED FLEET"
