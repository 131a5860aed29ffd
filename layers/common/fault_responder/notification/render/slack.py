"""Slack Block Kit messages for incidents, their lifecycle steps and standalone alerts.

Pure functions, no I/O. Everything that came from an event (reasons, names, ids, titles built from
reasons) is untrusted: it goes through `escape_mrkdwn`, and mrkdwn objects are sent `verbatim` so
Slack does not auto-link bare `@channel` or `#channel` either. Nothing exceeds a Block Kit limit, so a
long reason cannot cost the notification an `invalid_blocks` error, and nothing is left out in silence:
a text cut to fit ends with SHORTENED (or says where its full text is), and a list fitted into the
message by `fit_lines` or `fit_fields` ends with a line counting what it left out and saying where to see it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
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

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
MAX_FIELD_TEXT = 2000
MAX_FIELDS_PER_SECTION = 10
MAX_CONTEXT_ELEMENTS = 10
MAX_FALLBACK_TEXT = 40_000
MAX_BUTTON_VALUE = 2000
ELLIPSIS = "…"
SHORTENED = f"{ELLIPSIS} (shortened)"
"""Ends a text cut to fit a limit, so the reader knows there was more."""
MORE_IN_THREAD = f"{ELLIPSIS} (more in the thread)"
"""Ends a root's step cut short: its thread reply has the step's text at full length (or says it is cut)."""
MAX_MESSAGE_TEXT = 10_000
"""The characters of text a message's blocks may hold in all. Beyond Block Kit's documented limits, Slack refuses
a message whose blocks hold more than about 12,000 (`msg_blocks_too_long`, undocumented; reported refused from
~11,300 to ~13,300): `_fit` keeps a margin below that."""
MAX_LISTING_TEXT = 6000
"""The characters a list (a notice's details, a fleet's members) may take in one message: most of
MAX_MESSAGE_TEXT, and room left for the header, the fields and the context."""

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
_STEP_LINE_BUDGET = 300
DASHBOARD_LINK_TEXT = "Dashboard"


@dataclass(frozen=True)
class SlackMessage:
    text: str
    """The notification fallback text (push notifications, screen readers, old clients)."""
    blocks: list[dict[str, Any]]


def escape_mrkdwn(text: str) -> str:
    """Escape Slack's control characters so untrusted text cannot form links or mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Listing:
    """A list fitted into a message (`fit_lines`, `fit_fields`): its blocks, and how much of the list they show."""

    blocks: list[dict[str, Any]]
    shown: int
    """The list's first `shown` items are in `blocks`, in order, each whole or ending with its marker."""
    left_out: int
    """The items after those, in no block: counted by the note when the caller gave one, else the caller's to say."""
    chars: int
    """The characters of text in `blocks`, note included."""


def fit_lines(
    lines: Sequence[str],
    *,
    title: str | None = None,
    max_blocks: int = MAX_BLOCKS,
    max_chars: int | None = None,
    max_line: int = MAX_SECTION_TEXT,
    left_out: Callable[[int], str] | None = None,
    marker: str = SHORTENED,
) -> Listing:
    """Fit `lines` (each already escaped mrkdwn, most important first) into as few section blocks as they need.

    Packs by characters: each section holds as many whole lines, joined by newlines, as its 3,000 characters
    allow; the first starts with `title` (its own line). A line is never cut, except one longer than `max_line`
    (or than a section holding the title), which is cut to that length and ends with `marker`: say there
    "(shortened)" or where its full text is. A blank line shows as "—" (Slack refuses an empty text).

    The lines shown are always the first `shown`, in order: the first line that fits neither the last section
    nor a new one within `max_blocks` sections and `max_chars` characters of text ends the listing. When lines
    are left out and `left_out` is given, `left_out(count)` is the listing's last line, saying how many and where
    to see them (e.g. "…and 37 more: the thread names each one"); room for it is made by leaving out more lines,
    and `count` counts every one. Without `left_out`, `Listing.left_out` is the caller's to say.

    Guarantees: at most `max_blocks` blocks, each text within the section limit, at most `max_chars` characters
    of text in all, and `shown` + `left_out` == len(lines). If not even the note fits, there are no blocks,
    and `left_out` == len(lines) is the caller's to say. No lines, no blocks.

    Give a long list `max_chars` (MAX_LISTING_TEXT): a message holding more than MAX_MESSAGE_TEXT characters in
    all has its longest texts cut by `_fit`, and lines cut there are cut, not counted.
    """
    head = [title] if title else []
    room = MAX_SECTION_TEXT - sum(len(text) + 1 for text in head)
    items = [_clip(line if line.strip() else "—", min(max_line, room), marker) for line in lines]
    packer = _Packer(
        head,
        max_blocks,
        max_chars,
        separator=1,
        fits=lambda section, size, item: size + 1 + len(item) <= MAX_SECTION_TEXT,
    )
    shown = packer.fill(items, left_out, room, marker)
    blocks = [_section("\n".join(section)) for section in packer.sections]
    return Listing(blocks=blocks, shown=shown, left_out=len(items) - shown, chars=packer.used)


def fit_fields(
    fields: Sequence[tuple[str, str]],
    *,
    max_blocks: int = MAX_BLOCKS,
    max_chars: int | None = None,
    left_out: Callable[[int], str] | None = None,
    marker: str = SHORTENED,
) -> Listing:
    """Fit (label, value) fields (each escaped mrkdwn, most important first) into sections of up to 10 fields.

    Each field is "*label*\\nvalue", cut to Slack's 2,000 characters with `marker` at its end if longer. Fields are
    shown in order while they fit in `max_blocks` sections and `max_chars` characters of text; when some are left
    out and `left_out` is given, `left_out(count)` is the last field, counting every field left out (more are left
    out to make room for it). Same guarantees as `fit_lines`.
    """
    items = [_clip(f"*{label}*\n{value}", MAX_FIELD_TEXT, marker) for label, value in fields]
    packer = _Packer(
        [], max_blocks, max_chars, separator=0, fits=lambda section, size, item: len(section) < MAX_FIELDS_PER_SECTION
    )
    shown = packer.fill(items, left_out, MAX_FIELD_TEXT, marker)
    blocks = [
        {"type": "section", "fields": [_mrkdwn(text, MAX_FIELD_TEXT) for text in section]}
        for section in packer.sections
    ]
    return Listing(blocks=blocks, shown=shown, left_out=len(items) - shown, chars=packer.used)


class _Packer:
    """Items into sections, in order, within a budget of sections and characters (fit_lines, fit_fields)."""

    def __init__(
        self,
        head: list[str],
        max_blocks: int,
        max_chars: int | None,
        *,
        separator: int,
        fits: Callable[[list[str], int, str], bool],
    ) -> None:
        self.head = head
        self.separator = separator
        """Characters between two items of a section: the newline between lines, none between fields."""
        self.max_blocks = max_blocks
        self.max_chars = sys.maxsize if max_chars is None else max_chars
        self.fits = fits
        self.sections: list[list[str]] = []
        self.sizes: list[int] = []
        self.used = 0

    def fill(self, items: list[str], left_out: Callable[[int], str] | None, room: int, marker: str) -> int:
        """Place the items while they fit, then the note if any are left out; the number of items placed."""
        shown = 0
        for item in items:
            if not self._place(item):
                break
            shown += 1
        if shown == len(items) or left_out is None:
            return shown
        while not self._place(_clip(left_out(len(items) - shown), room, marker)):
            if shown == 0:
                return 0
            self._unplace()
            shown -= 1
        return shown

    def _place(self, item: str) -> bool:
        if self.sections and self.fits(self.sections[-1], self.sizes[-1], item):
            # Where it fits the last section, the character budget alone decides: a new section would not save it.
            added = self.separator + len(item)
            if self.used + added > self.max_chars:
                return False
            self.sections[-1].append(item)
            self.sizes[-1] += added
            self.used += added
            return True
        start = [] if self.sections else self.head
        size = self._size([*start, item])
        if len(self.sections) >= self.max_blocks or self.used + size > self.max_chars:
            return False
        self.sections.append([*start, item])
        self.sizes.append(size)
        self.used += size
        return True

    def _unplace(self) -> None:
        section = self.sections[-1]
        section.pop()
        self.used -= self.sizes[-1]
        if section == [] or (len(self.sections) == 1 and section == self.head):
            self.sections.pop()
            self.sizes.pop()
            return
        self.sizes[-1] = self._size(section)
        self.used += self.sizes[-1]

    def _size(self, section: list[str]) -> int:
        return sum(len(text) for text in section) + self.separator * (len(section) - 1)


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
    """The header block; a title too long for it ends with an ellipsis (`_headed` then shows it whole below)."""
    text = _clip(f"{_lead(emoji, label)} · {escape_mrkdwn(title)}", MAX_HEADER_TEXT)
    return {"type": "header", "text": {"type": "plain_text", "text": text, "emoji": True}}


def _headed(emoji: str, label: str, title: str) -> list[dict[str, Any]]:
    """The header, and the whole title right under it when the header had to cut it."""
    header = _header(emoji, label, title)
    if header["text"]["text"] != f"{_lead(emoji, label)} · {escape_mrkdwn(title)}":
        return [header, _section(f"*Title:* {escape_mrkdwn(title)}")]
    return [header]


def _lead(emoji: str, label: str) -> str:
    """What a header begins with: its emoji, if any, and its label."""
    return f"{emoji} {label}" if emoji else label


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text, MAX_SECTION_TEXT)}


def _field_sections(fields: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A few fields (a known, short list), ten to a section, each cut to Slack's limit saying so."""
    texts = [_mrkdwn(f"*{label}*\n{value}", MAX_FIELD_TEXT) for label, value in fields]
    return [
        {"type": "section", "fields": texts[start : start + MAX_FIELDS_PER_SECTION]}
        for start in range(0, len(texts), MAX_FIELDS_PER_SECTION)
    ]


def _context(elements: list[str]) -> dict[str, Any]:
    """A context block; elements past Slack's ten share the tenth, so none is dropped."""
    if len(elements) > MAX_CONTEXT_ELEMENTS:
        elements = [*elements[: MAX_CONTEXT_ELEMENTS - 1], " · ".join(elements[MAX_CONTEXT_ELEMENTS - 1 :])]
    return {"type": "context", "elements": [_mrkdwn(text, MAX_SECTION_TEXT) for text in elements]}


def root_context(elements: list[str], dashboard_url: str | None) -> dict[str, Any]:
    """A root message's context line: its elements, then the dashboard link (kept when the elements are too many:
    the ones past nine share the ninth)."""
    if not dashboard_url:
        return _context(elements)
    if len(elements) > MAX_CONTEXT_ELEMENTS - 1:
        elements = [*elements[: MAX_CONTEXT_ELEMENTS - 2], " · ".join(elements[MAX_CONTEXT_ELEMENTS - 2 :])]
    return _context([*elements, _link(dashboard_url, DASHBOARD_LINK_TEXT)])


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text, limit, SHORTENED), "verbatim": True}


def _fallback(text: str) -> str:
    return _clip(text, MAX_FALLBACK_TEXT, SHORTENED)


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _fit(blocks: list[dict[str, Any]], *, where: str = "") -> list[dict[str, Any]]:
    """At most Slack's 50 blocks and MAX_MESSAGE_TEXT characters of text. Past 50, the body's last blocks make way
    for a note naming each of them, and the message keeps its header and its closing buttons and context; `where`
    says where to see what was dropped (e.g. ": the thread has each one"). Past the characters, the longest texts
    are cut, each to the same length and saying so. Renderers fit their lists first (fit_lines, fit_fields):
    this is the last guard."""
    return _within_message_text(_within_blocks(blocks, where))


def _within_blocks(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    tail = 0
    while tail < 2 and blocks[len(blocks) - 1 - tail]["type"] in ("actions", "context"):
        tail += 1
    body, closing = blocks[: len(blocks) - tail], blocks[len(blocks) - tail :]
    kept = body[: MAX_BLOCKS - 1 - tail]
    dropped = body[len(kept) :]
    named = "; ".join(_block_name(block) for block in dropped)
    note = f"{_count(len(dropped), 'more block')} not shown ({named}){where}"
    return [*kept, _context([note]), *closing]


def _within_message_text(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks, their longest mrkdwn texts cut to one length (the highest that fits) when they hold too much."""
    texts = [text for block in blocks for text in _text_objects(block)]
    cuttable = [len(text["text"]) for text in texts if text["type"] == "mrkdwn"]
    budget = MAX_MESSAGE_TEXT - sum(len(text["text"]) for text in texts if text["type"] != "mrkdwn")
    if sum(cuttable) <= budget:
        return blocks
    low, high = len(SHORTENED), max(cuttable)
    while low < high:
        level = (low + high + 1) // 2
        low, high = (level, high) if sum(min(size, level) for size in cuttable) <= budget else (low, level - 1)
    return [_cut_texts(block, low) for block in blocks]


def _text_objects(block: dict[str, Any]) -> list[dict[str, Any]]:
    found = [block["text"]] if isinstance(block.get("text"), dict) else []
    found += block.get("fields", [])
    found += [element for element in block.get("elements", []) if element.get("type") in ("mrkdwn", "plain_text")]
    found += [element["text"] for element in block.get("elements", []) if isinstance(element.get("text"), dict)]
    return found


def _cut_texts(block: dict[str, Any], limit: int) -> dict[str, Any]:
    def cut(text: dict[str, Any]) -> dict[str, Any]:
        if text["type"] != "mrkdwn" or len(text["text"]) <= limit:
            return text
        return {**text, "text": _clip(text["text"], limit, SHORTENED)}

    changed = dict(block)
    if isinstance(block.get("text"), dict):
        changed["text"] = cut(block["text"])
    if "fields" in block:
        changed["fields"] = [cut(field) for field in block["fields"]]
    if block["type"] == "context":
        changed["elements"] = [cut(element) for element in block["elements"]]
    return changed


def _block_name(block: dict[str, Any]) -> str:
    """What a dropped block held, in a few words: its first line, or its fields' labels."""
    if "fields" in block:
        return "fields " + ", ".join(field["text"].split("\n", 1)[0] for field in block["fields"])
    if isinstance(block.get("text"), dict):
        return _clip(str(block["text"]["text"]).split("\n", 1)[0], 60)
    return str(block["type"])


def clip_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters ending with SHORTENED, the one mark of a text cut to fit."""
    return _clip(text, limit, SHORTENED)


def _clip(text: str, limit: int, marker: str = ELLIPSIS) -> str:
    """Cut `text` to `limit` characters ending with `marker`, never inside an entity or our link markup.

    `marker` says the text was cut: SHORTENED, or where its whole text is (MORE_IN_THREAD); a bare ellipsis only
    where the whole text is at hand (a link label, a header whose title follows it)."""
    if len(text) <= limit:
        return text
    if len(marker) >= limit:
        marker = ELLIPSIS
    cut = text[: limit - len(marker)]
    # After escaping, any `&` starts an entity and any `<` starts our own markup: a cut that leaves
    # either unterminated would show `&am` or swallow the rest of the message into a broken link.
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    lt = cut.rfind("<")
    if lt != -1 and ">" not in cut[lt:]:
        cut = cut[:lt]
    return cut + marker
