"""The stack's alarms as template.yaml declares them (docs/alarms.md): every alarm named so that
AlarmStateChangeRule sends it to the router, the rule delivering like the ECS rules, the own-health alarms also on
the second path (OwnHealthAlarmTopic), and NotificationsFailed watched with the dimensions the router emits."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from fault_responder.core import observability
from fault_responder.incidents.alarms import (
    GPU_RESTART_APP_XIDS,
    GPU_TEMPERATURE,
    MEMBER_ACCOUNTS,
    PER_CONTRIBUTOR,
    RESPONDER_HEALTH,
    alarm_check_type,
)
from sandbox.template import load_template
from tests.conftest import ROOT

TEMPLATE = load_template(ROOT / "template.yaml")
RESOURCES = TEMPLATE.resources
ALARMS = sorted(name for name, spec in RESOURCES.items() if spec["Type"] == "AWS::CloudWatch::Alarm")
GPU_ALARMS = {"GpuTemperatureAlarm", "GpuRestartAppXidAlarm"}
OWN_HEALTH = sorted(set(ALARMS) - GPU_ALARMS)
PREFIX = "${AWS::StackName}."


def _props(name: str) -> dict[str, Any]:
    props: dict[str, Any] = RESOURCES[name]["Properties"]
    return props


def _actions(value: Any) -> list[list[Any]]:
    """Both branches of an `Fn::If`, or the list itself."""
    if isinstance(value, dict) and "Fn::If" in value:
        return [branch for branch in value["Fn::If"][1:] if isinstance(branch, list)]
    return [value]


def test_the_recommended_and_own_health_alarms_exist() -> None:
    assert set(ALARMS) >= {
        "GpuTemperatureAlarm",
        "GpuRestartAppXidAlarm",
        "RouterErrorsAlarm",
        "RouterThrottlesAlarm",
        "AlertQueueAgeAlarm",
        "NotificationsFailedAlarm",
        "AlertDLQAlarm",
        "RuleTargetDLQAlarm",
        "ResumeTriggerDLQAlarm",
        "ResumeTrainingFailedAlarm",
        "ClosurePendingAlarm",
    }


@pytest.mark.parametrize("name", ALARMS)
def test_every_alarm_is_named_so_the_alarm_rule_matches_it(name: str) -> None:
    # Given an alarm of the stack and the rule that sends alarm state changes to the router
    pattern = _props("AlarmStateChangeRule")["EventPattern"]
    [prefix] = pattern["detail"]["alarmName"]

    # When its name is read, Then it starts with the rule's prefix: the stack's name and a dot
    assert prefix == {"prefix": {"Fn::Sub": PREFIX}}
    assert _props(name)["AlarmName"]["Fn::Sub"].startswith(PREFIX)


@pytest.mark.parametrize("name", ALARMS)
def test_the_router_knows_every_alarm_by_its_name(name: str) -> None:
    # Given an alarm's name as deployed in a stack named "prod"
    deployed = _props(name)["AlarmName"]["Fn::Sub"].replace(PREFIX, "prod.")

    # When the router reads what kind of alarm it is, Then the GPU alarms are themselves and every other one is
    # the responder's own health (never the catch-all ALARM)
    expected = {
        "GpuTemperatureAlarm": GPU_TEMPERATURE,
        "GpuRestartAppXidAlarm": GPU_RESTART_APP_XIDS,
        "MemberAccountsAlarm": MEMBER_ACCOUNTS,
    }
    assert alarm_check_type(deployed) == expected.get(name, RESPONDER_HEALTH)


def test_the_alarm_rule_delivers_to_the_alert_queue_as_the_ecs_rules_do() -> None:
    # Given the alarm rule and the health change rule
    alarm_rule = _props("AlarmStateChangeRule")
    health_rule = _props("HealthChangeRule")

    # Then it matches CloudWatch's alarm state changes and its alarms' contributor state changes, and its one target
    # is the same as the health rule's: the alert queue, with the rule target DLQ and the same retry policy
    assert alarm_rule["EventPattern"]["source"] == ["aws.cloudwatch"]
    assert alarm_rule["EventPattern"]["detail-type"] == [
        "CloudWatch Alarm State Change",
        "CloudWatch Alarm Contributor State Change",
    ]
    assert alarm_rule["Targets"] == health_rule["Targets"]
    # ... and the queue lets it deliver
    [statement] = _props("AlertQueuePolicy")["PolicyDocument"]["Statement"]
    assert {"Fn::GetAtt": ["AlarmStateChangeRule", "Arn"]} in statement["Condition"]["ArnEquals"]["aws:SourceArn"]


@pytest.mark.parametrize("name", OWN_HEALTH)
def test_own_health_alarms_also_take_the_second_path_on_alarm_and_ok(name: str) -> None:
    props = _props(name)
    for key in ("AlarmActions", "OKActions"):
        for branch in _actions(props[key]):
            assert {"Ref": "OwnHealthAlarmTopic"} in branch, f"{name} {key}"


@pytest.mark.parametrize("name", sorted(GPU_ALARMS))
def test_gpu_alarms_go_through_the_router_only_and_watch_every_cluster(name: str) -> None:
    props = _props(name)
    assert "OwnHealthAlarmTopic" not in json.dumps(props)
    [query] = props["Metrics"]
    assert query["Expression"].startswith("SELECT MAX(TaskGPU")
    assert 'FROM "ECS/ContainerInsights" GROUP BY ClusterName' in query["Expression"]
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["TreatMissingData"] == "notBreaching"


def test_the_gpu_alarm_thresholds_are_parameters_with_aws_recommended_defaults() -> None:
    assert _props("GpuTemperatureAlarm")["Threshold"] == {"Ref": "GpuTemperatureThreshold"}
    assert _props("GpuRestartAppXidAlarm")["Threshold"] == {"Ref": "GpuRestartAppXidThreshold"}
    assert TEMPLATE.parameters["GpuTemperatureThreshold"]["Default"] == 90
    assert TEMPLATE.parameters["GpuRestartAppXidThreshold"]["Default"] == 0


def test_notifications_failed_is_watched_with_the_dimensions_the_router_emits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given the alarm's metrics and the router's own EMF line for one failed Slack delivery
    alarm_metrics = [
        m["MetricStat"]["Metric"] for m in _props("NotificationsFailedAlarm")["Metrics"] if "MetricStat" in m
    ]

    variables = TEMPLATE.body["Globals"]["Function"]["Environment"]["Variables"]
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", variables["POWERTOOLS_SERVICE_NAME"])  # as the template sets it
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        observability.count("NotificationsFailed", "Channel", "slack")
    emf = json.loads(printed.getvalue().strip().splitlines()[-1])
    [directive] = emf["_aws"]["CloudWatchMetrics"]
    [dimension_names] = directive["Dimensions"]

    # Then the alarm watches the namespace and every dimension the router emits, for both channels
    assert observability.NAMESPACE == variables["POWERTOOLS_METRICS_NAMESPACE"] == directive["Namespace"]
    for metric in alarm_metrics:
        assert metric["Namespace"] == directive["Namespace"]
        assert metric["MetricName"] == "NotificationsFailed"
        assert sorted(d["Name"] for d in metric["Dimensions"]) == sorted(dimension_names)
        service = next(d["Value"] for d in metric["Dimensions"] if d["Name"] == "service")
        assert service == variables["POWERTOOLS_SERVICE_NAME"]
    channels = {next(d["Value"] for d in m["Dimensions"] if d["Name"] == "Channel") for m in alarm_metrics}
    assert channels == {"slack", "pagerduty"}


def test_closures_pending_too_long_are_an_own_health_alarm_on_the_sweeps_metric() -> None:
    # Given the closure-pending alarm and the functions' metric namespace and service as the template sets them
    props = _props("ClosurePendingAlarm")
    variables = TEMPLATE.body["Globals"]["Function"]["Environment"]["Variables"]

    # Then it watches the age of the oldest closure not yet delivered to every receiver, as the sweep emits it once
    # per run (its Sweep dimension, and the service dimension Powertools adds), in the functions' namespace
    assert (props["Namespace"], props["MetricName"]) == (
        variables["POWERTOOLS_METRICS_NAMESPACE"],
        "PendingClosureAgeMinutes",
    )
    assert {d["Name"]: d["Value"] for d in props["Dimensions"]} == {
        "Sweep": "closures",
        "service": variables["POWERTOOLS_SERVICE_NAME"],
    }
    # ... and fires in the first minute whose oldest pending closure is ClosurePendingAlarmMinutes old (15 by
    # default), while no data (no sweep run reported) is no alarm
    assert (props["Statistic"], props["Period"], props["EvaluationPeriods"]) == ("Maximum", 60, 1)
    assert props["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert props["Threshold"] == {"Ref": "ClosurePendingAlarmMinutes"}
    assert TEMPLATE.parameters["ClosurePendingAlarmMinutes"]["Default"] == 15
    assert props["TreatMissingData"] == "notBreaching"


def test_the_topic_admits_only_this_stacks_alarms_of_this_account() -> None:
    [statement] = _props("OwnHealthAlarmTopicPolicy")["PolicyDocument"]["Statement"]
    assert statement["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert statement["Action"] == "sns:Publish"
    assert statement["Resource"] == {"Ref": "OwnHealthAlarmTopic"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert statement["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Sub"].endswith(":alarm:" + PREFIX + "*")


def test_the_pagerduty_subscription_reads_its_url_from_the_secret_at_deploy_time() -> None:
    # Given the optional HTTPS subscription of the second path
    subscription = RESOURCES["OwnHealthPagerDutySubscription"]
    endpoint = subscription["Properties"]["Endpoint"]["Fn::Sub"]

    # Then it exists only when asked for, and its endpoint is a dynamic reference, never a URL in the template
    assert subscription["Condition"] == "OwnHealthPagesPagerDuty"
    assert subscription["Properties"]["Protocol"] == "https"
    assert endpoint == "{{resolve:secretsmanager:${PagerDutySecretName}:SecretString:cloudwatch_integration_url}}"
    assert "events.pagerduty.com/integration" not in (ROOT / "template.yaml").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", ALARMS)
def test_the_alarms_told_per_contributor_are_exactly_the_group_by_queries(name: str) -> None:
    # Given an alarm of the stack and what kind the router reads from its name
    props = _props(name)
    kind = alarm_check_type(props["AlarmName"]["Fn::Sub"].replace(PREFIX, "prod."))

    # When its metrics are read
    expressions = [metric.get("Expression", "") for metric in props.get("Metrics", [])]
    grouped = any("GROUP BY" in expression for expression in expressions)

    # Then the router tells its contributors instead of the alarm's own ALARM exactly when it is a Metrics Insights
    # GROUP BY query (one series per cluster): a single-series alarm keeps its own incident
    assert (kind in PER_CONTRIBUTOR) == grouped
