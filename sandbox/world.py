"""Seed a scenario's world into the sandbox: ECS clusters, capacity providers, instances, task definitions
and running tasks; S3 checkpoints; earlier resume attempts in the ledger.

Everything goes through the AWS APIs (moto) where moto models it (instances' custom attributes, each
EC2_AUTOSCALING provider's Auto Scaling group, the stack's alarms), and through sandbox/ecs_emulation.py and
sandbox/cloudwatch_emulation.py where it does not (capacity provider types and auto-repair, instance membership of a
provider, the group's launches; an alarm's state, contributors and history).
Checkpoints are written by the training helper the jobs themselves use, and the ledger by the
workflow's own store, so the seeded data has exactly the shape production code writes.

Scenarios name things (`gpu-a`, `rank-0`); moto picks the ids and ARNs. `World` maps names to what
moto picked, and fills `{{...}}` placeholders in events and expectations (docs/scenarios.md).

A world's other accounts (docs/scenarios.md#accounts) are seeded the same way, each with credentials of its own
(sandbox/accounts.py), in each of its Regions: forwarder.yaml deployed from the template itself (its rules, its
ResponderRole), then its clusters, instances, tasks and buckets. Instance names are the world's (unique across
accounts); a member's cluster is known as `<account>/<region>/<name>` (two accounts may name clusters alike).
"""

from __future__ import annotations

import base64
import copy
import importlib.util
import json
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from sandbox import scenario as model
from sandbox.accounts import create_role, delete_role, open_account
from sandbox.aws import AwsClients
from sandbox.cloudwatch_emulation import CloudWatchEmulation, Contributor
from sandbox.ecs_emulation import EcsEmulation
from sandbox.errors import SandboxError
from sandbox.stack import DeployedResource, Stack, StackBuilder, deploy_stack, layer_on_path
from sandbox.template import StackIdentity, Template, load_template, resolve_parameters

CHECKPOINT_HELPER = model.REPO_ROOT / "training" / "fault_responder_checkpoint.py"
FORWARDER_TEMPLATE = model.REPO_ROOT / "forwarder.yaml"
FORWARDER_STACK = "gpu-fault-responder-forwarder"
"""The name a member account's forwarder stack is deployed under, with its Region (`...-us-west-2`): each StackSet
instance is a stack of its own, and its roles' names (IAM is global) must differ between an account's Regions."""
ORGANIZATION_BUS = "OrganizationEventBus"
INCIDENTS_TABLE = "IncidentsTable"
_AMI = "ami-12345678"
_ATTRIBUTES_PER_CALL = 10
"""PutAttributes: at most 10 attributes a call."""
_ATTACHED_PER_CALL = 20
"""AttachInstances: at most 20 instances a call."""
_PLACEHOLDER = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_NOW = re.compile(r"^now(?:([+-])(\d+(?:\.\d+)?)([smhd]))?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class SeededInstance:
    name: str
    cluster: str
    cluster_arn: str
    container_instance_arn: str
    ec2_instance_id: str
    capacity_provider: str
    instance_type: str
    gpus: int
    account: str = ""
    region: str = ""


Place = tuple[str, str]
"""(account, Region)."""


@dataclass(frozen=True)
class SeededAccount:
    """One of the world's other accounts, as seeded."""

    id: str
    name: str | None
    organization: bool
    regions: tuple[str, ...]
    role: str
    """present, deleted, wrong_external_id or none: its ResponderRole as seeded (a step may delete it since)."""
    role_name: str


@dataclass(frozen=True)
class SeededAlarm:
    """One of the stack's alarms (or of forwarder.yaml's in a member account and Region) as last set: its full name
    and ARN, when it entered its state, its contributors'."""

    name: str
    full_name: str
    arn: str
    since: datetime
    contributors: dict[str, tuple[datetime, str]] = field(default_factory=dict)
    """Contributor id -> when it entered ALARM, and its reason, as it was last listed in ALARM."""


@dataclass(frozen=True)
class SeededTask:
    name: str
    cluster: str
    arn: str
    instance: str


@dataclass
class World:
    """What was seeded, by the scenario's names."""

    identity: StackIdentity
    clusters: dict[str, str] = field(default_factory=dict)
    """Cluster name -> ARN."""
    instances: dict[str, SeededInstance] = field(default_factory=dict)
    tasks: dict[str, SeededTask] = field(default_factory=dict)
    checkpoints: dict[str, list[str]] = field(default_factory=dict)
    """Checkpoint URI prefix -> the complete checkpoint folders written, oldest first."""
    silences: list[tuple[str, str]] = field(default_factory=list)
    """(id, comment) of each silence the scenario's cli steps added, in order."""
    health: dict[tuple[str, str], datetime] = field(default_factory=dict)
    """(instance name, check type) -> the seeded check's lastStatusChange."""
    emulation: EcsEmulation | None = field(default=None, repr=False, compare=False)
    """The ECS emulation the world was seeded into: it knows the instances launched since."""
    alarms: dict[str, SeededAlarm] = field(default_factory=dict)
    """The stack's alarms by the scenario's name for them (`gpu-temperature`), and a member's by
    `<account>/<region>/<name>`, as last set."""
    cloudwatch: CloudWatchEmulation | None = field(default=None, repr=False, compare=False)
    """The CloudWatch emulation the alarms are set in."""
    accounts: dict[str, SeededAccount] = field(default_factory=dict)
    """The other accounts, by id."""
    places: dict[str, Place] = field(default_factory=dict)
    """A member's cluster (its `<account>/<region>/<name>`) -> its account and Region; the stack's own are not here."""
    members: dict[Place, AwsClients] = field(default_factory=dict, repr=False, compare=False)
    """Clients acting in each member account and Region (the sandbox's access to it, not the responder's)."""
    forwarders: dict[Place, Stack] = field(default_factory=dict, repr=False, compare=False)
    """forwarder.yaml as deployed in each member account and Region."""
    event_bus_arn: str = ""
    """The stack's organization bus (its OrganizationEventBusArn output); empty without the organization mode."""

    def cluster_key(self, account: str, region: str, name: str) -> str:
        """How the world knows a cluster: by its name in the stack's account and Region, else with both."""
        if (account, region) == (self.identity.account_id, self.identity.region):
            return name
        return f"{account}/{region}/{name}"

    def alarm_key(self, name: str, place: Place | None) -> str:
        """How the world knows an alarm: by its name at the stack's home, else with its account and Region."""
        return name if place is None else self.cluster_key(*place, name)

    def place_of(self, cluster: str) -> Place:
        """The account and Region of a cluster the world knows."""
        return self.places.get(cluster, (self.identity.account_id, self.identity.region))

    def launched(self) -> dict[str, SeededInstance]:
        """The instances the capacity providers' Auto Scaling groups launched since seeding, by their names
        (`<provider>-launched-<n>`, n from 1 per provider), in the order they registered."""
        launches = list(self.emulation.launches) if self.emulation is not None else []
        launched: dict[str, SeededInstance] = {}
        for launch in launches:
            key = self.cluster_key(launch["account"], launch["region"], launch["cluster"])
            if key not in self.clusters or launch["name"] in self.instances:
                continue
            launched[launch["name"]] = SeededInstance(
                launch["name"],
                key,
                self.clusters[key],
                launch["container_instance_arn"],
                launch["ec2_instance_id"],
                launch["provider"],
                str(launch["instance_type"]),
                int(launch["gpus"]),
                launch["account"],
                launch["region"],
            )
        return launched

    def all_instances(self) -> dict[str, SeededInstance]:
        """The seeded instances, then those launched since."""
        return {**self.instances, **self.launched()}

    def instance(self, name: str) -> SeededInstance:
        instances = self.all_instances()
        if name not in instances:
            known = ", ".join(sorted(instances)) or "none"
            raise SandboxError(f"no instance named {name!r} in the world (instances: {known})")
        return instances[name]

    def names(self) -> dict[str, str]:
        """ARN or EC2 instance id -> the scenario's name for it (a launched instance's too)."""
        names = {arn: name for name, arn in self.clusters.items()}
        for instance in self.all_instances().values():
            names[instance.container_instance_arn] = instance.name
            names[instance.ec2_instance_id] = instance.name
        names.update({task.arn: task.name for task in self.tasks.values()})
        return names

    def references(self) -> dict[str, str]:
        """Every `{{...}}` placeholder but `now`, with its value."""
        refs = {"account": self.identity.account_id, "region": self.identity.region}
        refs["stack.external_id"] = self.identity.stack_id.split("/")[2]  # the MemberRoleExternalId output
        if self.event_bus_arn:
            refs["stack.event_bus_arn"] = self.event_bus_arn  # the OrganizationEventBusArn output
        for name, arn in self.clusters.items():
            refs |= {f"clusters.{name}.arn": arn, f"clusters.{name}.name": name.rsplit("/", 1)[-1]}
        for instance in self.all_instances().values():
            prefix = f"instances.{instance.name}"
            refs |= {
                f"{prefix}.arn": instance.container_instance_arn,
                f"{prefix}.container_instance_arn": instance.container_instance_arn,
                f"{prefix}.id": instance.container_instance_arn.rsplit("/", 1)[-1],
                f"{prefix}.ec2_instance_id": instance.ec2_instance_id,
                f"{prefix}.cluster_arn": instance.cluster_arn,
                f"{prefix}.capacity_provider": instance.capacity_provider,
                f"{prefix}.instance_type": instance.instance_type,
                f"{prefix}.account": instance.account,
                f"{prefix}.region": instance.region,
            }
        for (name, check), moment in self.health.items():
            refs[f"instances.{name}.health.{check}.since"] = _iso(moment)
        for task in self.tasks.values():
            refs[f"tasks.{task.name}.arn"] = task.arn
            refs[f"tasks.{task.name}.id"] = task.arn.rsplit("/", 1)[-1]
        for prefix, folders in self.checkpoints.items():
            if folders:
                refs[f"checkpoints.{prefix}.newest"] = folders[-1]
        for key, alarm in self.alarms.items():
            prefix = f"alarms.{key}"
            refs |= {
                f"{prefix}.name": alarm.full_name,
                f"{prefix}.arn": alarm.arn,
                f"{prefix}.since": _iso(alarm.since),
            }
            for contributor, (since, reason) in alarm.contributors.items():
                refs[f"{prefix}.contributors.{contributor}.since"] = _iso(since)
                refs[f"{prefix}.contributors.{contributor}.reason"] = reason
        for account in self.accounts.values():
            refs[f"accounts.{account.id}.name"] = account.name or account.id
            refs[f"accounts.{account.id}.role_arn"] = f"arn:aws:iam::{account.id}:role/{account.role_name}"
        for silence_id, comment in self.silences:
            refs[f"silences.{comment}"] = silence_id  # the newest with that comment
        if self.silences:
            refs["silences.last"] = self.silences[-1][0]
        return refs

    def fill(self, value: Any, now: datetime | None = None) -> Any:
        """`value` with every `{{reference}}` in its strings replaced (keys are left as they are)."""
        refs = self.references()
        moment = now or datetime.now(UTC)

        def replace(match: re.Match[str]) -> str:
            reference = match.group(1)
            if (when := _NOW.match(reference)) is not None:
                return _iso(_shifted(moment, when))
            if reference not in refs:
                raise SandboxError(f"unknown placeholder {{{{{reference}}}}}; known: {', '.join(sorted(refs))}, now")
            return refs[reference]

        return map_strings(value, lambda text: _PLACEHOLDER.sub(replace, text))


def map_strings(value: Any, change: Callable[[str], str]) -> Any:
    """`value` (JSON-like) with `change` applied to each string in it; the keys of objects are left as they are."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [map_strings(element, change) for element in value]
    if isinstance(value, dict):
        return {key: map_strings(element, change) for key, element in value.items()}
    return value


def _shifted(moment: datetime, when: re.Match[str]) -> datetime:
    if when.group(1) is None:
        return moment
    seconds = float(when.group(2)) * _UNITS[when.group(3)]
    return moment + timedelta(seconds=seconds if when.group(1) == "+" else -seconds)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Events ----------------------------------------------------------------------------------------


def deep_merge(base: Any, overrides: Any) -> Any:
    """Objects merge key by key, recursively; any other value replaces; a null removes the key."""
    if not (isinstance(base, dict) and isinstance(overrides, dict)):
        return copy.deepcopy(overrides)
    merged = copy.deepcopy(base)
    for key, value in overrides.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = deep_merge(merged.get(key), value)
    return merged


def point_at(event: dict[str, Any], instance: SeededInstance, identity: StackIdentity) -> dict[str, Any]:
    """The event about `instance`: its cluster and container instance, and for container-instance events also
    its EC2 instance, capacity provider and `resources`; the account and Region are the instance's (the sandbox's
    own for the world's own clusters)."""
    pointed = copy.deepcopy(event)
    pointed["account"] = instance.account or identity.account_id
    pointed["region"] = instance.region or identity.region
    detail = pointed.setdefault("detail", {})
    detail["clusterArn"] = instance.cluster_arn
    detail["containerInstanceArn"] = instance.container_instance_arn
    about_instance = str(pointed.get("detail-type", "")).startswith("ECS Container Instance")
    for key, value in (
        ("ec2InstanceId", instance.ec2_instance_id),
        ("capacityProviderName", instance.capacity_provider),
    ):
        if about_instance or key in detail:
            detail[key] = value
    if about_instance:
        pointed["resources"] = [instance.container_instance_arn]
    return pointed


# --- Seeding ---------------------------------------------------------------------------------------


def seed_world(
    world_model: model.World,
    aws: AwsClients,
    emulation: EcsEmulation,
    stack: Stack,
    cloudwatch: CloudWatchEmulation | None = None,
) -> World:
    world = World(stack.identity, emulation=emulation, cloudwatch=cloudwatch)
    if ORGANIZATION_BUS in stack.resources:
        world.event_bus_arn = str(stack.get_att(ORGANIZATION_BUS, "Arn"))
    home = (stack.identity.account_id, stack.identity.region)
    for cluster in world_model.clusters:
        _seed_cluster(cluster, world, aws, emulation, home)
    _seed_s3(world_model, world, aws)
    if world_model.accounts:
        _seed_accounts(world_model.accounts, world, aws, emulation, stack)
    if world_model.ledger:
        _seed_ledger(world_model.ledger, world, aws, stack)
    for alarm in world_model.alarms:
        _seed_alarm(alarm, world, aws)
    return world


# --- Other accounts --------------------------------------------------------------------------------


def _seed_accounts(
    accounts: Sequence[model.MemberAccount], world: World, aws: AwsClients, emulation: EcsEmulation, stack: Stack
) -> None:
    """Each account's Regions: forwarder.yaml deployed with the stack's outputs (the role in its first Region, the
    rules in each Region that forwards), then its clusters and buckets, all with the account's own credentials."""
    if ORGANIZATION_BUS not in stack.resources:
        raise SandboxError(
            "world.accounts needs the stack's organization mode (OrganizationId or EnrolledAccounts): their "
            "forwarders send to its bus"
        )
    forwarder = load_template(FORWARDER_TEMPLATE)
    role_name = str(stack.parameters["MemberRoleName"])
    for account in accounts:
        world.accounts[account.id] = SeededAccount(
            account.id,
            account.name,
            account.organization,
            tuple(region.region for region in account.regions),
            account.role,
            role_name,
        )
        for index, member_region in enumerate(account.regions):
            clients = open_account(aws, account.id, member_region.region)
            place = (account.id, member_region.region)
            world.members[place] = clients
            creates_role = index == 0 and account.role != "none"
            if creates_role or member_region.forwarder:
                parameters = _forwarder_parameters(account, member_region, stack, role_name, creates_role)
                world.forwarders[place] = _deploy_forwarder(forwarder, clients, place, parameters)
            if creates_role and account.role == "deleted":
                delete_role(clients, role_name)
            for cluster in member_region.clusters:
                _seed_cluster(cluster, world, clients, emulation, place)
            _seed_s3(member_region, world, clients)
            for alarm in member_region.alarms:
                _seed_alarm(alarm, world, clients, place)


def _forwarder_parameters(
    account: model.MemberAccount, member_region: model.MemberRegion, stack: Stack, role_name: str, creates_role: bool
) -> dict[str, str]:
    """forwarder.yaml's parameters from the stack's outputs (docs/organization.md), as the StackSets pass them."""
    external_id = stack.identity.stack_id.split("/")[2]
    parameters = {
        "CentralEventBusArn": str(stack.get_att(ORGANIZATION_BUS, "Arn")),
        "CentralStackName": stack.identity.name,
        "ExternalId": f"not-{external_id}" if account.role == "wrong_external_id" else external_id,
        "ResponderRoleName": role_name,
        "ForwardEvents": "true" if member_region.forwarder else "false",
        "CreateResponderRole": "true" if creates_role else "false",
    }
    return {**parameters, **account.forwarder_parameters}


def _deploy_forwarder(template: Template, clients: AwsClients, place: Place, parameters: dict[str, str]) -> Stack:
    """forwarder.yaml deployed into the member account and Region as the sandbox deploys template.yaml, its roles
    created in IAM (AssumeRole checks them: sandbox/accounts.py)."""
    account, region = place
    identity = StackIdentity(f"{FORWARDER_STACK}-{region}", region, account)
    try:
        resolved = resolve_parameters(template, parameters)
        return deploy_stack(template, identity, resolved, clients, creators={"AWS::IAM::Role": _create_iam_role})
    except SandboxError:
        raise
    except Exception as exc:  # a template error, a parameter refused: named with where it happened
        raise SandboxError(f"deploying forwarder.yaml in {account} {region} failed: {exc}") from exc


def _create_iam_role(builder: StackBuilder, logical_id: str) -> DeployedResource:
    properties = builder.resolver.properties(logical_id)
    name = str(properties.get("RoleName") or builder.physical_name(logical_id, 64))
    arn = create_role(builder.aws, properties, name)
    return DeployedResource(logical_id, "AWS::IAM::Role", name, {"Arn": arn}, properties)


def _seed_alarm(alarm: model.Alarm, world: World, aws: AwsClients, place: Place | None = None) -> None:
    """The alarm created in moto as the template creates it (named after the stack; in a member account and Region,
    as forwarder.yaml creates it there, with that account's credentials), then set to its state."""
    full_name = f"{world.identity.name}.{alarm.name}"
    aws.client("cloudwatch").put_metric_alarm(
        AlarmName=full_name,
        AlarmDescription="Seeded by the scenario: the sandbox sets its state, it does not evaluate it.",
        Namespace="ECS/ContainerInsights",
        MetricName="TaskGPUTemperature",
        Statistic="Maximum",
        Period=60,
        EvaluationPeriods=1,
        Threshold=alarm.threshold,
        ComparisonOperator="GreaterThanThreshold",
        TreatMissingData="notBreaching",
    )
    set_alarm(alarm, world, datetime.now(UTC), place)


def set_alarm(alarm: model.Alarm, world: World, now: datetime, place: Place | None = None) -> SeededAlarm:
    """The alarm in the state the scenario gives (its moments from `now`), in the CloudWatch emulation; no event. In
    `place` (a member account and Region; default: an `alarm` step's own, else the stack's)."""
    if world.cloudwatch is None:
        raise SandboxError("the world has alarms, and no CloudWatch emulation to set them in")
    place = place or alarm.place
    identity = world.identity
    account, region = place or (identity.account_id, identity.region)
    now = now.astimezone(UTC).replace(microsecond=0)
    full_name = f"{world.identity.name}.{alarm.name}"
    since = _at(alarm.since, now)
    contributors = []
    for contributor in alarm.contributors:
        at = _at(contributor.since, now)
        reason = contributor.state_reason(alarm.threshold, at)
        contributors.append(Contributor(contributor.id, contributor.all_attributes, reason, at))
    world.cloudwatch.set_alarm(
        full_name,
        alarm.state,
        alarm.state_reason,
        since,
        contributors=contributors,
        error=alarm.contributors_error,
        account=account,
        region=region,
    )
    key = world.alarm_key(alarm.name, place)
    before = world.alarms.get(key)
    seeded = SeededAlarm(
        alarm.name,
        full_name,
        f"arn:{identity.partition}:cloudwatch:{region}:{account}:alarm:{full_name}",
        since,
        # Every contributor as it was last listed in ALARM: its events may come after it is OK again.
        {**(before.contributors if before else {}), **{c.id: (c.since, c.reason) for c in contributors}},
    )
    world.alarms[key] = seeded
    return seeded


def _at(since: str, now: datetime) -> datetime:
    when = _NOW.match(since)
    return _shifted(now, when) if when is not None else now


def _seed_cluster(cluster: model.Cluster, world: World, aws: AwsClients, emulation: EcsEmulation, place: Place) -> None:
    with emulation.at(*place):
        _seed_cluster_here(cluster, world, aws, emulation, place)


def _seed_cluster_here(
    cluster: model.Cluster, world: World, aws: AwsClients, emulation: EcsEmulation, place: Place
) -> None:
    ecs, ec2 = aws.client("ecs"), aws.client("ec2")
    account, region = place
    known_as = world.cluster_key(account, region, cluster.name)
    if known_as in world.clusters:
        raise SandboxError(f"two clusters are named {cluster.name!r} in account {account} {region}")
    tags = [{"key": key, "value": value} for key, value in cluster.tags.items()]
    arn = ecs.create_cluster(clusterName=cluster.name, **({"tags": tags} if tags else {}))["cluster"]["clusterArn"]
    world.clusters[known_as] = arn
    if known_as != cluster.name:
        world.places[known_as] = place
    for provider in cluster.capacity_providers:
        emulation.seed_capacity_provider(
            cluster.name, provider.name, provider_type=provider.type, auto_repair=provider.auto_repair
        )
        for instance in provider.instances:
            if instance.name in world.instances:
                raise SandboxError(f"two instances are named {instance.name!r}")
            ec2_id = ec2.run_instances(ImageId=_AMI, MinCount=1, MaxCount=1, InstanceType=instance.instance_type)[
                "Instances"
            ][0]["InstanceId"]
            document = {"instanceId": ec2_id, "region": region, "instanceType": instance.instance_type}
            registered = ecs.register_container_instance(
                cluster=cluster.name,
                instanceIdentityDocument=json.dumps(document),
                totalResources=[
                    {"name": "GPU", "type": "STRINGSET", "stringSetValue": [f"gpu-{i}" for i in range(instance.gpus)]}
                ],
            )["containerInstance"]
            container_instance_arn = registered["containerInstanceArn"]
            emulation.assign_instance(cluster.name, container_instance_arn, provider.name)
            _put_attributes(ecs, cluster.name, container_instance_arn, instance.ecs_attributes)
            if instance.status == "DRAINING":
                ecs.update_container_instances_state(
                    cluster=cluster.name, containerInstances=[container_instance_arn], status="DRAINING"
                )
            since = _seed_health(instance, container_instance_arn, emulation)
            world.health.update({(instance.name, check): moment for check, moment in since.items()})
            if instance.gone:
                ecs.deregister_container_instance(
                    cluster=cluster.name, containerInstance=container_instance_arn, force=True
                )
            world.instances[instance.name] = SeededInstance(
                instance.name,
                known_as,
                arn,
                container_instance_arn,
                ec2_id,
                provider.name,
                instance.instance_type,
                instance.gpus,
                account,
                region,
            )
        if provider.type == "EC2_AUTOSCALING":
            _seed_auto_scaling_group(provider, cluster.name, world, aws, emulation, region)
    for definition in cluster.task_definitions:
        ecs.register_task_definition(
            family=definition.family,
            containerDefinitions=[_container(c, definition.family) for c in definition.containers],
        )
    for task in cluster.tasks:
        _seed_task(task, cluster, known_as, world, aws, emulation)


def _put_attributes(ecs: Any, cluster: str, container_instance_arn: str, attributes: dict[str, str]) -> None:
    """The instance's custom attributes, through PutAttributes (at most 10 a call, as ECS takes them)."""
    items = [{"name": k, "value": v, "targetId": container_instance_arn} for k, v in attributes.items()]
    for start in range(0, len(items), _ATTRIBUTES_PER_CALL):
        ecs.put_attributes(cluster=cluster, attributes=items[start : start + _ATTRIBUTES_PER_CALL])


def _seed_auto_scaling_group(
    provider: model.CapacityProvider, cluster: str, world: World, aws: AwsClients, emulation: EcsEmulation, region: str
) -> None:
    """The provider's Auto Scaling group, `<provider>-asg`: a launch template of the provider's launch instance type
    (its user data registers in the cluster with the launch attributes), the seeded instances that are not gone
    attached (desired = min = their number; max = max_size), and the emulation told to launch what the group asks
    for beyond them (docs/sandbox.md#ecs)."""
    ec2, autoscaling = aws.client("ec2"), aws.client("autoscaling")
    group = f"{provider.name}-asg"
    attributes = provider.launched_attributes
    user_data = f"#!/bin/bash\necho ECS_CLUSTER={cluster} >> /etc/ecs/ecs.config\n"
    if attributes:
        user_data += f"echo 'ECS_INSTANCE_ATTRIBUTES={json.dumps(attributes)}' >> /etc/ecs/ecs.config\n"
    template = ec2.create_launch_template(
        LaunchTemplateName=f"{provider.name}-launch-template",
        LaunchTemplateData={
            "ImageId": _AMI,
            "InstanceType": provider.launched_instance_type,
            "UserData": base64.b64encode(user_data.encode()).decode(),
        },
    )["LaunchTemplate"]["LaunchTemplateId"]
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=group,
        LaunchTemplate={"LaunchTemplateId": template, "Version": "$Latest"},
        MinSize=0,
        MaxSize=provider.group_max_size,
        DesiredCapacity=0,
        AvailabilityZones=[f"{region}a"],
    )
    running = [world.instances[instance.name].ec2_instance_id for instance in provider.instances if not instance.gone]
    for start in range(0, len(running), _ATTACHED_PER_CALL):
        autoscaling.attach_instances(
            AutoScalingGroupName=group, InstanceIds=running[start : start + _ATTACHED_PER_CALL]
        )
    autoscaling.update_auto_scaling_group(AutoScalingGroupName=group, MinSize=len(running))
    emulation.seed_auto_scaling(
        cluster,
        provider.name,
        group,
        managed_scaling=provider.managed_scaling,
        launch_delay_seconds=provider.launch_delay_seconds,
        launch_attributes=attributes,
        gpus=provider.launch_gpus,
    )


def _seed_health(instance: model.Instance, arn: str, emulation: EcsEmulation) -> dict[str, datetime]:
    """The instance's health as DescribeContainerInstances will show it; returns each check's lastStatusChange."""
    if not instance.health:
        return {}
    now = datetime.now(UTC).replace(microsecond=0)
    since: dict[str, datetime] = {}
    details = []
    for check in instance.health:
        when = _NOW.match(check.since)
        moment = _shifted(now, when) if when is not None else now
        since[check.type] = moment
        detail: dict[str, Any] = {"type": check.type, "status": check.status, "lastUpdated": now}
        detail["lastStatusChange"] = moment
        if check.reason:
            detail["statusReason"] = check.reason
        details.append(detail)
    statuses = {check.status for check in instance.health}
    overall = next((s for s in ("IMPAIRED", "INSUFFICIENT_DATA", "INITIALIZING") if s in statuses), "OK")
    emulation.set_health(arn, overall, details)
    return since


def _container(container: model.Container, family: str) -> dict[str, Any]:
    definition: dict[str, Any] = {
        "name": container.name,
        "image": container.image or f"{family}:latest",
        "cpu": container.cpu,
        "memory": container.memory,
        "essential": container.essential,
        "environment": [{"name": key, "value": value} for key, value in container.environment.items()],
    }
    if container.gpus:
        definition["resourceRequirements"] = [{"type": "GPU", "value": str(container.gpus)}]
    return definition


def _seed_task(
    task: model.Task, cluster: model.Cluster, known_as: str, world: World, aws: AwsClients, emulation: EcsEmulation
) -> None:
    """A task started on the named instance, as the training platform started it.

    StartTask places on a given instance; what ECS would also record for a task launched through a
    capacity provider (its capacityProviderName) is set through the emulation's view of moto's model.
    """
    if task.name in world.tasks:
        raise SandboxError(f"two tasks are named {task.name!r}")
    instance = world.instance(task.instance)
    if instance.cluster != known_as:
        raise SandboxError(f"task {task.name} is in cluster {cluster.name}, its instance {instance.name} is not")
    ecs = aws.client("ecs")
    request: dict[str, Any] = {
        "cluster": cluster.name,
        "taskDefinition": task.task_definition,
        "containerInstances": [instance.container_instance_arn],
        "overrides": _overrides(task),
        "tags": [{"key": key, "value": value} for key, value in _tags(task).items()],
    }
    if task.started_by:
        request["startedBy"] = task.started_by
    if task.group:
        request["group"] = task.group
    started = ecs.start_task(**request)["tasks"][0]
    arn = started["taskArn"]
    provider = task.capacity_provider or instance.capacity_provider
    for tasks in emulation.backend.tasks.values():
        if arn in tasks:
            tasks[arn].capacity_provider_name = provider
    if task.last_status == "STOPPED":
        ecs.stop_task(cluster=cluster.name, task=arn, reason="Stopped before the scenario began")
        # The emulated lifecycle goes through STOPPING, one DescribeTasks at a time.
        for _ in range(emulation.stop_after_describes):
            ecs.describe_tasks(cluster=cluster.name, tasks=[arn])
    world.tasks[task.name] = SeededTask(task.name, known_as, arn, instance.name)


def _tags(task: model.Task) -> dict[str, str]:
    tags = dict(task.tags)
    if task.job is not None:
        job_tags = {
            "fault-responder:job-id": task.job.id,
            "fault-responder:checkpoint-uri": task.job.checkpoint_uri,
            "fault-responder:max-attempts": None if task.job.max_attempts is None else str(task.job.max_attempts),
            "fault-responder:mode": task.job.mode,
        }
        tags.update({key: value for key, value in job_tags.items() if value is not None})
    return tags


def _overrides(task: model.Task) -> dict[str, Any]:
    overrides = copy.deepcopy(task.overrides)
    entries: list[dict[str, Any]] = overrides.setdefault("containerOverrides", [])
    for container, variables in task.environment.items():
        entry = next((e for e in entries if e.get("name") == container), None)
        if entry is None:
            entry = {"name": container}
            entries.append(entry)
        entry.setdefault("environment", []).extend({"name": k, "value": v} for k, v in variables.items())
    if not entries:
        del overrides["containerOverrides"]
    return overrides


# --- S3 --------------------------------------------------------------------------------------------


def _seed_s3(world_model: model.World | model.MemberRegion, world: World, aws: AwsClients) -> None:
    s3 = aws.client("s3")
    buckets = list(dict.fromkeys([
        *world_model.buckets,
        *(_bucket(c.uri) for c in world_model.checkpoints),
        *(_bucket(o.uri) for o in world_model.objects),
    ]))  # fmt: skip
    region = aws.region
    # Outside us-east-1, CreateBucket must name the Region as the bucket's location constraint.
    where = {} if region == "us-east-1" else {"CreateBucketConfiguration": {"LocationConstraint": region}}
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket, **where)
    if world_model.checkpoints:
        helper = checkpoint_helper()
        for checkpoints in world_model.checkpoints:
            world.checkpoints[checkpoints.uri] = _write_checkpoints(helper, checkpoints, s3)
    for obj in world_model.objects:
        bucket, _, key = obj.uri.removeprefix("s3://").partition("/")
        s3.put_object(Bucket=bucket, Key=key, Body=_body(obj))


def _bucket(uri: str) -> str:
    return uri.removeprefix("s3://").split("/", 1)[0]


def _body(obj: model.S3Object) -> bytes:
    if obj.body is not None:
        return obj.body.encode()
    if obj.json_body is not None:
        return json.dumps(obj.json_body).encode()
    return b"x" * (obj.size or 0)


def _write_checkpoints(helper: ModuleType, checkpoints: model.Checkpoints, s3: Any) -> list[str]:
    """Every step in order, as the job would have written them: complete ones end with their manifest."""
    complete: list[str] = []
    for step in sorted({*checkpoints.steps, *checkpoints.incomplete}):
        files = {
            f"shard-{index:05d}.pt": _content(f"{checkpoints.uri}{step}/{index}", checkpoints.file_size)
            for index in range(checkpoints.files_per_step)
        }
        if step in checkpoints.steps:
            answers = checkpoints.answers.get(step)
            complete.append(str(helper.save_checkpoint(checkpoints.uri, step, files, answers=answers, client=s3)))
        else:
            folder = helper.prepare_checkpoint_folder(checkpoints.uri, step, client=s3)
            helper.write_checkpoint_files(folder, files, client=s3)
    return complete


def _content(seed: str, size: int) -> bytes:
    pattern = seed.encode()
    return (pattern * (size // len(pattern) + 1))[:size]


_helper: ModuleType | None = None


def checkpoint_helper() -> ModuleType:
    """training/fault_responder_checkpoint.py, the file training images copy (it is not a package module)."""
    global _helper  # noqa: PLW0603  (loaded once per process)
    loaded = sys.modules.get("fault_responder_checkpoint")
    if _helper is None and loaded is not None and Path(str(loaded.__file__)).resolve() == CHECKPOINT_HELPER.resolve():
        _helper = loaded  # imported already (a test, or training code beside the sandbox): the same file, once
    if _helper is None:
        spec = importlib.util.spec_from_file_location("fault_responder_checkpoint", CHECKPOINT_HELPER)
        if spec is None or spec.loader is None:
            raise SandboxError(f"cannot load the checkpoint helper {CHECKPOINT_HELPER}")
        module = importlib.util.module_from_spec(spec)
        # Registered before it runs, as an import does: its dataclasses look their module up while they are made.
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        _helper = module
    return _helper


# --- The resume ledger -----------------------------------------------------------------------------


def _seed_ledger(entries: Sequence[model.LedgerEntry], world: World, aws: AwsClients, stack: Stack) -> None:
    """Earlier attempts, recorded and finished through the workflow's DynamoDBResumeStore."""
    table = stack.resources.get(INCIDENTS_TABLE)
    if table is None:
        raise SandboxError(f"ledger entries need the stack's {INCIDENTS_TABLE}")
    with layer_on_path(stack):
        from fault_responder.adapters.resume_store import DynamoDBResumeStore  # noqa: PLC0415
        from fault_responder.resume.budget import AttemptOutcome, LedgerAttempt  # noqa: PLC0415
        from fault_responder.resume.jobs import job_key  # noqa: PLC0415

        store = DynamoDBResumeStore(str(table.ref), aws.dynamodb)
        now = datetime.now(UTC)
        for entry in entries:
            if entry.cluster not in world.clusters:
                raise SandboxError(f"ledger entry for {entry.job_id}: no cluster named {entry.cluster!r}")
            key = job_key(world.clusters[entry.cluster], entry.job_id)
            for number, attempt in enumerate(entry.attempts, start=1):
                seeded = f"seeded-{entry.job_id}-{number}"
                recorded = LedgerAttempt(
                    number=number,
                    step=attempt.step,
                    checkpoint_uri=attempt.checkpoint_uri,
                    fault_key=seeded,
                    execution=seeded,
                    started_at=now - timedelta(hours=attempt.hours_ago),
                )
                result = store.record_attempt(key, recorded, replaces=seeded)
                if attempt.outcome != "launching" and result.attempt is not None:
                    store.finish_attempt(key, result.attempt.number, AttemptOutcome(attempt.outcome), attempt.reason)
            if entry.failed_hosts:
                hosts = [world.instances[h].ec2_instance_id if h in world.instances else h for h in entry.failed_hosts]
                store.add_failed_hosts(key, hosts)
