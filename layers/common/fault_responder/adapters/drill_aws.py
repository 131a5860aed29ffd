"""What a drill does in the operator's account (docs/drills.md): EventBridge PutEvents for the synthetic drill;
ECS for the DCGM drill (the cluster's tags, the injector task definition, RunTask, where it landed, the
instances' status). Nothing here decides: fault_responder.operations.drill does."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

INJECTOR_FAMILY = "fault-responder-dcgm-injector"
INJECTOR_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04"
"""Ships dcgmi; its DCGM major version must match the host's (--injector-image to change it)."""
HOST_DCGM_DIR = "/run/nvidia-dcgm"
"""Where the host's nv-hostengine keeps its unix socket (not TCP 5555); bind-mounted into the injector."""
CONTAINER_DCGM_DIR = "/hostdcgm"
DCGM_HOST = f"unix://{CONTAINER_DCGM_DIR}/nv-hostengine"


def inject_command(xid: int, gpu: int = 0) -> list[str]:
    """What the injector runs: write the XID into DCGM field 230 (the XID field) of one GPU, through the host's
    DCGM socket; the ECS agent's GPU health monitor reads the same host engine."""
    return ["dcgmi", "test", "--inject", "--gpuid", str(gpu), "-f", "230", "-v", str(xid), "--host", DCGM_HOST]


class DrillAwsError(Exception):
    """An AWS call succeeded but did not do what the drill needs (a rejected event, a task not placed)."""


class DrillRefusedError(Exception):
    """The drill will not run there (a cluster not tagged as a drill target)."""


def put_events(events: Any, entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """PutEvents; the event ids, or DrillAwsError saying why not (the call failed, or an entry was rejected): the
    drill reports it as its first hop's failure."""
    try:
        response = events.put_events(Entries=list(entries))
    except (ClientError, BotoCoreError) as error:
        raise DrillAwsError(f"PutEvents failed: {error}") from None
    if response.get("FailedEntryCount"):
        failed = next(entry for entry in response["Entries"] if entry.get("ErrorCode"))
        raise DrillAwsError(
            f"EventBridge rejected the drill event: {failed['ErrorCode']}: {failed.get('ErrorMessage')}"
        )
    return [str(entry["EventId"]) for entry in response["Entries"]]


def account_id(sts: Any) -> str:
    return str(sts.get_caller_identity()["Account"])


# --- DCGM drill ---------------------------------------------------------------------------------------


def cluster_tags(ecs: Any, cluster: str) -> tuple[str, dict[str, str]]:
    """The cluster's ARN and tags; DrillAwsError if there is no such cluster."""
    described = ecs.describe_clusters(clusters=[cluster], include=["TAGS"])
    found = described.get("clusters") or []
    if not found or found[0].get("status") == "INACTIVE":
        raise DrillAwsError(f"no active ECS cluster named {cluster!r}")
    return str(found[0]["clusterArn"]), {tag["key"]: tag["value"] for tag in found[0].get("tags") or []}


def injector_task_definition(command: Sequence[str], image: str = INJECTOR_IMAGE) -> dict[str, Any]:
    """The injector: privileged, in the host's PID namespace, with the host's DCGM socket, reserving no GPU and
    no CPU (it must land beside the workload, on a host whose GPUs are all taken)."""
    return {
        "family": INJECTOR_FAMILY,
        "requiresCompatibilities": ["EC2"],  # as AWS's own injector, which ran on Managed Instances
        "networkMode": "host",
        "pidMode": "host",
        "containerDefinitions": [
            {
                "name": "dcgm-inject",
                "image": image,
                "essential": True,
                "privileged": True,
                "cpu": 0,
                "memory": 128,
                "command": list(command),
                "mountPoints": [{"sourceVolume": "host-dcgm", "containerPath": CONTAINER_DCGM_DIR}],
            }
        ],
        "volumes": [{"name": "host-dcgm", "host": {"sourcePath": HOST_DCGM_DIR}}],
        "tags": [{"key": "fault-responder:drill", "value": "dcgm-injector"}],
    }


def register_injector(ecs: Any, command: Sequence[str], image: str = INJECTOR_IMAGE) -> str:
    registered = ecs.register_task_definition(**injector_task_definition(command, image))
    return str(registered["taskDefinition"]["taskDefinitionArn"])


def deregister_injector(ecs: Any, task_definition_arn: str) -> None:
    """The privileged task definition is kept no longer than the drill (its revision becomes INACTIVE)."""
    ecs.deregister_task_definition(taskDefinition=task_definition_arn)


def run_injector(ecs: Any, cluster: str, task_definition_arn: str, capacity_provider: str | None) -> str:
    """RunTask on the capacity provider (or the cluster's default strategy); the task's ARN."""
    request: dict[str, Any] = {
        "cluster": cluster,
        "taskDefinition": task_definition_arn,
        "count": 1,
        "startedBy": "fault-responder-drill",
    }
    if capacity_provider:
        request["capacityProviderStrategy"] = [{"capacityProvider": capacity_provider, "weight": 1}]
    response = ecs.run_task(**request)
    tasks = response.get("tasks") or []
    if not tasks:
        reasons = ", ".join(f"{f.get('arn', '')} {f.get('reason', '')}".strip() for f in response.get("failures", []))
        raise DrillAwsError(f"RunTask placed no injector task ({reasons or 'no reason given'})")
    return str(tasks[0]["taskArn"])


@dataclass(frozen=True, slots=True)
class TaskView:
    arn: str
    last_status: str
    container_instance_arn: str | None
    stopped_reason: str | None


def describe_task(ecs: Any, cluster: str, task_arn: str) -> TaskView:
    [task] = ecs.describe_tasks(cluster=cluster, tasks=[task_arn])["tasks"]
    return TaskView(
        arn=task_arn,
        last_status=str(task.get("lastStatus")),
        container_instance_arn=task.get("containerInstanceArn"),
        stopped_reason=task.get("stoppedReason"),
    )


@dataclass(frozen=True, slots=True)
class InstanceView:
    arn: str
    status: str
    ec2_instance_id: str | None
    registered_at: Any
    running_tasks: int


def instances(ecs: Any, cluster: str) -> list[InstanceView]:
    """Every container instance of the cluster (ACTIVE, DRAINING and the rest), paginated."""
    arns: list[str] = []
    for status in ("ACTIVE", "DRAINING", "REGISTERING", "DEREGISTERING"):
        token: str | None = None
        while True:
            page = ecs.list_container_instances(
                cluster=cluster, status=status, **({"nextToken": token} if token else {})
            )
            arns.extend(page.get("containerInstanceArns") or [])
            token = page.get("nextToken")
            if not token:
                break
    found: list[InstanceView] = []
    for start in range(0, len(arns), 100):
        described = ecs.describe_container_instances(cluster=cluster, containerInstances=arns[start : start + 100])
        for item in described.get("containerInstances") or []:
            found.append(
                InstanceView(
                    arn=str(item["containerInstanceArn"]),
                    status=str(item.get("status")),
                    ec2_instance_id=item.get("ec2InstanceId"),
                    registered_at=item.get("registeredAt"),
                    running_tasks=int(item.get("runningTasksCount") or 0),
                )
            )
    return found


def instance_status(ecs: Any, cluster: str, arn: str) -> str | None:
    """An instance's status (INACTIVE when deregistered), or None if ECS no longer knows it."""
    described = ecs.describe_container_instances(cluster=cluster, containerInstances=[arn])
    found = described.get("containerInstances") or []
    return str(found[0].get("status")) if found else None
