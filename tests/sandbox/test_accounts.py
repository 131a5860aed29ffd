"""The sandbox's other accounts (docs/sandbox.md#accounts): AssumeRole refused as AWS refuses it where moto hands out
credentials for anything, member accounts seeded with their own credentials, and the bus policy evaluated for the
account that delivers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox.accounts import TrustEmulation, create_role, delete_role, open_account, required_external_ids
from sandbox.errors import SandboxError
from sandbox.eventbridge import BusPolicy
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT

MEMBER = "222222222222"
ROLE = "gpu-fault-responder-member"
ROLE_ARN = f"arn:aws:iam::{MEMBER}:role/{ROLE}"
BUS = "arn:aws:events:us-east-1:123456789012:event-bus/gpu-fault-responder-organization"


def trust(external_id: str | None) -> dict[str, Any]:
    statement: dict[str, Any] = {
        "Effect": "Allow",
        "Principal": {"AWS": "arn:aws:iam::123456789012:root"},
        "Action": "sts:AssumeRole",
    }
    if external_id is not None:
        statement["Condition"] = {"StringEquals": {"sts:ExternalId": external_id}}
    return {"Version": "2012-10-17", "Statement": [statement]}


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(load_template(ROOT / "template.yaml")) as running, TrustEmulation():
        yield running


def assume(sandbox: Sandbox, **extra: str) -> str:
    """The account the credentials act in, or the error code AssumeRole answered."""
    sts = sandbox.aws.client("sts")
    try:
        sts.assume_role(RoleArn=ROLE_ARN, RoleSessionName="responder", **extra)
    except ClientError as error:
        return str(error.response["Error"]["Code"])
    return "assumed"


def test_a_member_account_is_seeded_with_its_own_credentials(sandbox: Sandbox) -> None:
    member = open_account(sandbox.aws, MEMBER, "us-west-2")

    arn = member.client("ecs").create_cluster(clusterName="training")["cluster"]["clusterArn"]

    assert arn == f"arn:aws:ecs:us-west-2:{MEMBER}:cluster/training"
    assert sandbox.aws.client("ecs").list_clusters()["clusterArns"] == []


def test_assume_role_is_refused_for_a_missing_role_and_a_wrong_external_id_as_aws_refuses_it(sandbox: Sandbox) -> None:
    member = open_account(sandbox.aws, MEMBER, "us-west-2")

    # A role that does not exist: moto alone would hand out credentials
    assert assume(sandbox, ExternalId="the-stack") == "AccessDenied"

    create_role(member, {"AssumeRolePolicyDocument": trust("the-stack")}, ROLE)
    assert assume(sandbox, ExternalId="the-stack") == "assumed"
    assert assume(sandbox, ExternalId="another-stack") == "AccessDenied"
    assert assume(sandbox) == "AccessDenied"

    assert delete_role(member, ROLE)
    assert assume(sandbox, ExternalId="the-stack") == "AccessDenied"
    assert not delete_role(member, ROLE)


def test_the_external_ids_a_trust_policy_requires() -> None:
    assert required_external_ids(json.dumps(trust("a"))) == {"a"}
    assert required_external_ids(trust(None)) == set()
    both = {"Statement": [trust("a")["Statement"][0], {**trust("b")["Statement"][0], "Effect": "Deny"}]}
    assert required_external_ids(both) == {"a"}


def statement(principal: Any, organization: str | None) -> dict[str, Any]:
    found: dict[str, Any] = {"Effect": "Allow", "Principal": principal, "Action": "events:PutEvents", "Resource": BUS}
    if organization is not None:
        found["Condition"] = {"StringEquals": {"aws:PrincipalOrgID": organization}}
    return found


def test_the_bus_policy_admits_the_organizations_accounts_or_the_listed_ones_and_no_other() -> None:
    organizations = {MEMBER: "o-a1b2c3d4e5", "333333333333": "o-a1b2c3d4e5", "999999999999": None}
    organization_wide = BusPolicy(BUS, (statement("*", "o-a1b2c3d4e5"),), organizations.get)
    listed = BusPolicy(BUS, (statement({"AWS": [MEMBER]}, "o-a1b2c3d4e5"),), organizations.get)

    assert organization_wide.refusal(MEMBER) is None
    assert organization_wide.refusal("333333333333") is None
    assert "not authorized to perform: events:PutEvents" in str(organization_wide.refusal("999999999999"))
    assert listed.refusal(MEMBER) is None
    assert listed.refusal("333333333333") is not None


def test_a_policy_condition_the_sandbox_does_not_evaluate_is_an_error_not_an_admission() -> None:
    unknown = {**statement("*", None), "Condition": {"ArnLike": {"aws:SourceArn": "*"}}}
    policy = BusPolicy(BUS, (unknown,), lambda account: None)

    with pytest.raises(SandboxError, match="does not evaluate"):
        policy.refusal(MEMBER)
