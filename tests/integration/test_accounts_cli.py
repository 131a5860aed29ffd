"""`fault-responder accounts` against an organization's stack (docs/organization.md, "Seeing the organization"): each
enrolled account and Region with its last event, its member role and forwarder checked now through that role, and
its open incidents; exit status 1 when any is broken, naming it.

In process against moto: a CloudFormation stack with the responder's parameters, outputs and incidents table; member
accounts reached with credentials of their own (moto keeps accounts apart by them), each with forwarder.yaml's role
(trusting the stack's external id) and rules as its template makes them, or without; AssumeRole refused as AWS refuses
it for a missing role or a wrong external id (sandbox/accounts.py, which moto does not check)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.places_store import DynamoDBPlacesStore
from fault_responder.core.accounts import Accounts
from fault_responder.core.places import Place
from sandbox.accounts import TrustEmulation
from tests.integration.test_silence_organization_cli import FAKE_CREDENTIALS, HOME, cli
from tests.integration.test_status_organization_cli import record
from tests.unit.test_identity import fault

STACK = "gpu-fault-responder-org"
REGION = "us-east-1"
EXTERNAL_ID = "5f0c6a8e-0d7e-11f1-9a3b-0a1b2c3d4e5f"
ROLE = "gpu-fault-responder-member"
BUS = f"arn:aws:events:{REGION}:{HOME}:event-bus/{STACK}-organization"
RESEARCH, INFERENCE, BATCH, TRAINING = "222222222222", "333333333333", "444444444444", "555555555555"
NAMES = f"{RESEARCH}=research,{INFERENCE}=inference,{BATCH}=batch,{TRAINING}=training"
FORWARD_RULES = ("HealthChangeForwardRule", "InstanceStateChangeForwardRule", "TaskStoppedForwardRule")


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name, value in FAKE_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("USER", "alice")
    with mock_aws():
        yield


def deploy(parameters: dict[str, str], outputs: dict[str, str]) -> str:
    """A stack with the responder's parameters, outputs and incidents table; its table's name."""
    from tests.conftest import incidents_table  # noqa: PLC0415

    template = {
        "Parameters": {name: {"Type": "String", "Default": ""} for name in parameters},
        "Resources": {"IncidentsTable": {"Type": "AWS::DynamoDB::Table", "Properties": incidents_table()}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    cloudformation.create_stack(
        StackName=STACK,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": name, "ParameterValue": value} for name, value in parameters.items()],
    )
    resource = cloudformation.describe_stack_resource(StackName=STACK, LogicalResourceId="IncidentsTable")
    return str(resource["StackResourceDetail"]["PhysicalResourceId"])


def member(account: str, service: str) -> Any:
    """A client acting in `account` (moto maps the credentials its STS hands out to the role's account)."""
    credentials = boto3.client("sts", region_name=REGION).assume_role(
        RoleArn=f"arn:aws:iam::{account}:role/OrganizationAccountAccessRole", RoleSessionName="setup"
    )["Credentials"]
    return boto3.client(
        service,
        region_name=REGION,
        aws_access_key_id=credentials["AccessKeyId"],
        aws_secret_access_key=credentials["SecretAccessKey"],
        aws_session_token=credentials["SessionToken"],
    )


def responder_role(account: str, external_id: str = EXTERNAL_ID) -> None:
    """forwarder.yaml's ResponderRole: trusted with the stack's external id."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{HOME}:root"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
            }
        ],
    }
    member(account, "iam").create_role(RoleName=ROLE, AssumeRolePolicyDocument=json.dumps(trust))


def forwarding_rules(events: Any, *, disabled: tuple[str, ...] = ()) -> None:
    """forwarder.yaml's rules on the default bus, each sending to the stack's bus (or the stack's own
    LocalEventsForwardRule, with the home account's client)."""
    for name in FORWARD_RULES:
        events.put_rule(
            Name=f"forwarder-{name}",
            EventPattern=json.dumps({"source": ["aws.ecs"]}),
            State="DISABLED" if name in disabled else "ENABLED",
            Tags=[{"Key": "fault-responder:forwards-to", "Value": STACK}],
        )
        events.put_targets(Rule=f"forwarder-{name}", Targets=[{"Id": "central-bus", "Arn": BUS}])


def organization(now: datetime) -> str:
    """The stack (EnrolledAccounts: four members; EnrolledRegions: its own), and what its accounts hold:
    research: role and rules, an event a few minutes ago, two open incidents; inference: no role (never deployed);
    batch: a role, no rule; training: a role, one of its rules disabled. The stack's own LocalEventsForwardRule."""
    table = deploy(
        {
            "OrganizationId": "o-a1b2c3d4e5",
            "EnrolledAccounts": f"{RESEARCH},{INFERENCE},{BATCH},{TRAINING}",
            "EnrolledRegions": REGION,
            "AccountNames": NAMES,
            "MemberRoleName": ROLE,
        },
        {"MemberRoleExternalId": EXTERNAL_ID, "OrganizationEventBusArn": BUS},
    )
    home_events = boto3.client("events", region_name=REGION)
    home_events.put_rule(Name="LocalEventsForwardRule", EventPattern=json.dumps({"source": ["aws.ecs"]}))
    home_events.put_targets(Rule="LocalEventsForwardRule", Targets=[{"Id": "organization-bus", "Arn": BUS}])
    for account in (RESEARCH, BATCH, TRAINING):
        responder_role(account)
    forwarding_rules(member(RESEARCH, "events"))
    forwarding_rules(member(TRAINING, "events"), disabled=("TaskStoppedForwardRule",))
    places = DynamoDBPlacesStore(table, boto3.client("dynamodb", region_name=REGION), clock=now.timestamp)
    places.note(Place(RESEARCH, REGION))
    names = {RESEARCH: "research", INFERENCE: "inference", BATCH: "batch", TRAINING: "training"}
    accounts = Accounts(home=(HOME, REGION), names=names)
    record(table, [fault(RESEARCH, REGION, 1, now), fault(RESEARCH, REGION, 2, now)], accounts)
    return table


def accounts_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with TrustEmulation():
        return cli(capsys, "accounts", *argv)


def test_each_account_is_listed_with_its_role_and_forwarder_checked_now_and_the_broken_ones_named(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    organization(datetime.now(UTC) - timedelta(minutes=3))

    code, out, err = accounts_cli(capsys, "--stack", STACK, "--region", REGION)

    assert err == ""
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ") and "(" in line}
    # The stack's own: no role to assume, its LocalEventsForwardRule sends to the bus
    assert "own credentials" in rows[HOME] and "in place (1 rule)" in rows[HOME]
    # research: the role assumed, its three rules in place, its last event and its two open incidents
    assert "assumed" in rows["research"] and "in place (3 rules)" in rows["research"]
    assert "(3m ago)" in rows["research"] and rows["research"].endswith("2 incidents")
    # inference: no role; batch: no rule; training: a rule disabled
    assert "NOT ASSUMABLE" in rows["inference"] and "not checked" in rows["inference"]
    assert "none in 30 days" in rows["inference"]
    assert "assumed" in rows["batch"] and "MISSING" in rows["batch"]
    assert "DISABLED (1 of 3)" in rows["training"]
    # ... each broken one said why, and named in the verdict; the exit status says it
    assert (
        f"inference ({INFERENCE}) {REGION}: role not assumable: AssumeRole of arn:aws:iam::{INFERENCE}:role/{ROLE} "
        "was refused (AccessDenied)"
    ) in out
    assert f"batch ({BATCH}) {REGION}: forwarder missing: no rule of this account and Region's default bus" in out
    assert "forwarder-TaskStoppedForwardRule (DISABLED)" in out
    assert out.rstrip().endswith(
        f"3 of 5 accounts and Regions broken: inference ({INFERENCE}) {REGION}, batch ({BATCH}) {REGION}, "
        f"training ({TRAINING}) {REGION}"
    )
    assert code == 1


def test_as_json_each_account_says_what_was_checked_and_a_healthy_organization_exits_0(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    organization(datetime.now(UTC) - timedelta(minutes=3))

    code, out, _ = accounts_cli(capsys, "--stack", STACK, "--region", REGION, "--json")

    assert code == 1
    view = json.loads(out)
    places = {place["account"]: place for place in view["places"]}
    assert [place["account"] for place in view["places"]] == [HOME, RESEARCH, INFERENCE, BATCH, TRAINING]
    research = places[RESEARCH]
    assert (research["account_name"], research["region"], research["broken"]) == ("research", REGION, False)
    assert research["role"] == {"state": "assumed", "detail": f"arn:aws:iam::{RESEARCH}:role/{ROLE}"}
    assert research["forwarder"]["state"] == "in_place"
    assert sorted(rule["name"] for rule in research["forwarder"]["rules"]) == [f"forwarder-{n}" for n in FORWARD_RULES]
    assert research["open"] == {"incidents": 2, "fleets": 0}
    assert research["last_event_at"].endswith("Z")
    assert places[HOME]["role"]["state"] == "own_credentials" and places[HOME]["home"] is True
    assert {account: places[account]["broken"] for account in (INFERENCE, BATCH, TRAINING)} == dict.fromkeys(
        (INFERENCE, BATCH, TRAINING), True
    )
    assert view["broken"] == 3

    # When the three are mended (a role deployed, rules added, the rule enabled), nothing is broken: exit 0
    responder_role(INFERENCE)
    forwarding_rules(member(INFERENCE, "events"))
    forwarding_rules(member(BATCH, "events"))
    member(TRAINING, "events").enable_rule(Name="forwarder-TaskStoppedForwardRule")
    code, out, _ = accounts_cli(capsys, "--stack", STACK, "--region", REGION)
    assert code == 0
    assert out.rstrip().endswith("5 accounts and Regions, none broken")


def test_a_role_trusting_another_external_id_cannot_be_assumed(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    organization(datetime.now(UTC))
    responder_role(INFERENCE, external_id="another-stacks-id")

    code, out, _ = accounts_cli(capsys, "--stack", STACK, "--region", REGION, "--json")

    [inference] = [place for place in json.loads(out)["places"] if place["account"] == INFERENCE]
    assert inference["role"]["state"] == "not_assumable" and code == 1


def test_with_a_table_the_options_say_what_the_stack_would_and_what_they_leave_out_is_not_checked(
    aws: None, capsys: pytest.CaptureFixture[str]
) -> None:
    table = organization(datetime.now(UTC) - timedelta(hours=2))
    target = ["--table", table, "--region", REGION]

    # Without the external id and the bus: what was seen (research, and the stack's own), nothing checked, nothing
    # broken
    code, out, _ = accounts_cli(capsys, *target, "--json")
    view = json.loads(out)
    assert code == 0
    assert [place["account"] for place in view["places"]] == [HOME, RESEARCH]
    research = view["places"][1]
    assert research["role"]["state"] == "not_checked" and "--external-id" in research["role"]["detail"]
    assert research["open"] == {"incidents": 2, "fleets": 0}

    # With them, as the stack would
    code, out, _ = accounts_cli(
        capsys,
        *target,
        "--enrolled-accounts",
        f"{RESEARCH},{BATCH}",
        "--account-names",
        f"{RESEARCH}=research",
        "--external-id",
        EXTERNAL_ID,
        "--event-bus-arn",
        BUS,
    )
    assert code == 1
    assert f"research ({RESEARCH})" in out
    assert f"{BATCH} {REGION}: forwarder missing" in out


def test_a_single_account_stack_has_no_accounts_to_list(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    deploy({"RoutingFile": "default.yaml"}, {})

    code, out, err = accounts_cli(capsys, "--stack", STACK, "--region", REGION)

    assert (code, out) == (2, "")
    assert "serves one account and Region" in err
