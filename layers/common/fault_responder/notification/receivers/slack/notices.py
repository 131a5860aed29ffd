"""The training auto-resume workflow's notices in Slack: a reply in the incident's thread (or the fleet incident's),
or a message of its own (no thread to reply in yet, or an incoming webhook). Pure, within Block Kit's limits; a text
cut to fit ends with SHORTENED, as every other Slack message's does."""

from __future__ import annotations

from typing import Any

from fault_responder.notification.receivers.kind import ResumeNotice
from fault_responder.notification.render.blocks import (
    MAX_HEADER_TEXT,
    MAX_SECTION_TEXT,
    SlackMessage,
    clip_text,
    escape_mrkdwn,
    root_context,
)
from fault_responder.notification.render.slack import SEVERITY_EMOJI, approval_buttons


def render_notice_reply(notice: ResumeNotice) -> SlackMessage:
    """A reply in the incident's thread: the notice, its buttons (an approval request's), and what it is about."""
    blocks = [_section(_headline(notice)), *approval_buttons(notice.approval_id), _context(notice)]
    return SlackMessage(text=clip_text(escape_mrkdwn(notice.title), MAX_SECTION_TEXT), blocks=blocks)


def render_notice_standalone(notice: ResumeNotice, *, dashboard_url: str | None = None) -> SlackMessage:
    """The same notice as a message of its own (no incident thread to reply in, or a webhook): a root, which links
    to the dashboard. In organization mode (`notice.where`), it names the account and Region beside the cluster."""
    where = notice.where
    emoji = SEVERITY_EMOJI[notice.severity]
    header = clip_text(f"{emoji} Training auto-resume · {notice.title}", MAX_HEADER_TEXT)
    account = (
        f"  *Account:* {escape_mrkdwn(where.account_text)}  *Region:* {escape_mrkdwn(where.region)}"
        if where is not None
        else ""
    )
    place = (
        f"*Cluster:* {escape_mrkdwn(notice.cluster)}{account}  *Instance:* {escape_mrkdwn(notice.host)}  "
        f"*Capacity provider:* {escape_mrkdwn(notice.capacity_provider)}  *Fault:* {escape_mrkdwn(notice.fault_title)}"
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
        _section(_body(notice)),
        _section(place),
        *approval_buttons(notice.approval_id),
        root_context([_context_text(notice)], dashboard_url),
    ]
    cluster = notice.cluster + (f", {where}" if where is not None else "")
    fallback = f"Training auto-resume · {notice.title} · {notice.host} ({cluster})"
    return SlackMessage(text=clip_text(escape_mrkdwn(fallback), MAX_SECTION_TEXT), blocks=blocks)


def _headline(notice: ResumeNotice) -> str:
    return f"{SEVERITY_EMOJI[notice.severity]} *{escape_mrkdwn(notice.title)}*\n{_body(notice)}"


def _body(notice: ResumeNotice) -> str:
    return escape_mrkdwn(notice.text)


def _context(notice: ResumeNotice) -> dict[str, Any]:
    return {"type": "context", "elements": [_mrkdwn(_context_text(notice))]}


def _context_text(notice: ResumeNotice) -> str:
    parts = ["Training auto-resume"]
    if notice.job_id:
        parts.append(f"job `{escape_mrkdwn(notice.job_id)}`")
    parts.append(f"host `{escape_mrkdwn(notice.host)}`")
    parts.append(f"incident `{escape_mrkdwn(notice.incident_id)}`")
    return " · ".join(parts)


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": clip_text(text, MAX_SECTION_TEXT), "verbatim": True}
