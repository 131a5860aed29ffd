"""Contributor state changes of a multi time series alarm: parsed strictly at the edge, each contributor a record and
an incident of its own that names its cluster and its value against the threshold, and the alarm's own ALARM told
to no one (fault_responder.incidents.alarms, fault_responder.events.cloudwatch; docs/alarms.md)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.adapters.serialization import instance_from_dict, instance_to_dict
from fault_responder.core.domain import InstanceRef
from fault_responder.events.cloudwatch import AlarmContributorStateChangeEvent, AlarmStateChangeEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.alarms import (
    GPU_RESTART_APP_XIDS,
    GPU_TEMPERATURE,
    MAX_ATTRIBUTES,
    RESPONDER_HEALTH,
    contributor_facts,
    reading,
    told_by_contributors,
)
from fault_responder.incidents.record import InstanceRecord
from fault_responder.notification.render.pagerduty import render_trigger
from fault_responder.notification.render.slack import render_incident_root
from fault_responder.routing.matchers import incident_labels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import load_event

ROUTER = Router(load_routing("default.yaml"))
CONTRIBUTOR_ALARM = "alarm/gpu-temperature-contributor-alarm.json"
CONTRIBUTOR_OK = "alarm/gpu-temperature-contributor-ok.json"
TRAINING_KEY = "cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature/8f3a2c1d9e4b7a60"
LATER = datetime(2026, 4, 11, 3, 0, tzinfo=UTC)


def _raw(name: str = CONTRIBUTOR_ALARM) -> dict[str, Any]:
    return load_event(name)


def _other_cluster(raw: dict[str, Any]) -> dict[str, Any]:
    """The same alarm's contributor for gpu-inference, at 91.5 °C."""
    other = copy.deepcopy(raw)
    other["id"] = "2e8b4d6f-0a3c-4e5b-9d1f-7c3a5e9b1d24"
    other["detail"]["alarmContributor"] = {"id": "1c7e5b9d3f2a8046", "attributes": {"ClusterName": "gpu-inference"}}
    other["detail"]["state"]["reason"] = other["detail"]["state"]["reason"].replace("[93.0", "[91.5")
    return other


def _records(*raws: dict[str, Any]) -> dict[str, InstanceRecord]:
    """The records the events make, keyed as the store keys them (the container instance ARN)."""
    records: dict[str, InstanceRecord] = {}
    for raw in raws:
        event = parse_ecs_event(raw)
        facts = lifecycle.facts_from_event(event)
        if facts is None:
            continue
        arn = facts.instance.container_instance_arn
        records.setdefault(arn, InstanceRecord(arn, facts.instance)).add(facts)
    return records


def _incidents(*raws: dict[str, Any]) -> list[Any]:
    return [
        incident
        for record in _records(*raws).values()
        for incident in lifecycle.derive(record, lifecycle.Settings(), ROUTER.route, LATER).incidents
    ]


# --- parsing -------------------------------------------------------------------------------------------


def test_aws_documented_sample_parses_into_the_contributor_model() -> None:
    # Given AWS's documented contributor event, verbatim (a muteDetail, no previousState)
    raw = load_event("aws-docs/alarm-contributor-state-change.json")

    # When it is parsed
    event = parse_ecs_event(raw)

    # Then it is a contributor state change naming its contributor and its attributes
    assert isinstance(event, AlarmContributorStateChangeEvent)
    assert event.detail.alarm_contributor.id == "6d442278dba546f6"
    assert event.detail.alarm_contributor.attributes == {"TableName": "example-dynamodb-table-name"}
    assert event.detail.state.timestamp == datetime(2025, 12, 1, 13, 42, 4, 919000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        ("id", "8f3a2c1d9e4b7a60/../x"),
        ("id", "x" * 17),
        ("id", ""),
        ("id", "a#contributor"),
        ("id", 12345),
        ("attributes", {"ClusterName": ["gpu-training"]}),
        ("attributes", {"ClusterName": 7}),
        ("attributes", {"": "gpu-training"}),
        ("attributes", {"k" * 256: "v"}),
        ("attributes", {"ClusterName": "v" * 1025}),
        ("attributes", {f"k{number}": "v" for number in range(151)}),
        ("attributes", "ClusterName=gpu-training"),
        ("contributor", None),
        ("contributor", "8f3a2c1d9e4b7a60"),
        ("unknown", {"id": "8f3a2c1d9e4b7a60", "attributes": {}, "extra": "x"}),
    ],
)
def test_a_malformed_or_hostile_contributor_is_refused(where: str, value: Any) -> None:
    # Given a contributor state change whose contributor is broken one way
    raw = _raw()
    contributor = raw["detail"]["alarmContributor"]
    if where in ("id", "attributes"):
        contributor[where] = value
    else:
        raw["detail"]["alarmContributor"] = value

    # When it is parsed, Then it is refused (the router dead-letters it as malformed, with the reason)
    with pytest.raises(ValidationError):
        parse_ecs_event(raw)


def test_the_shipped_malformed_contributor_sample_is_refused() -> None:
    with pytest.raises(ValidationError):
        parse_ecs_event(load_event("malformed/alarm-contributor-hostile-id.json"))


@pytest.mark.parametrize("detail_type", ["CloudWatch Alarm State Change", "CloudWatch Alarm Contributor State Change"])
def test_no_alarm_name_may_pass_for_a_contributor_record(detail_type: str) -> None:
    # Given an alarm event whose alarm's name contains the mark that separates an alarm's ARN from a contributor's id
    raw = _raw() if "Contributor" in detail_type else load_event("alarm/gpu-temperature-alarm.json")
    name = "gpu-fault-responder.gpu-temperature#contributor/8f3a2c1d9e4b7a60"
    raw["detail"]["alarmName"] = name
    raw["resources"] = [f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{name}"]

    # When it is parsed, Then it is refused: it could otherwise share a contributor's record
    with pytest.raises(ValidationError):
        parse_ecs_event(raw)


def test_an_unreadable_reason_or_timestamp_is_drift_not_refusal() -> None:
    # Given a contributor event whose reason is absurdly long and whose timestamp is not a time
    raw = _raw()
    raw["detail"]["state"]["reason"] = "x" * 5000
    raw["detail"]["state"]["timestamp"] = "yesterday"

    # When it is parsed and made a fact
    event = parse_ecs_event(raw)
    assert isinstance(event, AlarmContributorStateChangeEvent)
    facts = contributor_facts(event, event.id)

    # Then both are read as absent: the fact is at the event's time, and its value is "not reported"
    assert facts is not None
    [fact] = facts.health
    assert (fact.reason, fact.at) == (None, event.time)
    [incident] = _incidents(raw)
    assert incident.classification.title == (
        "GPU temperature on cluster gpu-training: value not reported (threshold not reported)"
    )


# --- records and incidents ------------------------------------------------------------------------------


def test_each_contributor_is_its_own_record_apart_from_the_alarms() -> None:
    # Given the alarm's own ALARM and two contributors' ALARMs
    alarm = load_event("alarm/gpu-temperature-alarm.json")
    records = _records(alarm, _raw(), _other_cluster(_raw()))

    # Then three records: the alarm's (as before) and one per contributor, keyed by the alarm's ARN and its id
    arn = "arn:aws:cloudwatch:us-west-2:123456789012:alarm:gpu-fault-responder.gpu-temperature"
    assert sorted(records) == [
        arn,
        f"{arn}#contributor/1c7e5b9d3f2a8046",
        f"{arn}#contributor/8f3a2c1d9e4b7a60",
    ]
    training = records[f"{arn}#contributor/8f3a2c1d9e4b7a60"].instance
    assert (training.is_alarm, training.alarm_contributor) == (True, "8f3a2c1d9e4b7a60")
    assert (training.container_instance_id, training.cluster_name) == (
        "gpu-fault-responder.gpu-temperature",
        "gpu-training",
    )
    assert records[arn].instance.alarm_contributor is None


def test_two_hot_clusters_are_two_incidents_each_naming_its_cluster_and_temperature() -> None:
    # Given "2 out of 7 time series evaluated to ALARM" and the two contributors' ALARMs
    alarm = load_event("alarm/gpu-temperature-alarm.json")
    alarm["detail"]["state"]["reason"] = "Threshold Crossed: 2 out of 7 time series evaluated to ALARM"
    incidents = _incidents(alarm, _raw(), _other_cluster(_raw()))

    # Then the contributors are the incidents told, critical, keyed per contributor; the alarm's own is recorded and
    # told to no one
    told = sorted((i for i in incidents if i.receivers), key=lambda i: i.fingerprint)
    assert [(i.fingerprint, i.classification.title) for i in told] == [
        (
            "cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature/1c7e5b9d3f2a8046",
            "GPU temperature 91.5 °C on cluster gpu-inference (threshold 90 °C)",
        ),
        (TRAINING_KEY, "GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)"),
    ]
    assert all(i.receivers == ["gpu-alerts", "gpu-oncall"] and i.status == "OPEN" for i in told)
    [own] = [i for i in incidents if not i.receivers]
    assert (own.fingerprint, own.status) == ("cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature", "OPEN")
    assert own.route == "page-critical-and-error"


def test_a_contributor_is_labelled_with_its_cluster_and_the_alarms_kind() -> None:
    [incident] = _incidents(_raw())

    labels = incident_labels(incident)

    assert (labels["kind"], labels["cluster"], labels["instance"]) == (
        "alarm",
        "gpu-training",
        "gpu-fault-responder.gpu-temperature",
    )
    assert (labels["check_type"], labels["severity"], labels["fault_class"]) == (
        GPU_TEMPERATURE,
        "critical",
        "gpu_temperature",
    )


def test_a_contributors_ok_resolves_it_only_whatever_the_order_and_duplicates() -> None:
    # Given two hot clusters, then gpu-training's OK; in order, reversed, and with duplicates
    training, inference, ok = _raw(), _other_cluster(_raw()), _raw(CONTRIBUTOR_OK)
    orders = [(training, inference, ok), (ok, inference, training, training), (inference, ok, ok, training)]

    for order in orders:
        # When the incidents are derived
        by_key = {i.fingerprint: i for i in _incidents(*order)}

        # Then gpu-training's is closed by its OK and gpu-inference's stays open
        assert by_key[TRAINING_KEY].status == "CLOSED"
        assert by_key[TRAINING_KEY].close_reason == "the alarm is OK"
        other = "cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature/1c7e5b9d3f2a8046"
        assert by_key[other].status == "OPEN"
        assert len(by_key) == 2


def test_an_ok_of_a_contributor_never_seen_is_no_news() -> None:
    # Given only a contributor's OK (contributor events carry no previous state)
    incidents = _incidents(_raw(CONTRIBUTOR_OK))

    # Then there is no incident, and nothing to tell
    assert incidents == []


def test_insufficient_data_of_a_contributor_records_nothing() -> None:
    raw = _raw()
    raw["detail"]["state"]["value"] = "INSUFFICIENT_DATA"
    event = parse_ecs_event(raw)
    assert isinstance(event, AlarmContributorStateChangeEvent)

    assert contributor_facts(event, event.id) is None


def test_the_restart_app_xid_alarms_contributors_are_warnings_with_a_count() -> None:
    # Given the XID alarm's contributor, 3 XIDs against a threshold of 0
    raw = _raw()
    name = "gpu-fault-responder.gpu-restart-app-xids"
    raw["detail"]["alarmName"] = name
    raw["resources"] = [f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{name}"]
    raw["detail"]["state"]["reason"] = (
        "Threshold Crossed: 1 datapoint was greater than the threshold (0.0). "
        "The most recent datapoint which crossed the threshold: [3.0 (11/04/26 02:13:00)]."
    )

    [incident] = _incidents(raw)

    assert incident.check_type == GPU_RESTART_APP_XIDS
    assert incident.classification.severity.value == "warning"
    assert incident.classification.title == "GPU restart-the-application XIDs 3 on cluster gpu-training (threshold 0)"


# --- which alarm's own ALARM is told --------------------------------------------------------------------


def test_only_the_group_by_alarms_own_alarm_is_told_by_its_contributors() -> None:
    alarm = InstanceRef("us-west-2", "1", "", "arn:aws:cloudwatch:us-west-2:1:alarm:s.gpu-temperature", None, None)
    contributor = InstanceRef("us-west-2", "1", "", f"{alarm.container_instance_arn}#contributor/ab", None, None)

    assert told_by_contributors(alarm, GPU_TEMPERATURE)
    assert told_by_contributors(alarm, GPU_RESTART_APP_XIDS)
    assert not told_by_contributors(alarm, RESPONDER_HEALTH)
    assert not told_by_contributors(contributor, GPU_TEMPERATURE)


def test_a_single_series_alarm_still_pages_as_before() -> None:
    # Given the router's own errors alarm (one series, no contributors)
    [incident] = _incidents(load_event("alarm/router-errors-alarm.json"))

    # Then it is routed and paged, keyed by the alarm, as before
    assert incident.receivers == ["gpu-alerts", "gpu-oncall"]
    assert incident.fingerprint == "cloudwatch-alarm/us-west-2/gpu-fault-responder.router-errors"


# --- reading the value ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "value", "threshold"),
    [
        (
            "Threshold Crossed: 1 datapoint was greater than the threshold (90.0). The most recent datapoint which "
            "crossed the threshold: [93.0 (11/04/26 02:13:00)].",
            93.0,
            90.0,
        ),
        (
            "Threshold Crossed: 1 datapoint [95.25 (11/04/26 02:13:00)] was greater than the threshold (90.0).",
            95.25,
            90,
        ),
        ("The most recent datapoint which crossed the threshold: [nan (11/04/26 02:13:00)].", None, None),
        ("The most recent datapoint which crossed the threshold: [1e999 (x)]. the threshold (9e999)", None, None),
        ("Threshold Crossed: no datapoint", None, None),
        ("", None, None),
        (None, None, None),
        ("[" * 5000 + "the threshold (" * 2000, None, None),
    ],
)
def test_the_value_is_read_defensively(reason: str | None, value: float | None, threshold: float | None) -> None:
    instance = InstanceRef(
        "us-west-2",
        "1",
        "arn:aws:ecs:us-west-2:1:cluster/c",
        "arn:aws:cloudwatch:us-west-2:1:alarm:a#contributor/x",
        None,
        None,
    )

    found = reading(instance, GPU_TEMPERATURE, reason)

    assert found is not None
    assert (found.value, found.threshold, found.cluster) == (value, threshold, "c")


# --- messages ------------------------------------------------------------------------------------------


def test_slack_and_pagerduty_name_the_cluster_and_the_value_against_the_threshold() -> None:
    [incident] = _incidents(_raw())

    root = render_incident_root(incident)
    trigger = render_trigger(incident, "key")

    assert root.blocks[0]["text"]["text"].endswith(
        "CRITICAL · GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)"
    )
    assert trigger["dedup_key"] == TRAINING_KEY
    assert trigger["payload"]["summary"].startswith("GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)")
    details = trigger["payload"]["custom_details"]
    assert {key: details[key] for key in ("cluster", "value", "threshold", "contributor_id", "attributes")} == {
        "cluster": "gpu-training",
        "value": "93 °C",
        "threshold": "90 °C",
        "contributor_id": "8f3a2c1d9e4b7a60",
        "attributes": {"ClusterName": "gpu-training"},
    }
    assert details["link"] == (
        "https://us-west-2.console.aws.amazon.com/cloudwatch/home?region=us-west-2"
        "#alarmsV2:alarm/gpu-fault-responder.gpu-temperature"
    )


def test_many_long_attributes_are_kept_bounded_and_survive_the_store() -> None:
    # Given a contributor with CloudWatch's maximum of attributes, each as long as allowed
    raw = _raw()
    raw["detail"]["alarmContributor"]["attributes"] = {f"{number:03d}" + "k" * 252: "v" * 1024 for number in range(150)}

    # When it is made a record
    [record] = _records(raw).values()

    # Then its record keeps the first few, clipped, and reads back the same from its stored form
    attributes = record.instance.attributes
    assert len(attributes) == MAX_ATTRIBUTES
    assert all(len(key) <= 64 and len(value) <= 256 for key, value in attributes)
    assert instance_from_dict(instance_to_dict(record.instance)) == record.instance
    # ... and an instance with none stores exactly as before
    alarm = _records(load_event("alarm/gpu-temperature-alarm.json"))
    [stored] = [instance_to_dict(r.instance) for r in alarm.values()]
    assert "attributes" not in stored
    assert isinstance(parse_ecs_event(load_event("alarm/gpu-temperature-alarm.json")), AlarmStateChangeEvent)
