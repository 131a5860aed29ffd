"""Slack Block Kit messages for incidents, their lifecycle steps and standalone alerts.

Pure functions, no I/O. Everything that came from an event (reasons, names, ids, titles built from
reasons) is untrusted: it goes through `escape_mrkdwn`, and mrkdwn objects are sent `verbatim` so
Slack does not auto-link bare `@channel` or `#channel` either. Every text is clipped to the Block Kit
limits, so a long reason degrades to an ellipsis instead of an `invalid_blocks` error that would
lose the notification.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fault_responder.buttons import ActionId, IncidentButton
from fault_responder.domain import (
    Alert,
    DrainAttribution,
    EntryKind,
    Incident,
    InstanceRef,
    PersonAction,
    Runbook,
    Severity,
    TimelineEntry,
)
from fault_responder.record import is_reconciled
from fault_responder.timefmt import as_utc, format_duration

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
MAX_FIELD_TEXT = 2000
MAX_FIELDS_PER_SECTION = 10
MAX_CONTEXT_ELEMENTS = 10
MAX_FALLBACK_TEXT = 40_000
MAX_BUTTON_VALUE = 2000
ELLIPSIS = "…"

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
_LABEL_BUDGET = 200
_STEP_TEXT_BUDGET = 700
DASHBOARD_LINK_TEXT = "Dashboard"


@dataclass(frozen=True)
class SlackMessage:
    text: str
    """The notification fallback text (push notifications, screen readers, old clients)."""
    blocks: list[dict[str, Any]]


def escape_mrkdwn(text: str) -> str:
    """Escape Slack's control characters so untrusted text cannot form links or mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_incident_root(incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    """The incident's root message with its current status; posted once, then updated in place. With a
    `dashboard_url` (the stack's CloudWatch dashboard), its context links to it."""
    blocks = [
        _incident_header(incident),
        *_runbook_sections(incident.runbook, with_action=incident.is_open),
        *_field_sections(_incident_fields(incident)),
    ]
    if not incident.is_open:
        blocks.append(_section(_resolution_line(incident)))
    recent = [entry for entry in incident.timeline if entry.muted is None][-_RECENT_STEPS:]
    if recent:
        blocks.append(_section("\n".join(["*Latest*", *(_step_line(entry) for entry in recent)])))
    blocks.extend(incident_buttons(incident))
    blocks.append(_incident_context(incident, dashboard_url))
    return SlackMessage(text=_clip(_incident_fallback(incident), MAX_FALLBACK_TEXT), blocks=_fit(blocks))


def render_timeline_reply(incident: Incident, entry: TimelineEntry) -> SlackMessage:
    """One thread reply for one lifecycle step of the incident."""
    blocks = [_section(_step_text(incident, entry)), _step_context(incident, entry)]
    fallback = f"{escape_mrkdwn(entry.phase)}: {escape_mrkdwn(entry.text)}"
    return SlackMessage(text=_clip(fallback, MAX_FALLBACK_TEXT), blocks=_fit(blocks))


def render_alert(alert: Alert, *, dashboard_url: str | None = None) -> SlackMessage:
    """A standalone message for something that belongs to no incident (a manual drain, a spot stop): a root of its
    own, so it links to the dashboard as incident roots do."""
    blocks = [_header(SEVERITY_EMOJI[alert.severity], alert.severity.value.upper(), alert.title)]
    if alert.text:
        # Slack rejects an empty text object, and with it the whole message.
        blocks.append(_section(escape_mrkdwn(alert.text)))
    # Before the details, which can be many: the block limit cuts from the end.
    blocks.extend(_runbook_sections(alert.runbook, with_action=True))
    blocks.extend(_field_sections(_alert_fields(alert)))
    blocks.append(
        root_context(
            [f"{escape_mrkdwn(alert.kind.value)} · ECS event `{escape_mrkdwn(alert.event_id)}`"], dashboard_url
        )
    )
    fallback = (
        f"{alert.severity.value.upper()} · {escape_mrkdwn(alert.title)} · {_instance_name(alert.instance)}"
        f" ({escape_mrkdwn(alert.instance.cluster_name)}) · {escape_mrkdwn(alert.text)}"
    )
    return SlackMessage(text=_clip(fallback, MAX_FALLBACK_TEXT), blocks=_fit(blocks))


def render_superseded_alert(alert: Alert, incident: Incident, *, dashboard_url: str | None = None) -> SlackMessage:
    """A notice corrected in place: an incident learned after it was sent explains it (its thread has it)."""
    where = _thread_pointer(incident)
    text = f"{escape_mrkdwn(alert.text)}\nNow part of {where}: see its thread."
    blocks = [
        _header(SEVERITY_EMOJI[Severity.INFO], "PART OF AN INCIDENT", alert.title),
        _section(text),
        *_field_sections(_alert_fields(alert)),
        root_context(
            [f"{escape_mrkdwn(alert.kind.value)} · ECS event `{escape_mrkdwn(alert.event_id)}`"], dashboard_url
        ),
    ]
    fallback = f"{escape_mrkdwn(alert.title)} · now part of {_incident_subject(incident)}"
    return SlackMessage(text=_clip(fallback, MAX_FALLBACK_TEXT), blocks=_fit(blocks))


def render_webhook_step(incident: Incident, entry: TimelineEntry, *, dashboard_url: str | None = None) -> SlackMessage:
    """A self-contained message for incoming-webhook mode, where there is no thread to update.

    It carries the incident's current status and the step it announces, so each message can be read on its
    own in the channel.
    """
    blocks = [
        _incident_header(incident),
        _section(_step_text(incident, entry)),
        *_runbook_sections(incident.runbook, with_action=incident.is_open),
    ]
    step = f"{escape_mrkdwn(entry.phase)}: {escape_mrkdwn(entry.text)}"
    fallback = f"{_incident_subject(incident)} · {step}"
    blocks.extend(_field_sections(_incident_fields(incident)))
    if not incident.is_open:
        blocks.append(_section(_resolution_line(incident)))
    blocks.append(_incident_context(incident, dashboard_url))
    return SlackMessage(text=_clip(fallback, MAX_FALLBACK_TEXT), blocks=_fit(blocks))


def _runbook_sections(runbook: Runbook | None, *, with_action: bool) -> list[dict[str, Any]]:
    """What to do and where to read more; once a fault is over, only the link (the action is history)."""
    if runbook is None:
        return []
    lines = [f"*What to do:* {_clip(escape_mrkdwn(runbook.action), _STEP_TEXT_BUDGET)}"] if with_action else []
    lines.append(f"*Runbook:* {_link(runbook.url, runbook.link_text)}")
    return [_section("\n".join(lines))]


def _thread_pointer(incident: Incident) -> str:
    subject = f"incident `{escape_mrkdwn(incident.fingerprint)}` ({escape_mrkdwn(incident.classification.title)})"
    return subject


def _incident_header(incident: Incident) -> dict[str, Any]:
    if incident.is_open:
        severity = incident.classification.severity
        return _header(SEVERITY_EMOJI[severity], severity.value.upper(), incident.classification.title)
    return _header(RESOLVED_EMOJI, "RESOLVED", incident.classification.title)


def _incident_fields(incident: Incident) -> list[tuple[str, str]]:
    classification = incident.classification
    fields = [
        *_instance_fields(incident.instance),
        ("Check", escape_mrkdwn(incident.check_type)),
        ("Status", _status_text(incident)),
        ("Opened", _slack_time(incident.opened_at)),
    ]
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
        return []  # an absurdly long ARN: no buttons rather than a message Slack refuses
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


def _alert_fields(alert: Alert) -> list[tuple[str, str]]:
    fields = [*_instance_fields(alert.instance), ("At", _slack_time(alert.at))]
    if alert.drain is not None:
        fields.extend(_drain_fields(alert.drain))
    fields.extend((escape_mrkdwn(key), escape_mrkdwn(value)) for key, value in alert.details.items())
    return fields


def _instance_fields(instance: InstanceRef) -> list[tuple[str, str]]:
    if instance.is_alarm:
        alarm = [("CloudWatch alarm", _link(instance.console_url, instance.container_instance_id))]
        return [*alarm, ("Cluster", escape_mrkdwn(instance.cluster_name))] if instance.cluster_name else alarm
    return [
        ("Cluster", escape_mrkdwn(instance.cluster_name)),
        ("Container instance", _link(instance.console_url, instance.container_instance_id)),
        ("EC2 instance", escape_mrkdwn(instance.ec2_instance_id or "—")),
        ("Capacity provider", escape_mrkdwn(instance.capacity_provider or "—")),
    ]


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


def _step_text(incident: Incident, entry: TimelineEntry) -> str:
    lines = [
        f"*{escape_mrkdwn(entry.phase)}* · {_slack_time(entry.at)}",
        _clip(escape_mrkdwn(entry.text), _STEP_TEXT_BUDGET),
    ]
    if entry.phase == "DRAINING" and incident.drain is not None:
        lines.append(f"*Drain:* {escape_mrkdwn(incident.drain.label)}")
        if incident.drain.reason:
            lines.append(f"*Drain reason:* {_clip(escape_mrkdwn(incident.drain.reason), _STEP_TEXT_BUDGET)}")
    return "\n".join(lines)


def _step_line(entry: TimelineEntry) -> str:
    return f"• {_slack_time(entry.at)} *{escape_mrkdwn(entry.phase)}* {_clip(escape_mrkdwn(entry.text), 300)}"


def _step_context(incident: Incident, entry: TimelineEntry) -> dict[str, Any]:
    if is_reconciled(entry.event_id):
        return _context(["Found by the reconciliation sweep in ECS's answer: no event reported it"])
    if entry.kind == EntryKind.ACTION:
        source = "a PagerDuty webhook" if entry.event_id.startswith("action:pagerduty:") else "a Slack button"
        return _context([f"Done by a person, through {source}"])
    source = "CloudWatch event" if incident.instance.is_alarm else "ECS event"
    return _context([f"{source} `{escape_mrkdwn(entry.event_id)}`"])


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
    if incident.is_open:
        return f"{_incident_subject(incident)} · {_status_text(incident)}"
    reason = f" · {escape_mrkdwn(incident.close_reason)}" if incident.close_reason else ""
    return _incident_subject(incident) + reason


def _incident_subject(incident: Incident) -> str:
    """What a push notification leads with: the state, the fault, where it is."""
    state = incident.classification.severity.value.upper() if incident.is_open else _status_text(incident)
    cluster = incident.instance.cluster_name
    where = _instance_name(incident.instance) + (f" ({escape_mrkdwn(cluster)})" if cluster else "")
    return f"{state} · {escape_mrkdwn(incident.classification.title)} · {where}"


def _instance_name(instance: InstanceRef) -> str:
    return escape_mrkdwn(instance.ec2_instance_id or instance.container_instance_id)


def _incident_duration(incident: Incident) -> str | None:
    if incident.closed_at is None:
        return None
    return format_duration(as_utc(incident.closed_at) - as_utc(incident.opened_at))


def _slack_time(moment: datetime) -> str:
    """Slack's date token: each reader sees their own time zone; the fallback is UTC."""
    utc = as_utc(moment)
    fallback = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time_secs}}|{fallback}>"


def _link(url: str, label: str) -> str:
    # Slack decodes &amp; &lt; &gt; inside the URL too; `|` and spaces would end or break the link.
    safe_url = escape_mrkdwn(url).replace("|", "%7C").replace(" ", "%20")
    return f"<{safe_url}|{_clip(escape_mrkdwn(label), _LABEL_BUDGET)}>"


def _header(emoji: str, label: str, title: str) -> dict[str, Any]:
    text = _clip(f"{emoji} {label} · {escape_mrkdwn(title)}", MAX_HEADER_TEXT)
    return {"type": "header", "text": {"type": "plain_text", "text": text, "emoji": True}}


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text, MAX_SECTION_TEXT)}


def _field_sections(fields: list[tuple[str, str]]) -> list[dict[str, Any]]:
    texts = [_mrkdwn(f"*{label}*\n{value}", MAX_FIELD_TEXT) for label, value in fields]
    return [
        {"type": "section", "fields": texts[start : start + MAX_FIELDS_PER_SECTION]}
        for start in range(0, len(texts), MAX_FIELDS_PER_SECTION)
    ]


def _context(elements: list[str]) -> dict[str, Any]:
    return {
        "type": "context",
        "elements": [_mrkdwn(text, MAX_SECTION_TEXT) for text in elements[:MAX_CONTEXT_ELEMENTS]],
    }


def root_context(elements: list[str], dashboard_url: str | None) -> dict[str, Any]:
    """A root message's context line: its elements, then the dashboard link (kept when the elements are too many)."""
    if not dashboard_url:
        return _context(elements)
    return _context([*elements[: MAX_CONTEXT_ELEMENTS - 1], _link(dashboard_url, DASHBOARD_LINK_TEXT)])


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text, limit), "verbatim": True}


def _fit(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    kept = blocks[: MAX_BLOCKS - 1]
    return [*kept, _context([f"{len(blocks) - len(kept)} more blocks not shown"])]


def _clip(text: str, limit: int) -> str:
    """Cut `text` to `limit` characters with an ellipsis, never inside an entity or our link markup."""
    if len(text) <= limit:
        return text
    cut = text[: limit - len(ELLIPSIS)]
    # After escaping, any `&` starts an entity and any `<` starts our own markup: a cut that leaves
    # either unterminated would show `&am` or swallow the rest of the message into a broken link.
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    lt = cut.rfind("<")
    if lt != -1 and ">" not in cut[lt:]:
        cut = cut[:lt]
    return cut + ELLIPSIS
