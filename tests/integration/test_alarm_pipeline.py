"""The stack's CloudWatch alarms through the real router: AlarmStateChangeRule from template.yaml, the alert
queue and DLQ in moto, the real handler, and the Slack / PagerDuty stand-ins over real HTTP (docs/alarms.md).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.conftest import load_event
from tests.integration.test_alert_pipeline import calls, incident_roots, pagerduty_bodies, run

ALARM = "alarm/router-errors-alarm.json"
OK = "alarm/gpu-temperature-ok.json"
NAME = "gpu-fault-responder.router-errors"
DEDUP_KEY = f"cloudwatch-alarm/us-west-2/{NAME}"
GPU_ALARM = "alarm/gpu-temperature-alarm.json"
CONTRIBUTOR_ALARM = "alarm/gpu-temperature-contributor-alarm.json"
CONTRIBUTOR_OK = "alarm/gpu-temperature-contributor-ok.json"
CONTRIBUTOR_KEY = "cloudwatch-alarm/us-west-2/gpu-fault-responder.gpu-temperature/8f3a2c1d9e4b7a60"


@pytest.fixture
def alarm() -> dict[str, Any]:
    """A single-series alarm (the router's own errors) to ALARM: its own state changes are its incident."""
    return load_event(ALARM)


@pytest.fixture
def ok() -> dict[str, Any]:
    """The same alarm back to OK at 03:19:40Z, its previousState the ALARM above (the temperature alarm's OK,
    renamed and moved)."""
    raw = load_event(OK)
    raw["time"] = "2026-04-11T03:19:40Z"
    raw["detail"]["state"]["timestamp"] = "2026-04-11T03:19:40.118+0000"
    raw["detail"]["alarmName"] = NAME
    raw["resources"] = [f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{NAME}"]
    raw["detail"]["previousState"] = copy.deepcopy(load_event(ALARM)["detail"]["state"])
    return raw


def test_an_alarm_opens_an_incident_that_pages_critical_keyed_by_the_alarm(alarm: dict[str, Any]) -> None:
    # Given a single-series alarm (the router's errors) going to ALARM
    # When its state change reaches the router through the stack's rule
    report = run([alarm])

    # Then one Slack root and one PagerDuty trigger, critical, with the alarm's dedup key
    assert report["events"][0]["matched_rules"] == ["AlarmStateChangeRule"]
    assert sorted(calls(report)) == [("pagerduty", "enqueue", 202), ("slack", "chat.postMessage", 200)]  # any order
    [trigger] = pagerduty_bodies(report)
    assert (trigger["event_action"], trigger["dedup_key"]) == ("trigger", DEDUP_KEY)
    assert trigger["payload"]["severity"] == "critical"
    assert NAME in trigger["payload"]["summary"]
    [incident] = report["incidents"]
    assert (incident["status"], incident["check_type"]) == ("OPEN", "ALARM_RESPONDER_HEALTH")


def test_a_hot_clusters_contributor_pages_naming_it_and_the_gpu_alarms_own_alarm_pages_no_one() -> None:
    # Given the GPU temperature alarm's own ALARM and its contributor for gpu-training, each through the rule
    report = run([load_event(GPU_ALARM)], [load_event(CONTRIBUTOR_ALARM)])

    # Then one Slack root and one PagerDuty trigger, the contributor's, naming the cluster and the temperature
    assert [event["matched_rules"] for event in report["events"]] == [["AlarmStateChangeRule"]] * 2
    assert sorted(calls(report)) == [("pagerduty", "enqueue", 202), ("slack", "chat.postMessage", 200)]
    [trigger] = pagerduty_bodies(report)
    assert (trigger["event_action"], trigger["dedup_key"]) == ("trigger", CONTRIBUTOR_KEY)
    assert trigger["payload"]["summary"].startswith("GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)")
    [root] = incident_roots(report)
    assert "GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)" in root["text"]


def test_a_contributors_ok_resolves_its_page() -> None:
    report = run([load_event(CONTRIBUTOR_ALARM)], [load_event(CONTRIBUTOR_OK)])

    trigger, resolve = pagerduty_bodies(report)
    assert (trigger["dedup_key"], resolve["event_action"], resolve["dedup_key"]) == (
        CONTRIBUTOR_KEY,
        "resolve",
        CONTRIBUTOR_KEY,
    )
    [root] = incident_roots(report)
    assert root["text"].startswith("RESOLVED")


def test_a_malformed_contributor_event_is_dead_lettered_and_counted_not_retried() -> None:
    hostile = load_event("malformed/alarm-contributor-hostile-id.json")

    report = run([hostile])

    [message] = report["dlq"]
    assert message["body"]["id"] == hostile["id"]
    assert message["message_attributes"]["reason"].startswith("malformed: invalid event")
    assert report["requests"] == []


def test_its_ok_resolves_with_the_same_dedup_key_and_the_slack_root_ends_resolved(
    alarm: dict[str, Any], ok: dict[str, Any]
) -> None:
    # Given the alarm's ALARM, then its OK
    report = run([alarm], [ok])

    # Then PagerDuty is resolved with the trigger's key, and the one Slack root says RESOLVED
    trigger, resolve = pagerduty_bodies(report)
    assert (resolve["event_action"], resolve["dedup_key"]) == ("resolve", trigger["dedup_key"])
    [root] = incident_roots(report)
    assert root["text"].startswith("RESOLVED")


def test_ok_before_alarm_and_duplicates_give_one_closed_incident_that_never_pages(
    alarm: dict[str, Any], ok: dict[str, Any]
) -> None:
    # Given the OK delivered first (twice), then the ALARM it ended (a late, duplicated delivery)
    report = run([ok], [ok], [alarm])

    # Then one incident, closed from the start: Slack is told, with the duration; nothing pages
    [incident] = report["incidents"]
    assert incident["status"] == "CLOSED"
    assert {service for service, _, _ in calls(report)} == {"slack"}
    [root] = incident_roots(report)
    assert root["text"].startswith("RESOLVED")


def test_a_restart_app_xid_alarm_is_a_warning_that_stays_in_slack() -> None:
    # Given the RESTART_APP XID count alarm's contributor for a cluster going to ALARM
    raw = load_event(CONTRIBUTOR_ALARM)
    name = "gpu-fault-responder.gpu-restart-app-xids"
    raw["detail"]["alarmName"] = name
    raw["resources"] = [f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{name}"]
    report = run([raw])

    # Then it is a warning: Slack only, with the default routing file
    assert [service for service, _, _ in calls(report)] == ["slack"]
    [incident] = report["incidents"]
    assert incident["classification"]["severity"] == "warning"


def test_an_alarm_of_another_stack_never_reaches_the_router(alarm: dict[str, Any]) -> None:
    # Given an alarm state change of an alarm not named after this stack
    foreign = copy.deepcopy(alarm)
    foreign["detail"]["alarmName"] = "someone-else.gpu-temperature"
    foreign["resources"] = ["arn:aws:cloudwatch:us-west-2:123456789012:alarm:someone-else.gpu-temperature"]

    # When it is put on the bus
    report = run([foreign])

    # Then no rule matches it and nothing is sent
    assert report["events"][0]["matched_rules"] == []
    assert report["requests"] == []


def test_a_malformed_alarm_event_is_dead_lettered_and_counted_not_retried(alarm: dict[str, Any]) -> None:
    # Given an alarm state change whose resources name something other than the alarm
    hostile = copy.deepcopy(alarm)
    hostile["resources"] = ["arn:aws:ecs:us-west-2:123456789012:cluster/gpu-inference"]

    # When the router receives it
    report = run([hostile])

    # Then it is dead-lettered at once with a reason, and nothing is sent
    [message] = report["dlq"]
    assert message["body"]["id"] == hostile["id"]
    assert message["message_attributes"]["reason"].startswith("malformed: invalid event")
    assert report["requests"] == []
