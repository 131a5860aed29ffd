"""The training auto-resume workflow's notices as Slack and PagerDuty render them, for the tests that read what
on-call sees: resume/ decides what a notice says (resume_notice), each receiver kind's package how it looks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fault_responder.core.domain import Where
from fault_responder.notification.receivers.pagerduty.notices import render_notice_change, render_notice_trigger
from fault_responder.notification.receivers.slack.notices import render_notice_reply, render_notice_standalone
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.resume.fault import Fault
from fault_responder.resume.notices import Notice
from fault_responder.resume.notify import resume_notice


def render_resume_reply(notice: Notice, fault: Fault) -> SlackMessage:
    """A reply in the incident's thread (receivers/slack/notices.py)."""
    return render_notice_reply(resume_notice(notice, fault))


def render_resume_standalone(
    notice: Notice, fault: Fault, *, dashboard_url: str | None = None, where: Where | None = None
) -> SlackMessage:
    """The notice as a message of its own (receivers/slack/notices.py)."""
    return render_notice_standalone(resume_notice(notice, fault, where=where), dashboard_url=dashboard_url)


def render_resume_trigger(
    notice: Notice,
    fault: Fault,
    routing_key: str,
    now: datetime,
    dedup_key: str | None = None,
    *,
    where: Where | None = None,
) -> dict[str, Any]:
    """A page (receivers/pagerduty/notices.py), one PagerDuty alert per fault and job unless `dedup_key` says
    otherwise."""
    told = resume_notice(notice, fault, where=where, dedup_key=dedup_key)
    return render_notice_trigger(told, routing_key, now, told.dedup_key)


def render_change_event(
    notice: Notice, fault: Fault, routing_key: str, now: datetime, *, where: Where | None = None
) -> dict[str, Any]:
    """A Change Event (receivers/pagerduty/notices.py): it never pages."""
    return render_notice_change(resume_notice(notice, fault, where=where), routing_key, now)
