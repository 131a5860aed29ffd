"""Slack and PagerDuty messages for fleet incidents: one root and one alert for many instances, at any size.

A fleet incident can have thousands of members, so no message carries them all: the root shows the counts and
lists the open members that fit (by characters, in whole lines) and says how many it leaves out and where they
are named (the thread names every member as it joins and as it leaves); the PagerDuty alert lists up to
MEMBERS_IN_PAGE open members and says how many more there are. Untrusted text is escaped and clipped exactly as
for single incidents (render/slack.py).
"""

from __future__ import annotations

from typing import Any

from fault_responder.core.domain import FleetMember, FleetSummary, Incident, TimelineEntry
from fault_responder.core.timefmt import as_utc, iso_utc
from fault_responder.noise.fleet import group_arn, member_name, repair_rounds
from fault_responder.notification.render import blocks, pagerduty, slack
from fault_responder.notification.render.blocks import SlackMessage, escape_mrkdwn
from fault_responder.notification.render.slack import SEVERITY_EMOJI

MEMBERS_IN_PAGE = 300
"""Members listed in a PagerDuty event: about 75 KB, far below its 512 KB limit."""
ROOT_MEMBER_BLOCKS = 8
"""Sections of member lines a root may take (of Slack's 50 blocks), so the buttons and context always fit."""
REPLY_BLOCKS = 45
THREAD_TEXT = 160
"""Characters of a member step's text in a thread reply: its name and its fault, the first lines of a title."""
FALLBACK_STEPS = 20
_THREAD = "the thread names each one as it joins and leaves"


def render_fleet_root(incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    fleet = _fleet(incident)
    if incident.is_open:
        severity = incident.classification.severity
        header = blocks._headed(
            SEVERITY_EMOJI[severity], f"{severity.value.upper()} FLEET", incident.classification.title
        )
    else:
        header = blocks._headed(slack.RESOLVED_EMOJI, "RESOLVED FLEET", incident.classification.title)
    result: list[dict[str, Any]] = [
        *header,
        *slack._runbook_sections(incident.runbook, with_action=incident.is_open),
        *blocks._field_sections(_fields(incident)),
    ]
    if incident.is_open:
        result.append(blocks._section(_repair_note(fleet.open)))
        members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m)))
        # The open members read for this message (at most LISTED_MEMBERS) and those not read count alike: each
        # one not shown is counted, and the thread names each as it joins and leaves.
        not_read = fleet.open - len(members)
        members_listing = blocks.fit_lines(
            [_member_line(m) for m in members],
            title="*Impaired members*",
            max_blocks=ROOT_MEMBER_BLOCKS,
            max_chars=blocks.MAX_LISTING_TEXT,
            left_out=lambda n: f"…and {n + not_read} more impaired not listed here: {_THREAD}.",
        )
        result.extend(members_listing.blocks)
        if not members_listing.left_out and not_read > 0:
            result.append(blocks._section(f"…and {not_read} more impaired not listed here: {_THREAD}."))
    else:
        result.append(blocks._section(slack._resolution_line(incident)))
        result.append(blocks._section(f"All {fleet.total} members recovered or left the cluster: {_THREAD}."))
    result.extend(slack.incident_buttons(incident, fleet_record=group_arn(fleet.group)))
    result.append(blocks.root_context(_context(incident), dashboard_url))
    fallback = f"{_state(incident)} · {escape_mrkdwn(incident.classification.title)}"
    if incident.where is not None:
        fallback += f" ({escape_mrkdwn(incident.instance.cluster_name)}{slack.where_suffix(incident.where)})"
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def render_fleet_steps(
    incident: Incident, entries: tuple[TimelineEntry, ...], *, dashboard_url: str | None = None
) -> SlackMessage:
    """One thread reply (or webhook message) naming several member steps at once: delivery hands it no more than
    `steps_that_fit` says fit, so every step it is given is named. A webhook message stands in the channel on its
    own: it gets the `dashboard_url` link, a thread reply does not."""
    fitted = _steps_listing(entries)
    result = list(fitted.blocks)
    if fitted.left_out:
        # Not reached with delivery's batches; said rather than lost if it ever is.
        result.append(blocks._section(f"…and {fitted.left_out} more updates not shown here."))
    result.append(blocks.root_context([f"Fleet incident `{escape_mrkdwn(incident.fingerprint)}`"], dashboard_url))
    shown = entries[:FALLBACK_STEPS]
    fallback = f"{escape_mrkdwn(incident.classification.title)}: " + "; ".join(escape_mrkdwn(e.text) for e in shown)
    if len(entries) > len(shown):
        fallback += f"; and {len(entries) - len(shown)} more"
    return SlackMessage(text=blocks._clip(fallback, blocks.MAX_FALLBACK_TEXT), blocks=blocks._fit(result))


def steps_that_fit(entries: tuple[TimelineEntry, ...]) -> int:
    """How many of these member steps (the first ones) one reply names in full."""
    return _steps_listing(entries).shown


def _steps_listing(entries: tuple[TimelineEntry, ...]) -> blocks.Listing:
    return blocks.fit_lines(
        [_thread_line(entry) for entry in entries],
        title=f"*{len(entries)} updates*",
        max_blocks=REPLY_BLOCKS,
        max_chars=blocks.MAX_LISTING_TEXT,
    )


def _thread_line(entry: TimelineEntry) -> str:
    """A member step, short: a fleet's thread names hundreds of them."""
    at = as_utc(entry.at).strftime("%H:%M:%S UTC")
    return f"• {at} *{escape_mrkdwn(entry.phase)}* {blocks._clip(escape_mrkdwn(entry.text), THREAD_TEXT)}"


def render_fleet_trigger(incident: Incident, routing_key: str, dedup_key: str) -> dict[str, Any]:
    """The fleet's alert: its counts, and the open members read for it (at most MEMBERS_IN_PAGE) in its details;
    how many more are open, and where every one is named, when it lists fewer than are open. Every text cut to fit
    says so, and the event stays within PagerDuty's 512 KB."""
    return pagerduty._within_size(lambda limit: _fleet_trigger(incident, routing_key, dedup_key, limit))


def _fleet_trigger(incident: Incident, routing_key: str, dedup_key: str, limit: int) -> dict[str, Any]:
    fleet = _fleet(incident)
    where = incident.instance
    source = where.capacity_provider or where.cluster_name
    place = f"cluster {where.cluster_name}" + (f", {incident.where}" if incident.where is not None else "")
    prefix = f"[FLEET] {fleet.open} of {fleet.total} instances of {source} ({place}) failing {incident.check_type}: "
    summary = pagerduty._clip(prefix + (fleet.fault or incident.classification.title), pagerduty.MAX_SUMMARY)
    members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m)))[:MEMBERS_IN_PAGE]
    details: dict[str, Any] = {
        "incident": incident.id,
        "fingerprint": incident.fingerprint,
        "title": incident.classification.title,
        "group": dict(fleet.group),
        **pagerduty.where_details(incident.where),
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
    if incident.runbook is not None:
        details = {"what_to_do": incident.runbook.action, **details}
    payload = {
        "summary": summary,
        "source": pagerduty._clip(source, 255) or "fleet",
        "severity": incident.classification.severity.value,
        "timestamp": iso_utc(incident.last_status_change or incident.opened_at),
        "component": pagerduty._clip(incident.check_type, 255),
        "group": pagerduty._clip(where.capacity_provider or where.cluster_name, 255),
        "class": incident.classification.fault_class.value,
        "custom_details": pagerduty._clipped(details, limit),
    }
    event: dict[str, Any] = {"routing_key": routing_key, "event_action": "trigger", "dedup_key": dedup_key}
    event["payload"] = payload
    if incident.runbook is not None:
        event["links"] = [{"href": incident.runbook.url, "text": incident.runbook.link_text}]
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
        *slack.where_fields(incident.where),
        ("Capacity provider", escape_mrkdwn(where.capacity_provider or "—")),
        ("Check", escape_mrkdwn(incident.check_type)),
        ("Members", members),
        ("First seen", blocks._slack_time(fleet.first_seen or incident.opened_at)),
        ("Last change", blocks._slack_time(fleet.last_change or incident.opened_at)),
        *slack.people_fields(incident),
    ]


def _member_line(member: FleetMember) -> str:
    instance = member.instance
    name = blocks._link(instance.console_url, member_name(member))
    state = escape_mrkdwn(member.phase) if member.is_open else "recovered or left"
    title = blocks._clip(escape_mrkdwn(member.title), 120)
    return f"• {name} · {title} · {state} since {blocks._slack_time(member.closed_at or member.opened_at)}"


def _member_detail(member: FleetMember) -> dict[str, Any]:
    return {
        "container_instance_arn": member.instance.container_instance_arn,
        "ec2_instance_id": member.instance.ec2_instance_id,
        "title": member.title,
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
