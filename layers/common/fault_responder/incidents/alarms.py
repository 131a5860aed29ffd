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
- `ALARM_RESPONDER_MEMBER_ACCOUNTS` (organization mode: the reconciliation's MemberAccountFailures, one series per
  account): critical, the responder's own health. The responder could not act in that account (its role could not
  be assumed, its calls were refused or throttled): missed faults there go unfound, and the resume workflow cannot
  act there. A Metrics Insights GROUP BY Account query, so each account is an incident of its own, named in its title.
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

The reconciliation sweep (fault_responder.operations.alarm_reconcile) gives what it finds in CloudWatch's answers the
same records and facts an event would (contributor_ref): a contributor it found in ALARM is the incident its event
would have opened. Where the contributors cannot be read, it pages the alarm itself on one more record of the alarm,
the pseudo-contributor ALL_CONTRIBUTORS (`...#contributor/*`: no contributor's id can be `*`), whose title says how
many series are in ALARM and that their clusters are unknown (unknown_clusters_title). The alarm's OK closes it
(unknown_clusters_ok).

Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fault_responder.core.domain import (
    CONTRIBUTOR_MARK,
    Classification,
    ContributorReading,
    FaultClass,
    InstanceRef,
    Severity,
)
from fault_responder.incidents.record import FOUND_BY_SWEEP, EventFacts, HealthFact, bounded_id, clip

if TYPE_CHECKING:
    from datetime import datetime

    from fault_responder.events.cloudwatch import (
        AlarmContributorStateChangeEvent,
        AlarmState,
        AlarmStateChangeEvent,
    )

ALARM_CHECK_PREFIX = "ALARM"
GPU_TEMPERATURE = "ALARM_GPU_TEMPERATURE"
GPU_RESTART_APP_XIDS = "ALARM_GPU_RESTART_APP_XIDS"
RESPONDER_HEALTH = "ALARM_RESPONDER_HEALTH"
MEMBER_ACCOUNTS = "ALARM_RESPONDER_MEMBER_ACCOUNTS"
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
    "member-accounts": MEMBER_ACCOUNTS,
}
"""The `<what>` of each alarm template.yaml creates (tests/unit/test_template_alarms.py keeps them in step)."""
PER_CONTRIBUTOR = frozenset({GPU_TEMPERATURE, GPU_RESTART_APP_XIDS, MEMBER_ACCOUNTS})
"""The kinds of alarm template.yaml makes Metrics Insights GROUP BY queries (tests/unit/test_template_alarms.py
checks it): their contributors are the incidents, the alarm's own ALARM is recorded and told to no one."""
ACCOUNT_ATTRIBUTE = "Account"
"""The dimension a member-accounts contributor is grouped by: the account it names."""
MAX_DEDUP_KEY = 255
MAX_ATTRIBUTES = 10
"""A contributor's attributes kept on its record and shown (CloudWatch allows 150): the first, by name."""
MAX_ATTRIBUTE_KEY = 64
MAX_ATTRIBUTE_VALUE = 256
MAX_CLUSTER_NAME = 255
MAX_CONTRIBUTOR_RECORD_ARN = 990
"""A contributor's record is the alarm's ARN (bounded to this) and its id: CONTRIBUTOR_MARK and 16 characters more
stay within the 1,024 every record's key is bounded to."""
ALL_CONTRIBUTORS = "*"
"""The pseudo-contributor of a multi time series alarm whose contributors could not be read: the alarm paged itself.
Not an id CloudWatch can give (letters, digits, `.`, `_`, `:` and `-` only), so no contributor event reaches it."""
FOUND_CONTRIBUTOR = "found by the sweep: the contributor event was missed"
FOUND_UNKNOWN_CLUSTERS = "found by the sweep: no contributor event came, and the clusters could not be read"
_UNITS = {GPU_TEMPERATURE: " °C"}
_SUBJECTS = {GPU_TEMPERATURE: "GPU temperature", GPU_RESTART_APP_XIDS: "GPU restart-the-application XIDs"}
_ACTS = "GPU Fault Responder cannot act"
"""How a member-accounts contributor's title begins: its series are accounts, not clusters."""
_NUMBER = r"(-?\d{1,15}(?:\.\d{1,15})?(?:[eE][+-]?\d{1,3})?)"
_CROSSED = re.compile(r"most recent datapoint which crossed the threshold: \[\s*" + _NUMBER + r"[\s(\]]")
_DATAPOINT = re.compile(r"datapoints? \[\s*" + _NUMBER + r"[\s(\],]")
_THRESHOLD = re.compile(r"the threshold \(\s*" + _NUMBER + r"\s*\)")
_SERIES = re.compile(r"(\d{1,6}) out of (\d{1,6}) time series")
_ALARM_ARN = re.compile(r"^arn:aws[a-z-]*:cloudwatch:(?P<region>[^:]*):(?P<account>[^:]*):alarm:(?P<name>.+)$")

_CLASSES: dict[str, tuple[FaultClass, Severity, str]] = {
    GPU_TEMPERATURE: (FaultClass.GPU_TEMPERATURE, Severity.CRITICAL, "GPU temperature above the alarm threshold"),
    GPU_RESTART_APP_XIDS: (
        FaultClass.GPU_RESTART_APP_XIDS,
        Severity.WARNING,
        "GPU tasks report restart-the-application XIDs",
    ),
    RESPONDER_HEALTH: (FaultClass.RESPONDER_HEALTH, Severity.CRITICAL, "GPU Fault Responder is unhealthy"),
    MEMBER_ACCOUNTS: (
        FaultClass.RESPONDER_HEALTH,
        Severity.CRITICAL,
        "GPU Fault Responder cannot act in a member account",
    ),
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
    return _alarm_ref(event.region, event.account, cluster, bounded_id(event.alarm_arn, 1024))


def contributor_instance(event: AlarmContributorStateChangeEvent) -> InstanceRef:
    """One time series of the alarm: its record is the alarm's ARN and the contributor's id; its cluster is the
    `ClusterName` attribute; its attributes are kept bounded (the first MAX_ATTRIBUTES by name, each clipped)."""
    contributor = event.detail.alarm_contributor
    return contributor_ref(event.alarm_arn, event.region, event.account, contributor.id, contributor.attributes)


def contributor_ref(
    alarm_arn: str, region: str, account: str, contributor_id: str, attributes: Mapping[str, str]
) -> InstanceRef:
    """Where one contributor's facts are kept, as its event names it (contributor_instance) and as the reconciliation
    sweep finds it in DescribeAlarmContributors' answer: the same record, so the event and the sweep merge."""
    kept = tuple(
        (clip(key, MAX_ATTRIBUTE_KEY) or "", clip(value, MAX_ATTRIBUTE_VALUE) or "")
        for key, value in sorted(attributes.items())[:MAX_ATTRIBUTES]
    )
    record = f"{bounded_id(alarm_arn, MAX_CONTRIBUTOR_RECORD_ARN)}{CONTRIBUTOR_MARK}{contributor_id}"
    return _alarm_ref(region, account, attributes.get("ClusterName"), record, kept)


def alarm_ref(alarm_arn: str, cluster: str | None = None) -> InstanceRef | None:
    """The alarm's own record, as its events name it (alarm_instance), from its ARN and the ClusterName dimension of
    its metric, if it has one (the reconciliation sweep, from DescribeAlarms). None for what is not an alarm's ARN."""
    parts = alarm_arn_parts(alarm_arn)
    if parts is None:
        return None
    region, account, _ = parts
    return _alarm_ref(region, account, cluster, bounded_id(alarm_arn, 1024))


def unknown_clusters_ref(alarm_arn: str) -> InstanceRef | None:
    """The record of a multi time series alarm paged as a whole, its clusters unknown (ALL_CONTRIBUTORS)."""
    parts = alarm_arn_parts(alarm_arn)
    if parts is None:
        return None
    region, account, _ = parts
    return contributor_ref(alarm_arn, region, account, ALL_CONTRIBUTORS, {})


def alarm_arn_parts(arn: str) -> tuple[str, str, str] | None:
    """(Region, account, name) of a CloudWatch alarm's ARN; None for anything else."""
    found = _ALARM_ARN.match(arn)
    if found is None or CONTRIBUTOR_MARK in arn:
        return None
    return found.group("region"), found.group("account"), found.group("name")


def alarm_of(record_arn: str) -> str | None:
    """The alarm's ARN a record belongs to (the alarm's own, or one of its contributors'); None for a record that is
    not an alarm's (an instance, a group)."""
    alarm = record_arn.split(CONTRIBUTOR_MARK, 1)[0]
    return alarm if alarm_arn_parts(alarm) is not None else None


def is_unknown_clusters(instance: InstanceRef) -> bool:
    return instance.alarm_contributor == ALL_CONTRIBUTORS


def found_by_sweep(instance: InstanceRef) -> str:
    """What an incident the reconciliation sweep made known says of itself (an alarm's says which event was lost)."""
    if instance.alarm_contributor is None:
        return FOUND_BY_SWEEP
    return FOUND_UNKNOWN_CLUSTERS if is_unknown_clusters(instance) else FOUND_CONTRIBUTOR


def _alarm_ref(
    region: str, account: str, cluster: str | None, record: str, attributes: tuple[tuple[str, str], ...] = ()
) -> InstanceRef:
    """Where an alarm's (or one contributor's) facts are kept, `record`, standing where an instance would; the
    cluster's ARN is built from its name, in the alarm's Region and account."""
    region = bounded_id(region, 64)
    account = bounded_id(account, 64)
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
    to open, fault_responder.incidents.episodes.episodes)."""
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


def unknown_clusters_ok(event: AlarmStateChangeEvent, event_id: str) -> EventFacts | None:
    """The alarm's OK as a fact of its unknown-clusters record (unknown_clusters_ref), for a multi time series alarm
    the reconciliation sweep may have paged as a whole: the OK of the alarm is the OK of every series in it. None
    for any other alarm or state."""
    state = event.detail.state
    check = alarm_check_type(event.detail.alarm_name)
    if state.value != "OK" or check not in PER_CONTRIBUTOR:
        return None
    instance = contributor_ref(event.alarm_arn, event.region, event.account, ALL_CONTRIBUTORS, {})
    return EventFacts(event_id, instance, health=(_fact(check, state, state.timestamp or event.time, event_id),))


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
    if contributor is None or contributor == ALL_CONTRIBUTORS:
        return None
    text = reason or ""
    value = _number(_CROSSED.search(text) or _DATAPOINT.search(text))
    threshold = _number(_THRESHOLD.search(text))
    named = ", ".join(f"{key}={text}" for key, text in instance.attributes)
    cluster = instance.cluster_name or clip(named, MAX_CLUSTER_NAME) or ""
    if check_type == MEMBER_ACCOUNTS:
        cluster = ""  # its series are accounts, not clusters: its title names the account
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


def contributor_title(
    check_type: str,
    classification: Classification,
    found: ContributorReading,
    attributes: tuple[tuple[str, str], ...] = (),
) -> str:
    """`GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)`; a contributor with no cluster is named by
    its attributes, or its id; a member account's by its account (`GPU Fault Responder cannot act in account
    222222222222: 2 failed reconciliation runs (threshold 0)`)."""
    subject = _SUBJECTS.get(check_type, classification.title)
    where = f"cluster {found.cluster}" if found.cluster else f"contributor {found.contributor_id}"
    if check_type == MEMBER_ACCOUNTS:
        named = dict(attributes).get(ACCOUNT_ATTRIBUTE)
        where = f"account {named}" if named else where
        threshold = f"threshold {shown(found.threshold, found.unit)}"
        if found.value is None:
            return f"{_ACTS} in {where}: failed reconciliation runs not reported ({threshold})"
        runs = "run" if found.value == 1 else "runs"
        return f"{_ACTS} in {where}: {shown(found.value, found.unit)} failed reconciliation {runs} ({threshold})"
    threshold = f"threshold {shown(found.threshold, found.unit)}"
    if found.value is None:
        return f"{subject} on {where}: value not reported ({threshold})"
    return f"{subject} {shown(found.value, found.unit)} on {where} ({threshold})"


def series_in_alarm(reason: str | None) -> tuple[int, int] | None:
    """(in ALARM, evaluated) from a multi time series alarm's reason ("Threshold Crossed: 3 out of 11 time series
    evaluated to ALARM"); None when the reason does not say so readably."""
    found = _SERIES.search(reason or "")
    if found is None:
        return None
    return int(found.group(1)), int(found.group(2))


def unknown_clusters_title(check_type: str, classification: Classification) -> str:
    """`GPU temperature above the threshold on 3 of 11 clusters (which ones is unknown)`: what the alarm's reason says
    of its series, and that their clusters could not be read."""
    subject = _SUBJECTS.get(check_type, classification.title)
    counted = series_in_alarm(classification.reason)
    if check_type == MEMBER_ACCOUNTS:
        if counted is None:
            return f"{_ACTS} in accounts not known (how many is not reported)"
        return f"{_ACTS} in {counted[0]} of {counted[1]} accounts (which ones is unknown)"
    if counted is None:
        return f"{subject} above the threshold on clusters not known (how many is not reported)"
    hot, evaluated = counted
    clusters = "cluster" if evaluated == 1 else "clusters"
    return f"{subject} above the threshold on {hot} of {evaluated} {clusters} (which ones is unknown)"


def alarm_fingerprint(instance: InstanceRef, *, home: bool = True) -> str:
    """`cloudwatch-alarm/REGION/NAME`: one PagerDuty dedup_key per alarm, for every episode of it; a contributor's
    `cloudwatch-alarm/REGION/NAME/CONTRIBUTOR`. An alarm of another account or Region than the stack's (`home`
    false: the organization's bus) is `cloudwatch-alarm/ACCOUNT/REGION/NAME`: every member account's forwarder
    creates the GPU alarms under the same names."""
    region = instance.region if home else f"{instance.account}/{instance.region}"
    value = f"cloudwatch-alarm/{region}/{instance.container_instance_id}"
    if instance.alarm_contributor is not None:
        value = f"{value}/{instance.alarm_contributor}"
    if len(value) <= MAX_DEDUP_KEY:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest}"
