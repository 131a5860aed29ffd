"""The resume workflow's steps act where the fault happened (docs/organization.md, "Acting where it happened"): the
stack's own account and Region with the function's own clients, another account's through its member role, against
moto with AssumeRole checked as AWS checks it (sandbox/accounts.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws
from moto.iam.models import iam_backends

from fault_responder.core.accounts import Accounts
from fault_responder.core.places import Place, RoleNotAssumable
from fault_responder.noise.fleet import group_from_labels
from fault_responder.resume.fault import Fault
from fault_responder.routing.router import Grouping
from fault_responder.wiring import resume_training
from fault_responder.wiring.resume_training import place_of, resume_steps
from sandbox.accounts import TrustEmulation

HOME = Place("123456789012", "us-east-1")
MEMBER = Place("222222222222", "us-west-2")
ROLE = "gpu-fault-responder-member"
EXTERNAL_ID = "0b1c2d3e-4f50-11f1-8a9b-0a1b2c3d4e5f"
ORGANIZATION_ENV = {
    "STACK_ACCOUNT": HOME.account,
    "AWS_REGION": HOME.region,
    "MEMBER_ROLE_NAME": ROLE,
    "MEMBER_ROLE_EXTERNAL_ID": EXTERNAL_ID,
}


def member_role() -> None:
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{HOME.account}:root"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": EXTERNAL_ID}},
            }
        ],
    }
    iam_backends[MEMBER.account]["aws"].create_role(ROLE, json.dumps(trust), "/", None, "", [], None)


def clusters_in(place: Place) -> list[str]:
    """The clusters the place's steps see (ECS's ListClusters through the steps' own adapter's client)."""
    steps = resume_steps(place)
    client = steps.ecs._ecs  # type: ignore[attr-defined]
    return list(client.list_clusters()["clusterArns"])


@pytest.fixture
def organization(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", HOME.region)
    for name in ("INCIDENTS_TABLE", "SLACK_SECRET_NAME", "PAGERDUTY_SECRET_NAME"):
        monkeypatch.setenv(name, name.lower())
    for name, value in ORGANIZATION_ENV.items():
        monkeypatch.setenv(name, value)
    resume_training.reset()
    with mock_aws(), TrustEmulation():
        boto3.client("ecs", region_name=HOME.region).create_cluster(clusterName="home-training")
        yield
    resume_training.reset()


def test_a_member_accounts_fault_is_acted_on_there_and_the_stacks_own_with_its_own_clients(organization: None) -> None:
    member_role()
    sts = boto3.client("sts", region_name=HOME.region)
    member = sts.assume_role(
        RoleArn=f"arn:aws:iam::{MEMBER.account}:role/{ROLE}", RoleSessionName="seed", ExternalId=EXTERNAL_ID
    )["Credentials"]
    boto3.client(
        "ecs",
        region_name=MEMBER.region,
        aws_access_key_id=member["AccessKeyId"],
        aws_secret_access_key=member["SecretAccessKey"],
        aws_session_token=member["SessionToken"],
    ).create_cluster(clusterName="training")

    assert clusters_in(MEMBER) == [f"arn:aws:ecs:{MEMBER.region}:{MEMBER.account}:cluster/training"]
    assert clusters_in(HOME) == [f"arn:aws:ecs:{HOME.region}:{HOME.account}:cluster/home-training"]
    assert clusters_in(None) == clusters_in(HOME)  # type: ignore[arg-type]


def test_a_member_role_that_cannot_be_assumed_fails_the_step_naming_the_account(organization: None) -> None:
    steps = resume_steps(MEMBER)

    with pytest.raises(RoleNotAssumable, match=MEMBER.account):
        steps.ecs.running_tasks(f"arn:aws:ecs:{MEMBER.region}:{MEMBER.account}:cluster/training")


def test_without_the_organizations_bus_every_place_is_the_functions_own(
    organization: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ORGANIZATION_ENV:
        monkeypatch.delenv(name)
    resume_training.reset()

    assert resume_steps(MEMBER) is resume_steps(None)


def test_a_fault_and_an_event_name_their_place() -> None:
    assert place_of({"account": MEMBER.account, "region": MEMBER.region}) == MEMBER
    assert place_of({"account": "not an account", "region": MEMBER.region}) is None
    fields = Fault.model_fields
    assert {"account", "region"} <= set(fields)


def test_a_member_places_keys_name_it_as_the_alert_sides_do_and_the_homes_are_unchanged(organization: None) -> None:
    member, home = resume_steps(MEMBER), resume_steps(HOME)

    # Its resume keys (claims per provider, ledgers, spares, refills) begin with its account and Region
    assert member.store.scope == f"{MEMBER.account}/{MEMBER.region}/"  # type: ignore[attr-defined]
    assert home.store.scope == "" and home.scope == ()  # type: ignore[attr-defined]
    # and the alert side's group of its provider, whose open members are hosts to avoid, is read by the router's key
    labels = {"cluster": "training", "capacity_provider": "p5", "check_type": "ACCELERATED_COMPUTE"}
    alert_side = group_from_labels(
        {**labels, "account": MEMBER.account, "region": MEMBER.region},
        Grouping(),
        Accounts(home=(HOME.account, HOME.region)),
    )
    assert (*labels.items(), *member.scope) == alert_side
