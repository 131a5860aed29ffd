"""The reconciliation's ECS adapter against moto (with container-instance health and list pages emulated): what it
asks ECS, and how it reads the answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.ecs_health import EcsHealthInventory
from sandbox.ecs_emulation import EcsEmulation

REGION = "us-east-1"
CLUSTER = "gpu-fleet"
CLUSTER_ARN = f"arn:aws:ecs:{REGION}:123456789012:cluster/{CLUSTER}"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws(), EcsEmulation() as emulation:
        ecs, ec2 = boto3.client("ecs", region_name=REGION), boto3.client("ec2", region_name=REGION)
        ecs.create_cluster(clusterName=CLUSTER)
        arns = []
        for _ in range(5):
            instance = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]
            document = json.dumps({"instanceId": instance["InstanceId"], "region": REGION})
            registered = ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document)
            arns.append(registered["containerInstance"]["containerInstanceArn"])
        inventory = EcsHealthInventory(ecs, page_size=2)
        yield {"ecs": ecs, "emulation": emulation, "arns": arns, "inventory": inventory}


def test_instances_are_listed_page_by_page(world: dict[str, Any]) -> None:
    pages = list(world["inventory"].instance_pages(CLUSTER_ARN))

    assert [len(page) for page in pages] == [2, 2, 1]
    assert sorted(arn for page in pages for arn in page) == sorted(world["arns"])


def test_instances_are_described_with_their_health(world: dict[str, Any]) -> None:
    since = datetime(2026, 11, 30, 23, 0, tzinfo=UTC)
    check = {"type": "ACCELERATED_COMPUTE", "status": "IMPAIRED", "statusReason": "XID_79"}
    world["emulation"].set_health(
        world["arns"][0], "IMPAIRED", [{**check, "lastStatusChange": since, "lastUpdated": since + timedelta(1)}]
    )

    described = world["inventory"].describe(CLUSTER_ARN, world["arns"][:2])

    impaired, healthy = sorted(described.instances, key=lambda i: world["arns"].index(i.container_instance_arn))
    assert (impaired.overall_status, healthy.overall_status) == ("IMPAIRED", "OK")
    (reported,) = impaired.checks
    assert (reported.type, reported.status, reported.reason) == ("ACCELERATED_COMPUTE", "IMPAIRED", "XID_79")
    assert reported.last_status_change == since
    assert world["emulation"].describe_requests[-1]["include"] == ["CONTAINER_INSTANCE_HEALTH"]
    assert not described.missing and not described.unreadable


def test_an_instance_ecs_no_longer_knows_is_missing_under_the_arn_it_was_asked_with(world: dict[str, Any]) -> None:
    gone = world["arns"][0]
    world["ecs"].deregister_container_instance(cluster=CLUSTER, containerInstance=gone)

    described = world["inventory"].describe(CLUSTER_ARN, [gone])

    assert described.missing == [gone]


def test_more_than_100_instances_are_never_asked_for_at_once(world: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="at most 100"):
        world["inventory"].describe(CLUSTER_ARN, world["arns"] * 21)
    assert world["emulation"].describe_requests == []


def test_the_emulated_ecs_refuses_more_than_100_as_ecs_does(world: dict[str, Any]) -> None:
    with pytest.raises(world["ecs"].exceptions.InvalidParameterException):
        world["ecs"].describe_container_instances(cluster=CLUSTER, containerInstances=world["arns"] * 21)


def test_every_cluster_is_listed(world: dict[str, Any]) -> None:
    assert list(world["inventory"].clusters()) == [CLUSTER_ARN]


def test_a_check_at_go_zero_time_is_read_as_a_check_with_no_time_never_as_a_time(world: dict[str, Any]) -> None:
    # Given an instance whose check ECS describes with Go's zero time (a reading, not a moment)
    zero = datetime(1, 1, 1, tzinfo=UTC)
    check = {"type": "ACCELERATED_COMPUTE", "status": "IMPAIRED", "statusReason": "XID_79"}
    world["emulation"].set_health(world["arns"][0], "IMPAIRED", [{**check, "lastStatusChange": zero}])

    # When it is described, Then its check is read, with no time (the reconciliation's own time stands in)
    described = world["inventory"].describe(CLUSTER_ARN, world["arns"][:1])

    [instance] = described.instances
    [reported] = instance.checks
    assert (reported.status, reported.last_status_change) == ("IMPAIRED", None)
    assert described.unreadable == []
