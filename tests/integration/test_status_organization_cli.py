"""`status` against an organization's stack (docs/organization.md, docs/operations.md): the open incidents and fleet
incidents listed under each account and Region (its name and id), the stack's own first, each row saying where it is
and the view counting them by account; a member account's alarm keyed as the router keys it (its account and Region
in its fingerprint). A single-account stack's status says nothing of accounts.

In process against moto: a CloudFormation stack with the responder's parameters and incidents table, its open
incidents written by the router's own code (AlertService over the DynamoDB store)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import StorePorts
from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.incidents import lifecycle
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import load_event
from tests.integration.test_silence_organization_cli import HOME, NAMES, aws, cli, deploy
from tests.unit.test_identity import PROD, SANDBOX, fault

__all__ = ["aws"]  # the fixture, used by name

ORGANIZATION = Accounts(home=(HOME, "us-east-1"), names={PROD: "prod-ml", SANDBOX: "sandbox-ml"})
ALARM = "gpu-fault-responder-org.gpu-temperature"


def contributor_alarm(account: str, region: str, at: datetime) -> dict[str, Any]:
    """The GPU temperature alarm's contributor (cluster gpu-training) in ALARM, in `account` and `region` (a member's
    forwarder creates the alarm under the central stack's name)."""
    event = copy.deepcopy(load_event("alarm/gpu-temperature-contributor-alarm.json"))
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event.update(
        id=f"contributor-{account}-{region}",
        account=account,
        region=region,
        time=stamp,
        resources=[f"arn:aws:cloudwatch:{region}:{account}:alarm:{ALARM}"],
    )
    event["detail"]["alarmName"] = ALARM
    event["detail"]["state"]["timestamp"] = at.strftime("%Y-%m-%dT%H:%M:%S.000+0000")
    return event


def record(table: str, events: list[dict[str, Any]], accounts: Accounts) -> None:
    """The events handled as the router handles them, into the stack's table."""
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
    for event in events:
        service.handle(event)


def organization_faults(now: datetime) -> list[dict[str, Any]]:
    """Two faults in prod-ml (us-west-2), one in sandbox-ml (eu-west-1), one at home; the GPU alarm's contributor in
    prod-ml (us-west-2)."""
    return [
        fault(PROD, "us-west-2", 1, now + timedelta(seconds=1)),
        fault(PROD, "us-west-2", 2, now + timedelta(seconds=2)),
        fault(SANDBOX, "eu-west-1", 3, now + timedelta(seconds=3)),
        fault(HOME, "us-east-1", 4, now + timedelta(seconds=4)),
        contributor_alarm(PROD, "us-west-2", now + timedelta(seconds=5)),
    ]


def status(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return cli(capsys, "status", *argv)


def test_an_organizations_status_lists_the_incidents_under_each_account_and_region_the_stacks_own_first(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an organization's stack with open incidents in three accounts and Regions
    table = deploy({"OrganizationId": "o-a1b2c3d4e5", "AccountNames": NAMES})
    record(table, organization_faults(datetime.now(UTC) - timedelta(minutes=10)), ORGANIZATION)

    # When status reads it
    code, out, err = status(capsys, "--stack", "gpu-fault-responder-org", "--region", "us-east-1")

    # Then each account and Region heads its incidents, by name and id, the stack's own first
    assert (code, err) == (0, "")
    assert "Open incidents: 5, in 3 accounts and Regions" in out
    headings = [line.strip() for line in out.splitlines() if line.startswith("  ") and not line.startswith("    ")]
    assert headings[:3] == [
        f"{HOME}, us-east-1 (this stack's): 1",
        f"prod-ml ({PROD}), us-west-2: 3",
        f"sandbox-ml ({SANDBOX}), eu-west-1: 1",
    ]
    # ... and the member's alarm is keyed with its account and Region, as the router keys it
    assert f"cloudwatch-alarm/{PROD}/us-west-2/{ALARM}/" in out
    assert f"cloudwatch-alarm/us-west-2/{ALARM}" not in out


def test_an_organizations_status_as_json_says_where_each_incident_is_and_counts_them_by_account(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = deploy({"EnrolledAccounts": f"{PROD},{SANDBOX}", "AccountNames": NAMES})
    record(table, organization_faults(datetime.now(UTC) - timedelta(minutes=10)), ORGANIZATION)

    code, out, _ = status(capsys, "--stack", "gpu-fault-responder-org", "--region", "us-east-1", "--json")

    assert code == 0
    view = json.loads(out)
    where = sorted((row["account"], row["account_name"], row["region"]) for row in view["incidents"])
    assert where == [
        (PROD, "prod-ml", "us-west-2"),
        (PROD, "prod-ml", "us-west-2"),
        (PROD, "prod-ml", "us-west-2"),
        (HOME, "", "us-east-1"),
        (SANDBOX, "sandbox-ml", "eu-west-1"),
    ]
    assert view["accounts"] == [
        {"account": HOME, "account_name": "", "region": "us-east-1", "home": True, "incidents": 1, "fleets": 0},
        {"account": PROD, "account_name": "prod-ml", "region": "us-west-2", "home": False, "incidents": 3, "fleets": 0},
        {
            "account": SANDBOX,
            "account_name": "sandbox-ml",
            "region": "eu-west-1",
            "home": False,
            "incidents": 1,
            "fleets": 0,
        },
    ]


def test_a_table_is_an_organizations_when_said_with_the_names_given(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = deploy({"OrganizationId": "o-a1b2c3d4e5"})
    record(table, organization_faults(datetime.now(UTC) - timedelta(minutes=10)), ORGANIZATION)
    target = ["--table", table, "--region", "us-east-1"]

    code, out, _ = status(capsys, *target, "--organization", "--account-names", f"{SANDBOX}=sandbox-ml")

    # Then the accounts are named as given (the others by their ids: Organizations does not answer here)
    assert code == 0
    assert f"  sandbox-ml ({SANDBOX}), eu-west-1: 1" in out
    assert f"  {PROD}, us-west-2: 3" in out
    # ... and without --organization the same table is a single account's
    single = status(capsys, *target)[1]
    assert "Open incidents: 5\n  SEVERITY" in single
    assert "accounts and Regions" not in single and "(this stack's)" not in single


def test_a_single_account_stacks_status_says_nothing_of_accounts(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    table = deploy({"RoutingFile": "default.yaml"})
    now = datetime.now(UTC) - timedelta(minutes=10)
    record(table, [fault(HOME, "us-east-1", 1, now), fault(HOME, "us-east-1", 2, now)], SINGLE_ACCOUNT)

    code, out, _ = status(capsys, "--stack", "gpu-fault-responder-org", "--region", "us-east-1")
    json_code, as_json, _ = status(capsys, "--stack", "gpu-fault-responder-org", "--region", "us-east-1", "--json")

    assert (code, json_code) == (0, 0)
    assert "Open incidents: 2\n  SEVERITY  INCIDENT" in out
    assert HOME not in out
    view = json.loads(as_json)
    assert "accounts" not in view
    assert all(not {"account", "account_name", "region"} & set(row) for row in view["incidents"])
