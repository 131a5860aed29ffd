"""The ECS adapter against moto: what RunTask needs to start a task again, read while the task runs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.ecs import EcsAdapter, EcsOperationError
from sandbox.ecs_emulation import EcsEmulation

REGION = "us-east-1"
CLUSTER = "gpu-training"


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
    with mock_aws(), EcsEmulation() as emulation:
        ecs, ec2 = boto3.client("ecs", region_name=REGION), boto3.client("ec2", region_name=REGION)
        ecs.create_cluster(clusterName=CLUSTER)
        emulation.seed_capacity_provider(CLUSTER, "p5-training")
        instance = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]
        document = json.dumps({"instanceId": instance["InstanceId"], "region": REGION})
        arn = ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document)["containerInstance"][
            "containerInstanceArn"
        ]
        emulation.assign_instance(CLUSTER, arn, "p5-training")
        adapter = EcsAdapter(ecs, ec2)
        yield {"ecs": ecs, "ec2": ec2, "instance": instance, "arn": arn, "adapter": adapter, "emulation": emulation}


def test_an_awsvpc_task_is_read_with_the_network_configuration_runtask_needs(world: dict[str, Any]) -> None:
    # Given an awsvpc task with a subnet and a security group
    ecs, ec2 = world["ecs"], world["ec2"]
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    ec2.modify_vpc_attribute(VpcId=vpc, EnableDnsHostnames={"Value": True})  # moto's ENIs need it for tasks
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.1.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="trainers", Description="t", VpcId=vpc)["GroupId"]
    ecs.register_task_definition(
        family="trainer", networkMode="awsvpc", containerDefinitions=[{"name": "trainer", "image": "t", "memory": 64}]
    )
    ecs.run_task(
        cluster=CLUSTER,
        taskDefinition="trainer",
        capacityProviderStrategy=[{"capacityProvider": "p5-training", "weight": 1}],
        networkConfiguration={"awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group]}},
        tags=[{"key": "fault-responder:job-id", "value": "llm"}],
    )

    # When the tasks on the instance are read
    [spec] = world["adapter"].running_tasks(CLUSTER, world["arn"])

    # Then the spec has what RunTask needs: provider, network, tags, host
    assert spec.network_configuration == {
        "awsvpcConfiguration": {"subnets": [subnet], "securityGroups": [group], "assignPublicIp": "DISABLED"}
    }
    assert (spec.capacity_provider_name, spec.ec2_instance_id) == ("p5-training", world["instance"]["InstanceId"])
    assert spec.tags == {"fault-responder:job-id": "llm"}


def test_task_states_name_tasks_ecs_no_longer_knows_missing(world: dict[str, Any]) -> None:
    [state] = world["adapter"].task_states(CLUSTER, [f"arn:aws:ecs:{REGION}:123456789012:task/{CLUSTER}/gone"])
    assert state.last_status == "MISSING"


def test_task_states_carry_the_times_ecs_gives_of_a_stop(world: dict[str, Any]) -> None:
    # Given a running task, then stopped
    ecs = world["ecs"]
    ecs.register_task_definition(family="trainer", containerDefinitions=[{"name": "t", "image": "t", "memory": 64}])
    [task] = ecs.run_task(cluster=CLUSTER, taskDefinition="trainer")["tasks"]
    [running] = world["adapter"].task_states(CLUSTER, [task["taskArn"]])
    world["adapter"].stop_task(CLUSTER, task["taskArn"], "moved")

    # When its state is read
    [stopped] = world["adapter"].task_states(CLUSTER, [task["taskArn"]])

    # Then the stop's times are ECS's, with their offset: told to stop first, then stopped
    assert running.told_to_stop_at is None
    assert stopped.stopping_at is not None and stopped.stopping_at.tzinfo is not None
    assert stopped.stopped_at is not None and stopped.stopping_at <= stopped.stopped_at
    assert stopped.told_to_stop_at == stopped.stopping_at


def test_draining_reports_each_instances_status(world: dict[str, Any]) -> None:
    assert world["adapter"].drain(CLUSTER, [world["arn"]]) == {world["arn"]: "DRAINING"}


def test_the_providers_instances_are_counted(world: dict[str, Any]) -> None:
    assert world["adapter"].provider_instance_count(CLUSTER, "p5-training") == 1
    assert world["adapter"].provider_instance_count(CLUSTER, "other") == 0


def test_an_unknown_capacity_provider_is_an_error(world: dict[str, Any]) -> None:
    with pytest.raises(EcsOperationError, match="capacity providers not found: gone"):
        world["adapter"].describe_capacity_providers(["gone"], CLUSTER)


def test_runtask_failures_are_reported_not_raised(world: dict[str, Any]) -> None:
    # Given the only instance is excluded by the request's constraint
    world["ecs"].register_task_definition(family="t", containerDefinitions=[{"name": "a", "image": "a", "memory": 64}])
    excluded = world["instance"]["InstanceId"]

    # When RunTask is asked to place the task
    result = world["adapter"].run_task(
        {
            "cluster": CLUSTER,
            "taskDefinition": "t",
            "capacityProviderStrategy": [{"capacityProvider": "p5-training", "weight": 1}],
            "placementConstraints": [{"type": "memberOf", "expression": f"ec2InstanceId !in ['{excluded}']"}],
        }
    )

    # Then nothing started and ECS's reason is returned
    assert (result.task_arns, result.failures) == ((), ("ATTRIBUTE",))


def test_spares_are_the_instances_carrying_the_attribute_with_their_load(world: dict[str, Any]) -> None:
    # Given the instance and a second one, only the second marked as a spare
    ecs, ec2, adapter = world["ecs"], world["ec2"], world["adapter"]
    other = ec2.run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)["Instances"][0]
    document = json.dumps({"instanceId": other["InstanceId"], "region": REGION})
    spare_arn = ecs.register_container_instance(cluster=CLUSTER, instanceIdentityDocument=document)[
        "containerInstance"
    ]["containerInstanceArn"]
    world["emulation"].assign_instance(CLUSTER, spare_arn, "p5-training")
    ecs.put_attributes(
        cluster=CLUSTER,
        attributes=[{"name": "fault-responder.spare", "value": "true", "targetId": spare_arn}],
    )

    # When the spares are read
    [spare] = adapter.spare_hosts(CLUSTER, "fault-responder.spare")

    # Then only the marked one, idle, on its provider
    assert (spare.container_instance_arn, spare.ec2_instance_id) == (spare_arn, other["InstanceId"])
    assert (spare.capacity_provider, spare.status, spare.idle) == ("p5-training", "ACTIVE", True)
    assert adapter.spare_hosts(CLUSTER, "another.attribute") == []


def test_a_providers_auto_scaling_group_is_named_from_its_arn(world: dict[str, Any]) -> None:
    [provider] = world["adapter"].describe_capacity_providers(["p5-training"], CLUSTER).values()
    assert provider.auto_scaling_group == "p5-training"
