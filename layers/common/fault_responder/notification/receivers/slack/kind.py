"""Slack as a receiver kind: a channel through the bot token (post a root, update it in place, reply in its thread),
or an incoming webhook (post only: one self-contained message per step).

Never twice: a bot post whose outcome is unknown (a read timeout, a worker that died) is marked pending and looked
for, by the metadata every message carries, before anything is posted again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from fault_responder.core.domain import Incident
from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import DeliveryError, SlackPostRef
from fault_responder.notification.receivers.kind import (
    Capability,
    News,
    NoticeAt,
    Once,
    Outbox,
    ReceiverKind,
    ResumeNotice,
    Work,
)
from fault_responder.notification.receivers.slack.notices import render_notice_reply, render_notice_standalone
from fault_responder.notification.receivers.slack.plan import (
    bot_plan,
    message_digest,
    notice_message,
    root_message,
    webhook_plan,
)
from fault_responder.notification.receivers.steps import (
    LOOKBACK,
    METADATA_INCIDENT,
    METADATA_NOTICE,
    METADATA_STEP,
    WEBHOOK_POSTED,
    Step,
    StepKind,
    View,
    alert_in,
    incident_in,
    noted,
    pending_since,
    posted_root,
    required,
    step_marker,
    without,
)
from fault_responder.notification.receivers.timeline import batch_told
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.fleet import render_fleet_steps
from fault_responder.notification.render.notes import render_note_message, render_note_reply
from fault_responder.notification.render.silences import render_silence_news
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_timeline_reply,
    render_webhook_step,
)
from fault_responder.routing.router import SlackTarget

log = logging.getLogger(__name__)

AUTH_FAILURES = frozenset({"invalid_auth", "token_revoked", "token_expired", "account_inactive", "not_authed"})
_BOT = frozenset(
    {
        Capability.OPEN,
        Capability.UPDATE,
        Capability.THREAD,
        Capability.TIMELINE,
        Capability.NEWS,
    }
)
_WEBHOOK = frozenset({Capability.OPEN, Capability.TIMELINE, Capability.NEWS})


class SlackApi(Protocol):
    def post_message(
        self, channel: str, message: SlackMessage, thread_ts: str | None = None, metadata: dict[str, Any] | None = None
    ) -> SlackPostRef: ...

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None: ...

    def find_message(
        self, channel: str, event_type: str, marker: str, oldest: datetime, thread_ts: str | None = None
    ) -> SlackPostRef | None: ...


class SlackHook(Protocol):
    def post(self, message: SlackMessage) -> None: ...


class SlackChannels(Protocol):
    """What a Slack receiver asks of the wiring's channels (secrets resolved lazily)."""

    def slack_api(self) -> SlackApi: ...

    def slack_webhook(self, name: str) -> SlackHook: ...


class SlackKind(ReceiverKind[SlackTarget]):
    key = "slack"
    target = SlackTarget

    def capabilities(self, target: SlackTarget) -> frozenset[Capability]:
        return _BOT if target.channel is not None else _WEBHOOK

    def describe(self, target: SlackTarget) -> str:
        return f"slack {target.channel or f'webhook {target.webhook}'}"

    def subject(self, incident: Incident) -> str:
        return incident.id

    def hears(self, paging: str | None) -> bool:
        return True

    def plan(self, name: str, target: SlackTarget, work: Work) -> list[Step]:
        if target.channel is not None:
            return bot_plan(name, work.incidents, work.alerts, work.record, work.view, dashboard_url=work.dashboard_url)
        return webhook_plan(name, work.incidents, work.alerts, work.record)

    def perform(self, target: SlackTarget, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
        channels: SlackChannels = out.channels
        if target.channel is not None:
            return _bot(channels.slack_api(), target.channel, step, view, sent, out=out)
        return _webhook(
            channels.slack_webhook(required(target.webhook, "a slack target without a webhook")), step, view, sent, out
        )

    def notify(
        self, name: str, target: SlackTarget, notice: ResumeNotice, at: NoticeAt, *, out: Outbox, once: Once
    ) -> None:
        """In the incident's thread (a reply, its root updated) or the fleet incident's (a reply, and the incident's
        own root updated where it has one); a message of its own while there is no thread, and always through a
        webhook, which has none."""
        channels: SlackChannels = out.channels
        if target.channel is None:
            hook = channels.slack_webhook(required(target.webhook, "a slack target without a webhook"))
            message = render_notice_standalone(notice, dashboard_url=out.dashboard_url)
            once("post", lambda: hook.post(message))
            return
        api = channels.slack_api()
        incident = at.incident
        own = next((t for t in incident.slack_threads if t.receiver == name), None) if incident else None
        thread = (
            at.fleet.threads.get(name)
            if at.fleet is not None and incident is not None
            else ((own.channel, own.ts) if own is not None else None)
        )
        if thread is None or incident is None:
            standalone = render_notice_standalone(notice, dashboard_url=out.dashboard_url)
            once("post", lambda: api.post_message(target.channel or "", standalone))
            return
        reply = render_notice_reply(notice)
        once("reply", lambda: api.post_message(thread[0], reply, thread[1]))
        if own is not None:
            root = render_incident_root(incident, dashboard_url=out.dashboard_url)
            once("update", lambda: api.update_message(own.channel, own.ts, root))

    def announce(
        self, target: SlackTarget, news: News, out: Outbox, *, since: datetime | None, intend: Callable[[], None]
    ) -> bool:
        channels: SlackChannels = out.channels
        if since is not None and target.channel is None:
            log.warning(
                "silence %s %s: a webhook post's outcome is unknown; not posted again",
                news.silence.id,
                news.phase.value,
            )
            return False
        if since is not None and target.channel is not None:
            found = channels.slack_api().find_message(target.channel, news.event_type, news.marker, since - LOOKBACK)
            if found is not None:
                return False  # posted by the sweep that died: told
        message = render_silence_news(news.silence, news.phase, news.muted, dashboard_url=out.dashboard_url)
        intend()
        if target.channel is not None:
            metadata = {"event_type": news.event_type, "event_payload": {"id": news.marker}}
            channels.slack_api().post_message(target.channel, message, metadata=metadata)
        else:
            channels.slack_webhook(target.webhook or "").post(message)
        return True

    def is_auth_failure(self, error: DeliveryError) -> bool:
        return error.reason in AUTH_FAILURES


# --- Bot token -----------------------------------------------------------------------------------------------


def _bot(api: SlackApi, channel: str, step: Step, view: View, sent: Delivery, *, out: Outbox) -> Delivery:
    dashboard_url = out.dashboard_url
    if step.kind == StepKind.POST_ROOT:
        incident = incident_in(view, step.subject)
        return _post(api, channel, root_message(incident, dashboard_url), step, sent, out=out, thread_ts=None)
    if step.kind == StepKind.REPLY:
        incident = incident_in(view, step.subject)
        entry = required(step.entry, "a reply without its step")
        channel, ts = posted_root(sent)
        message = render_fleet_steps(incident, step.batch) if step.batch else render_timeline_reply(incident, entry)
        return _post(api, channel, message, step, sent, out=out, thread_ts=ts)
    if step.kind == StepKind.UPDATE_ROOT:
        message = root_message(incident_in(view, step.subject), dashboard_url)
        api.update_message(*posted_root(sent), message)
        return replace(sent, digest=message_digest(message))
    if step.kind == StepKind.NOTE:
        incident, entry, note = noted(view, step)
        if step.thread is None:
            message = render_note_message(incident, entry, note, dashboard_url=dashboard_url)
            return _post(api, channel, message, step, sent, out=out, thread_ts=None)
        thread_channel, ts = step.thread
        return _post(api, thread_channel, render_note_reply(incident, entry, note), step, sent, out=out, thread_ts=ts)
    alert = alert_in(view, step.subject)
    message = notice_message(alert, view, dashboard_url)
    if step.kind == StepKind.UPDATE_NOTICE:
        api.update_message(*posted_root(sent), message)
        return replace(sent, digest=message_digest(message))
    return _post(api, channel, message, step, sent, out=out, thread_ts=None)


def _post(
    api: SlackApi,
    channel: str,
    message: SlackMessage,
    step: Step,
    sent: Delivery,
    *,
    out: Outbox,
    thread_ts: str | None,
) -> Delivery:
    """Post, unless an earlier post of the same message whose outcome was unknown is found first."""
    marker = step_marker(step.subject, step.entry)
    event_type = _event_type(step)
    since = pending_since(sent, marker)
    if since is not None:
        found = api.find_message(sent.channel or channel, event_type, marker, since - LOOKBACK, thread_ts)
        if found is not None:
            return _posted(sent, step, found, message, marker, now=out.clock())
    metadata = {"event_type": event_type, "event_payload": {"id": marker}}
    ref = api.post_message(channel, message, thread_ts, metadata=metadata)
    return _posted(sent, step, ref, message, marker, now=out.clock())


def _posted(
    sent: Delivery, step: Step, ref: SlackPostRef, message: SlackMessage, marker: str, *, now: datetime
) -> Delivery:
    pending = without(sent.pending, marker)
    if step.batch:
        return replace(batch_told(sent, step.batch), pending=pending, last_at=now)
    if step.entry is not None:
        return replace(sent, steps=[*sent.steps, step.entry.key], pending=pending, last_at=now)
    return replace(sent, channel=ref.channel, ts=ref.ts, digest=message_digest(message), pending=pending)


def _event_type(step: Step) -> str:
    if step.entry is not None:
        return METADATA_STEP
    return METADATA_NOTICE if step.kind == StepKind.POST_NOTICE else METADATA_INCIDENT


# --- Incoming webhook ----------------------------------------------------------------------------------------


def _webhook(hook: SlackHook, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
    link = out.dashboard_url
    if step.kind == StepKind.NOTE:
        incident, entry, note = noted(view, step)
        hook.post(render_note_message(incident, entry, note, dashboard_url=link))
        return replace(sent, steps=[*sent.steps, entry.key])
    if step.kind == StepKind.POST_STEP:
        incident = incident_in(view, step.subject)
        entry = required(step.entry, "a webhook step without its step")
        if step.batch:
            hook.post(render_fleet_steps(incident, step.batch, dashboard_url=link))
            return replace(batch_told(sent, step.batch), last_at=out.clock())
        hook.post(
            render_fleet_steps(incident, (entry,), dashboard_url=link)
            if incident.fleet
            else render_webhook_step(incident, entry, dashboard_url=link)
        )
        return replace(sent, steps=[*sent.steps, entry.key])
    hook.post(render_alert(alert_in(view, step.subject), dashboard_url=link))
    return replace(sent, steps=[*sent.steps, WEBHOOK_POSTED])


SLACK = SlackKind()
