"""Adaptive Cards for incidents, their lifecycle steps and standalone alerts, for a Teams Workflows webhook.

A Workflows webhook can neither edit a card it posted nor reply in a thread: every change of an incident is a new
card that names the incident (its id and title) and the step it announces (opened, drain attributed, recovered,
resolved, ...), and carries the incident's current state, so each card reads on its own in the channel. What the
cards say is what the Slack messages say (notification/render/slack.py): the title and severity, the facts, what to
do and the runbook, the drain and its reason, the resolution; only the medium differs.

Pure functions, no I/O; untrusted text is escaped (card.escape_markdown) and every message fits Teams' size limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fault_responder.core.domain import (
    Alert,
    EntryKind,
    Incident,
    InstanceRef,
    PersonAction,
    Runbook,
    TimelineEntry,
    Where,
)
from fault_responder.core.timefmt import as_utc, format_duration
from fault_responder.incidents.alarms import shown
from fault_responder.incidents.record import is_reconciled
from fault_responder.notification.receivers.teams.card import (
    MAX_LABEL,
    MAX_TEXT,
    MAX_TITLE,
    RESOLVED_MARK,
    SEVERITY_MARK,
    SEVERITY_STYLE,
    Element,
    TeamsMessage,
    clip,
    container,
    escape_markdown,
    fact_set,
    fit_items,
    message,
    open_url,
    text_block,
    within_budget,
)
from fault_responder.notification.render import drill

DASHBOARD_LINK_TEXT = "Dashboard"
NO_EDIT = "Teams cannot edit or thread: each change of this incident is a new card naming it"
"""Said on every incident card: the newest card naming an incident is its current state."""
_DRAIN_PHASES = frozenset({"DRAINING", "DEREGISTERING", "INACTIVE"})


def render_incident(
    incident: Incident, entry: TimelineEntry | None = None, *, dashboard_url: str | None = None
) -> TeamsMessage:
    """The card for one change of an incident: the step `entry` announces, or, without one, the incident as it is
    (opened, or resolved once it is closed). It names the incident and the step and carries the current state. A
    fleet incident's cards are fleet.py's."""
    step = step_name(incident, entry)
    body = [
        *incident_header(incident, step),
        *_drill_lines(incident),
        *([_step_block(incident, entry)] if entry is not None else []),
        *runbook_blocks(incident.runbook, with_action=incident.is_open, for_drill=drill.is_drill(incident)),
        *fact_set(_incident_facts(incident)),
    ]
    if not incident.is_open:
        body.append(text_block(resolution_line(incident)))
    body.append(text_block(" · ".join(_incident_context(incident)), subtle=True, separator=True))
    fallback = escape_markdown(
        f"{_state(incident)} · {incident.classification.title} · {_instance_name(incident.instance)} · {step}"
    )
    actions = incident_actions(incident.runbook, incident.instance, dashboard_url)
    return within_budget(message(body, fallback=fallback, actions=actions))


def render_resolved(incident: Incident, *, dashboard_url: str | None = None) -> TeamsMessage:
    """The card saying the incident is resolved (how, when, after how long): Teams cannot edit the card that
    opened it."""
    if incident.is_open:
        raise ValueError(f"{incident.id} is still open")
    return render_incident(incident, None, dashboard_url=dashboard_url)


def step_name(incident: Incident, entry: TimelineEntry | None) -> str:
    """Which change a card announces, in a few words (plain text)."""
    if entry is None:
        return "Opened" if incident.is_open else "Resolved"
    if entry.kind == EntryKind.OPENED:
        return "Opened"
    if entry.kind == EntryKind.RECOVERED:
        return "Recovered" if incident.is_open else "Resolved"
    if entry.kind == EntryKind.INSTANCE:
        if entry.phase == "DRAINING" and incident.drain is not None:
            return "Drain attributed"
        return f"Instance {clip(entry.phase, MAX_LABEL)}"
    names = {
        EntryKind.CHANGED: "Changed",
        EntryKind.TASK: "Task stopped",
        EntryKind.NOTICE: "Training auto-resume",
        EntryKind.ACTION: "Done by a person",
    }
    return names[entry.kind]


def render_alert(alert: Alert, *, dashboard_url: str | None = None) -> TeamsMessage:
    """A card for something that belongs to no incident (a manual drain, a spot stop): where and when, the drain,
    what to do, and its details, as many as fit; a last fact counts those left out and says where they are."""
    event = escape_markdown(alert.event_id)
    title = escape_markdown(clip(alert.title, MAX_TITLE))
    header = [
        text_block(
            f"{SEVERITY_MARK[alert.severity]} {alert.severity.value.upper()} · {title}", size="Medium", weight="Bolder"
        )
    ]
    lead = [container(header, style=SEVERITY_STYLE[alert.severity])]
    if alert.text:
        lead.append(text_block(escape_markdown(clip(alert.text, MAX_TEXT))))
    lead.extend(runbook_blocks(alert.runbook, with_action=True))
    facts = [*instance_facts(alert.instance, alert.where), ("At", plain_time(alert.at))]
    if alert.drain is not None:
        facts.append(("Drain", escape_markdown(alert.drain.label)))
        if alert.drain.reason:
            facts.append(("Drain reason", escape_markdown(clip(alert.drain.reason, MAX_TEXT))))
    details = [(escape_markdown(key), escape_markdown(value)) for key, value in alert.details.items()]
    context = text_block(f"{escape_markdown(alert.kind.value)} · ECS event {event}", subtle=True, separator=True)
    fallback = escape_markdown(
        f"{alert.severity.value.upper()} · {alert.title} · {_instance_name(alert.instance)} · {alert.text}"
    )
    actions = incident_actions(alert.runbook, alert.instance, dashboard_url)

    def build(shown: Sequence[tuple[str, str]], left_out: int) -> TeamsMessage:
        note = [("Not shown", f"{_count(left_out, 'more detail')}, left out to fit Teams: ECS event {event} has them")]
        listed = [*facts, *shown, *(note if left_out else [])]
        return message([*lead, *fact_set(listed), context], fallback=fallback, actions=actions)

    return within_budget(fit_items(details, build).message)


def incident_header(incident: Incident, step: str) -> list[Element]:
    """The coloured head of an incident's card: its state and title, then the step and the incident it names."""
    severity = incident.classification.severity
    title = escape_markdown(clip(incident.classification.title, MAX_TITLE))
    if drill.is_drill(incident):
        label = severity.value.upper() if incident.is_open else "RESOLVED"
        head = f"DRILL · {label} · {escape_markdown(clip(drill.fault_title(incident), MAX_TITLE))}"
    elif incident.is_open:
        head = f"{SEVERITY_MARK[severity]} {severity.value.upper()} · {title}"
    else:
        head = f"{RESOLVED_MARK} RESOLVED · {title}"
    style = SEVERITY_STYLE[severity] if incident.is_open else "good"
    named = f"**{escape_markdown(step)}** · incident {escape_markdown(incident.id)}"
    return [container([text_block(head, size="Medium", weight="Bolder"), text_block(named)], style=style)]


def runbook_blocks(runbook: Runbook | None, *, with_action: bool, for_drill: bool = False) -> list[Element]:
    """What to do and where to read more; once a fault is over, only the link (the action is history). A drill's
    action is what a real fault would call for, and says so."""
    if runbook is None:
        return []
    label = drill.IN_A_REAL_FAULT if for_drill else "What to do"
    lines = [f"**{label}:** {escape_markdown(clip(runbook.action, MAX_TEXT))}"] if with_action else []
    lines.append(f"**Runbook:** {markdown_link(runbook.link_text, runbook.url)}")
    return [text_block("\n\n".join(lines))]


def incident_actions(runbook: Runbook | None, instance: InstanceRef | None, dashboard_url: str | None) -> list[Element]:
    """The card's buttons: they open the runbook, the console (for one instance or alarm) and the dashboard; a
    webhook's card cannot act (acknowledge, resolve and silence from Slack, PagerDuty or the CLI)."""
    actions = [open_url(f"Runbook: {runbook.link_text}", runbook.url)] if runbook is not None else []
    if instance is not None and instance.container_instance_arn:
        console = "CloudWatch alarm" if instance.is_alarm else "Container instance"
        actions.append(open_url(console, instance.console_url))
    if dashboard_url:
        actions.append(open_url(DASHBOARD_LINK_TEXT, dashboard_url))
    return actions


def markdown_link(label: str, url: str) -> str:
    """A markdown link; its label is escaped, and the URL's `)` and spaces cannot end it early."""
    safe = url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")
    return f"[{escape_markdown(clip(label, MAX_LABEL))}]({safe})"


def instance_facts(instance: InstanceRef, where: Where | None = None) -> list[tuple[str, str]]:
    if instance.is_alarm:
        facts = [("CloudWatch alarm", escape_markdown(instance.container_instance_id))]
        if instance.cluster_name:
            facts.append(("Cluster", escape_markdown(instance.cluster_name)))
        return [*facts, *where_facts(where)]
    return [
        ("Cluster", escape_markdown(instance.cluster_name)),
        *where_facts(where),
        ("Container instance", escape_markdown(instance.container_instance_id)),
        ("EC2 instance", escape_markdown(instance.ec2_instance_id or "—")),
        ("Capacity provider", escape_markdown(instance.capacity_provider or "—")),
    ]


def where_facts(where: Where | None) -> list[tuple[str, str]]:
    """In organization mode, the account (its name and id) and the Region, beside the cluster."""
    if where is None:
        return []
    return [
        ("Account", escape_markdown(clip(where.account_text, MAX_LABEL))),
        ("Region", escape_markdown(where.region)),
    ]


def people_facts(incident: Incident) -> list[tuple[str, str]]:
    """Who is on an open incident: its acknowledgement and PagerDuty's assignment, if any."""
    facts: list[tuple[str, str]] = []
    if incident.acknowledged is not None and incident.is_open:
        facts.append(("Acknowledged", _person(incident.acknowledged)))
    if incident.assigned is not None and incident.is_open:
        facts.append(("Assigned", f"{escape_markdown(incident.assigned.note or '—')} {_via(incident.assigned)}"))
    return facts


def resolution_line(incident: Incident) -> str:
    duration = _duration(incident)
    line = f"{RESOLVED_MARK} **Resolved**" + (f" after {duration}" if duration else "")
    if incident.closed_at is not None:
        line += f" ({plain_time(incident.closed_at)})"
    if incident.resolved_by is not None:
        line += f" by {escape_markdown(incident.resolved_by.by)} {_via(incident.resolved_by)}"
    if incident.close_reason:
        line += f": {escape_markdown(clip(incident.close_reason, MAX_TEXT))}"
    return line


def plain_time(moment: datetime) -> str:
    """UTC, to the second: a card is read in many time zones, and Teams formats no time inside a fact."""
    return as_utc(moment).strftime("%Y-%m-%d %H:%M:%S UTC")


def _step_block(incident: Incident, entry: TimelineEntry) -> Element:
    """The step in full: its phase and time, its text, the drain's words, and what reported it."""
    lines = [f"**{escape_markdown(clip(entry.phase, MAX_LABEL))}** · {plain_time(entry.at)}"]
    lines.append(escape_markdown(clip(entry.text, MAX_TEXT)))
    if entry.phase == "DRAINING" and incident.drain is not None:
        lines.append(f"**Drain:** {escape_markdown(clip(incident.drain.label, MAX_LABEL))}")
        if incident.drain.reason:
            lines.append(f"**Drain reason:** {escape_markdown(clip(incident.drain.reason, MAX_TEXT))}")
    lines.append(f"_{_step_source(incident, entry)}_")
    return text_block("\n\n".join(lines))


def _step_source(incident: Incident, entry: TimelineEntry) -> str:
    if is_reconciled(entry.event_id):
        answer = "CloudWatch's" if incident.instance.is_alarm else "ECS's"
        return f"Found by the reconciliation sweep in {answer} answer: no event reported it"
    if entry.kind == EntryKind.ACTION:
        source = "a PagerDuty webhook" if entry.event_id.startswith("action:pagerduty:") else "a Slack button"
        return f"Done by a person, through {source}"
    if drill.is_drill(incident):
        return f"Drill event {escape_markdown(entry.event_id)}"
    source = "CloudWatch event" if incident.instance.is_alarm else "ECS event"
    return f"{source} {escape_markdown(entry.event_id)}"


def _drill_lines(incident: Incident) -> list[Element]:
    if not drill.is_drill(incident):
        return []
    who = escape_markdown(clip(drill.author(incident), MAX_LABEL))
    lines = [
        f"**{drill.NO_ACTION_HEAD}:** {drill.NO_ACTION_WHY}.",
        f"**Started by:** {who}, {plain_time(incident.opened_at)}",
    ]
    if incident.is_open:
        lines.append(f"**How it ends:** {escape_markdown(drill.HOW_IT_ENDS)}")
    return [text_block("\n\n".join(lines))]


def _incident_facts(incident: Incident) -> list[tuple[str, str]]:
    classification = incident.classification
    facts = [
        *instance_facts(incident.instance, incident.where),
        ("Check", escape_markdown(incident.check_type)),
        ("Status", _status_text(incident)),
        ("Opened", plain_time(incident.opened_at)),
    ]
    if incident.reading is not None:
        found = incident.reading
        facts.extend(
            [
                ("Value", escape_markdown(shown(found.value, found.unit))),
                ("Threshold", escape_markdown(shown(found.threshold, found.unit))),
                ("Contributor", escape_markdown(found.contributor_id)),
            ]
        )
    if not incident.is_open:
        facts.append(("Severity", classification.severity.value))
    if classification.reason:
        facts.append(("Reason", escape_markdown(clip(classification.reason, MAX_TEXT))))
    if incident.drain is not None:
        facts.append(("Drain", escape_markdown(incident.drain.label)))
        if incident.drain.reason:
            facts.append(("Drain reason", escape_markdown(clip(incident.drain.reason, MAX_TEXT))))
    facts.extend(people_facts(incident))
    return facts


def _status_text(incident: Incident) -> str:
    if not incident.is_open:
        duration = _duration(incident)
        return f"RESOLVED after {duration}" if duration else "RESOLVED"
    phase = escape_markdown(incident.phase)
    if incident.phase in _DRAIN_PHASES and incident.drain is not None:
        return f"{phase} — {escape_markdown(incident.drain.label)}"
    if incident.resolves_at is not None:
        return f"{phase} — resolves {plain_time(incident.resolves_at)} if it stays OK"
    return phase


def _incident_context(incident: Incident) -> list[str]:
    elements = []
    if incident.found:
        elements.append(f"**{escape_markdown(incident.found.capitalize())}**")
    if incident.opened_count > 1:
        elements.append(f"Opened {incident.opened_count} times")
    if incident.flapping:
        elements.append(f"Flapping: relapsed {_count(incident.relapses, 'time')}")
    if incident.route:
        elements.append(f"Route {escape_markdown(incident.route)}")
    if incident.fleet_id:
        elements.append(f"Part of fleet incident {escape_markdown(incident.fleet_id)}")
    elements.extend(f"Quiet: {escape_markdown(reason)}" for reason in sorted(set(incident.muted.values())))
    elements.append(NO_EDIT)
    return elements


def _state(incident: Incident) -> str:
    if not incident.is_open:
        return "RESOLVED"
    state = incident.classification.severity.value.upper()
    return f"DRILL · {state}" if drill.is_drill(incident) else state


def _instance_name(instance: InstanceRef) -> str:
    return instance.ec2_instance_id or instance.container_instance_id


def _person(action: PersonAction) -> str:
    return f"by {escape_markdown(action.by)} {_via(action)}, {plain_time(action.at)}"


def _via(action: PersonAction) -> str:
    return "from Slack" if action.via == "slack" else "in PagerDuty"


def _duration(incident: Incident) -> str | None:
    if incident.closed_at is None:
        return None
    return format_duration(as_utc(incident.closed_at) - as_utc(incident.opened_at))


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
