"""Alarm state changes: parsed at the edge, made facts, classified, labelled, and derived into incidents
(fault_responder.incidents.alarms, fault_responder.events.cloudwatch; docs/alarms.md)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.core.domain import EventKind, FaultClass, InstanceRef, Severity
from fault_responder.events.cloudwatch import AlarmStateChangeEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.alarms import (
    GPU_RESTART_APP_XIDS,
    GPU_TEMPERATURE,
    OTHER_ALARM,
    RESPONDER_HEALTH,
    alarm_check_type,
    alarm_facts,
    classify_alarm,
)
from fault_responder.incidents.record import InstanceRecord
from fault_responder.routing.matchers import incident_labels
from fault_responder.routing.router import Router, incident_context, load_routing
from tests.conftest import load_event

ROUTER = Router(load_routing("default.yaml"))
SETTINGS = lifecycle.Settings(hold_down=timedelta(minutes=10))


def _alarm(name: str = "alarm/gpu-temperature-alarm.json") -> dict[str, Any]:
    return load_event(name)


def _parsed(raw: dict[str, Any]) -> AlarmStateChangeEvent:
    event = parse_ecs_event(raw)
    assert isinstance(event, AlarmStateChangeEvent)
    return event


def _record(*raws: dict[str, Any]) -> InstanceRecord:
    record: InstanceRecord | None = None
    for raw in raws:
        event = _parsed(raw)
        facts = alarm_facts(event, event.id)
        if facts is None:
            continue
        record = record or InstanceRecord(facts.instance.container_instance_arn, facts.instance)
        record.add(facts)
    assert record is not None
    return record


def _derive(record: InstanceRecord, now: datetime | None = None) -> lifecycle.InstanceView:
    return lifecycle.derive(record, SETTINGS, ROUTER.route, now)


# --- parsing -------------------------------------------------------------------------------------------


def test_cloudwatch_timestamps_without_a_colon_in_the_offset_are_read_as_utc() -> None:
    # Given an alarm event whose state timestamp is written as CloudWatch writes it (+0000)
    raw = _alarm()

    # When it is parsed
    event = _parsed(raw)

    # Then the time is the same instant, in UTC
    assert event.detail.state.timestamp == datetime(2026, 4, 11, 2, 14, 5, 318000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("resources", ["arn:aws:ecs:us-west-2:123456789012:cluster/gpu"]),
        ("resources", ["arn:aws:cloudwatch:us-west-2:123456789012:alarm:another-alarm"]),
        ("resources", []),
        ("alarmName", "x" * 256),
        ("state", {"timestamp": "2026-04-11T00:48:53.000+0000"}),
        ("source", "aws.ecs"),
    ],
)
def test_an_alarm_event_that_does_not_name_its_alarm_is_refused(field: str, value: Any) -> None:
    # Given an alarm state change with one field broken
    raw = _alarm()
    if field in ("alarmName", "state"):
        raw["detail"][field] = value
    else:
        raw[field] = value

    # When it is parsed, Then it is refused (the router dead-letters it as malformed)
    with pytest.raises(ValidationError):
        parse_ecs_event(raw)


def test_a_state_cloudwatch_may_add_is_shown_as_itself_not_refused() -> None:
    # Given a state value this app does not know
    raw = _alarm()
    raw["detail"]["state"]["value"] = "PARTIAL_DATA"

    # When it is parsed and classified
    event = _parsed(raw)
    classification = classify_alarm(alarm_check_type(event.detail.alarm_name), event.detail.state.value, None)

    # Then it is an error-severity fault that names the state
    assert classification.fault_class == FaultClass.UNKNOWN_CHECK
    assert "PARTIAL_DATA" in classification.title


# --- what kind of alarm, and how severe -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sample", "check_type", "severity"),
    [
        ("alarm/gpu-temperature-alarm.json", GPU_TEMPERATURE, Severity.CRITICAL),
        ("alarm/gpu-restart-app-xids-alarm.json", GPU_RESTART_APP_XIDS, Severity.WARNING),
        ("alarm/router-errors-alarm.json", RESPONDER_HEALTH, Severity.CRITICAL),
    ],
)
def test_each_alarm_is_classified_from_its_name(sample: str, check_type: str, severity: Severity) -> None:
    # Given one of the stack's alarms in ALARM
    event = _parsed(_alarm(sample))

    # When its kind and classification are derived
    kind = alarm_check_type(event.detail.alarm_name)

    # Then the GPU temperature and own-health alarms are critical, the RESTART_APP XID count a warning
    assert kind == check_type
    assert classify_alarm(kind, "ALARM", None).severity == severity


@pytest.mark.parametrize("name", ["gpu-fault-responder.disk-full", "gpu-temperature", "gpu-fault-responder.gpu"])
def test_any_other_alarm_is_an_error(name: str) -> None:
    # Given an alarm whose name is not one the template gives
    # When it is classified, Then it is an error, as an unknown fault is
    kind = alarm_check_type(name)
    assert kind == OTHER_ALARM
    assert classify_alarm(kind, "ALARM", None).severity == Severity.ERROR


def test_an_alarm_keeps_one_incident_when_its_configuration_changes() -> None:
    # Given the temperature alarm's ALARM, and its OK after its configuration was edited (another query)
    alarm = _alarm()
    edited = _alarm("alarm/gpu-temperature-ok.json")
    edited["detail"]["configuration"]["metrics"][0]["expression"] = 'SELECT MAX(gpu_temp) FROM "Custom"'

    # When the incidents are derived
    record = _record(alarm, edited)

    # Then the alarm is one check with one incident, closed by the OK
    assert list(record.health) == [GPU_TEMPERATURE]
    [incident] = _derive(record).incidents
    assert incident.status == "CLOSED"


# --- facts ---------------------------------------------------------------------------------------------


def test_an_ok_also_records_the_alarm_it_left() -> None:
    # Given the OK event alone (its ALARM event was lost)
    event = _parsed(_alarm("alarm/gpu-temperature-ok.json"))

    # When its facts are read
    facts = alarm_facts(event, event.id)

    # Then the ALARM it left is a fact too, at the time it began
    assert facts is not None
    assert [(fact.status, fact.at) for fact in facts.health] == [
        ("ALARM", event.detail.previous_state.timestamp if event.detail.previous_state else None),
        ("OK", event.detail.state.timestamp),
    ]


def test_insufficient_data_of_an_alarm_that_was_not_firing_is_no_news() -> None:
    # Given an alarm that goes from OK to INSUFFICIENT_DATA
    raw = _alarm()
    raw["detail"]["state"]["value"] = "INSUFFICIENT_DATA"

    # When its facts are read, Then there are none
    event = _parsed(raw)
    assert alarm_facts(event, event.id) is None


def test_insufficient_data_during_an_alarm_is_shown_on_its_incident() -> None:
    # Given ALARM, then INSUFFICIENT_DATA (previousState ALARM)
    alarm = _alarm()
    no_data = copy.deepcopy(_alarm("alarm/gpu-temperature-ok.json"))
    no_data["id"] = "1c3e5a7b-9d1f-4a3c-8e5a-7b9d1f3a5c79"
    no_data["detail"]["state"]["value"] = "INSUFFICIENT_DATA"

    # When the incident is derived
    [incident] = _derive(_record(alarm, no_data)).incidents

    # Then it is still open and critical, its phase INSUFFICIENT_DATA
    assert (incident.status, incident.phase) == ("OPEN", "INSUFFICIENT_DATA")
    assert incident.classification.severity == Severity.CRITICAL


# --- incidents -----------------------------------------------------------------------------------------


def test_alarm_opens_and_ok_resolves_at_once_whatever_the_order() -> None:
    # Given the ALARM and its OK, in either order, one of them twice
    in_order = _derive(
        _record(_alarm(), _alarm("alarm/gpu-temperature-ok.json")), now=datetime(2026, 4, 11, 2, 32, tzinfo=UTC)
    )
    reversed_ = _derive(
        _record(_alarm("alarm/gpu-temperature-ok.json"), _alarm(), _alarm("alarm/gpu-temperature-ok.json")),
        now=datetime(2026, 4, 11, 2, 32, tzinfo=UTC),
    )

    # Then both give one closed incident (no flapping hold-down: CloudWatch already damps an alarm)
    for view in (in_order, reversed_):
        [incident] = view.incidents
        assert (incident.status, incident.close_reason) == ("CLOSED", "the alarm is OK")
    assert in_order.incidents[0].id == reversed_.incidents[0].id


def test_an_alarm_incident_is_labelled_and_routed_as_an_alarm() -> None:
    # Given the temperature alarm's incident
    [incident] = _derive(_record(_alarm())).incidents

    # When its labels and route are read
    labels = incident_labels(incident)
    decision = ROUTER.route(incident_context(incident))

    # Then it is kind alarm, named by the alarm, keyed by it in PagerDuty, and pages (critical)
    assert incident.kind == EventKind.ALARM
    assert labels["kind"] == "alarm"
    assert labels["instance"] == "gpu-fault-responder.gpu-temperature"
    assert labels["severity"] == "critical"
    assert labels["cluster"] == ""
    assert incident.dedup_key == "cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature"
    assert decision.receivers == ("gpu-alerts", "gpu-oncall")


def test_an_alarm_with_a_cluster_dimension_names_its_cluster() -> None:
    # Given an alarm on a metric with a ClusterName dimension
    raw = _alarm("alarm/router-errors-alarm.json")
    raw["detail"]["configuration"]["metrics"][0]["metricStat"]["metric"]["dimensions"] = {"ClusterName": "gpu-a"}

    # When its incident is labelled, Then its cluster is that cluster
    [incident] = _derive(_record(raw)).incidents
    assert incident_labels(incident)["cluster"] == "gpu-a"
    assert incident.instance.cluster_arn == "arn:aws:ecs:us-west-2:123456789012:cluster/gpu-a"


def test_an_ecs_container_instance_arn_never_makes_itself_an_alarm() -> None:
    hostile = InstanceRef(
        region="us-east-1",
        account="123456789012",
        cluster_arn="arn:aws:ecs:us-east-1:123456789012:cluster/c",
        container_instance_arn="arn:aws:ecs:us-east-1:123456789012:container-instance/c/x:alarm:y",
        ec2_instance_id=None,
        capacity_provider=None,
    )
    assert not hostile.is_alarm and hostile.container_instance_id == "x:alarm:y"
    alarm = InstanceRef(
        region="us-east-1",
        account="123456789012",
        cluster_arn="",
        container_instance_arn="arn:aws:cloudwatch:us-east-1:123456789012:alarm:stack.GpuTemperature",
        ec2_instance_id=None,
        capacity_provider=None,
    )
    assert alarm.is_alarm and alarm.container_instance_id == "stack.GpuTemperature"
