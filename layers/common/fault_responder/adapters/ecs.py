"""Amazon ECS (and the EC2 network interfaces of awsvpc tasks) for the training auto-resume workflow.

Translates boto3 answers into the domain's types (fault_responder.resume) and respects the API limits:
DescribeTasks and DescribeContainerInstances take 100 ARNs per call, UpdateContainerInstancesState 10.
Throttling is retried by botocore (standard mode); anything else raises, and the workflow pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from botocore.client import BaseClient

from fault_responder.resume.fault import ProviderInfo
from fault_responder.resume.jobs import TaskSpec
from fault_responder.resume.relaunch import RunTaskResult
from fault_responder.resume.spares import SpareHost
from fault_responder.resume.watch import TaskState

DESCRIBE_BATCH = 100
DRAIN_BATCH = 10
NETWORK_INTERFACE_BATCH = 100
_COUNTED_STATUSES = frozenset({"ACTIVE", "DRAINING"})


class EcsOperationError(Exception):
    """ECS answered with failures for a request that must succeed (the message names them)."""


class EcsAdapter:
    def __init__(self, ecs: BaseClient, ec2: BaseClient) -> None:
        self._ecs = cast(Any, ecs)
        self._ec2 = cast(Any, ec2)

    # --- Capacity providers and instances ----------------------------------------------------

    def describe_capacity_providers(self, names: Sequence[str], cluster: str) -> dict[str, ProviderInfo]:
        """The providers by name; `cluster` is needed to see Managed Instances providers (cluster-scoped)."""
        if not names:
            return {}
        answer = self._ecs.describe_capacity_providers(capacityProviders=list(names), cluster=cluster)
        providers: dict[str, ProviderInfo] = {}
        for raw in answer.get("capacityProviders", []):
            managed = raw.get("managedInstancesProvider") or {}
            group_arn = str((raw.get("autoScalingGroupProvider") or {}).get("autoScalingGroupArn") or "")
            providers[raw["name"]] = ProviderInfo(
                name=raw["name"],
                type=raw.get("type"),
                auto_repair=(managed.get("autoRepairConfiguration") or {}).get("actionsStatus"),
                auto_scaling_group=_group_name(group_arn),
            )
        missing = [name for name in names if name not in providers]
        if missing:
            raise EcsOperationError(f"capacity providers not found: {', '.join(missing)}")
        return providers

    def instance_capacity_provider(self, cluster: str, container_instance_arn: str) -> str | None:
        """The capacity provider of one container instance (None when it has none, or has left the cluster)."""
        described = self._ecs.describe_container_instances(cluster=cluster, containerInstances=[container_instance_arn])
        instances = described.get("containerInstances", [])
        return str(instances[0].get("capacityProviderName") or "") or None if instances else None

    def provider_instance_count(self, cluster: str, provider: str) -> int:
        """Container instances of the provider that are ACTIVE or DRAINING (the ones a fault can hit)."""
        arns = self._paginate("list_container_instances", "containerInstanceArns", cluster=cluster)
        return sum(
            1
            for instance in self._describe_instances(cluster, list(arns))
            if instance.get("capacityProviderName") == provider and instance.get("status") in _COUNTED_STATUSES
        )

    def spare_hosts(self, cluster: str, attribute: str) -> list[SpareHost]:
        """The ACTIVE container instances that carry `attribute` (one filtered list: as many as the pool, whatever
        the size of the cluster), as ECS describes them now."""
        arns = self._paginate(
            "list_container_instances",
            "containerInstanceArns",
            cluster=cluster,
            status="ACTIVE",
            filter=f"attribute:{attribute} exists",
        )
        return [
            SpareHost(
                container_instance_arn=raw["containerInstanceArn"],
                ec2_instance_id=raw["ec2InstanceId"],
                capacity_provider=raw.get("capacityProviderName") or None,
                status=raw.get("status", ""),
                agent_connected=bool(raw.get("agentConnected", False)),
                running_tasks=int(raw.get("runningTasksCount", 0)),
                pending_tasks=int(raw.get("pendingTasksCount", 0)),
            )
            for raw in self._describe_instances(cluster, list(arns))
            # The filter is ECS's; the attribute is checked again, so a host is never taken for a spare by mistake.
            if raw.get("ec2InstanceId") and any(item.get("name") == attribute for item in raw.get("attributes", []))
        ]

    def drain(self, cluster: str, container_instance_arns: Sequence[str]) -> dict[str, str]:
        """Set the instances DRAINING; returns each one's status (MISSING when it already left the cluster)."""
        statuses: dict[str, str] = {}
        for batch in _batches(container_instance_arns, DRAIN_BATCH):
            answer = self._ecs.update_container_instances_state(
                cluster=cluster, containerInstances=list(batch), status="DRAINING"
            )
            for instance in answer.get("containerInstances", []):
                statuses[instance["containerInstanceArn"]] = instance.get("status", "DRAINING")
            for failure in answer.get("failures", []):
                if failure.get("reason") != "MISSING":
                    raise EcsOperationError(f"cannot drain {failure.get('arn')}: {failure.get('reason')}")
                statuses[failure.get("arn", "")] = "MISSING"
        return statuses

    # --- Tasks -------------------------------------------------------------------------------

    def running_tasks(self, cluster: str, container_instance: str | None = None) -> list[TaskSpec]:
        """Tasks whose desired status is RUNNING (on one instance, or in the whole cluster), with their tags,
        hosts and, for awsvpc tasks, the network configuration RunTask needs to start them again."""
        filters = {"containerInstance": container_instance} if container_instance else {}
        arns = list(self._paginate("list_tasks", "taskArns", cluster=cluster, desiredStatus="RUNNING", **filters))
        raw_tasks = self._describe_tasks(cluster, arns)
        hosts = self.hosts(cluster, {t["containerInstanceArn"] for t in raw_tasks if t.get("containerInstanceArn")})
        networks = self._network_configurations(raw_tasks)
        return [_task_spec(raw, hosts, networks) for raw in raw_tasks]

    def running_task_tags(self, cluster: str, container_instance: str | None = None) -> list[dict[str, str]]:
        """The tags of each task whose desired status is RUNNING (on one instance, or in the whole cluster): ECS
        only, for a caller that needs no more than which jobs run where."""
        filters = {"containerInstance": container_instance} if container_instance else {}
        arns = list(self._paginate("list_tasks", "taskArns", cluster=cluster, desiredStatus="RUNNING", **filters))
        return [
            {tag["key"]: tag["value"] for tag in raw.get("tags", []) if "key" in tag and "value" in tag}
            for raw in self._describe_tasks(cluster, arns)
        ]

    def task_states(self, cluster: str, task_arns: Sequence[str]) -> list[TaskState]:
        """Each task's state, in the order asked; a task ECS no longer knows is MISSING."""
        raw_tasks = {raw["taskArn"]: raw for raw in self._describe_tasks(cluster, task_arns, tags=False)}
        hosts = self.hosts(
            cluster, {t["containerInstanceArn"] for t in raw_tasks.values() if t.get("containerInstanceArn")}
        )
        states = []
        for arn in task_arns:
            raw = raw_tasks.get(arn)
            if raw is None:
                states.append(TaskState(task_arn=arn, last_status="MISSING"))
                continue
            states.append(
                TaskState(
                    task_arn=arn,
                    last_status=raw.get("lastStatus") or "UNKNOWN",
                    desired_status=raw.get("desiredStatus"),
                    stop_code=raw.get("stopCode"),
                    stopped_reason=raw.get("stoppedReason"),
                    host=hosts.get(raw.get("containerInstanceArn") or ""),
                    stopping_at=_aware(raw.get("stoppingAt")),
                    execution_stopped_at=_aware(raw.get("executionStoppedAt")),
                    stopped_at=_aware(raw.get("stoppedAt")),
                )
            )
        return states

    def stop_task(self, cluster: str, task_arn: str, reason: str) -> None:
        """StopTask is idempotent: stopping a stopped task changes nothing."""
        self._ecs.stop_task(cluster=cluster, task=task_arn, reason=reason)

    def run_task(self, request: dict[str, Any]) -> RunTaskResult:
        answer = self._ecs.run_task(**request)
        arns = tuple(task["taskArn"] for task in answer.get("tasks", []))
        failures = tuple(
            f"{failure.get('reason', 'unknown')}" + (f" ({failure['detail']})" if failure.get("detail") else "")
            for failure in answer.get("failures", [])
        )
        return RunTaskResult(task_arns=arns, failures=failures)

    def container_names(self, task_definition: str) -> list[str]:
        answer = self._ecs.describe_task_definition(taskDefinition=task_definition)
        return [container["name"] for container in answer["taskDefinition"].get("containerDefinitions", [])]

    def hosts(self, cluster: str, container_instance_arns: Iterable[str]) -> dict[str, str]:
        """Container instance ARN -> EC2 instance id."""
        return {
            instance["containerInstanceArn"]: instance["ec2InstanceId"]
            for instance in self._describe_instances(cluster, sorted(container_instance_arns))
            if instance.get("ec2InstanceId")
        }

    # --- Helpers -----------------------------------------------------------------------------

    def _paginate(self, operation: str, key: str, **arguments: Any) -> Iterator[str]:
        for page in self._ecs.get_paginator(operation).paginate(**arguments):
            yield from page.get(key, [])

    def _describe_tasks(self, cluster: str, arns: Sequence[str], *, tags: bool = True) -> list[dict[str, Any]]:
        include = {"include": ["TAGS"]} if tags else {}
        tasks: list[dict[str, Any]] = []
        for batch in _batches(arns, DESCRIBE_BATCH):
            tasks.extend(self._ecs.describe_tasks(cluster=cluster, tasks=list(batch), **include).get("tasks", []))
        return tasks

    def _describe_instances(self, cluster: str, arns: Sequence[str]) -> list[dict[str, Any]]:
        instances: list[dict[str, Any]] = []
        for batch in _batches(arns, DESCRIBE_BATCH):
            answer = self._ecs.describe_container_instances(cluster=cluster, containerInstances=list(batch))
            instances.extend(answer.get("containerInstances", []))
        return instances

    def _network_configurations(self, raw_tasks: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """awsvpc tasks: subnet from the task's ENI attachment, security groups and public IP from the ENI.

        DescribeTasks does not return a task's networkConfiguration, and the ENI disappears when the task
        stops, so this is read while the job still runs.
        """
        enis = {arn: eni for arn, eni in ((t["taskArn"], _eni(t)) for t in raw_tasks) if eni is not None}
        if not enis:
            return {}
        interfaces: dict[str, dict[str, Any]] = {}
        ids = sorted({eni["networkInterfaceId"] for eni in enis.values()})
        for batch in _batches(ids, NETWORK_INTERFACE_BATCH):
            answer = self._ec2.describe_network_interfaces(NetworkInterfaceIds=list(batch))
            interfaces.update({raw["NetworkInterfaceId"]: raw for raw in answer.get("NetworkInterfaces", [])})
        configurations = {}
        for task_arn, eni in enis.items():
            interface = interfaces.get(eni["networkInterfaceId"], {})
            public = bool((interface.get("Association") or {}).get("PublicIp"))
            configurations[task_arn] = {
                "awsvpcConfiguration": {
                    "subnets": [eni["subnetId"]],
                    "securityGroups": [group["GroupId"] for group in interface.get("Groups", [])],
                    "assignPublicIp": "ENABLED" if public else "DISABLED",
                }
            }
        return configurations


def _aware(moment: Any) -> datetime | None:
    """A time of DescribeTasks' (botocore parses them with the offset ECS gives); None when absent."""
    if not isinstance(moment, datetime):
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _eni(task: dict[str, Any]) -> dict[str, str] | None:
    for attachment in task.get("attachments", []):
        if attachment.get("type") != "ElasticNetworkInterface":
            continue
        details = {item.get("name"): item.get("value") for item in attachment.get("details", [])}
        if details.get("networkInterfaceId") and details.get("subnetId"):
            return {"networkInterfaceId": details["networkInterfaceId"], "subnetId": details["subnetId"]}
    return None


def _task_spec(raw: dict[str, Any], hosts: dict[str, str], networks: dict[str, dict[str, Any]]) -> TaskSpec:
    instance = raw.get("containerInstanceArn")
    return TaskSpec(
        task_arn=raw["taskArn"],
        task_definition_arn=raw["taskDefinitionArn"],
        container_instance_arn=instance,
        ec2_instance_id=hosts.get(instance or ""),
        capacity_provider_name=raw.get("capacityProviderName") or None,
        launch_type=raw.get("launchType") or None,
        group=raw.get("group") or None,
        started_by=raw.get("startedBy") or None,
        overrides=raw.get("overrides") or {},
        tags={tag["key"]: tag.get("value", "") for tag in raw.get("tags", [])},
        network_configuration=networks.get(raw["taskArn"]),
        enable_execute_command=bool(raw.get("enableExecuteCommand")),
    )


def _group_name(arn: str) -> str | None:
    """An Auto Scaling group's name from its ARN (…:autoScalingGroupName/<name>); a bare name as it is."""
    if not arn:
        return None
    return arn.split(":autoScalingGroupName/", 1)[1] if ":autoScalingGroupName/" in arn else arn


def _batches(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
