"""Slack Block Kit messages for incidents, their lifecycle steps and standalone alerts.

Pure functions, no I/O. Everything that came from an event (reasons, names, ids, titles built from
reasons) is untrusted: it goes through `escape_mrkdwn`, and mrkdwn objects are sent `verbatim` so
Slack does not auto-link bare `@channel` or `#channel` either. Nothing exceeds a Block Kit limit, so a
long reason cannot cost the notification an `invalid_blocks` error, and nothing is left out in silence:
a text cut to fit ends with SHORTENED (or says where its full text is), and a list fitted into the
message by `fit_lines` or `fit_fields` ends with a line counting what it left out and saying where to see it.
"""

from __future__ import annotations

from typing import Any

from fault_responder.core.domain import (
    Alert,
    DrainAttribution,
    EntryKind,
    Incident,
    InstanceRef,
    PersonAction,
    Runbook,
    Severity,
    TimelineEntry,
    Where,
)
from fault_responder.core.timefmt import as_utc, format_duration
from fault_responder.incidents.alarms import shown
from fault_responder.incidents.record import is_reconciled
from fault_responder.notification.buttons import ActionId, IncidentButton
from fault_responder.notification.render import drill
from fault_responder.notification.render.blocks import (
    _LABEL_BUDGET,
    MAX_BLOCKS,
    MAX_BUTTON_VALUE,
    MAX_LISTING_TEXT,
    MAX_SECTION_TEXT,
    MORE_IN_THREAD,
    SlackMessage,
    _clip,
    _context,
    _count,
    _fallback,
    _field_sections,
    _fit,
    _headed,
    _link,
    _section,
    _slack_time,
    escape_mrkdwn,
    fit_fields,
    fit_lines,
    root_context,
)
from fault_responder.notification.render.marks import ELLIPSIS, SHORTENED

SEVERITY_EMOJI: dict[Severity, str] = {
    Severity.CRITICAL: ":rotating_light:",
    Severity.ERROR: ":red_circle:",
    Severity.WARNING: ":warning:",
    Severity.INFO: ":information_source:",
}
RESOLVED_EMOJI = ":white_check_mark:"

# Phases in which the drain attribution is the news: the instance is leaving because of it.
_DRAIN_PHASES = frozenset({"DRAINING", "DEREGISTERING", "INACTIVE"})
# The root message repeats the newest steps so the channel view answers "what now?" without
# opening the thread.
_RECENT_STEPS = 3
# A link label or a single list item must not crowd out everything else in its text object.
_STEP_TEXT_BUDGET = 700
_STEP_LINE_BUDGET = 300


def render_incident_root(incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    """The incident's root message with its current status; posted once, then updated in place. With a
    `dashboard_url` (the stack's CloudWatch dashboard), its context links to it."""
    blocks = [
        *_incident_header(incident),
        *_drill_sections(incident),
        *_runbook_sections(incident.runbook, with_action=incident.is_open, for_drill=drill.is_drill(incident)),
        *_field_sections(_incident_fields(incident)),
    ]
    if not incident.is_open:
        blocks.append(_section(_resolution_line(incident)))
    blocks.extend(_latest_steps(incident))
    blocks.extend(incident_buttons(incident))
    blocks.append(_incident_context(incident, dashboard_url))
    return SlackMessage(text=_fallback(_incident_fallback(incident)), blocks=_fit(blocks))


def _latest_steps(incident: Incident) -> list[dict[str, Any]]:
    """The newest steps after a count of the earlier ones; a step cut short points at its thread reply (the opening
    step has none: the root's fields say it)."""
    steps = [entry for entry in incident.timeline if entry.muted is None]
    recent = steps[-_RECENT_STEPS:]
    earlier = len(steps) - len(recent)
    lines = [f"{ELLIPSIS}{_count(earlier, 'earlier step')}: see the thread"] if earlier else []
    lines.extend(
        _step_line(entry, marker=SHORTENED if entry.kind == EntryKind.OPENED else MORE_IN_THREAD) for entry in recent
    )
    # A few short lines: they always fit one section, so nothing is left for a note to count.
    return fit_lines(lines, title="*Latest*", max_blocks=1).blocks


def render_timeline_reply(incident: Incident, entry: TimelineEntry) -> SlackMessage:
    """One thread reply for one lifecycle step of the incident; a drill's begins by saying it is one."""
    lead = f"*{drill.NO_ACTION_HEAD}* · " if drill.is_drill(incident) else ""
    blocks = [_section(lead + _step_text(incident, entry, room=MAX_SECTION_TEXT - len(lead)))]
    blocks.append(_step_context(incident, entry))
    fallback = f"{escape_mrkdwn(entry.phase)}: {escape_mrkdwn(entry.text)}"
    if lead:
        fallback = f"{drill.NO_ACTION_HEAD} · {fallback}"
    return SlackMessage(text=_fallback(fallback), blocks=_fit(blocks))


def render_alert(alert: Alert, *, dashboard_url: str | None = None) -> SlackMessage:
    """A standalone message for something that belongs to no incident (a manual drain, a spot stop): a root of its
    own, so it links to the dashboard as incident roots do."""
    blocks = _headed(SEVERITY_EMOJI[alert.severity], alert.severity.value.upper(), alert.title)
    if alert.text:
        # Slack rejects an empty text object, and with it the whole message.
        blocks.append(_section(escape_mrkdwn(alert.text)))
    # Before the details, which can be many: what to do is never among what is left out.
    blocks.extend(_runbook_sections(alert.runbook, with_action=True))
    context = root_context(
        [f"{escape_mrkdwn(alert.kind.value)} · ECS event `{escape_mrkdwn(alert.event_id)}`"], dashboard_url
    )
    blocks.extend(_alert_field_sections(alert, max_blocks=MAX_BLOCKS - len(blocks) - 1))
    blocks.append(context)
    fallback = (
        f"{alert.severity.value.upper()} · {escape_mrkdwn(alert.title)} · {_instance_name(alert.instance)}"
        f" ({escape_mrkdwn(alert.instance.cluster_name)}{where_suffix(alert.where)}) · {escape_mrkdwn(alert.text)}"
    )
    return SlackMessage(text=_fallback(fallback), blocks=_fit(blocks))


def render_superseded_alert(alert: Alert, incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    """A notice corrected in place: an incident learned after it was sent explains it (its thread has it)."""
    where = _thread_pointer(incident)
    text = f"{escape_mrkdwn(alert.text)}\nNow part of {where}: see its thread."
    blocks = [*_headed(SEVERITY_EMOJI[Severity.INFO], "PART OF AN INCIDENT", alert.title), _section(text)]
    context = root_context(
        [f"{escape_mrkdwn(alert.kind.value)} · ECS event `{escape_mrkdwn(alert.event_id)}`"], dashboard_url
    )
    blocks.extend(_alert_field_sections(alert, max_blocks=MAX_BLOCKS - len(blocks) - 1))
    blocks.append(context)
    fallback = f"{escape_mrkdwn(alert.title)} · now part of {_incident_subject(incident)}"
    return SlackMessage(text=_fallback(fallback), blocks=_fit(blocks))


def render_webhook_step(incident: Incident, entry: TimelineEntry, *, dashboard_url: str | None = None) -> SlackMessage:
    """A self-contained message for incoming-webhook mode, where there is no thread to update.

    It carries the incident's current status and the step it announces, so each message can be read on its
    own in the channel.
    """
    blocks = [
        *_incident_header(incident),
        *_drill_sections(incident),
        _section(_step_text(incident, entry)),
        *_runbook_sections(incident.runbook, with_action=incident.is_open, for_drill=drill.is_drill(incident)),
    ]
    step = f"{escape_mrkdwn(entry.phase)}: {escape_mrkdwn(entry.text)}"
    fallback = f"{_incident_subject(incident)} · {step}"
    blocks.extend(_field_sections(_incident_fields(incident)))
    if not incident.is_open:
        blocks.append(_section(_resolution_line(incident)))
    blocks.append(_incident_context(incident, dashboard_url))
    return SlackMessage(text=_fallback(fallback), blocks=_fit(blocks))


def _runbook_sections(runbook: Runbook | None, *, with_action: bool, for_drill: bool = False) -> list[dict[str, Any]]:
    """What to do and where to read more; once a fault is over, only the link (the action is history). A drill's
    action is what a real fault would call for, and says so: nobody is to act on a drill."""
    if runbook is None:
        return []
    label = drill.IN_A_REAL_FAULT if for_drill else "What to do"
    lines = [f"*{label}:* {_clip(escape_mrkdwn(runbook.action), _STEP_TEXT_BUDGET, SHORTENED)}"] if with_action else []
    lines.append(f"*Runbook:* {_link(runbook.url, runbook.link_text)}")
    return [_section("\n".join(lines))]


def _thread_pointer(incident: Incident) -> str:
    subject = f"incident `{escape_mrkdwn(incident.fingerprint)}` ({escape_mrkdwn(incident.classification.title)})"
    return subject


def _incident_header(incident: Incident) -> list[dict[str, Any]]:
    severity = incident.classification.severity
    if drill.is_drill(incident):
        # No alarm emoji: the header begins with DRILL, then the state a real fault would show.
        label = severity.value.upper() if incident.is_open else "RESOLVED"
        return _headed("", f"DRILL · {label}", drill.fault_title(incident))
    if incident.is_open:
        return _headed(SEVERITY_EMOJI[severity], severity.value.upper(), incident.classification.title)
    return _headed(RESOLVED_EMOJI, "RESOLVED", incident.classification.title)


def _drill_sections(incident: Incident) -> list[dict[str, Any]]:
    """A drill's first words after its header: nobody needs to act, who started it and when, and (while it is
    open) what ends it."""
    if not drill.is_drill(incident):
        return []
    who = _clip(escape_mrkdwn(drill.author(incident)), _LABEL_BUDGET)
    lines = [
        f"*{drill.NO_ACTION_HEAD}:* {drill.NO_ACTION_WHY}.",
        f"*Started by:* {who}, {_slack_time(incident.opened_at)}",
    ]
    if incident.is_open:
        lines.append(f"*How it ends:* {escape_mrkdwn(drill.HOW_IT_ENDS)}")
    return [_section("\n".join(lines))]


def _incident_fields(incident: Incident) -> list[tuple[str, str]]:
    classification = incident.classification
    fields = [
        *_instance_fields(incident.instance, incident.where),
        ("Check", escape_mrkdwn(incident.check_type)),
        ("Status", _status_text(incident)),
        ("Opened", _slack_time(incident.opened_at)),
    ]
    if incident.reading is not None:
        found = incident.reading
        fields.extend(
            [
                ("Value", escape_mrkdwn(shown(found.value, found.unit))),
                ("Threshold", escape_mrkdwn(shown(found.threshold, found.unit))),
                ("Contributor", escape_mrkdwn(found.contributor_id)),
            ]
        )
    if not incident.is_open:
        # The header shows the severity only while the incident is open.
        fields.append(("Severity", classification.severity.value))
    if classification.reason:
        fields.append(("Reason", escape_mrkdwn(classification.reason)))
    if incident.drain is not None:
        fields.append(("Drain", escape_mrkdwn(incident.drain.label)))
    fields.extend(people_fields(incident))
    return fields


def people_fields(incident: Incident) -> list[tuple[str, str]]:
    """Who is on an open incident: its acknowledgement and PagerDuty's assignment, if any."""
    fields: list[tuple[str, str]] = []
    if incident.acknowledged is not None and incident.is_open:
        fields.append(("Acknowledged", _person(incident.acknowledged)))
    if incident.assigned is not None and incident.is_open:
        fields.append(("Assigned", escape_mrkdwn(incident.assigned.note or "—") + " " + _where(incident.assigned)))
    return fields


def _person(action: PersonAction) -> str:
    return f"by {escape_mrkdwn(action.by)} {_where(action)}, {_slack_time(action.at)}"


def _where(action: PersonAction) -> str:
    return "from Slack" if action.via == "slack" else "in PagerDuty"


def incident_buttons(incident: Incident, *, fleet_record: str | None = None) -> list[dict[str, Any]]:
    """An open incident's buttons (SlackActionsFunction answers them, docs/slack-actions.md): Acknowledge until
    someone has, Resolve (with a confirmation: it closes the incident for everyone), Silence 1 h and 4 h. Each
    carries the record and the incident (buttons.IncidentButton). A fleet incident (`fleet_record`: its group's
    record) has Acknowledge only: it closes when its members recover, and silences name what they match."""
    if not incident.is_open:
        return []
    instance = incident.instance
    value = IncidentButton(
        record=fleet_record or instance.container_instance_arn,
        incident=incident.id,
        cluster=instance.cluster_name,
        instance="" if fleet_record else instance.container_instance_id,
    ).value()
    if len(value) > MAX_BUTTON_VALUE:
        # An absurdly long ARN: no buttons rather than a message Slack refuses, and a line saying so.
        return [
            _context([f"No buttons: this incident's ids exceed Slack's {MAX_BUTTON_VALUE:,} characters per button"])
        ]
    elements = []
    if incident.acknowledged is None:
        elements.append(_button("Acknowledge", ActionId.ACKNOWLEDGE, value, style="primary"))
    if fleet_record is not None:
        return [{"type": "actions", "block_id": "incident_actions", "elements": elements}] if elements else []
    resolve = _button("Resolve", ActionId.RESOLVE, value)
    resolve["confirm"] = {
        "title": {"type": "plain_text", "text": "Resolve this incident?"},
        "text": {
            "type": "plain_text",
            "text": "It closes for everyone, and its PagerDuty alert is resolved. The next fault opens a new one.",
        },
        "confirm": {"type": "plain_text", "text": "Resolve"},
        "deny": {"type": "plain_text", "text": "Cancel"},
    }
    elements.extend(
        [
            resolve,
            _button("Silence 1 h", ActionId.SILENCE_1H, value),
            _button("Silence 4 h", ActionId.SILENCE_4H, value),
        ]
    )
    return [{"type": "actions", "block_id": "incident_actions", "elements": elements}]


def approval_buttons(approval_id: str | None) -> list[dict[str, Any]]:
    """A resume approval request's Approve and Reject, carrying its opaque id (SlackActionsFunction finds the task
    token by it, never in Slack; an answer after the workflow stopped waiting is refused there, and says so)."""
    if not approval_id:
        return []
    approve = _button("Approve", ActionId.APPROVE, approval_id, style="primary")
    reject = _button("Reject", ActionId.REJECT, approval_id, style="danger")
    return [{"type": "actions", "block_id": "resume_approval", "elements": [approve, reject]}]


def _button(label: str, action: ActionId, value: str, *, style: str | None = None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "action_id": action.value,
        "text": {"type": "plain_text", "text": label},
        "value": value,
    }
    if style is not None:
        button["style"] = style
    return button


def _alert_field_sections(alert: Alert, *, max_blocks: int) -> list[dict[str, Any]]:
    """Where and when, then the notice's details, as many as fit; a last field counts the details left out."""
    fields = [*_instance_fields(alert.instance, alert.where), ("At", _slack_time(alert.at))]
    if alert.drain is not None:
        fields.extend(_drain_fields(alert.drain))
    fields.extend((escape_mrkdwn(key), escape_mrkdwn(value)) for key, value in alert.details.items())
    event = escape_mrkdwn(alert.event_id)

    def left_out(count: int) -> str:
        return f"*Not shown*\n{_count(count, 'more field')}, left out to fit Slack: ECS event `{event}` has them"

    return fit_fields(fields, max_blocks=max_blocks, max_chars=MAX_LISTING_TEXT, left_out=left_out).blocks


def _instance_fields(instance: InstanceRef, where: Where | None = None) -> list[tuple[str, str]]:
    if instance.is_alarm:
        alarm = [("CloudWatch alarm", _link(instance.console_url, instance.container_instance_id))]
        if instance.cluster_name:
            alarm.append(("Cluster", escape_mrkdwn(instance.cluster_name)))
        return [*alarm, *where_fields(where)]
    return [
        ("Cluster", escape_mrkdwn(instance.cluster_name)),
        *where_fields(where),
        ("Container instance", _link(instance.console_url, instance.container_instance_id)),
        ("EC2 instance", escape_mrkdwn(instance.ec2_instance_id or "—")),
        ("Capacity provider", escape_mrkdwn(instance.capacity_provider or "—")),
    ]


def where_fields(where: Where | None) -> list[tuple[str, str]]:
    """In organization mode, the account (its name and id) and the Region, beside the cluster."""
    if where is None:
        return []
    return [
        ("Account", escape_mrkdwn(_clip(where.account_text, _LABEL_BUDGET))),
        ("Region", escape_mrkdwn(where.region)),
    ]


def where_suffix(where: Where | None) -> str:
    """`, account prod-ml (111111111111), us-west-2` after a cluster's name, in organization mode; else nothing."""
    return "" if where is None else f", {escape_mrkdwn(_clip(str(where), _LABEL_BUDGET))}"


def _drain_fields(drain: DrainAttribution) -> list[tuple[str, str]]:
    fields = [("Drain", escape_mrkdwn(drain.label))]
    if drain.reason:
        fields.append(("Drain reason", escape_mrkdwn(drain.reason)))
    return fields


def _status_text(incident: Incident) -> str:
    if not incident.is_open:
        duration = _incident_duration(incident)
        return f"RESOLVED after {duration}" if duration else "RESOLVED"
    phase = escape_mrkdwn(incident.phase)
    if incident.phase in _DRAIN_PHASES and incident.drain is not None:
        return f"{phase} — {escape_mrkdwn(incident.drain.label)}"
    if incident.resolves_at is not None:
        return f"{phase} — resolves {_slack_time(incident.resolves_at)} if it stays OK"
    return phase


def _resolution_line(incident: Incident) -> str:
    duration = _incident_duration(incident)
    line = f"{RESOLVED_EMOJI} *Resolved*" + (f" after {duration}" if duration else "")
    if incident.closed_at is not None:
        line += f" ({_slack_time(incident.closed_at)})"
    if incident.close_reason:
        line += f": {escape_mrkdwn(incident.close_reason)}"
    return line


def _step_text(incident: Incident, entry: TimelineEntry, *, room: int = MAX_SECTION_TEXT) -> str:
    """One step in full: its phase and time, its text with all the room `room` leaves, the drain's words."""
    head = f"*{_clip(escape_mrkdwn(entry.phase), _LABEL_BUDGET, SHORTENED)}* · {_slack_time(entry.at)}"
    drain: list[str] = []
    if entry.phase == "DRAINING" and incident.drain is not None:
        drain.append(f"*Drain:* {_clip(escape_mrkdwn(incident.drain.label), _LABEL_BUDGET, SHORTENED)}")
        if incident.drain.reason:
            reason = _clip(escape_mrkdwn(incident.drain.reason), _STEP_TEXT_BUDGET, SHORTENED)
            drain.append(f"*Drain reason:* {reason}")
    room -= sum(len(line) + 1 for line in [head, *drain])
    return "\n".join([head, _clip(escape_mrkdwn(entry.text), room, SHORTENED), *drain])


def _step_line(entry: TimelineEntry, *, budget: int = _STEP_LINE_BUDGET, marker: str = SHORTENED) -> str:
    """A step on one line, its text cut to `budget` with `marker` (say where the rest is, or that it is cut)."""
    phase = _clip(escape_mrkdwn(entry.phase), _LABEL_BUDGET, SHORTENED)
    return f"• {_slack_time(entry.at)} *{phase}* {_clip(escape_mrkdwn(entry.text), budget, marker)}"


def _step_context(incident: Incident, entry: TimelineEntry) -> dict[str, Any]:
    return _context([*_drill_context(incident), _step_source(incident, entry)])


def _step_source(incident: Incident, entry: TimelineEntry) -> str:
    if is_reconciled(entry.event_id):
        answer = "CloudWatch's" if incident.instance.is_alarm else "ECS's"
        return f"Found by the reconciliation sweep in {answer} answer: no event reported it"
    if entry.kind == EntryKind.ACTION:
        source = "a PagerDuty webhook" if entry.event_id.startswith("action:pagerduty:") else "a Slack button"
        return f"Done by a person, through {source}"
    if drill.is_drill(incident):
        return f"Drill event `{escape_mrkdwn(entry.event_id)}`"
    source = "CloudWatch event" if incident.instance.is_alarm else "ECS event"
    return f"{source} `{escape_mrkdwn(entry.event_id)}`"


def _drill_context(incident: Incident) -> list[str]:
    """A drill's thread reply says who started it and when, and where to read what ends it (its root says)."""
    if not drill.is_drill(incident):
        return []
    who = _clip(escape_mrkdwn(drill.author(incident)), _LABEL_BUDGET)
    ends = "it ends by itself (its root says how)" if incident.is_open else "it has ended"
    return [f"Drill started by {who}, {_slack_time(incident.opened_at)}: {drill.NO_ACTION_WHY}; {ends}"]


def _incident_context(incident: Incident, dashboard_url: str | None) -> dict[str, Any]:
    elements = [f"Incident `{escape_mrkdwn(incident.fingerprint)}`"]
    if incident.found:
        elements.append(f"*{escape_mrkdwn(incident.found.capitalize())}*")
    if incident.opened_count > 1:
        elements.append(f"Opened {incident.opened_count} times")
    if incident.flapping:
        elements.append(f"Flapping: relapsed {incident.relapses} time{'s' if incident.relapses != 1 else ''}")
    if incident.route:
        elements.append(f"Route `{escape_mrkdwn(incident.route)}`")
    if incident.fleet_id:
        elements.append(f"Part of fleet incident `{escape_mrkdwn(incident.fleet_id)}`: updates are in its thread")
    elements.extend(f"Quiet: {escape_mrkdwn(reason)}" for reason in sorted(set(incident.muted.values())))
    return root_context(elements, dashboard_url)


def _incident_fallback(incident: Incident) -> str:
    no_action = f" · {drill.NO_ACTION_SHORT}" if drill.is_drill(incident) else ""
    if incident.is_open:
        return f"{_incident_subject(incident)} · {_status_text(incident)}{no_action}"
    reason = f" · {escape_mrkdwn(incident.close_reason)}" if incident.close_reason else ""
    return _incident_subject(incident) + reason + no_action


def _incident_subject(incident: Incident) -> str:
    """What a push notification leads with: the state, the fault, where it is."""
    state = incident.classification.severity.value.upper() if incident.is_open else _status_text(incident)
    cluster = incident.instance.cluster_name
    named = f"{escape_mrkdwn(cluster)}{where_suffix(incident.where)}" if cluster else where_suffix(incident.where)[2:]
    where = _instance_name(incident.instance) + (f" ({named})" if named else "")
    if drill.is_drill(incident):
        # Its title, which begins with DRILL, comes first: a push notification leads with it.
        return f"{escape_mrkdwn(incident.classification.title)} · {state} · {where}"
    return f"{state} · {escape_mrkdwn(incident.classification.title)} · {where}"


def _instance_name(instance: InstanceRef) -> str:
    return escape_mrkdwn(instance.ec2_instance_id or instance.container_instance_id)


def _incident_duration(incident: Incident) -> str | None:
    if incident.closed_at is None:
        return None
    return format_duration(as_utc(incident.closed_at) - as_utc(incident.opened_at))
