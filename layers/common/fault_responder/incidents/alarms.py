"""The stack's CloudWatch alarms as incidents: an alarm is a record keyed by its ARN, with one check.

An alarm's state changes are facts like a health check's transitions (fault_responder.incidents.record), so the same
lifecycle applies: ALARM opens an incident, OK closes it, duplicates add nothing and the order of arrival does
not matter (each state carries its own timestamp). The check type says what kind of alarm it is, which decides
its fault class and severity. It is read from the alarm's name (`<stack name>.<what>`, as template.yaml names
them), never from its configuration: the name is part of the alarm's ARN, so an alarm's record has exactly one
check whatever its events say, and an edited alarm (or a forged configuration) cannot split its incident in two.

- `ALARM_GPU_TEMPERATURE` (TaskGPUTemperature): critical. A GPU past its limit throttles or shuts down, and
  nothing on the ECS side acts on temperature: a person must.
- `ALARM_GPU_RESTART_APP_XIDS` (TaskGPURestartAppXidCount): warning. NVIDIA's advice for these XIDs is to
  restart the application, not the host; it is an early sign, as the restart-the-application XIDs of health
  events are.
- `ALARM_RESPONDER_HEALTH` (the router's errors and throttles, the queues, NotificationsFailed, the resume
  workflow): critical. While it fires, faults may not page at all.
- `ALARM` (any other alarm that reaches the router): error, as an unknown fault is.

An event also tells the state the alarm left (`previousState`): when that was ALARM, the ALARM is recorded too,
so an alarm episode whose ALARM event was lost is still told, resolved, with its duration. INSUFFICIENT_DATA is
recorded (and shown as itself) only while the alarm is or was in ALARM: no data about an alarm that was not
firing (a new alarm's first state) is no news.

Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from fault_responder.core.domain import Classification, FaultClass, InstanceRef, Severity
from fault_responder.incidents.record import EventFacts, HealthFact, bounded_id, clip

if TYPE_CHECKING:
    from datetime import datetime

    from fault_responder.events.cloudwatch import AlarmState, AlarmStateChangeEvent

ALARM_CHECK_PREFIX = "ALARM"
GPU_TEMPERATURE = "ALARM_GPU_TEMPERATURE"
GPU_RESTART_APP_XIDS = "ALARM_GPU_RESTART_APP_XIDS"
RESPONDER_HEALTH = "ALARM_RESPONDER_HEALTH"
OTHER_ALARM = "ALARM"

KINDS_BY_NAME: dict[str, str] = {
    "gpu-temperature": GPU_TEMPERATURE,
    "gpu-restart-app-xids": GPU_RESTART_APP_XIDS,
    "router-errors": RESPONDER_HEALTH,
    "router-throttles": RESPONDER_HEALTH,
    "alert-queue-age": RESPONDER_HEALTH,
    "notifications-failed": RESPONDER_HEALTH,
    "alert-dlq-depth": RESPONDER_HEALTH,
    "rule-target-dlq-depth": RESPONDER_HEALTH,
    "resume-trigger-dlq-depth": RESPONDER_HEALTH,
    "resume-workflow-failed": RESPONDER_HEALTH,
    "closure-pending": RESPONDER_HEALTH,
}
"""The `<what>` of each alarm template.yaml creates (tests/unit/test_template_alarms.py keeps them in step)."""
MAX_DEDUP_KEY = 255

_CLASSES: dict[str, tuple[FaultClass, Severity, str]] = {
    GPU_TEMPERATURE: (FaultClass.GPU_TEMPERATURE, Severity.CRITICAL, "GPU temperature above the alarm threshold"),
    GPU_RESTART_APP_XIDS: (
        FaultClass.GPU_RESTART_APP_XIDS,
        Severity.WARNING,
        "GPU tasks report restart-the-application XIDs",
    ),
    RESPONDER_HEALTH: (FaultClass.RESPONDER_HEALTH, Severity.CRITICAL, "GPU Fault Responder is unhealthy"),
    OTHER_ALARM: (FaultClass.ALARM, Severity.ERROR, "CloudWatch alarm"),
}


def is_alarm_check(check_type: str) -> bool:
    return check_type == OTHER_ALARM or check_type.startswith(f"{ALARM_CHECK_PREFIX}_")


def alarm_check_type(alarm_name: str) -> str:
    """What kind of alarm this is, from the `<what>` after the stack's name and its dot; any other is `ALARM`."""
    _, dot, what = alarm_name.rpartition(".")
    return KINDS_BY_NAME.get(what, OTHER_ALARM) if dot else OTHER_ALARM


def alarm_instance(event: AlarmStateChangeEvent) -> InstanceRef:
    """The alarm stands where an instance would; its cluster is the ClusterName dimension, when it has one."""
    cluster = next(
        (
            metric.metric_stat.metric.dimensions["ClusterName"]
            for metric in (event.detail.configuration.metrics if event.detail.configuration else [])
            if metric.metric_stat is not None and metric.metric_stat.metric.dimensions.get("ClusterName")
        ),
        None,
    )
    region = bounded_id(event.region, 64)
    account = bounded_id(event.account, 64)
    cluster_arn = f"arn:aws:ecs:{region}:{account}:cluster/{bounded_id(cluster, 255)}" if cluster else ""
    return InstanceRef(
        region=region,
        account=account,
        cluster_arn=cluster_arn,
        container_instance_arn=bounded_id(event.alarm_arn, 1024),
        ec2_instance_id=None,
        capacity_provider=None,
    )


def alarm_facts(event: AlarmStateChangeEvent, event_id: str) -> EventFacts | None:
    """The alarm's states this event tells of: the state it entered, and an ALARM it left."""
    check = alarm_check_type(event.detail.alarm_name)
    state, previous = event.detail.state, event.detail.previous_state
    was_alarm = previous is not None and previous.value == "ALARM"
    facts: list[HealthFact] = []
    if was_alarm and previous is not None and previous.timestamp is not None:
        # (An ALARM left at an unknown time cannot be placed among the alarm's states: only the state entered is told.)
        facts.append(_fact(check, previous, previous.timestamp, event_id))
    if state.value != "INSUFFICIENT_DATA" or was_alarm:
        # A state without a readable timestamp (read as absent, fault_responder.events.cloudwatch) took place when the
        # event says.
        facts.append(_fact(check, state, state.timestamp or event.time, event_id))
    if not facts:
        return None
    return EventFacts(event_id, alarm_instance(event), health=tuple(facts))


def _fact(check: str, state: AlarmState, at: datetime, event_id: str) -> HealthFact:
    return HealthFact(
        check_type=check,
        status=bounded_id(state.value, 64),
        at=at,
        event_id=event_id,
        reason=clip(state.reason or None),
    )


def classify_alarm(check_type: str, status: str, reason: str | None) -> Classification:
    """An alarm state as a fault class and a severity. Never raises: an unknown state is shown as itself."""
    fault_class, severity, title = _CLASSES.get(check_type, _CLASSES[OTHER_ALARM])
    if status == "OK":
        return Classification(FaultClass.RECOVERY, Severity.INFO, f"{title}: OK again", reason=reason)
    if status == "INSUFFICIENT_DATA":
        return Classification(
            FaultClass.INSUFFICIENT_DATA, Severity.WARNING, f"{title}: the alarm has insufficient data", reason=reason
        )
    if status != "ALARM":
        return Classification(FaultClass.UNKNOWN_CHECK, Severity.ERROR, f"{title}: alarm state {status}", reason=reason)
    return Classification(fault_class, severity, title, reason=reason)


def alarm_fingerprint(instance: InstanceRef) -> str:
    """`cloudwatch-alarm/REGION/NAME`: one PagerDuty dedup_key per alarm, for every episode of it."""
    value = f"cloudwatch-alarm/{instance.region}/{instance.container_instance_id}"
    if len(value) <= MAX_DEDUP_KEY:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest}"
