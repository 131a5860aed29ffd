"""`silence add` against an organization's stack (docs/silences.md, "Across an organization"): a silence that names no
account, cluster or instance needs --all-accounts, and what it would mute now is shown across the organization, by
account and Region, with the channels told of its start and end. A single-account stack's `silence add` is unchanged.

In process against moto: a CloudFormation stack with the responder's parameters and incidents table, its open
incidents written by the router's own code (AlertService over the DynamoDB store) from faults in two accounts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import StorePorts
from fault_responder.cli.main import main
from fault_responder.core.accounts import Accounts
from fault_responder.incidents import lifecycle
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import incidents_table
from tests.unit.test_identity import PROD, SANDBOX, fault

STACK = "gpu-fault-responder-org"
HOME = "123456789012"
NAMES = f"{PROD}=prod-ml,{SANDBOX}=sandbox-ml"
FAKE_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


def deploy(parameters: dict[str, str]) -> str:
    """A stack with the responder's parameters and incidents table (its Open index included); its table's name."""
    template = {
        "Parameters": {name: {"Type": "String", "Default": ""} for name in parameters},
        "Resources": {"IncidentsTable": {"Type": "AWS::DynamoDB::Table", "Properties": incidents_table()}},
    }
    cloudformation = boto3.client("cloudformation", region_name="us-east-1")
    cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": name, "ParameterValue": value} for name, value in parameters.items()],
    )
    resource = cloudformation.describe_stack_resource(StackName=STACK, LogicalResourceId="IncidentsTable")
    return str(resource["StackResourceDetail"]["PhysicalResourceId"])


def faults_in(table: str, accounts: Accounts) -> None:
    """Open incidents, written as the router writes them: two in the prod account (us-west-2), one in the sandbox
    account (eu-west-1), on clusters of the same name."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    routing = load_routing("default.yaml")
    store = DynamoDBInstanceStore(table, timedelta(days=30), client)
    service = AlertService(
        StorePorts(store, store, store),
        Router(routing),
        ReceiverCourier(RecordingChannels()),
        lifecycle.Settings(accounts=accounts),
        grouping=routing.grouping,
    )
    now = datetime.now(UTC) - timedelta(minutes=10)
    for account, region, number in ((PROD, "us-west-2", 1), (PROD, "us-west-2", 2), (SANDBOX, "eu-west-1", 3)):
        service.handle(fault(account, region, number, now + timedelta(seconds=number)))


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("USER", "alice")
    with mock_aws():
        yield


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def add(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    target = ["--stack", STACK, "--region", "us-east-1"]
    return cli(capsys, "silence", "add", "--duration", "1h", "--comment", "driver rollout", *argv, *target)


def stored(table: str) -> list[str]:
    items = boto3.client("dynamodb", region_name="us-east-1").query(
        TableName=table, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "SILENCE"}}
    )["Items"]
    return [item["sk"]["S"] for item in items]


def test_in_an_organization_a_silence_naming_no_account_cluster_or_instance_needs_all_accounts(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = deploy({"OrganizationId": "o-a1b2c3d4e5", "AccountNames": NAMES})
    faults_in(table, Accounts(home=(HOME, "us-east-1"), names={PROD: "prod-ml", SANDBOX: "sandbox-ml"}))

    refused = add(capsys, "--match", "severity=critical")
    narrowing_nothing = add(capsys, "--match", "severity=critical", "--match", "cluster!=gpu-a")

    for status, out, err in (refused, narrowing_nothing):
        assert (status, out) == (2, "")
        assert "would mute every account's and Region's incidents" in err and "--all-accounts" in err
    assert stored(table) == []

    # With --all-accounts it is made, and what it mutes now is shown, by account and Region
    status, out, err = add(capsys, "--match", "severity=critical", "--all-accounts")
    assert status == 0 and stored(table) == [out.strip()]
    lines = err.splitlines()
    assert lines[0] == "would mute now: 3 open incidents in 2 accounts and Regions"
    assert lines[1].startswith(f"  prod-ml ({PROD}), us-west-2: 2 (my-cluster/")
    assert lines[2].startswith(f"  sandbox-ml ({SANDBOX}), eu-west-1: 1 (my-cluster/")
    assert lines[3] == "its start and its end are told to: gpu-alerts"


def test_a_silence_of_one_account_shows_that_accounts_incidents_alone_and_a_dry_run_adds_nothing(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = deploy({"EnrolledAccounts": f"{PROD},{SANDBOX}", "AccountNames": NAMES})
    faults_in(table, Accounts(home=(HOME, "us-east-1"), names={PROD: "prod-ml", SANDBOX: "sandbox-ml"}))

    status, out, err = add(capsys, "--match", "account_name=sandbox-ml", "--dry-run")

    assert (status, out) == (0, "")
    assert stored(table) == []
    first, listed = err.splitlines()[:2]
    assert first == "would mute now: 1 open incident in 1 account and Region"
    assert listed.startswith(f"  sandbox-ml ({SANDBOX}), eu-west-1: 1 (my-cluster/{3:032x}/ACCELERATED_COMPUTE@")
    assert err.splitlines()[-1] == "not added (--dry-run)"


def test_a_single_account_stack_makes_any_silence_as_before_and_shows_nothing(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = deploy({"RoutingFile": "default.yaml"})

    status, out, err = add(capsys, "--match", "severity=critical")

    assert (status, err) == (0, "")
    assert stored(table) == [out.strip()]


def test_a_table_is_taken_as_an_organizations_only_when_said(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    table = deploy({})
    target = ["--table", table, "--region", "us-east-1"]
    argv = ["silence", "add", "--match", "severity=critical", "--duration", "1h", "--comment", "c"]

    assert cli(capsys, *argv, *target)[0] == 0
    status, _, err = cli(capsys, *argv, "--organization", *target)
    assert status == 2 and "--all-accounts" in err
