"""Slack and PagerDuty messages for fleet incidents: one root and one alert for many instances, at any size.

A fleet incident can have thousands of members, so no message carries them all: the root shows the counts and
lists the open members that fit (by characters, in whole lines) and says how many it leaves out and where they
are named (the thread names every member as it joins and as it leaves); the PagerDuty alert lists up to
MEMBERS_IN_PAGE open members and says how many more there are. Untrusted text is escaped and clipped exactly as
for single incidents (render/slack.py).
"""

from __future__ import annotations

from typing import Any

from fault_responder.domain import FleetMember, FleetSummary, Incident, TimelineEntry
from fault_responder.fleet import group_arn, member_name, repair_rounds
from fault_responder.render import slack as blocks
from fault_responder.render.slack import SEVERITY_EMOJI, SlackMessage, escape_mrkdwn
from fault_responder.timefmt import iso_utc

MEMBERS_IN_PAGE = 300
"""Members listed in a PagerDuty event: about 75 KB, far below its 512 KB limit."""
ROOT_MEMBER_BLOCKS = 8
"""Sections of member lines a root may take (of Slack's 50 blocks), so the buttons and context always fit."""
REPLY_BLOCKS = 45
_THREAD = "the thread names each one as it joins and leaves"


def render_fleet_root(incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    fleet = _fleet(incident)
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
        result.append(blocks._section(_repair_note(fleet.open)))
        members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m)))
        sections, shown = listing("*Impaired members*", [_member_line(m) for m in members], ROOT_MEMBER_BLOCKS)
        result.extend(sections)
        left_out = fleet.open - shown
        if left_out > 0:
            result.append(blocks._section(f"…and {left_out} more impaired not listed here: {_THREAD}."))
    else:
        result.append(blocks._section(blocks._resolution_line(incident)))
        result.append(blocks._section(f"All {fleet.total} members recovered or left the cluster: {_THREAD}."))
    result.extend(blocks.incident_buttons(incident, fleet_record=group_arn(fleet.group)))
    result.append(blocks.root_context(_context(incident), dashboard_url))
    fallback = f"{_state(incident)} · {escape_mrkdwn(incident.classification.title)}"
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def render_fleet_steps(
    incident: Incident, entries: tuple[TimelineEntry, ...], *, dashboard_url: str | None = None
) -> SlackMessage:
    """One thread reply (or webhook message) for several member steps at once; every step it is given is named
    (delivery hands it at most a hundred, whose lines are bounded). A webhook message stands in the channel on
    its own: it gets the `dashboard_url` link, a thread reply does not."""
    sections, shown = listing(
        f"*{len(entries)} updates*", [blocks._step_line(entry) for entry in entries], REPLY_BLOCKS
    )
    result = list(sections)
    if shown < len(entries):
        # Not reached with delivery's bounds; said rather than lost if it ever is.
        result.append(blocks._section(f"…and {len(entries) - shown} more updates not shown here."))
    result.append(blocks.root_context([f"Fleet incident `{escape_mrkdwn(incident.fingerprint)}`"], dashboard_url))
    fallback = f"{escape_mrkdwn(incident.classification.title)}: " + "; ".join(
        escape_mrkdwn(entry.text) for entry in entries[:20]
    )
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def listing(title: str, lines: list[str], max_blocks: int) -> tuple[list[dict[str, Any]], int]:
    """`title` and the lines in as few sections as fit, each under Slack's section limit, whole lines only (a line
    longer than a section is clipped), at most `max_blocks` sections: the sections and how many lines they show."""
    sections: list[dict[str, Any]] = []
    current, shown = title, 0
    for raw in lines:
        line = blocks._clip(raw, blocks.MAX_SECTION_TEXT)
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) <= blocks.MAX_SECTION_TEXT:
            current, shown = candidate, shown + 1
            continue
        if len(sections) + 1 >= max_blocks:
            break
        sections.append(blocks._section(current))
        current, shown = line, shown + 1
    if current:
        sections.append(blocks._section(current))
    return sections, shown


def render_fleet_trigger(incident: Incident, routing_key: str, dedup_key: str) -> dict[str, Any]:
    fleet = _fleet(incident)
    where = incident.instance
    source = where.capacity_provider or where.cluster_name
    summary = (
        f"[FLEET] {fleet.open} of {fleet.total} instances of {source} "
        f"(cluster {where.cluster_name}) failing {incident.check_type}: {incident.classification.title}"
    )
    members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m)))[:MEMBERS_IN_PAGE]
    details: dict[str, Any] = {
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "group": dict(fleet.group),
        "members_total": fleet.total,
        "members_open": fleet.open,
        "first_seen": iso_utc(fleet.first_seen or incident.opened_at),
        "last_seen": iso_utc(fleet.last_change or incident.opened_at),
        "grouped_when": f"{fleet.threshold} or more faults within {fleet.window_minutes} min",
        "ecs_repair": _repair_note(fleet.open, markdown=False),
        "members": [_member_detail(member) for member in members],
    }
    if fleet.open > len(members):
        details["members_not_listed"] = fleet.open - len(members)
        details["members_not_listed_where"] = "the Slack thread of the fleet incident names every member"
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
        payload["custom_details"] = {"what_to_do": incident.runbook.action, **details}
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger", "dedup_key": dedup_key}
    event["payload"] = payload
    if links:
        event["links"] = links
    return event


def _fleet(incident: Incident) -> FleetSummary:
    if incident.fleet is None:
        raise ValueError(f"{incident.id} is not a fleet incident")
    return incident.fleet


def _fields(incident: Incident) -> list[tuple[str, str]]:
    fleet = _fleet(incident)
    where = incident.instance
    members = f"{fleet.open} impaired of {fleet.total}" if incident.is_open else f"{fleet.total}, all recovered or left"
    return [
        ("Cluster", escape_mrkdwn(where.cluster_name)),
        ("Capacity provider", escape_mrkdwn(where.capacity_provider or "—")),
        ("Check", escape_mrkdwn(incident.check_type)),
        ("Members", members),
        ("First seen", blocks._slack_time(fleet.first_seen or incident.opened_at)),
        ("Last change", blocks._slack_time(fleet.last_change or incident.opened_at)),
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
