"""The member-session adapter (docs/organization.md, "Acting where it happened") against moto, with AssumeRole
checked as AWS checks it (sandbox/accounts.py): the stack's own account and Region with the function's own
credentials, any other through forwarder.yaml's role assumed with the stack's external id, the credentials kept per
account until shortly before they expire (one AssumeRole per account, whatever the threads asking), and every
failure typed so that callers report it per account."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.iam.models import iam_backends

from fault_responder.adapters.member_session import MemberSessions, classify, session_name
from fault_responder.core.places import (
    MemberAccessDenied,
    MemberCallFailed,
    MemberThrottled,
    Place,
    RoleNotAssumable,
)
from sandbox.accounts import TrustEmulation

HOME = Place("123456789012", "us-east-1")
MEMBER = "222222222222"
ROLE = "gpu-fault-responder-member"
EXTERNAL_ID = "0b1c2d3e-4f50-11f1-8a9b-0a1b2c3d4e5f"
FUNCTION = "gpu-fault-responder-ReconcileFunction-ABCDEF123456"


def create_member_role(account: str = MEMBER, external_id: str = EXTERNAL_ID) -> None:
    """forwarder.yaml's ResponderRole as its trust reads (who may call is not what moto or the sandbox evaluates)."""
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{HOME.account}:root"},
                "Action": "sts:AssumeRole",
                "Condition": {"StringEquals": {"sts:ExternalId": external_id}},
            }
        ],
    }
    iam_backends[account]["aws"].create_role(ROLE, json.dumps(trust), "/", None, "", [], None)


def delete_member_role(account: str = MEMBER) -> None:
    iam_backends[account]["aws"].delete_role(ROLE)


class Clock:
    """Moves only when told, from the real time (STS's expirations are the real time's)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class CountingSts:
    """The real (moto) STS client, counting AssumeRole calls and holding each one a moment so that threads overlap."""

    def __init__(self, client: Any, hold: threading.Event | None = None) -> None:
        self.client = client
        self.calls = 0
        self.hold = hold
        self._lock = threading.Lock()

    def assume_role(self, **request: Any) -> Any:
        with self._lock:
            self.calls += 1
        if self.hold is not None:
            self.hold.wait(5)
        return self.client.assume_role(**request)


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", HOME.region)
    with mock_aws(), TrustEmulation():
        yield


def sessions(sts: Any = None, clock: Clock | None = None, external_id: str = EXTERNAL_ID) -> MemberSessions:
    return MemberSessions(
        home=HOME,
        role_name=ROLE,
        external_id=external_id,
        function_name=FUNCTION,
        sts=sts,
        clock=clock or Clock(),
    )


def caller(client: Any) -> dict[str, str]:
    identity = client.get_caller_identity()
    return {"account": identity["Account"], "arn": identity["Arn"]}


def test_the_home_account_and_region_act_with_the_functions_own_credentials(aws: None) -> None:
    counting = CountingSts(boto3.client("sts", region_name=HOME.region))
    adapter = sessions(counting)

    assert caller(adapter.client("sts", HOME))["account"] == HOME.account
    assert counting.calls == 0


def test_a_member_account_is_acted_in_through_its_role_with_the_stacks_external_id_and_a_named_session(
    aws: None,
) -> None:
    create_member_role()
    adapter = sessions()

    ecs = adapter.client("ecs", Place(MEMBER, "us-west-2"))
    ecs.create_cluster(clusterName="training")

    assert caller(adapter.client("sts", Place(MEMBER, "us-west-2"))) == {
        "account": MEMBER,
        "arn": f"arn:aws:sts::{MEMBER}:assumed-role/{ROLE}/{FUNCTION}",
    }
    assert ecs.list_clusters()["clusterArns"] == [f"arn:aws:ecs:us-west-2:{MEMBER}:cluster/training"]
    assert boto3.client("ecs", region_name="us-west-2").list_clusters()["clusterArns"] == []
    # ... and the stack's own account in another Region goes through the role too (its own grants are for its Region)
    create_member_role(HOME.account)
    assert caller(adapter.client("sts", Place(HOME.account, "eu-west-1")))["arn"].startswith(
        f"arn:aws:sts::{HOME.account}:assumed-role/{ROLE}/"
    )


def test_an_accounts_credentials_are_assumed_once_for_all_its_regions_until_shortly_before_they_expire(
    aws: None,
) -> None:
    create_member_role()
    counting = CountingSts(boto3.client("sts", region_name=HOME.region))
    clock = Clock()
    adapter = sessions(counting, clock)

    first = adapter.client("ecs", Place(MEMBER, "us-west-2"))
    adapter.client("s3", Place(MEMBER, "eu-west-1"))
    assert adapter.client("ecs", Place(MEMBER, "us-west-2")) is first
    assert counting.calls == 1

    # Moto's credentials last the hour asked for: five minutes before, they are assumed again (new clients too)
    clock.now += 3600 - 301
    assert adapter.client("ecs", Place(MEMBER, "us-west-2")) is first
    clock.now += 2
    assert adapter.client("ecs", Place(MEMBER, "us-west-2")) is not first
    assert counting.calls == 2


def test_threads_asking_for_one_account_at_once_share_one_assume_role(aws: None) -> None:
    # The sweep asks for an account's Regions from several threads at once (operations/reconcile.py)
    create_member_role()
    hold = threading.Event()
    counting = CountingSts(boto3.client("sts", region_name=HOME.region), hold)
    adapter = sessions(counting)
    regions = ["us-west-2", "eu-west-1", "ap-south-1", "us-east-2", "eu-central-1", "ca-central-1"]
    accounts: dict[str, str] = {}

    def ask(region: str) -> None:
        accounts[region] = caller(adapter.client("sts", Place(MEMBER, region)))["account"]

    threads = [threading.Thread(target=ask, args=(region,)) for region in regions]
    for thread in threads:
        thread.start()
    hold.set()
    for thread in threads:
        thread.join(10)

    assert accounts == dict.fromkeys(regions, MEMBER)
    assert counting.calls == 1


@pytest.mark.parametrize("role", ["missing", "another external id", "deleted"])
def test_a_role_that_cannot_be_assumed_is_role_not_assumable_and_is_asked_again_next_time(aws: None, role: str) -> None:
    place = Place(MEMBER, "us-west-2")
    if role == "another external id":
        create_member_role(external_id="not-this-stack")
    adapter = sessions()
    if role == "deleted":
        create_member_role()
        adapter.client("ecs", place)
        delete_member_role()
        adapter.forget(MEMBER)

    with pytest.raises(RoleNotAssumable) as refused:
        adapter.client("ecs", place)

    assert refused.value.kind == "role_not_assumable"
    assert refused.value.place == place
    assert f"arn:aws:iam::{MEMBER}:role/{ROLE}" in str(refused.value)
    # A refusal is not kept: the role deployed (again), the next call acts
    if role == "another external id":
        delete_member_role()
    create_member_role()
    assert caller(adapter.client("sts", place))["account"] == MEMBER


class RefusingSts:
    def __init__(self, code: str) -> None:
        self.code = code

    def assume_role(self, **request: Any) -> Any:
        raise ClientError({"Error": {"Code": self.code, "Message": "no"}}, "AssumeRole")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("AccessDenied", RoleNotAssumable),
        ("Throttling", MemberThrottled),
        ("RegionDisabledException", MemberCallFailed),
    ],
)
def test_assume_role_failures_are_typed(code: str, kind: type[Exception]) -> None:
    with pytest.raises(kind):
        sessions(RefusingSts(code)).client("ecs", Place(MEMBER, "us-west-2"))


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        ("AccessDeniedException", MemberAccessDenied),
        ("ThrottlingException", MemberThrottled),
        ("TooManyRequestsException", MemberThrottled),
        ("ClusterNotFoundException", MemberCallFailed),
    ],
)
def test_a_calls_failure_in_a_member_account_is_classified(code: str, kind: type[Exception]) -> None:
    error = ClientError({"Error": {"Code": code, "Message": "no"}}, "ListClusters")

    classified = classify(error, Place(MEMBER, "us-west-2"))

    assert type(classified) is kind
    assert classified.place == Place(MEMBER, "us-west-2")
    assert code in classified.detail


def test_the_session_name_is_the_functions_name_as_sts_takes_it() -> None:
    assert session_name(FUNCTION) == FUNCTION
    assert session_name("x" * 80) == "x" * 64
    assert session_name("a b/c") == "a-b-c"
    assert len(session_name("")) >= 2
