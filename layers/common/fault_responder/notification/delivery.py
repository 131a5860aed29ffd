"""What each receiver still needs to be told, and telling it: where a page is sent.

Delivery is a reconciliation, not a reaction to one event. For one receiver of one instance, `plan` compares
what the derived incidents and notices say now with what that receiver was already told (the record's
deliveries) and lists the steps that close the gap: post a root, reply in its thread, update it, trigger or
resolve a PagerDuty alert, correct a notice in place. A `Courier` performs one step and returns what the
receiver now knows; the service records it after every step, under the receiver's lease, so a retried or
concurrent worker continues where the last one stopped instead of starting over.

Never twice: a Slack post whose outcome is unknown (a read timeout, a worker that died) is marked pending and
looked for, by the metadata every message carries, before anything is posted again. PagerDuty events are
idempotent per dedup key, and per receiver they go out in order (resolves of past episodes before the trigger
of a new one), because one worker at a time holds the receiver's lease.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import DeliveryError, ReceiverChannels
from fault_responder.notification.receivers.kind import ReceiverKind, Work
from fault_responder.notification.receivers.pagerduty.kind import ChangeEvents, PagerDuty, PagerDutyChannels
from fault_responder.notification.receivers.pagerduty.plan import pagerduty_subject
from fault_responder.notification.receivers.registry import kind_of
from fault_responder.notification.receivers.slack.kind import SlackApi, SlackChannels, SlackHook
from fault_responder.notification.receivers.steps import (
    FLEET_BATCH,
    FLEET_BATCH_WAIT,
    LOOKBACK,
    Step,
    StepKind,
    Told,
    View,
    as_seen_by,
    held_notes,
    pending_since,
    with_pending,
    without_pending,
)
from fault_responder.notification.receivers.timeline import replies
from fault_responder.routing.router import Receiver

__all__ = [
    "FLEET_BATCH",
    "FLEET_BATCH_WAIT",
    "LOOKBACK",
    "ChangeEvents",
    "Channels",
    "Courier",
    "PagerDuty",
    "SlackApi",
    "SlackHook",
    "Step",
    "StepKind",
    "Told",
    "View",
    "as_seen_by",
    "held_notes",
    "pagerduty_subject",
    "pending_since",
    "plan",
    "replies",
    "with_pending",
    "without_pending",
]


def plan(name: str, receiver: Receiver, view: View, record: Told, *, dashboard_url: str | None = None) -> list[Step]:
    """The steps that bring receiver `name` up to date with the view, in the order they must go out (its kind's
    plan). Root messages are compared as the Courier renders them: with the same `dashboard_url`."""
    incidents = [
        incident
        for incident in view.incidents
        if name in incident.receivers or (name, incident.id) in record.deliveries
    ]
    alerts = [alert for alert in view.alerts if name in alert.receivers or (name, alert.key) in record.deliveries]
    work = Work(incidents, alerts, record, view, dashboard_url)
    return kind_of(receiver).plan(name, receiver.target, work)


class Channels(SlackChannels, PagerDutyChannels, ReceiverChannels, Protocol):
    """Clients with their secrets resolved; fetched lazily so an unused channel needs no secret. What Slack and
    PagerDuty ask of them (SlackChannels, PagerDutyChannels), the port every other kind's own client sends through
    (ReceiverChannels: its secret by kind and a JSON POST), and reading a secret again."""

    def refresh(self, service: str) -> None:
        """Read the service's secret again (it may have been rotated since it was cached)."""
        ...


class Courier:
    """Performs one step for one receiver (through its kind) and returns the receiver's delivery record afterwards.
    Every message that stands at the top of a channel (a root, a notice, a webhook message) links to
    `dashboard_url`, if any."""

    def __init__(self, channels: Channels, clock: Callable[[], datetime], dashboard_url: str | None = None) -> None:
        self.channels = channels
        self.clock = clock
        self.dashboard_url = dashboard_url or None

    def perform(self, name: str, receiver: Receiver, step: Step, view: View, sent: Delivery) -> Delivery:
        kind = kind_of(receiver)
        target = receiver.target
        return self._once_more_if_rotated(kind, lambda: kind.perform(target, step, view, sent, self))

    def _once_more_if_rotated(self, kind: ReceiverKind[Any], attempt: Callable[[], Delivery]) -> Delivery:
        """A revoked token or an unknown routing key may be a secret rotated since it was cached: read the
        secret again and try once more before failing."""
        try:
            return attempt()
        except DeliveryError as error:
            if not kind.is_auth_failure(error):
                raise
        self.channels.refresh(kind.key)
        return attempt()
