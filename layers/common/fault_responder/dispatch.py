"""Delivering one notification to its receivers: where a page is sent.

Each delivery step (event, receiver, step) is recorded in a ledger once it succeeded, so a retried
event sends only what did not go out the first time. Every receiver is tried even when another one
fails; the failures are raised together afterwards, so the record is retried and, after the receive
limit, dead-lettered — never dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from fault_responder.adapters.http import DeliveryError
from fault_responder.adapters.slack import SlackPostRef
from fault_responder.domain import Incident, Notification, NotificationAction, SlackThread
from fault_responder.render.pagerduty import render_alert_trigger, render_resolve, render_trigger
from fault_responder.render.slack import (
    SlackMessage,
    render_alert,
    render_incident_root,
    render_timeline_reply,
    render_webhook_message,
)
from fault_responder.routing import Receiver


class SlackApi(Protocol):
    def post_message(self, channel: str, message: SlackMessage, thread_ts: str | None = None) -> SlackPostRef: ...

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None: ...


class SlackHook(Protocol):
    def post(self, message: SlackMessage) -> None: ...


class PagerDuty(Protocol):
    def send(self, event: dict[str, object]) -> str: ...


class Channels(Protocol):
    """Clients with their secrets resolved; fetched lazily so an unused channel needs no secret."""

    def slack_api(self) -> SlackApi: ...

    def slack_webhook(self, name: str) -> SlackHook: ...

    def pagerduty(self) -> PagerDuty: ...

    def routing_key(self, service: str) -> str: ...


class Ledger(Protocol):
    def delivered(self, key: str) -> bool: ...

    def mark_delivered(self, key: str) -> None: ...


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    receiver: str
    channel: str
    error: DeliveryError


class NotificationFailedError(Exception):
    """Some receivers could not be reached after retries; the event must be retried."""

    def __init__(self, failures: list[DeliveryFailure]) -> None:
        self.failures = failures
        summary = "; ".join(f"{f.receiver} ({f.channel}): {f.error}" for f in failures)
        super().__init__(f"{len(failures)} delivery failure(s): {summary}")


class Dispatcher:
    def __init__(
        self,
        receivers: dict[str, Receiver],
        channels: Channels,
        ledger: Ledger,
        on_delivery: Callable[[str, bool], None] = lambda channel, ok: None,
    ) -> None:
        self.receivers = receivers
        self.channels = channels
        self.ledger = ledger
        self.on_delivery = on_delivery

    def deliver(self, notification: Notification, receiver_names: list[str]) -> list[DeliveryFailure]:
        failures: list[DeliveryFailure] = []
        for name in receiver_names:
            receiver = self.receivers.get(name)
            if receiver is None:
                continue
            channel = "slack" if receiver.slack is not None else "pagerduty"
            try:
                if receiver.slack is not None and receiver.slack.channel is not None:
                    self._slack_bot(notification, name, receiver.slack.channel)
                elif receiver.slack is not None and receiver.slack.webhook is not None:
                    self._slack_webhook(notification, name, receiver.slack.webhook)
                elif receiver.pagerduty is not None:
                    self._pagerduty(notification, name, receiver.pagerduty.service)
            except DeliveryError as error:
                self.on_delivery(channel, False)
                failures.append(DeliveryFailure(name, channel, error))
        return failures

    def _step(
        self, notification: Notification, receiver: str, step: str, channel: str, send: Callable[[], None]
    ) -> None:
        key = f"{notification.event_id}#{receiver}#{step}"
        if self.ledger.delivered(key):
            return
        send()
        self.ledger.mark_delivered(key)
        self.on_delivery(channel, True)

    def _slack_bot(self, notification: Notification, receiver: str, channel: str) -> None:
        api = self.channels.slack_api()
        if notification.alert is not None:
            message = render_alert(notification.alert)
            self._step(notification, receiver, "post", "slack", lambda: _discard(api.post_message(channel, message)))
            return
        incident = notification.incident
        assert incident is not None and notification.entry is not None
        thread = _thread_for(incident, receiver)
        if thread is None:
            # First message for this incident on this receiver: the root shows the current status.
            ref = api.post_message(channel, render_incident_root(incident))
            thread = SlackThread(receiver=receiver, channel=ref.channel, ts=ref.ts)
            incident.slack_threads.append(thread)
            self.on_delivery("slack", True)
            if notification.action == NotificationAction.OPEN:
                return
        elif notification.action == NotificationAction.OPEN:
            return  # the root went out on an earlier attempt of this event
        entry = notification.entry
        reply = render_timeline_reply(incident, entry)
        self._step(
            notification,
            receiver,
            "reply",
            "slack",
            lambda: _discard(api.post_message(thread.channel, reply, thread.ts)),
        )
        root = render_incident_root(incident)
        self._step(
            notification, receiver, "update", "slack", lambda: api.update_message(thread.channel, thread.ts, root)
        )

    def _slack_webhook(self, notification: Notification, receiver: str, webhook: str) -> None:
        hook = self.channels.slack_webhook(webhook)
        message = render_alert(notification.alert) if notification.alert else render_webhook_message(notification)
        self._step(notification, receiver, "post", "slack", lambda: hook.post(message))

    def _pagerduty(self, notification: Notification, receiver: str, service: str) -> None:
        if notification.action == NotificationAction.UPDATE and not notification.page:
            return
        key = self.channels.routing_key(service)
        events = self.channels.pagerduty()
        if notification.alert is not None:
            alert = notification.alert
            dedup_key = f"{alert.kind.value}/{alert.instance.cluster_name}/{alert.event_id}"
            event = render_alert_trigger(alert, key, dedup_key)
        else:
            incident = notification.incident
            assert incident is not None
            resolve = notification.action == NotificationAction.RESOLVE
            event = render_resolve(incident, key) if resolve else render_trigger(incident, key)
        step = str(event["event_action"])
        self._step(notification, receiver, step, "pagerduty", lambda: _discard(events.send(event)))


def _thread_for(incident: Incident, receiver: str) -> SlackThread | None:
    return next((thread for thread in incident.slack_threads if thread.receiver == receiver), None)


def _discard(_: object) -> None:
    return None
