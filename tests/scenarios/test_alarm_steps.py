"""The stack's alarms in a scenario (docs/scenarios.md): `world.alarms` and the `alarm` step load as documented and
refuse what CloudWatch would not hold; setting one puts it in the CloudWatch emulation (sandbox/cloudwatch_emulation.py)
with its contributors and history, and its placeholders name what was set."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from sandbox.cloudwatch_emulation import CloudWatchEmulation
from sandbox.errors import SandboxError
from sandbox.scenario import Alarm, load_scenario
from sandbox.template import StackIdentity
from sandbox.world import World, set_alarm

REGION = "us-east-1"
NOW = datetime(2026, 4, 11, 2, 20, tzinfo=UTC)
HOT = """
world:
  alarms:
    - name: gpu-temperature
      state: ALARM
      series: 11
      since: now-2m
      contributors:
        - {id: 8f3a2c1d9e4b7a60, cluster: gpu-training, value: 93, since: now-2m}
        - {id: 1c7e5b9d3f2a8046, cluster: gpu-inference, value: 91.5}
"""


def _load(tmp_path: Path, text: str) -> Any:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return load_scenario(path).scenario


def test_an_alarm_and_an_alarm_step_load_with_cloudwatchs_wording(tmp_path: Path) -> None:
    scenario = _load(tmp_path, HOT + "events: [{reconcile: true}, {alarm: {name: gpu-temperature, state: OK}}]\n")

    [alarm] = scenario.world.alarms
    assert alarm.state_reason == "Threshold Crossed: 2 out of 11 time series evaluated to ALARM"
    training = alarm.contributors[0]
    assert training.all_attributes == {"ClusterName": "gpu-training"}
    assert training.state_reason(alarm.threshold, NOW) == (
        "Threshold Crossed: 1 datapoint was greater than the threshold (90.0). The most recent datapoint which crossed "
        "the threshold: [93.0 (11/04/26 02:19:00)]."
    )
    assert scenario.events[1].alarm.state_reason == "Threshold Crossed: no datapoint was greater than the threshold."


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (HOT + "events: [{alarm: {name: router-errors, state: OK}}]\n", "not one of world.alarms"),
        (HOT + "events: [{alarm: {name: gpu-temperature}, repeat: 2}]\n", "an alarm step takes no"),
        (
            "world: {alarms: [{name: a, state: OK, contributors: [{id: x}]}]}\nevents: [{reconcile: true}]\n",
            "a OK alarm has none",
        ),
        (
            "world: {alarms: [{name: a, state: ALARM, contributors: [{id: 'not/an id'}]}]}\n"
            "events: [{reconcile: true}]\n",
            "id",
        ),
        (
            "world: {alarms: [{name: a, state: ALARM, series: 1, contributors: [{id: x}, {id: y}]}]}\n"
            "events: [{reconcile: true}]\n",
            "more contributors in ALARM than the 1 series",
        ),
        ("world: {alarms: [{name: a}, {name: a}]}\nevents: [{reconcile: true}]\n", "two alarms have one name"),
        ("world: {alarms: [{name: a, contributors_error: Throttling}]}\nevents: [{reconcile: true}]\n", "error"),
        ("world: {alarms: [{name: a, since: yesterday}]}\nevents: [{reconcile: true}]\n", "since"),
    ],
)
def test_an_alarm_cloudwatch_would_not_hold_is_refused_saying_why(tmp_path: Path, text: str, says: str) -> None:
    with pytest.raises(SandboxError, match=says):
        _load(tmp_path, text)


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[World, Any, CloudWatchEmulation]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    with mock_aws(), CloudWatchEmulation() as emulation:
        client = boto3.client("cloudwatch", region_name=REGION)
        client.put_metric_alarm(
            AlarmName="stack.gpu-temperature",
            Namespace="ECS/ContainerInsights",
            MetricName="TaskGPUTemperature",
            Statistic="Maximum",
            Period=60,
            EvaluationPeriods=1,
            Threshold=90,
            ComparisonOperator="GreaterThanThreshold",
        )
        yield World(StackIdentity("stack", REGION), cloudwatch=emulation), client, emulation


def test_setting_an_alarm_puts_it_in_cloudwatch_and_its_placeholders_in_the_world(
    world: tuple[World, Any, CloudWatchEmulation], tmp_path: Path
) -> None:
    seeded, client, _ = world
    [alarm] = _load(tmp_path, HOT + "events: [{reconcile: true}]\n").world.alarms

    set_alarm(alarm, seeded, NOW)

    [described] = client.describe_alarms(AlarmNamePrefix="stack.")["MetricAlarms"]
    assert described["StateValue"] == "ALARM"
    assert described["StateTransitionedTimestamp"] == NOW - timedelta(minutes=2)
    listed = client.describe_alarm_contributors(AlarmName="stack.gpu-temperature")["AlarmContributors"]
    assert [(c["ContributorId"], c["ContributorAttributes"]["ClusterName"]) for c in listed] == [
        ("8f3a2c1d9e4b7a60", "gpu-training"),
        ("1c7e5b9d3f2a8046", "gpu-inference"),
    ]
    filled = seeded.fill(
        ["{{alarms.gpu-temperature.arn}}", "{{alarms.gpu-temperature.contributors.1c7e5b9d3f2a8046.since}}"]
    )
    assert filled == [
        "arn:aws:cloudwatch:us-east-1:123456789012:alarm:stack.gpu-temperature",
        "2026-04-11T02:20:00Z",
    ]


def test_an_alarm_step_makes_the_contributors_no_longer_listed_ok_in_the_history_and_keeps_their_placeholders(
    world: tuple[World, Any, CloudWatchEmulation], tmp_path: Path
) -> None:
    seeded, client, _ = world
    [alarm] = _load(tmp_path, HOT + "events: [{reconcile: true}]\n").world.alarms
    set_alarm(alarm, seeded, NOW)

    set_alarm(Alarm(name="gpu-temperature", state="OK", since="now"), seeded, NOW + timedelta(minutes=5))

    assert client.describe_alarm_contributors(AlarmName="stack.gpu-temperature")["AlarmContributors"] == []
    history = client.describe_alarm_history(
        AlarmName="stack.gpu-temperature", HistoryItemType="AlarmContributorStateUpdate", ScanBy="TimestampAscending"
    )["AlarmHistoryItems"]
    assert [(item["AlarmContributorId"], item["Timestamp"]) for item in history][-2:] == [
        ("8f3a2c1d9e4b7a60", NOW + timedelta(minutes=5)),
        ("1c7e5b9d3f2a8046", NOW + timedelta(minutes=5)),
    ]
    assert seeded.fill("{{alarms.gpu-temperature.contributors.8f3a2c1d9e4b7a60.since}}") == "2026-04-11T02:18:00Z"


def test_contributors_can_be_refused_and_answered_again(world: tuple[World, Any, CloudWatchEmulation]) -> None:
    seeded, client, _ = world
    refused = Alarm(name="gpu-temperature", state="ALARM", contributors_error="AccessDeniedException")
    set_alarm(refused, seeded, NOW)

    with pytest.raises(client.exceptions.ClientError, match="AccessDeniedException"):
        client.describe_alarm_contributors(AlarmName="stack.gpu-temperature")

    set_alarm(Alarm(name="gpu-temperature", state="ALARM"), seeded, NOW)
    assert client.describe_alarm_contributors(AlarmName="stack.gpu-temperature")["AlarmContributors"] == []


# --- A member account's alarms (forwarder.yaml's GPU alarms) ------------------------------------------------------

ORGANIZATION = """
parameters: {OrganizationId: o-a1b2c3d4e5}
world:
  accounts:
    - id: "222222222222"
      regions:
        - region: us-west-2
          alarms:
            - name: gpu-temperature
              state: ALARM
              contributors: [{id: 8f3a2c1d9e4b7a60, cluster: training, value: 93}]
"""


def test_a_member_accounts_alarm_and_a_step_naming_its_account_and_region_load(tmp_path: Path) -> None:
    scenario = _load(
        tmp_path,
        ORGANIZATION + "events: [{alarm: {account: '222222222222', region: us-west-2, name: gpu-temperature}}]\n",
    )

    [alarm] = scenario.world.accounts[0].regions[0].alarms
    assert (alarm.place, scenario.events[0].alarm.place) == (None, ("222222222222", "us-west-2"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            ORGANIZATION.replace("name: gpu-temperature", "name: router-errors") + "events: [{reconcile: true}]\n",
            "a member account's alarms are forwarder.yaml's",
        ),
        (
            ORGANIZATION + "events: [{alarm: {account: '222222222222', region: eu-west-1, name: gpu-temperature}}]\n",
            "gpu-temperature of 222222222222 eu-west-1, not one of world.alarms",
        ),
        (ORGANIZATION + "events: [{alarm: {name: gpu-temperature}}]\n", "not one of world.alarms"),
        (ORGANIZATION + "events: [{alarm: {account: '222222222222', name: gpu-temperature}}]\n", "together"),
        (
            "world: {alarms: [{name: a, account: '222222222222', region: us-west-2}]}\nevents: [{reconcile: true}]\n",
            "the stack's alarms name no account",
        ),
        (
            ORGANIZATION.replace("- region: us-west-2", "- region: us-west-2\n          forwarder: false")
            + "events: [{reconcile: true}]\n",
            "forwarder.yaml creates its GPU alarms where it forwards",
        ),
    ],
)
def test_a_member_alarm_the_forwarder_would_not_create_or_a_step_naming_none_is_refused(
    tmp_path: Path, text: str, says: str
) -> None:
    with pytest.raises(SandboxError, match=says):
        _load(tmp_path, text)


def test_setting_a_member_accounts_alarm_puts_it_in_that_accounts_cloudwatch_and_names_it_by_its_place(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    [alarm] = _load(tmp_path, ORGANIZATION + "events: [{reconcile: true}]\n").world.accounts[0].regions[0].alarms
    with mock_aws(), CloudWatchEmulation() as emulation:
        # Given the member account's CloudWatch, reached with credentials of that account
        credentials = boto3.client("sts").assume_role(
            RoleArn="arn:aws:iam::222222222222:role/OrganizationAccountAccessRole", RoleSessionName="test"
        )["Credentials"]
        member = boto3.client(
            "cloudwatch",
            region_name="us-west-2",
            aws_access_key_id=credentials["AccessKeyId"],
            aws_secret_access_key=credentials["SecretAccessKey"],
            aws_session_token=credentials["SessionToken"],
        )
        member.put_metric_alarm(
            AlarmName="stack.gpu-temperature",
            Namespace="ECS/ContainerInsights",
            MetricName="TaskGPUTemperature",
            Statistic="Maximum",
            Period=60,
            EvaluationPeriods=1,
            Threshold=90,
            ComparisonOperator="GreaterThanThreshold",
        )
        world = World(StackIdentity("stack", REGION), cloudwatch=emulation)

        # When the scenario sets it there
        set_alarm(alarm, world, NOW, ("222222222222", "us-west-2"))

        # Then that account's CloudWatch describes it with its contributor, and the stack's own knows nothing of it
        [described] = member.describe_alarms(AlarmNamePrefix="stack.")["MetricAlarms"]
        assert described["StateValue"] == "ALARM"
        listed = member.describe_alarm_contributors(AlarmName="stack.gpu-temperature")["AlarmContributors"]
        assert [c["ContributorId"] for c in listed] == ["8f3a2c1d9e4b7a60"]
        assert boto3.client("cloudwatch", region_name="us-west-2").describe_alarms()["MetricAlarms"] == []
        # ... and its placeholders name it by its account and Region
        assert world.fill("{{alarms.222222222222/us-west-2/gpu-temperature.arn}}") == (
            "arn:aws:cloudwatch:us-west-2:222222222222:alarm:stack.gpu-temperature"
        )
