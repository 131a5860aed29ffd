"""The alarms' reconciliation's CloudWatch adapter against moto (with DescribeAlarmContributors, DescribeAlarmHistory
and the pages moto lacks emulated: sandbox/cloudwatch_emulation.py): what it asks CloudWatch, how it reads the
answer, and what it says when the contributors cannot be read."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import botocore.loaders
import botocore.session
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from fault_responder.adapters.cloudwatch_alarms import CloudWatchAlarms, read_alarm, read_contributors, read_transition
from fault_responder.operations.alarm_reconcile import ContributorsUnavailableError, ObservedAlarm, UnreadableAlarm
from sandbox.cloudwatch_emulation import CloudWatchEmulation, Contributor

REGION = "us-east-1"
PREFIX = "gpu-fault-responder."
TEMPERATURE = f"{PREFIX}gpu-temperature"
NOW = datetime(2026, 4, 11, 2, 20, tzinfo=UTC)


def _contributor(number: int, since: datetime = NOW) -> Contributor:
    reason = f"Threshold Crossed: 1 datapoint was greater than the threshold (90.0): [{90 + number}.0]."
    return Contributor(f"{number:016x}", {"ClusterName": f"gpu-{number}"}, reason, since)


@pytest.fixture
def cloudwatch(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, CloudWatchEmulation]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws(), CloudWatchEmulation(contributor_page_size=2) as emulation:
        client = boto3.client("cloudwatch", region_name=REGION)
        for name in (TEMPERATURE, f"{PREFIX}router-errors", "other-stack.router-errors"):
            client.put_metric_alarm(
                AlarmName=name,
                Namespace="ECS/ContainerInsights",
                MetricName="TaskGPUTemperature",
                Statistic="Maximum",
                Period=60,
                EvaluationPeriods=1,
                Threshold=90,
                ComparisonOperator="GreaterThanThreshold",
            )
        yield client, emulation


def test_the_stacks_alarms_are_read_with_the_moment_each_entered_its_state(
    cloudwatch: tuple[Any, CloudWatchEmulation],
) -> None:
    client, emulation = cloudwatch
    emulation.set_alarm(TEMPERATURE, "ALARM", "3 out of 11 time series evaluated to ALARM", NOW)
    emulation.set_alarm(TEMPERATURE, "ALARM", "4 out of 11 time series evaluated to ALARM", NOW + timedelta(minutes=1))

    alarms = {alarm.name: alarm for alarm in CloudWatchAlarms(client).alarms(PREFIX)}

    assert sorted(alarms) == [TEMPERATURE, f"{PREFIX}router-errors"]
    alarm = alarms[TEMPERATURE]
    assert isinstance(alarm, ObservedAlarm)
    # (its reason changed since: StateUpdatedTimestamp moved, StateTransitionedTimestamp did not)
    assert (alarm.state, alarm.since, alarm.updated) == ("ALARM", NOW, NOW + timedelta(minutes=1))
    assert alarm.arn == f"arn:aws:cloudwatch:{REGION}:123456789012:alarm:{TEMPERATURE}"


def test_describe_alarms_is_read_page_by_page(cloudwatch: tuple[Any, CloudWatchEmulation]) -> None:
    client, _ = cloudwatch
    page = client.describe_alarms(AlarmNamePrefix=PREFIX, MaxRecords=1)

    assert len(page["MetricAlarms"]) == 1 and page["NextToken"]
    assert len(list(CloudWatchAlarms(client).alarms(PREFIX))) == 2


def test_contributors_are_read_page_by_page_with_their_attributes_and_moments(
    cloudwatch: tuple[Any, CloudWatchEmulation],
) -> None:
    client, emulation = cloudwatch
    hot = [_contributor(n, NOW - timedelta(minutes=n)) for n in range(5)]
    emulation.set_alarm(TEMPERATURE, "ALARM", "5 out of 11 time series evaluated to ALARM", NOW, contributors=hot)

    answer = CloudWatchAlarms(client, clock=lambda: NOW).contributors(TEMPERATURE, 500)

    assert answer.complete and answer.at == NOW
    assert [c.id for c in answer.listed] == [c.id for c in hot]
    first = answer.listed[1]
    assert first.attributes == (("ClusterName", "gpu-1"),) and first.since == NOW - timedelta(minutes=1)
    assert first.reason == hot[1].reason
    assert sum(r["operation"] == "DescribeAlarmContributors" for r in emulation.requests) == 3  # pages of 2


def test_more_contributors_than_asked_for_is_an_incomplete_answer_saying_so(
    cloudwatch: tuple[Any, CloudWatchEmulation],
) -> None:
    client, emulation = cloudwatch
    emulation.set_alarm(TEMPERATURE, "ALARM", "5 out of 11", NOW, contributors=[_contributor(n) for n in range(5)])

    answer = CloudWatchAlarms(client).contributors(TEMPERATURE, 3)

    assert not answer.complete and answer.why == "more than 3 in ALARM" and len(answer.listed) == 3


@pytest.mark.parametrize("error", ["AccessDeniedException", "ResourceNotFoundException", "ValidationError"])
def test_contributors_refused_are_unavailable_with_the_code_and_no_message(
    cloudwatch: tuple[Any, CloudWatchEmulation], error: str
) -> None:
    client, emulation = cloudwatch
    emulation.set_alarm(TEMPERATURE, "ALARM", "3 out of 11", NOW, error=error)

    with pytest.raises(ContributorsUnavailableError) as raised:
        CloudWatchAlarms(client).contributors(TEMPERATURE, 500)

    # (CloudWatch's message may name the role and the account: it is logged, not told)
    assert raised.value.reason == f"DescribeAlarmContributors answered {error}"


class _WithoutContributors(botocore.loaders.Loader):
    """botocore's service models, CloudWatch's without DescribeAlarmContributors (as botocore's before it had it)."""

    def load_service_model(self, service_name: str, type_name: str, api_version: str | None = None) -> Any:
        model = super().load_service_model(service_name, type_name, api_version)
        if (service_name, type_name) != ("cloudwatch", "service-2"):
            return model
        older = copy.deepcopy(model)
        del older["operations"]["DescribeAlarmContributors"]
        return older


def test_an_sdk_without_describe_alarm_contributors_makes_them_unavailable(
    cloudwatch: tuple[Any, CloudWatchEmulation],
) -> None:
    # Given a CloudWatch client of an SDK whose model has no DescribeAlarmContributors
    session = botocore.session.Session()
    session.register_component("data_loader", _WithoutContributors())
    old_client = session.create_client("cloudwatch", region_name=REGION)
    assert not hasattr(old_client, "describe_alarm_contributors")

    # When its contributors are asked for; Then they are unavailable, and the reason names the SDK
    with pytest.raises(
        ContributorsUnavailableError, match=r"this SDK \(botocore [0-9.]+\) has no DescribeAlarmContributors"
    ):
        CloudWatchAlarms(old_client).contributors(TEMPERATURE, 500)


def test_a_page_that_fails_after_others_were_read_leaves_an_incomplete_answer(
    cloudwatch: tuple[Any, CloudWatchEmulation], monkeypatch: pytest.MonkeyPatch
) -> None:
    client, emulation = cloudwatch
    emulation.set_alarm(TEMPERATURE, "ALARM", "5 out of 11", NOW, contributors=[_contributor(n) for n in range(5)])
    answered = client.describe_alarm_contributors
    calls = iter(range(10))

    def second_page_refused(**kwargs: Any) -> Any:
        if next(calls) == 1:
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "Describe")
        return answered(**kwargs)

    monkeypatch.setattr(client, "describe_alarm_contributors", second_page_refused)

    answer = CloudWatchAlarms(client).contributors(TEMPERATURE, 500)

    assert not answer.complete and len(answer.listed) == 2
    assert answer.why == "DescribeAlarmContributors answered ThrottlingException"


def test_the_history_is_read_as_the_states_each_change_entered(cloudwatch: tuple[Any, CloudWatchEmulation]) -> None:
    client, emulation = cloudwatch
    began, ended = NOW - timedelta(minutes=6), NOW - timedelta(minutes=2)
    emulation.set_alarm(TEMPERATURE, "ALARM", "1 out of 11", began, contributors=[_contributor(1, began)])
    emulation.set_alarm(TEMPERATURE, "OK", "0 out of 11", ended, contributors=[])
    source = CloudWatchAlarms(client)

    own = source.history(TEMPERATURE, NOW - timedelta(minutes=15), contributors=False, limit=500)
    series = source.history(TEMPERATURE, NOW - timedelta(minutes=15), contributors=True, limit=500)
    recent = source.history(TEMPERATURE, NOW - timedelta(minutes=4), contributors=False, limit=500)

    assert [(t.state, t.at) for t in own] == [("OK", ended), ("ALARM", began)]
    assert [(t.state, t.at, t.contributor and t.contributor.id) for t in series] == [
        ("OK", ended, f"{1:016x}"),
        ("ALARM", began, f"{1:016x}"),
    ]
    assert [t.state for t in recent] == ["OK"]


# --- Reading strictly ------------------------------------------------------------------------------------


ALARM = {
    "AlarmName": TEMPERATURE,
    "AlarmArn": f"arn:aws:cloudwatch:{REGION}:123456789012:alarm:{TEMPERATURE}",
    "StateValue": "ALARM",
    "StateReason": "3 out of 11 time series evaluated to ALARM",
    "StateUpdatedTimestamp": NOW,
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"StateValue": None}, "StateValue"),
        ({"AlarmArn": "arn:aws:ecs:us-east-1:123456789012:cluster/x"}, "AlarmArn"),
        ({"StateUpdatedTimestamp": datetime(2026, 4, 11, 2, 20)}, "time zone"),
        ({"AlarmName": ""}, "AlarmName"),
    ],
)
def test_an_alarm_not_as_documented_is_unreadable_saying_why(change: dict[str, Any], says: str) -> None:
    raw = {key: value for key, value in {**ALARM, **change}.items() if value is not None}

    read = read_alarm(raw)

    assert isinstance(read, UnreadableAlarm) and says in read.reason


def test_an_alarm_without_state_transitioned_timestamp_is_dated_by_its_last_update() -> None:
    read = read_alarm(ALARM)

    assert isinstance(read, ObservedAlarm) and read.since == read.updated == NOW


def test_a_reason_longer_than_cloudwatch_writes_is_read_as_absent() -> None:
    read = read_alarm({**ALARM, "StateReason": "x" * 5000})

    assert isinstance(read, ObservedAlarm) and read.reason is None


@pytest.mark.parametrize(
    "contributor",
    [
        {"ContributorId": "not/an#id", "ContributorAttributes": {}, "StateReason": "r"},
        {"ContributorId": "x" * 17, "ContributorAttributes": {}, "StateReason": "r"},
        {"ContributorId": "ok", "ContributorAttributes": {"ClusterName": 7}, "StateReason": "r"},
        {"ContributorId": "ok", "ContributorAttributes": {f"k{n}": "v" for n in range(151)}, "StateReason": "r"},
    ],
)
def test_a_contributor_not_as_documented_makes_the_answer_incomplete(contributor: dict[str, Any]) -> None:
    good = {"ContributorId": "a1", "ContributorAttributes": {"ClusterName": "gpu"}, "StateReason": "r"}

    listed, why = read_contributors({"AlarmContributors": [good, contributor]})

    assert [c.id for c in listed] == ["a1"]
    assert why is not None and why.startswith("a contributor could not be read")


@pytest.mark.parametrize(
    "item",
    [
        {"Timestamp": NOW, "HistoryData": "not json"},
        {"Timestamp": NOW, "HistoryData": '{"newState": {}}'},
        {"Timestamp": datetime(2026, 4, 11), "HistoryData": '{"newState": {"stateValue": "OK"}}'},
        {"HistoryData": '{"newState": {"stateValue": "OK"}}'},
    ],
)
def test_a_history_item_not_as_documented_is_skipped(item: dict[str, Any]) -> None:
    assert read_transition(item, contributors=False) is None


@pytest.mark.parametrize(
    "shape",
    [
        {"Dimensions": [{"Name": "FunctionName", "Value": "f"}, {"Name": "ClusterName", "Value": "gpu-training"}]},
        {
            "Metrics": [
                {"Id": "e", "Expression": "m1 * 2"},
                {
                    "Id": "m1",
                    "MetricStat": {"Metric": {"Dimensions": [{"Name": "ClusterName", "Value": "gpu-training"}]}},
                },
            ]
        },
    ],
)
def test_an_alarms_cluster_is_its_metrics_cluster_name_dimension(shape: dict[str, Any]) -> None:
    read = read_alarm({**ALARM, **shape})

    assert isinstance(read, ObservedAlarm) and read.cluster == "gpu-training"
    assert isinstance(plain := read_alarm(ALARM), ObservedAlarm) and plain.cluster is None
