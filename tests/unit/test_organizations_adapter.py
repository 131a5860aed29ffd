"""Accounts' names from AWS Organizations (fault_responder.adapters.organizations) against moto: asked once per
account, a failure shown by the id and asked again later, and a refusal (not the management account, no organization)
turning the lookups off for good."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import set_initial_no_auth_action_count

from fault_responder.adapters.organizations import RETRY_AFTER, OrganizationsAccountNames
from fault_responder.core.accounts import Accounts

HOME = ("123456789012", "us-east-1")
NO_ORGANIZATIONS = (
    '{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:GetCallerIdentity", "Resource": "*"}]}'
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def organizations(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, list[str]]]:
    """moto's Organizations, and the DescribeAccount calls made (by account id)."""
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("organizations", region_name="us-east-1")
        asked: list[str] = []
        client.meta.events.register(
            "provide-client-params.organizations.DescribeAccount", lambda params, **_: asked.append(params["AccountId"])
        )
        yield client, asked


def test_a_name_is_asked_once_and_kept_an_unknown_account_is_shown_by_its_id_and_asked_again_later(
    organizations: tuple[Any, list[str]],
) -> None:
    client, asked = organizations
    client.create_organization(FeatureSet="ALL")
    status = client.create_account(AccountName="prod-ml", Email="prod@example.com")["CreateAccountStatus"]
    prod = client.describe_create_account_status(CreateAccountRequestId=status["Id"])["CreateAccountStatus"]
    account = prod["AccountId"]
    clock = Clock()
    lookup = OrganizationsAccountNames(lambda: client, clock=clock)
    accounts = Accounts(home=HOME, names={}, lookup=lookup)

    assert [accounts.name(account) for _ in range(3)] == ["prod-ml"] * 3
    assert accounts.name("999999999999") == ""
    assert accounts.name("999999999999") == ""
    assert asked == [account, "999999999999"]

    clock.now += RETRY_AFTER
    assert accounts.name("999999999999") == ""
    assert asked == [account, "999999999999", "999999999999"]


def test_the_first_refusal_turns_the_lookups_off_for_good_and_the_map_alone_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A caller that may not describe accounts (moto enforcing IAM: a role without organizations:DescribeAccount, as
    # AWS refuses a member account that is no delegated administrator)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")

    @set_initial_no_auth_action_count(3)
    @mock_aws
    def names() -> tuple[list[str], list[str]]:
        iam = boto3.client("iam")
        iam.create_user(UserName="router")
        iam.put_user_policy(UserName="router", PolicyName="nothing-of-organizations", PolicyDocument=NO_ORGANIZATIONS)
        keys = iam.create_access_key(UserName="router")["AccessKey"]
        client = boto3.client(
            "organizations", aws_access_key_id=keys["AccessKeyId"], aws_secret_access_key=keys["SecretAccessKey"]
        )
        asked: list[str] = []
        client.meta.events.register(
            "provide-client-params.organizations.DescribeAccount", lambda params, **_: asked.append(params["AccountId"])
        )
        accounts = Accounts(
            home=HOME, names={"111111111111": "prod-ml"}, lookup=OrganizationsAccountNames(lambda: client)
        )
        shown = [accounts.name(account) for account in ("222222222222", "333333333333", "111111111111")]
        return shown, asked

    shown, asked = names()

    assert shown == ["", "", "prod-ml"]
    assert asked == ["222222222222"]


def test_no_client_is_made_until_a_name_is_looked_up() -> None:
    made: list[int] = []

    def client() -> Any:
        made.append(1)
        raise OSError("no network here")

    lookup = OrganizationsAccountNames(client, clock=Clock())
    assert made == []
    assert Accounts(home=HOME, names={}, lookup=lookup).name("222222222222") == ""
    assert made == [1]
