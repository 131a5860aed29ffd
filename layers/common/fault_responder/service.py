"""The alert router's use case: one ECS event in, incidents updated, the right people told."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fault_responder import lifecycle
from fault_responder.dispatch import Dispatcher, NotificationFailedError
from fault_responder.domain import Incident, InstanceState, Notification, NotificationAction
from fault_responder.models.events import EcsEvent, HealthChangeEvent, InstanceStateEvent, parse_ecs_event
from fault_responder.routing import Router, context_for
from fault_responder.store import IncidentStore

Counter = Callable[[str, str, str], None]
"""count(metric, dimension name, dimension value)."""


@dataclass(frozen=True, slots=True)
class EventResult:
    event_id: str
    kind: str
    ignored: str | None
    notifications: list[dict[str, Any]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "event_id": self.event_id,
            "kind": self.kind,
            "ignored": self.ignored,
            "notifications": self.notifications,
        }


class AlertService:
    def __init__(
        self,
        store: IncidentStore,
        router: Router,
        dispatcher: Dispatcher,
        settings: lifecycle.Settings,
        count: Counter = lambda metric, dimension, value: None,
    ) -> None:
        self.store = store
        self.router = router
        self.dispatcher = dispatcher
        self.settings = settings
        self.count = count

    def handle(self, raw: dict[str, Any]) -> dict[str, Any]:
        """Process one EventBridge envelope. Raises on malformed input and on failed deliveries."""
        event = parse_ecs_event(raw)
        kind = _kind(event)
        self.count("EventsReceived", "Kind", kind)
        outcome = self._apply(event)
        if outcome.ignored:
            self.count("EventsIgnored", "Kind", kind)
        drain = _drain_cause(outcome)
        if drain is not None:
            self.count("DrainAttributions", "Attribution", drain)
        for notification in outcome.notifications:
            self._route(notification)
        self._save(outcome)
        threads = {id(n.incident): len(n.incident.slack_threads) for n in outcome.notifications if n.incident}
        failures = []
        sent: list[dict[str, Any]] = []
        for notification in outcome.notifications:
            receivers = self._receivers(notification)
            failed = self.dispatcher.deliver(notification, receivers)
            failures.extend(failed)
            sent.append(
                {"action": notification.action.value, "receivers": receivers, "failed": [f.receiver for f in failed]}
            )
        # Slack root messages posted just now are remembered even when another receiver failed.
        for notification in outcome.notifications:
            incident = notification.incident
            if incident is not None and len(incident.slack_threads) != threads.get(id(incident)):
                self.store.save_incident(incident)
                threads[id(incident)] = len(incident.slack_threads)
        if failures:
            raise NotificationFailedError(failures)
        return EventResult(event.id, kind, outcome.ignored, sent).as_dict()

    def _apply(self, event: EcsEvent) -> lifecycle.Outcome:
        arn = _container_instance_arn(event)
        if arn is None:
            incidents: dict[str, Incident] = {}
            state = InstanceState("")
        else:
            incidents, state = self.store.load(arn)
        if isinstance(event, HealthChangeEvent):
            return lifecycle.on_health_change(event, incidents, state)
        if isinstance(event, InstanceStateEvent):
            return lifecycle.on_instance_state(event, incidents, state, self.settings)
        return lifecycle.on_task_stopped(event, incidents)

    def _route(self, notification: Notification) -> None:
        """Incidents are routed when they open (and re-routed when they escalate); notices every time."""
        incident = notification.incident
        if incident is None:
            return
        first = notification.action == NotificationAction.OPEN or not incident.receivers
        if first or notification.page:
            decision = self.router.route(context_for(notification))
            if first:
                incident.route = ",".join(decision.routes) or None
            incident.receivers = [*incident.receivers, *(r for r in decision.receivers if r not in incident.receivers)]

    def _receivers(self, notification: Notification) -> list[str]:
        if notification.incident is not None:
            return list(notification.incident.receivers)
        return list(self.router.route(context_for(notification)).receivers)

    def _save(self, outcome: lifecycle.Outcome) -> None:
        seen: set[int] = set()
        for incident in outcome.incidents:
            if id(incident) not in seen:
                seen.add(id(incident))
                self.store.save_incident(incident)
        if outcome.instance_state is not None and outcome.instance_state.container_instance_arn:
            self.store.save_instance_state(outcome.instance_state)


def _kind(event: EcsEvent) -> str:
    if isinstance(event, HealthChangeEvent):
        return "health_change"
    if isinstance(event, InstanceStateEvent):
        return "instance_state"
    return "task_state"


def _drain_cause(outcome: lifecycle.Outcome) -> str | None:
    for notification in outcome.notifications:
        drain = notification.alert.drain if notification.alert else None
        if notification.entry is not None and notification.entry.phase == "DRAINING" and notification.incident:
            drain = notification.incident.drain
        if drain is not None:
            return drain.cause.value
    return None


def _container_instance_arn(event: EcsEvent) -> str | None:
    return event.detail.container_instance_arn or None
