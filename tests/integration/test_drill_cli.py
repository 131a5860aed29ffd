"""`python -m fault_responder.cli drill` in process against moto: what it refuses, what it leaves behind when a
hop or the injector fails. The whole path (the stack's rules, router, Slack and PagerDuty stand-ins, emulated ECS)
is in the drill-* scenarios (tests/scenarios/test_shipped_scenarios.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.drill_aws import INJECTOR_FAMILY, DrillAwsError, put_events
from fault_responder.cli.main import main
from tests.integration.tables import create_incidents_table

TABLE = "gpu-fault-responder-IncidentsTable-TEST"
TARGET = ["--table", TABLE, "--region", "us-east-1"]
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}
DRILL_TAG = [{"key": "fault-responder:drill-target", "value": "true"}]


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        create_incidents_table(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
        yield boto3.client("ecs", region_name="us-east-1")


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main([*argv, *TARGET])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def injector_revisions(ecs: Any) -> dict[str, list[str]]:
    return {
        status: ecs.list_task_definitions(familyPrefix=INJECTOR_FAMILY, status=status)["taskDefinitionArns"]
        for status in ("ACTIVE", "INACTIVE")
    }


def test_the_dcgm_drill_refuses_without_yes_and_registers_nothing(aws: Any, capsys: pytest.CaptureFixture[str]) -> None:
    aws.create_cluster(clusterName="gpu-test", tags=DRILL_TAG)
    status, _, err = cli(capsys, "drill", "--dcgm", "--cluster", "gpu-test")
    assert status == 2
    assert "injects a real XID" in err and "Give --yes" in err
    assert injector_revisions(aws) == {"ACTIVE": [], "INACTIVE": []}


def test_the_dcgm_drill_refuses_a_cluster_not_tagged_as_a_drill_target(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    aws.create_cluster(clusterName="production", tags=[{"key": "fault-responder:drill-target", "value": "false"}])
    status, _, err = cli(capsys, "drill", "--dcgm", "--cluster", "production", "--yes")
    assert status == 2
    assert "cluster 'production' is not a drill target: tag it fault-responder:drill-target=true" in err
    assert injector_revisions(aws) == {"ACTIVE": [], "INACTIVE": []}


def test_the_dcgm_drill_on_a_cluster_that_does_not_exist_is_an_error(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = cli(capsys, "drill", "--dcgm", "--cluster", "nowhere", "--yes")
    assert status == 1 and "no active ECS cluster named 'nowhere'" in err


def test_an_injector_that_cannot_be_placed_fails_and_its_task_definition_is_deregistered(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given its only instance DRAINING, RunTask places nothing.
    aws.create_cluster(clusterName="gpu-test", tags=DRILL_TAG)
    ec2 = boto3.client("ec2", region_name="us-east-1")
    ec2_id = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    registered = aws.register_container_instance(
        cluster="gpu-test", instanceIdentityDocument=json.dumps({"instanceId": ec2_id})
    )["containerInstance"]["containerInstanceArn"]
    aws.update_container_instances_state(cluster="gpu-test", containerInstances=[registered], status="DRAINING")
    status, _, err = cli(capsys, "drill", "--dcgm", "--cluster", "gpu-test", "--yes")
    assert status == 1 and "RunTask placed no injector task" in err
    revisions = injector_revisions(aws)
    assert revisions["ACTIVE"] == [] and len(revisions["INACTIVE"]) == 1
    [definition] = [aws.describe_task_definition(taskDefinition=arn)["taskDefinition"] for arn in revisions["INACTIVE"]]
    [container] = definition["containerDefinitions"]
    assert (definition["pidMode"], container["privileged"]) == ("host", True)


def test_a_drill_no_stack_answers_fails_at_the_incident_hop_and_still_sends_its_ok(
    aws: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a bus with no rule for the drill (moto's own EventBridge), the events land in a queue and nowhere else.
    events, sqs = boto3.client("events", region_name="us-east-1"), boto3.client("sqs", region_name="us-east-1")
    queue = sqs.create_queue(QueueName="seen")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="seen", EventPattern=json.dumps({"source": ["fault-responder.drill"]}))
    events.put_targets(Rule="seen", Targets=[{"Id": "q", "Arn": queue_arn}])
    status, out, _ = cli(
        capsys, "drill", "--cluster", "gpu-test", "--instance", "i-1", "--incident-timeout", "0.3",
        "--poll-seconds", "0.1",
    )  # fmt: skip
    assert status == 1
    assert "  1. event     event put on the default bus  ok " in out
    assert "  2. incident  incident recorded             FAILED  after 0s: no incident in the incidents table\n" in out
    assert out.endswith("Drill FAILED at: incident, slack, pagerduty, resolve\n")
    bodies = [json.loads(m["Body"]) for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]]
    assert [b["detail"]["overallStatus"] for b in sorted(bodies, key=lambda b: b["time"])] == ["IMPAIRED", "OK"]
    assert {b["source"] for b in bodies} == {"fault-responder.drill"}
    assert {b["detail"]["containerInstanceArn"].rsplit("/", 1)[-1] for b in bodies} == {"i-1"}


def test_an_entry_eventbridge_rejects_is_an_error_naming_why(aws: Any) -> None:
    events = boto3.client("events", region_name="us-east-1")
    with pytest.raises(DrillAwsError, match="EventBridge rejected the drill event: MalformedDetail"):
        put_events(events, [{"Source": "fault-responder.drill", "DetailType": "x", "Detail": "{not json"}])


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--account", "2222"], "not an account id"),
        (["--account", "222222222222", "--account-region", "us-west"], "not a Region code"),
        (["--account", "222222222222"], "--external-id"),
    ],
)
def test_a_member_accounts_drill_needs_the_account_its_region_and_the_external_id(
    aws: Any, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    status, out, err = cli(capsys, "drill", *argv)

    assert status == 2
    assert said in err
    assert out == ""
