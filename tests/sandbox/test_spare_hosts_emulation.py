"""sandbox/ecs_emulation.py's spare hosts and launch delay: custom attributes seeded and described, the cluster query
language in ListContainerInstances' filter and in RunTask's memberOf constraints, each EC2_AUTOSCALING provider's
Auto Scaling group, managed scaling's PROVISIONING tasks, and instances that register a launch delay after the
group's desired capacity rose.

Each test seeds a world into a sandbox (moto, with the ECS emulation) and acts on it through boto3, as the workflow
does. Waits are bounded polls for a condition; "not before the delay" is checked with a delay no test outlasts.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError
from pydantic import ValidationError

from sandbox import scenario as model
from sandbox.ecs_emulation import EcsEmulation
from sandbox.report import collect_ecs
from sandbox.session import Sandbox
from sandbox.template import load_template
from sandbox.world import World, seed_world
from tests.sandbox.conftest import TOY_STACK

pytestmark = pytest.mark.sandbox

CLUSTER = "training"
PROVIDER = "gpu-training"
SPARE = "fault-responder.spare"
STRATEGY = [{"capacityProvider": PROVIDER, "weight": 1}]
DEADLINE_SECONDS = 10.0
LONG_DELAY = 120.0
"""A launch delay no test outlasts: what has not happened yet within it did not happen early."""
SHORT_DELAY = 0.3


def world_model(*, instances: list[dict[str, Any]] | None = None, **provider: Any) -> model.World:
    """One cluster, one EC2_AUTOSCALING provider (`provider` its settings) with `instances` (default: gpu-a plain,
    gpu-b a spare, gpu-c on rack r1); task definitions `big` (fills an instance: moto's 7482 MiB) and `small`."""
    seeded = instances or [
        {"name": "gpu-a"},
        {"name": "gpu-b", "spare": True},
        {"name": "gpu-c", "attributes": {"rack": "r1"}},
    ]
    return model.World.model_validate(
        {
            "clusters": [
                {
                    "name": CLUSTER,
                    "capacity_providers": [{"name": PROVIDER, "instances": seeded, **provider}],
                    "task_definitions": [
                        {"family": "big", "containers": [{"name": "trainer", "memory": 7000}]},
                        {"family": "small", "containers": [{"name": "trainer", "memory": 64}]},
                    ],
                }
            ]
        }
    )


class Hosts:
    """A seeded world, and what the workflow does to it through the AWS APIs."""

    def __init__(self, sandbox: Sandbox, world: World, emulation: EcsEmulation) -> None:
        self.sandbox, self.world, self.emulation = sandbox, world, emulation
        self.ecs, self.autoscaling = sandbox.aws.client("ecs"), sandbox.aws.client("autoscaling")

    def name(self, arn_or_id: str | None) -> str | None:
        return self.world.names().get(arn_or_id or "")

    def listed(self, **arguments: Any) -> list[str]:
        """ListContainerInstances, every page, as instance names."""
        pages = self.ecs.get_paginator("list_container_instances").paginate(cluster=CLUSTER, **arguments)
        return [str(self.name(arn)) for page in pages for arn in page["containerInstanceArns"]]

    def described(self, name: str) -> dict[str, Any]:
        arn = self.world.instance(name).container_instance_arn
        return dict(
            self.ecs.describe_container_instances(cluster=CLUSTER, containerInstances=[arn])["containerInstances"][0]
        )

    def run(self, family: str, *constraints: str) -> dict[str, Any]:
        """RunTask as the workflow calls it: the provider's strategy, memberOf constraints."""
        return dict(
            self.ecs.run_task(
                cluster=CLUSTER,
                taskDefinition=family,
                capacityProviderStrategy=STRATEGY,
                placementConstraints=[{"type": "memberOf", "expression": c} for c in constraints],
            )
        )

    def task(self, arn: str) -> dict[str, Any]:
        return dict(self.ecs.describe_tasks(cluster=CLUSTER, tasks=[arn])["tasks"][0])

    def fill(self, *names: str) -> None:
        """A `big` task on each named instance: no room left there."""
        for name in names:
            started = self.run("big", f"ec2InstanceId in ['{self.world.instance(name).ec2_instance_id}']")
            assert [self.name(t.get("containerInstanceArn")) for t in started["tasks"]] == [name], started

    def group(self) -> dict[str, Any]:
        """The provider's Auto Scaling group, found as the workflow finds it: by the ARN the provider names."""
        provider = self.ecs.describe_capacity_providers(capacityProviders=[PROVIDER])["capacityProviders"][0]
        name = provider["autoScalingGroupProvider"]["autoScalingGroupArn"].split("autoScalingGroupName/", 1)[1]
        groups = self.autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=[name])["AutoScalingGroups"]
        assert len(groups) == 1, f"no Auto Scaling group named {name}"
        return dict(groups[0])

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not condition():
            assert time.monotonic() < deadline, f"not within {DEADLINE_SECONDS:g} s: {what}"
            time.sleep(0.02)


@pytest.fixture
def seed() -> Iterator[Callable[..., Hosts]]:
    """`seed(world, **emulation settings)`: the world seeded into a fresh sandbox."""
    with contextlib.ExitStack() as context:

        def start(world: model.World, **settings: Any) -> Hosts:
            sandbox = context.enter_context(Sandbox(load_template(TOY_STACK)))
            identity = sandbox.identity
            emulation = context.enter_context(
                EcsEmulation(account_id=identity.account_id, region=identity.region, **settings)
            )
            return Hosts(sandbox, seed_world(world, sandbox.aws, emulation, sandbox.stack), emulation)

        yield start


def _attributes(described: dict[str, Any]) -> dict[str, str | None]:
    return {attribute["name"]: attribute.get("value") for attribute in described["attributes"]}


# --- Attributes and filters ----------------------------------------------------------------------------


def test_seeded_attributes_are_described_with_what_a_spare_search_reads(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model())

    spare, racked, plain = hosts.described("gpu-b"), hosts.described("gpu-c"), hosts.described("gpu-a")

    assert _attributes(spare)[SPARE] == "true"
    assert _attributes(racked)["rack"] == "r1"
    assert SPARE not in _attributes(plain) and "rack" not in _attributes(plain)
    # ECS's own attributes are kept beside them
    assert _attributes(spare)["ecs.instance-type"] == "p5.48xlarge"
    assert {key: spare[key] for key in ("capacityProviderName", "status", "agentConnected")} == {
        "capacityProviderName": PROVIDER,
        "status": "ACTIVE",
        "agentConnected": True,
    }
    assert (spare["runningTasksCount"], spare["pendingTasksCount"]) == (0, 0)
    assert spare["ec2InstanceId"] == hosts.world.instance("gpu-b").ec2_instance_id


def test_the_filter_selects_by_attribute_clauses_joined_by_and(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model())
    gpu_b = hosts.world.instance("gpu-b").ec2_instance_id

    for expression, names in [
        (f"attribute:{SPARE} exists", ["gpu-b"]),
        (f"attribute:{SPARE} not_exists", ["gpu-a", "gpu-c"]),
        (f"attribute:{SPARE} !exists", ["gpu-a", "gpu-c"]),
        ("attribute:rack == r1", ["gpu-c"]),
        ("attribute:rack == 'r1'", ["gpu-c"]),
        ("attribute:rack != r1", ["gpu-a", "gpu-b"]),
        ("attribute:rack == r2", []),
        (f"attribute:ecs.instance-type == p5.48xlarge AND attribute:{SPARE} exists", ["gpu-b"]),
        (f"attribute:{SPARE} not_exists and attribute:rack not_exists", ["gpu-a"]),
        (f"attribute:{SPARE} not_exists and ec2InstanceId !in ['{gpu_b}']", ["gpu-a", "gpu-c"]),
    ]:
        assert sorted(hosts.listed(filter=expression, status="ACTIVE")) == names, expression


def test_the_filter_applies_before_the_pages_are_cut_and_with_the_status_filter(seed: Callable[..., Hosts]) -> None:
    instances: list[dict[str, Any]] = [
        {"name": "gpu-a"},
        {"name": "gpu-b", "spare": True},
        {"name": "gpu-c"},
        {"name": "gpu-d", "spare": True},
        {"name": "gpu-e", "spare": True, "status": "DRAINING"},
    ]
    hosts = seed(world_model(instances=instances))
    spares = f"attribute:{SPARE} exists"

    # Pages of one: each page holds a spare, none is empty, none is left out
    first = hosts.ecs.list_container_instances(cluster=CLUSTER, filter=spares, status="ACTIVE", maxResults=1)
    assert len(first["containerInstanceArns"]) == 1 and "nextToken" in first
    assert sorted(hosts.listed(filter=spares, status="ACTIVE", PaginationConfig={"PageSize": 1})) == ["gpu-b", "gpu-d"]
    # The status filter still applies: a DRAINING spare is listed only without it
    assert sorted(hosts.listed(filter=spares)) == ["gpu-b", "gpu-d", "gpu-e"]


@pytest.mark.parametrize(
    "expression",
    [
        "agentConnected == true",
        f"attribute:{SPARE} exists or attribute:rack exists",
        "attribute:rack ==",
        f"attribute:{SPARE} exists true",
        "attribute:rack =~ r.*",
    ],
)
def test_a_filter_the_emulation_does_not_understand_is_refused_naming_it(
    seed: Callable[..., Hosts], expression: str
) -> None:
    hosts = seed(world_model())

    with pytest.raises(ClientError) as raised:
        hosts.ecs.list_container_instances(cluster=CLUSTER, filter=expression)

    assert raised.value.response["Error"]["Code"] == "InvalidParameterException"
    assert expression in raised.value.response["Error"]["Message"]


# --- Placement constraints -----------------------------------------------------------------------------


def test_runtask_honours_memberof_attribute_clauses(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model())
    gpu_b = hosts.world.instance("gpu-b").ec2_instance_id

    on_rack = hosts.run("small", "attribute:rack == r1")
    on_spare = hosts.run("small", f"attribute:{SPARE} exists and ec2InstanceId in ['{gpu_b}']")
    off_spares = hosts.run("small", f"attribute:{SPARE} not_exists", "attribute:rack not_exists")
    nowhere = hosts.run("small", "attribute:rack == r9")

    assert hosts.name(on_rack["tasks"][0]["containerInstanceArn"]) == "gpu-c"
    assert hosts.name(on_spare["tasks"][0]["containerInstanceArn"]) == "gpu-b"
    assert hosts.name(off_spares["tasks"][0]["containerInstanceArn"]) == "gpu-a"
    # Without managed scaling a task no instance may take is a failure, as before
    assert (nowhere["tasks"], [f["reason"] for f in nowhere["failures"]]) == ([], ["ATTRIBUTE"])


# --- Managed scaling and the launch delay --------------------------------------------------------------


def test_a_full_provider_without_managed_scaling_answers_a_failure(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model())
    hosts.fill("gpu-a", "gpu-b", "gpu-c")

    started = hosts.run("big")

    assert (started["tasks"], [f["reason"] for f in started["failures"]]) == ([], ["RESOURCE:CPU"])
    assert hosts.group()["DesiredCapacity"] == 3
    assert hosts.emulation.provisioning_tasks() == []


def test_a_full_provider_with_managed_scaling_provisions_and_waits_for_the_launch_delay(
    seed: Callable[..., Hosts],
) -> None:
    hosts = seed(world_model(managed_scaling=True, launch_delay_seconds=LONG_DELAY))
    hosts.fill("gpu-a", "gpu-b", "gpu-c")

    # When a task finds no room
    started = hosts.run("big")

    # Then it waits in PROVISIONING, on no instance, and the group grows by one
    [task] = started["tasks"]
    assert (started["failures"], task["lastStatus"], task["desiredStatus"]) == ([], "PROVISIONING", "RUNNING")
    assert "containerInstanceArn" not in task
    assert hosts.group()["DesiredCapacity"] == 4
    assert [t["task_arn"] for t in hosts.emulation.provisioning_tasks()] == [task["taskArn"]]
    # And before the launch delay has passed nothing registers and the task stays where it is
    for _ in range(3):
        assert hosts.task(task["taskArn"])["lastStatus"] == "PROVISIONING"
    assert len(hosts.listed(status="ACTIVE")) == 3
    assert hosts.emulation.launches == []
    # And listing the tasks of an instance is not disturbed by a task on none
    arn = hosts.world.instance("gpu-a").container_instance_arn
    assert len(hosts.ecs.list_tasks(cluster=CLUSTER, containerInstance=arn)["taskArns"]) == 1


def test_a_provisioning_task_is_placed_on_the_instance_launched_after_the_delay(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model(managed_scaling=True, launch_delay_seconds=SHORT_DELAY), start_after_describes=1)
    hosts.fill("gpu-a", "gpu-b", "gpu-c")
    [task] = hosts.run("big")["tasks"]

    # When the workflow polls DescribeTasks until the task has an instance
    seen: list[dict[str, Any]] = []

    def placed() -> bool:
        seen.append(hosts.task(task["taskArn"]))
        return "containerInstanceArn" in seen[-1]

    hosts.wait_for("the task placed", placed)

    # Then it went on the instance the group launched, PENDING first, then RUNNING, as a new task does
    [launch] = hosts.emulation.launches
    assert hosts.name(seen[-1]["containerInstanceArn"]) == "gpu-training-launched-1" == launch["name"]
    assert task["lastStatus"] == "PROVISIONING"
    assert all(s["lastStatus"] == "PROVISIONING" for s in seen[:-1])
    assert seen[-1]["lastStatus"] == "PENDING"
    assert hosts.task(task["taskArn"])["lastStatus"] == "RUNNING"
    assert hosts.emulation.provisioning_tasks() == []
    # And no earlier than the launch delay after the group was asked
    waited = datetime.fromisoformat(launch["registered_at"]) - datetime.fromisoformat(launch["asked_at"])
    assert waited.total_seconds() >= SHORT_DELAY - 0.01  # the record's times are to the millisecond
    assert launch["ec2_instance_id"] in [i["InstanceId"] for i in hosts.group()["Instances"]]


def test_a_task_stopped_while_provisioning_is_not_placed(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model(managed_scaling=True, launch_delay_seconds=SHORT_DELAY))
    hosts.fill("gpu-a", "gpu-b", "gpu-c")
    [task] = hosts.run("big")["tasks"]

    hosts.ecs.stop_task(cluster=CLUSTER, task=task["taskArn"], reason="given up")
    hosts.wait_for("the launch", lambda: len(hosts.listed(status="ACTIVE")) == 4)

    stopped = hosts.task(task["taskArn"])
    assert (stopped["lastStatus"], "containerInstanceArn" in stopped) == ("STOPPED", False)
    assert hosts.described("gpu-training-launched-1")["runningTasksCount"] == 0


def test_set_desired_capacity_launches_a_spare_after_the_delay(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model(launch_spares=True, launch_delay_seconds=SHORT_DELAY))
    spares = f"attribute:{SPARE} exists"
    group = hosts.group()

    # When the workflow asks the provider's group for one more instance, as a refill does
    hosts.autoscaling.set_desired_capacity(
        AutoScalingGroupName=group["AutoScalingGroupName"],
        DesiredCapacity=group["DesiredCapacity"] + 1,
        HonorCooldown=False,
    )

    # Then once the delay has passed a new spare is found by the spare search
    hosts.wait_for("a second spare", lambda: len(hosts.listed(filter=spares, status="ACTIVE")) == 2)
    assert sorted(hosts.listed(filter=spares, status="ACTIVE")) == ["gpu-b", "gpu-training-launched-1"]
    launched = hosts.described("gpu-training-launched-1")
    assert _attributes(launched)[SPARE] == "true"
    assert (launched["capacityProviderName"], launched["runningTasksCount"], launched["status"]) == (
        PROVIDER,
        0,
        "ACTIVE",
    )
    # And it is the group's new EC2 instance, in the world by its name
    assert launched["ec2InstanceId"] in [i["InstanceId"] for i in hosts.group()["Instances"]]
    instance = hosts.world.instance("gpu-training-launched-1")
    assert (instance.ec2_instance_id, instance.capacity_provider, instance.gpus) == (
        launched["ec2InstanceId"],
        PROVIDER,
        8,
    )
    [launch] = hosts.emulation.launches
    assert (launch["attributes"], launch["auto_scaling_group"]) == ({SPARE: "true"}, group["AutoScalingGroupName"])
    waited = datetime.fromisoformat(launch["registered_at"]) - datetime.fromisoformat(launch["asked_at"])
    assert waited.total_seconds() >= SHORT_DELAY - 0.01  # the record's times are to the millisecond


def test_the_groups_maximum_holds_for_managed_scaling_and_for_set_desired_capacity(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model(instances=[{"name": "gpu-a"}, {"name": "gpu-b"}], managed_scaling=True, max_size=3))
    hosts.fill("gpu-a", "gpu-b")

    # When two tasks find no room, and the group has room for one instance more
    first, second = hosts.run("big")["tasks"], hosts.run("big")["tasks"]

    # Then both wait, and the group grew to its maximum only
    assert [t["lastStatus"] for t in first + second] == ["PROVISIONING", "PROVISIONING"]
    assert (hosts.group()["DesiredCapacity"], hosts.group()["MaxSize"]) == (3, 3)
    # And Auto Scaling refuses a desired capacity above it
    with pytest.raises(ClientError, match="New SetDesiredCapacity value 4 is above max value 3"):
        hosts.autoscaling.set_desired_capacity(
            AutoScalingGroupName=hosts.group()["AutoScalingGroupName"], DesiredCapacity=4
        )


def test_the_providers_group_is_the_real_one_holding_its_seeded_instances(seed: Callable[..., Hosts]) -> None:
    instances: list[dict[str, Any]] = [
        {"name": "gpu-a"},
        {"name": "gpu-b", "spare": True},
        {"name": "gpu-gone", "gone": True},
    ]
    hosts = seed(world_model(instances=instances, launch_instance_type="p4d.24xlarge"))

    group = hosts.group()
    provider = hosts.ecs.describe_capacity_providers(capacityProviders=[PROVIDER])["capacityProviders"][0]

    assert group["AutoScalingGroupARN"] == provider["autoScalingGroupProvider"]["autoScalingGroupArn"]
    assert provider["autoScalingGroupProvider"]["managedScaling"]["status"] == "DISABLED"
    assert (group["DesiredCapacity"], group["MinSize"], group["MaxSize"]) == (2, 2, 12)
    expected = sorted(hosts.world.instance(name).ec2_instance_id for name in ("gpu-a", "gpu-b"))
    assert sorted(i["InstanceId"] for i in group["Instances"]) == expected
    template = group["LaunchTemplate"]["LaunchTemplateId"]
    ec2 = hosts.sandbox.aws.client("ec2")
    data = ec2.describe_launch_template_versions(LaunchTemplateId=template)["LaunchTemplateVersions"][0]
    assert data["LaunchTemplateData"]["InstanceType"] == "p4d.24xlarge"


def test_a_launched_instance_and_its_task_carry_its_name_in_the_report(seed: Callable[..., Hosts]) -> None:
    hosts = seed(world_model(managed_scaling=True, launch_delay_seconds=0))
    hosts.fill("gpu-a", "gpu-b", "gpu-c")
    [task] = hosts.run("big")["tasks"]
    hosts.wait_for("the task placed", lambda: "containerInstanceArn" in hosts.task(task["taskArn"]))

    ecs = collect_ecs(hosts.sandbox.aws, [CLUSTER], hosts.world.names(), set())

    names = [instance["name"] for instance in ecs["instances"]]
    assert sorted(names) == ["gpu-a", "gpu-b", "gpu-c", "gpu-training-launched-1"]
    [entry] = [t for t in ecs["tasks"] if t["arn"] == task["taskArn"]]
    assert (entry["instance"], entry["capacity_provider"]) == ("gpu-training-launched-1", PROVIDER)
    assert hosts.world.references()["instances.gpu-training-launched-1.ec2_instance_id"] == entry["ec2_instance_id"]


# --- The scenario format -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "says"),
    [
        ({"type": "MANAGED_INSTANCES", "managed_scaling": True}, "managed_scaling: settings of an EC2_AUTOSCALING"),
        ({"type": "MANAGED_INSTANCES", "launch_delay_seconds": 5}, "launch_delay_seconds: settings of"),
        ({"max_size": 1}, "max_size 1 is below the 3 instances it starts with"),
        ({"launch_attributes": {"a:b": "x"}}, "attribute name 'a:b'"),
        ({"launch_attributes": {"rack": " r1"}}, "not starting or ending with a space"),
        ({"launch_spares": True, "launch_attributes": {SPARE: "false"}}, "launch_spares: true means"),
        ({"launch_delay_seconds": -1}, "greater than or equal to 0"),
    ],
)
def test_provider_settings_that_cannot_be_are_refused(provider: dict[str, Any], says: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(says)):
        world_model(**provider)


def test_instance_attributes_are_checked_and_spare_is_their_shorthand() -> None:
    with pytest.raises(ValidationError, match="spare: true means"):
        world_model(instances=[{"name": "gpu-a", "spare": True, "attributes": {SPARE: "no"}}])
    with pytest.raises(ValidationError, match="names of the form gpu-training-launched-N"):
        world_model(instances=[{"name": "gpu-training-launched-1"}])

    [provider] = world_model().clusters[0].capacity_providers
    assert [i.ecs_attributes for i in provider.instances] == [{}, {SPARE: "true"}, {"rack": "r1"}]
    assert (provider.launched_attributes, provider.group_max_size, provider.launched_instance_type) == (
        {},
        13,
        "p5.48xlarge",
    )


def test_the_yaml_example_of_the_docs_is_valid_as_written() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs/sandbox.md").read_text(encoding="utf-8")
    section = text.split("### ECS", 1)[1].split("\n## ", 1)[0]
    [block] = re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)

    [cluster] = model.World.model_validate(yaml.safe_load(block)["world"]).clusters
    [provider] = cluster.capacity_providers
    assert (provider.managed_scaling, provider.launch_delay_seconds) == (True, 10)
    assert [instance.ecs_attributes for instance in provider.instances].count({SPARE: "true"}) == 1
