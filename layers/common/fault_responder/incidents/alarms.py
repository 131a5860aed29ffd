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

A multi time series alarm (a Metrics Insights query with GROUP BY: both GPU alarms, one series per cluster) also
sends a "CloudWatch Alarm Contributor State Change" for each series that changes state. Each contributor is a
record of its own, keyed by the alarm's ARN and the contributor's id (CONTRIBUTOR_MARK between them), with the
alarm's check: so each cluster in ALARM is an incident of its own, its OK resolves that one only, and contributors
never merge with each other nor with the alarm's own record. Its `cluster` is the contributor's `ClusterName`
attribute, and its title names the cluster, the value that crossed the threshold and the threshold
(contributor_title). A contributor event carries no previous state, so an OK of a contributor never seen is no news.
The alarm's own ALARM of such an alarm (PER_CONTRIBUTOR) is recorded but told to no one (told_by_contributors):
its contributors are told, each with its cluster, and one fault is not paged twice.

Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import TYPE_CHECKING

from fault_responder.core.domain import (
    CONTRIBUTOR_MARK,
    Classification,
    ContributorReading,
    FaultClass,
    InstanceRef,
    Severity,
)
from fault_responder.incidents.record import EventFacts, HealthFact, bounded_id, clip

if TYPE_CHECKING:
    from datetime import datetime

    from fault_responder.events.cloudwatch import (
        AlarmContributorStateChangeEvent,
        AlarmEvent,
        AlarmState,
        AlarmStateChangeEvent,
    )

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
PER_CONTRIBUTOR = frozenset({GPU_TEMPERATURE, GPU_RESTART_APP_XIDS})
"""The kinds of alarm template.yaml makes Metrics Insights GROUP BY queries (tests/unit/test_template_alarms.py
checks it): their contributors are the incidents, the alarm's own ALARM is recorded and told to no one."""
MAX_DEDUP_KEY = 255
MAX_ATTRIBUTES = 10
"""A contributor's attributes kept on its record and shown (CloudWatch allows 150): the first, by name."""
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 256
MAX_CLUSTER_NAME = 255
_UNITS = {GPU_TEMPERATURE: " °C"}
_SUBJECTS = {GPU_TEMPERATURE: "GPU temperature", GPU_RESTART_APP_XIDS: "GPU restart-the-application XIDs"}
_NUMBER = r"(-?\d{1,15}(?:\.\d{1,15})?(?:[eE][+-]?\d{1,3})?)"
_CROSSED = re.compile(r"most recent datapoint which crossed the threshold: \[\s*" + _NUMBER + r"[\s(\]]")
_DATAPOINT = re.compile(r"datapoints? \[\s*" + _NUMBER + r"[\s(\],]")
_THRESHOLD = re.compile(r"the threshold \(\s*" + _NUMBER + r"\s*\)")

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
    return _alarm_ref(event, cluster, bounded_id(event.alarm_arn, 1024))


def contributor_instance(event: AlarmContributorStateChangeEvent) -> InstanceRef:
    """One time series of the alarm: its record is the alarm's ARN and the contributor's id; its cluster is the
    `ClusterName` attribute; its attributes are kept bounded (the first MAX_ATTRIBUTES by name, each clipped)."""
    contributor = event.detail.alarm_contributor
    attributes = tuple(
        (clip(key, MAX_ATTRIBUTE_KEY) or "", clip(value, MAX_ATTRIBUTE_VALUE) or "")
        for key, value in sorted(contributor.attributes.items())[:MAX_ATTRIBUTES]
    )
    record = f"{bounded_id(event.alarm_arn, 990)}{CONTRIBUTOR_MARK}{contributor.id}"
    return _alarm_ref(event, contributor.attributes.get("ClusterName"), record, attributes)


def _alarm_ref(
    event: AlarmEvent, cluster: str | None, record: str, attributes: tuple[tuple[str, str], ...] = ()
) -> InstanceRef:
    """Where an alarm's (or one contributor's) facts are kept, `record`, standing where an instance would; the
    cluster's ARN is built from its name, in the event's Region and account."""
    region = bounded_id(event.region, 64)
    account = bounded_id(event.account, 64)
    cluster_arn = f"arn:aws:ecs:{region}:{account}:cluster/{bounded_id(cluster, MAX_CLUSTER_NAME)}" if cluster else ""
    return InstanceRef(
        region=region,
        account=account,
        cluster_arn=cluster_arn,
        container_instance_arn=record,
        ec2_instance_id=None,
        capacity_provider=None,
        attributes=attributes,
    )


def contributor_facts(event: AlarmContributorStateChangeEvent, event_id: str) -> EventFacts | None:
    """The state the contributor entered. There is no previous state: an OK or INSUFFICIENT_DATA of a contributor
    is recorded, and is no news unless the contributor's record has its ALARM (an episode needs a non-OK report
    to open, fault_responder.incidents.lifecycle.episodes)."""
    state = event.detail.state
    if state.value == "INSUFFICIENT_DATA":
        return None
    check = alarm_check_type(event.detail.alarm_name)
    fact = _fact(check, state, state.timestamp or event.time, event_id)
    return EventFacts(event_id, contributor_instance(event), health=(fact,))


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


def told_by_contributors(instance: InstanceRef, check_type: str) -> bool:
    """The alarm's own incident of a multi time series alarm: its contributors are the incidents people hear of."""
    return instance.is_alarm and instance.alarm_contributor is None and check_type in PER_CONTRIBUTOR


def reading(instance: InstanceRef, check_type: str, reason: str | None) -> ContributorReading | None:
    """A contributor's cluster, value and threshold, read from its state's reason (CloudWatch writes "... the
    threshold (90.0) ... The most recent datapoint which crossed the threshold: [93.0 (dd/mm/yy HH:MM:SS)]"):
    an absent or unreadable number is None, never an error."""
    contributor = instance.alarm_contributor
    if contributor is None:
        return None
    text = reason or ""
    value = _number(_CROSSED.search(text) or _DATAPOINT.search(text))
    threshold = _number(_THRESHOLD.search(text))
    named = ", ".join(f"{key}={text}" for key, text in instance.attributes)
    cluster = instance.cluster_name or clip(named, MAX_CLUSTER_NAME) or ""
    return ContributorReading(contributor, cluster, value, threshold, _UNITS.get(check_type, ""))


def _number(found: re.Match[str] | None) -> float | None:
    if found is None:
        return None
    try:
        value = float(found.group(1))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def shown(value: float | None, unit: str) -> str:
    """93.0 as `93`, 93.25 as `93.25`, with its unit."""
    if value is None:
        return "not reported"
    text = str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.6g}"
    return f"{text}{unit}"


def contributor_title(check_type: str, classification: Classification, found: ContributorReading) -> str:
    """`GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)`; a contributor with no cluster is named by
    its attributes, or its id."""
    subject = _SUBJECTS.get(check_type, classification.title)
    where = f"cluster {found.cluster}" if found.cluster else f"contributor {found.contributor_id}"
    threshold = f"threshold {shown(found.threshold, found.unit)}"
    if found.value is None:
        return f"{subject} on {where}: value not reported ({threshold})"
    return f"{subject} {shown(found.value, found.unit)} on {where} ({threshold})"


def alarm_fingerprint(instance: InstanceRef) -> str:
    """`cloudwatch-alarm/REGION/NAME`: one PagerDuty dedup_key per alarm, for every episode of it; a contributor's
    `cloudwatch-alarm/REGION/NAME/CONTRIBUTOR`."""
    value = f"cloudwatch-alarm/{instance.region}/{instance.container_instance_id}"
    if instance.alarm_contributor is not None:
        value = f"{value}/{instance.alarm_contributor}"
    if len(value) <= MAX_DEDUP_KEY:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest}"
