"""Adaptive Cards for fleet incidents: one card for many instances, at any size, for a Teams Workflows webhook.

A fleet incident can have thousands of members; the card shows the counts and names the open members it was given
(at most fault_responder.noise.fleet.LISTED_MEMBERS), one short line each, as many as fit Teams' size limit, and
counts those it leaves out. Teams has no thread: the members that join and leave later are named by follow-up
cards (`render_fleet_steps`), each naming the fleet incident.
"""

from __future__ import annotations

from collections.abc import Sequence

from fault_responder.core.domain import FleetMember, FleetSummary, Incident, TimelineEntry
from fault_responder.core.timefmt import as_utc
from fault_responder.noise.fleet import member_name, repair_rounds
from fault_responder.notification.receivers.teams.card import (
    MAX_LABEL,
    MAX_TITLE,
    RESOLVED_MARK,
    SEVERITY_MARK,
    SEVERITY_STYLE,
    Fitted,
    TeamsMessage,
    clip,
    container,
    escape_markdown,
    fact_set,
    fit_items,
    message,
    text_block,
    within_budget,
)
from fault_responder.notification.receivers.teams.render import (
    incident_actions,
    people_facts,
    plain_time,
    resolution_line,
    runbook_blocks,
    where_facts,
)

MEMBER_TITLE = 120
"""Characters of a member's own title, shown when it differs from the fleet's."""
STEP_TEXT = 160
"""Characters of a member step's text in a follow-up card: its name and its fault."""
NOT_LISTED = "left out to fit Teams' message size limit"


def render_fleet(incident: Incident, *, step: str | None = None, dashboard_url: str | None = None) -> TeamsMessage:
    """The fleet incident's card: what its members have, the counts, what to do, and its open members by name, as
    many as fit; the rest are counted. `step` names the change it announces (default: opened, or resolved once it
    is closed)."""
    fleet = _fleet(incident)
    step = step or ("Opened" if incident.is_open else "Resolved")
    severity = incident.classification.severity
    title = escape_markdown(clip(incident.classification.title, MAX_TITLE))
    if incident.is_open:
        head = f"{SEVERITY_MARK[severity]} {severity.value.upper()} FLEET · {title}"
    else:
        head = f"{RESOLVED_MARK} RESOLVED FLEET · {title}"
    named = f"**{escape_markdown(clip(step, MAX_LABEL))}** · fleet incident {escape_markdown(incident.id)}"
    lead = [
        container(
            [text_block(head, size="Medium", weight="Bolder"), text_block(named)],
            style=SEVERITY_STYLE[severity] if incident.is_open else "good",
        ),
        *runbook_blocks(incident.runbook, with_action=incident.is_open),
        *fact_set(_facts(incident)),
    ]
    context = text_block(" · ".join(_context(incident)), subtle=True, separator=True)
    fallback = escape_markdown(f"{_state(incident)} · {incident.classification.title} · {_members(fleet, incident)}")
    actions = incident_actions(incident.runbook, None, dashboard_url)
    if not incident.is_open:
        closing = [
            text_block(resolution_line(incident)),
            text_block(f"All {fleet.total} members recovered or left the cluster."),
        ]
        return within_budget(message([*lead, *closing, context], fallback=fallback, actions=actions))
    members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m)))
    # Open members not read for this card count as those left out to fit it: each is counted.
    not_read = fleet.open - len(members)
    recovery = text_block(_repair_note(fleet.open))
    lines = [_member_line(member, fleet) for member in members]

    def build(shown: Sequence[str], left_out: int) -> TeamsMessage:
        listing = ["**Impaired members**", *shown]
        if left_out + not_read:
            listing.append(f"…and {left_out + not_read} more impaired not listed here, {NOT_LISTED}.")
        body = [*lead, recovery, text_block("\n".join(listing)), context]
        return message(body, fallback=fallback, actions=actions)

    return within_budget(fit_items(lines, build).message)


def render_fleet_steps(
    incident: Incident, entries: Sequence[TimelineEntry], *, dashboard_url: str | None = None
) -> TeamsMessage:
    """A follow-up card naming several member steps of the fleet incident at once (joined, left); a caller hands it
    no more than `fleet_steps_that_fit` says fit, so every step it is given is named (any left out are counted)."""
    return _steps_card(incident, entries, dashboard_url).message


def fleet_steps_that_fit(incident: Incident, entries: Sequence[TimelineEntry]) -> int:
    """How many of these member steps (the first ones) one follow-up card names in full."""
    return _steps_card(incident, entries, None).shown


def _steps_card(incident: Incident, entries: Sequence[TimelineEntry], dashboard_url: str | None) -> Fitted:
    title = escape_markdown(clip(incident.classification.title, MAX_TITLE))
    head = text_block(
        f"**{len(entries)} updates** · fleet incident {escape_markdown(incident.id)} · {title}", weight="Bolder"
    )
    fallback = escape_markdown(f"{incident.classification.title}: {len(entries)} member updates")
    actions = incident_actions(None, None, dashboard_url)

    def build(shown: Sequence[TimelineEntry], left_out: int) -> TeamsMessage:
        lines = [_step_line(entry) for entry in shown]
        if left_out:
            lines.append(f"…and {left_out} more updates not shown here, {NOT_LISTED}.")
        return message([head, text_block("\n".join(lines))], fallback=fallback, actions=actions)

    return fit_items(entries, build)


def _step_line(entry: TimelineEntry) -> str:
    at = as_utc(entry.at).strftime("%H:%M:%S UTC")
    return f"- {at} **{escape_markdown(clip(entry.phase, MAX_LABEL))}** {escape_markdown(clip(entry.text, STEP_TEXT))}"


def _member_line(member: FleetMember, fleet: FleetSummary) -> str:
    state = escape_markdown(member.phase) if member.is_open else "recovered or left"
    since = as_utc(member.closed_at or member.opened_at).strftime("%H:%M:%S UTC")
    own = f" · {escape_markdown(clip(member.title, MEMBER_TITLE))}" if member.title != fleet.fault else ""
    return f"- {escape_markdown(clip(member_name(member), MAX_LABEL))} · {state} since {since}{own}"


def _fleet(incident: Incident) -> FleetSummary:
    if incident.fleet is None:
        raise ValueError(f"{incident.id} is not a fleet incident")
    return incident.fleet


def _members(fleet: FleetSummary, incident: Incident) -> str:
    return f"{fleet.open} impaired of {fleet.total}" if incident.is_open else f"{fleet.total}, all recovered or left"


def _facts(incident: Incident) -> list[tuple[str, str]]:
    fleet = _fleet(incident)
    where = incident.instance
    return [
        ("Cluster", escape_markdown(where.cluster_name)),
        *where_facts(incident.where),
        ("Capacity provider", escape_markdown(where.capacity_provider or "—")),
        ("Check", escape_markdown(incident.check_type)),
        ("Members", _members(fleet, incident)),
        ("First seen", plain_time(fleet.first_seen or incident.opened_at)),
        ("Last change", plain_time(fleet.last_change or incident.opened_at)),
        *people_facts(incident),
    ]


def _repair_note(impaired: int) -> str:
    rounds = repair_rounds(impaired)
    limit = "at most 20 % of a capacity provider's instances at a time (one at a time below nine instances)"
    return (
        f"**Recovery:** ECS auto-repair drains and replaces {limit}. If these {impaired} impaired instances were the "
        f"whole provider, that is at least {rounds} round{'s' if rounds != 1 else ''} of drain and replace; a larger "
        "provider recovers in fewer. Where auto-repair is off, replace them yourself."
    )


def _context(incident: Incident) -> list[str]:
    fleet = _fleet(incident)
    grouped = ", ".join(escape_markdown(name) for name, _ in fleet.group)
    elements = [f"Grouped by {grouped}: {fleet.threshold} or more faults within {fleet.window_minutes} min"]
    if incident.route:
        elements.append(f"Route {escape_markdown(incident.route)}")
    elements.extend(f"Quiet: {escape_markdown(reason)}" for reason in sorted(set(incident.muted.values())))
    elements.append("Teams cannot edit or thread: members that join or leave are named by follow-up cards")
    return elements


def _state(incident: Incident) -> str:
    if incident.is_open:
        return f"{incident.classification.severity.value.upper()} FLEET"
    return "RESOLVED FLEET"
