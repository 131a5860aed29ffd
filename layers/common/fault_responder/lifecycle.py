"""The incident lifecycle: how each ECS event changes the incidents on its container instance.

Pure functions over the current state. ECS delivers at least once and out of order, so:
- an event already in an incident's timeline is not applied twice (a retry re-derives what to send);
- a health transition older than what the incident holds is recorded as stale and changes nothing;
- an instance state change whose `detail.version` is not newer than the last one seen is ignored.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from fault_responder.classify import classify_health_check
from fault_responder.domain import (
    Alert,
    Classification,
    DrainAttribution,
    DrainCause,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    InstanceState,
    Notification,
    NotificationAction,
    Severity,
    TimelineEntry,
)
from fault_responder.drain import attribute_drain
from fault_responder.models.events import (
    DRAINING_STOP_REASON,
    INFRASTRUCTURE_STOP_CODES,
    HealthChangeEvent,
    HealthCheck,
    InstanceStateEvent,
    TaskStateEvent,
)

MAX_TIMELINE = 100
MAX_DEDUP_KEY = 255


@dataclass(frozen=True, slots=True)
class Settings:
    drain_window: timedelta = timedelta(minutes=60)


@dataclass(slots=True)
class Outcome:
    """What one event changes: incidents and instance state to save, and what to tell people."""

    incidents: list[Incident] = field(default_factory=list)
    instance_state: InstanceState | None = None
    notifications: list[Notification] = field(default_factory=list)
    ignored: str | None = None
    """Why the event changed nothing, for the log and the metrics."""


def fingerprint(instance: InstanceRef, check_type: str) -> str:
    """cluster/container-instance/check-type: stable, readable, and a valid PagerDuty dedup_key."""
    value = f"{instance.cluster_name}/{instance.container_instance_id}/{check_type}"
    if len(value) <= MAX_DEDUP_KEY:
        return value
    digest = hashlib.sha256(value.encode()).hexdigest()[:32]
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest}"


# --- Health changes ------------------------------------------------------------------------------


def health_instance(event: HealthChangeEvent) -> InstanceRef:
    """The container instance a health change is about."""
    detail = event.detail
    return InstanceRef(
        region=event.region,
        account=event.account,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=detail.capacity_provider_name,
    )


def on_health_change(event: HealthChangeEvent, incidents: dict[str, Incident], state: InstanceState) -> Outcome:
    detail = event.detail
    instance = health_instance(event)
    checks = list(detail.health_checks)
    if not checks and detail.overall_status != "OK":
        # IMPAIRED with no check listed: still alert, labelled unknown.
        checks = [HealthCheck(type="UNKNOWN", status=detail.overall_status)]
    outcome = Outcome(instance_state=state)
    for check in checks:
        step = _HealthStep(event, instance, check, incidents.get(check.type), outcome)
        step.apply(state)
    if not outcome.incidents and not outcome.notifications:
        outcome.ignored = outcome.ignored or "no health transition to act on"
    return outcome


@dataclass(slots=True)
class _HealthStep:
    """One health check result of one event, applied to the incident of its fingerprint."""

    event: HealthChangeEvent
    instance: InstanceRef
    check: HealthCheck
    current: Incident | None
    outcome: Outcome

    @property
    def at(self) -> datetime:
        return self.check.last_status_change or self.event.time

    def apply(self, state: InstanceState) -> None:
        current, check = self.current, self.check
        if current is not None and _already_applied(current, self.event.id):
            self.outcome.notifications.extend(_replay_notifications(current, self.event.id))
            return
        if check.status == "INITIALIZING":
            self.outcome.ignored = f"{check.type} is INITIALIZING"
            return
        if current is not None and current.last_status_change is not None and self.at < current.last_status_change:
            text = f"{check.type} {check.status} from {self.at:%H:%M:%S}Z arrived after a newer transition; ignored"
            _record(self.outcome, current, self._entry("STALE", text, None, stale=True))
            self.outcome.ignored = "stale health transition"
            return
        classification = classify_health_check(check)
        if check.status == "OK":
            self._recover(classification)
            return
        state.last_impaired_at = self.at
        state.last_impaired_label = f"XID {classification.xid}" if classification.xid is not None else check.type
        if current is None or not current.is_open:
            self._open(classification)
        else:
            self._reassess(current, classification)

    def _open(self, classification: Classification) -> None:
        previous = self.current
        reopened = previous is not None and previous.classification.fault_class != FaultClass.RECOVERY
        text = f"{self.check.type} {self.check.status}: {classification.title}"
        incident = Incident(
            fingerprint=fingerprint(self.instance, self.check.type),
            instance=self.instance,
            check_type=self.check.type,
            status="OPEN",
            classification=classification,
            opened_at=self.at,
            phase="IMPAIRED",
            last_status_change=self.at,
            version=previous.version if previous else 0,
        )
        if reopened and previous is not None:
            # Same fingerprint, so the same PagerDuty dedup_key; Slack gets a fresh root message.
            incident.opened_count = previous.opened_count + 1
            incident.timeline = previous.timeline
            text = f"Re-opened: {text}"
        _record(self.outcome, incident, self._entry("IMPAIRED", text, NotificationAction.OPEN))

    def _reassess(self, current: Incident, classification: Classification) -> None:
        """A newer IMPAIRED on an open incident: a new reason is news; a higher severity pages again."""
        current.last_status_change = self.at
        if classification == current.classification:
            self.outcome.incidents.append(current)
            self.outcome.ignored = "incident already open for this fault"
            return
        escalated = classification.severity.rank > current.classification.severity.rank
        text = f"{self.check.type} now reports {classification.title}"
        if escalated:
            text += f" (severity {current.classification.severity} → {classification.severity})"
            current.classification = classification
        _record(self.outcome, current, self._entry("IMPAIRED", text, NotificationAction.UPDATE, page=escalated))

    def _recover(self, classification: Classification) -> None:
        current = self.current
        if current is None or not current.is_open:
            # Remember the transition, so an IMPAIRED older than it that arrives late is seen as stale.
            marker = current or Incident(
                fingerprint=fingerprint(self.instance, self.check.type),
                instance=self.instance,
                check_type=self.check.type,
                status="CLOSED",
                classification=classification,
                opened_at=self.at,
                phase="OK",
                closed_at=self.at,
            )
            marker.last_status_change = self.at
            self.outcome.incidents.append(marker)
            self.outcome.ignored = f"{self.check.type} OK with no open incident"
            return
        _close(current, self.at, f"{self.check.type} health check OK")
        current.last_status_change = self.at
        text = f"{self.check.type} is OK again"
        _record(self.outcome, current, self._entry("RECOVERED", text, NotificationAction.RESOLVE))

    def _entry(
        self, phase: str, text: str, action: NotificationAction | None, *, page: bool = True, stale: bool = False
    ) -> TimelineEntry:
        return TimelineEntry(self.event.time, self.event.id, phase, text, stale=stale, action=action, page=page)


# --- Instance state changes ----------------------------------------------------------------------


def on_instance_state(
    event: InstanceStateEvent,
    incidents: dict[str, Incident],
    state: InstanceState,
    settings: Settings,
) -> Outcome:
    detail = event.detail
    open_incidents = [i for i in incidents.values() if i.is_open]
    applied = [i for i in incidents.values() if _already_applied(i, event.id)]
    if applied:
        return Outcome(notifications=[n for i in applied for n in _replay_notifications(i, event.id)])
    if _is_stale_state(event, state):
        return Outcome(ignored=f"stale instance state change (version {detail.version} <= {state.status_version})")
    instance = _instance_ref(
        event,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=detail.capacity_provider_name,
        open_incidents=open_incidents,
    )
    state.status = detail.status
    state.status_version = detail.version
    state.status_at = detail.updated_at or event.time
    outcome = Outcome(instance_state=state)
    reason = detail.drain_reason or detail.status_reason
    if detail.status == "DRAINING":
        drain = attribute_drain(
            at=event.time, reason=reason, state=state, incidents=incidents.values(), window=settings.drain_window
        )
        _drain(event, instance, drain, open_incidents, outcome)
    elif detail.status in ("DEREGISTERING", "INACTIVE"):
        _leave(event, detail.status, open_incidents, outcome)
    elif detail.status == "REGISTRATION_FAILED":
        outcome.notifications.append(
            _standalone(
                event,
                kind=EventKind.INSTANCE_STATE,
                instance=instance,
                severity=Severity.WARNING,
                fault_class=FaultClass.INSTANCE_LIFECYCLE,
                title="Container instance registration failed",
                text=reason or "ECS gave no reason",
            )
        )
    else:
        outcome.ignored = f"instance status {detail.status} needs no action"
    return outcome


def _drain(
    event: InstanceStateEvent,
    instance: InstanceRef,
    drain: DrainAttribution,
    open_incidents: list[Incident],
    outcome: Outcome,
) -> None:
    if not open_incidents:
        severity = Severity.WARNING if drain.cause == DrainCause.ECS_AUTO_REPAIR else Severity.INFO
        outcome.notifications.append(
            _standalone(
                event,
                kind=EventKind.INSTANCE_STATE,
                instance=instance,
                severity=severity,
                fault_class=FaultClass.INSTANCE_LIFECYCLE,
                title="Container instance draining",
                text=f"Draining: {drain.label}",
                drain=drain,
            )
        )
        return
    for incident in open_incidents:
        incident.phase = "DRAINING"
        incident.drain = drain
        text = "Instance set to DRAINING"
        _record(
            outcome, incident, TimelineEntry(event.time, event.id, "DRAINING", text, action=NotificationAction.UPDATE)
        )


def _leave(event: InstanceStateEvent, status: str, open_incidents: list[Incident], outcome: Outcome) -> None:
    if not open_incidents:
        outcome.ignored = f"{status} with no open incident"
        return
    for incident in open_incidents:
        incident.phase = status
        if status == "INACTIVE":
            _close(incident, event.time, "the instance left the cluster")
            text, action, page = "Instance left the cluster (INACTIVE)", NotificationAction.RESOLVE, True
        else:
            text, action, page = "Instance DEREGISTERING", NotificationAction.UPDATE, False
        _record(outcome, incident, TimelineEntry(event.time, event.id, status, text, action=action, page=page))


# --- Task state changes --------------------------------------------------------------------------


def on_task_stopped(event: TaskStateEvent, incidents: dict[str, Incident]) -> Outcome:
    detail = event.detail
    drained = (detail.stopped_reason or "").startswith(DRAINING_STOP_REASON)
    if detail.last_status != "STOPPED" or not (detail.stop_code in INFRASTRUCTURE_STOP_CODES or drained):
        return Outcome(ignored="task not stopped by the infrastructure")
    applied = [i for i in incidents.values() if _already_applied(i, event.id)]
    if applied:
        return Outcome(notifications=[n for i in applied for n in _replay_notifications(i, event.id)])
    open_incidents = [i for i in incidents.values() if i.is_open]
    task_id = detail.task_arn.rsplit("/", 1)[-1]
    family = (detail.group or "").removeprefix("family:") or "task"
    why = detail.stopped_reason or "no reason given"
    code = f" [{detail.stop_code}]" if detail.stop_code else ""
    text = f"Task {family} ({task_id}) stopped: {why}{code}"
    if open_incidents:
        outcome = Outcome()
        for incident in open_incidents:
            entry = TimelineEntry(
                event.time, event.id, "TASK_STOPPED", text, action=NotificationAction.UPDATE, page=False
            )
            _record(outcome, incident, entry)
        return outcome
    if drained:
        # The drain itself was announced; one message per drained task would be noise.
        return Outcome(ignored="task stopped by a drain with no open incident")
    instance = _instance_ref(
        event,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn or "",
        ec2_instance_id=None,
        capacity_provider=detail.capacity_provider_name,
        open_incidents=[],
    )
    severity = Severity.WARNING if detail.stop_code == "InfrastructureHealth" else Severity.INFO
    return Outcome(
        notifications=[
            _standalone(
                event,
                kind=EventKind.TASK_STOPPED,
                instance=instance,
                severity=severity,
                fault_class=FaultClass.TASK_INTERRUPTION,
                title=f"Task stopped by the infrastructure ({detail.stop_code})",
                text=text,
            )
        ]
    )


# --- Helpers -------------------------------------------------------------------------------------


def _instance_ref(
    event: InstanceStateEvent | TaskStateEvent,
    *,
    cluster_arn: str,
    container_instance_arn: str,
    ec2_instance_id: str | None,
    capacity_provider: str | None,
    open_incidents: list[Incident],
) -> InstanceRef:
    known = open_incidents[0].instance if open_incidents else None
    return InstanceRef(
        region=event.region,
        account=event.account,
        cluster_arn=cluster_arn,
        container_instance_arn=container_instance_arn,
        ec2_instance_id=ec2_instance_id or (known.ec2_instance_id if known else None),
        capacity_provider=capacity_provider or (known.capacity_provider if known else None),
    )


def _standalone(
    event: InstanceStateEvent | TaskStateEvent,
    *,
    kind: EventKind,
    instance: InstanceRef,
    severity: Severity,
    fault_class: FaultClass,
    title: str,
    text: str,
    drain: DrainAttribution | None = None,
) -> Notification:
    alert = Alert(
        event_id=event.id,
        kind=kind,
        instance=instance,
        severity=severity,
        title=title,
        text=text,
        at=event.time,
        fault_class=fault_class,
        drain=drain,
    )
    return Notification(NotificationAction.STANDALONE, event.id, alert=alert)


def _is_stale_state(event: InstanceStateEvent, state: InstanceState) -> bool:
    version = event.detail.version
    if version is not None and state.status_version is not None:
        return version <= state.status_version
    return state.status_at is not None and event.time < state.status_at


def _close(incident: Incident, at: datetime, reason: str) -> None:
    incident.status = "CLOSED"
    incident.phase = "RESOLVED"
    incident.closed_at = at
    incident.close_reason = reason


def _record(outcome: Outcome, incident: Incident, entry: TimelineEntry) -> None:
    """Append a step to the incident's timeline, save it, and notify if the step says so."""
    incident.timeline = [*incident.timeline, entry][-MAX_TIMELINE:]
    outcome.incidents.append(incident)
    if entry.action in _NOTIFYING:
        outcome.notifications.append(_notification(incident, entry))


def _notification(incident: Incident, entry: TimelineEntry) -> Notification:
    assert entry.action is not None
    return Notification(entry.action, entry.event_id, incident=incident, entry=entry, page=entry.page)


def _already_applied(incident: Incident, event_id: str) -> bool:
    return any(entry.event_id == event_id for entry in incident.timeline)


def _replay_notifications(incident: Incident, event_id: str) -> list[Notification]:
    """A retried event: send again what it produced (the delivery ledger skips what already went out)."""
    return [
        replace(_notification(incident, entry), retry=True)
        for entry in incident.timeline
        if entry.event_id == event_id and entry.action in _NOTIFYING
    ]


_NOTIFYING = frozenset({NotificationAction.OPEN, NotificationAction.UPDATE, NotificationAction.RESOLVE})
