"""Training auto-resume: how a job is started again: the clientToken, where it may not land, the resume
environment and tags, the RunTask request, and the checkpoint it resumes from."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from fault_responder.checkpoints import Checkpoint
from fault_responder.resume.config import _clip, _Payload
from fault_responder.resume.fault import Fault, ProviderInfo
from fault_responder.resume.jobs import ATTEMPT_TAG, MAX_TAGS, RESUMED_FROM_TAG, TaskSpec

RESUME_FROM_ENV = "RESUME_FROM"
RESUME_ATTEMPT_ENV = "RESUME_ATTEMPT"
MAX_CLIENT_TOKEN = 64
MAX_TAG_VALUE = 256
MAX_STOP_REASON = 255
MAX_EXCLUSION_EXPRESSION = 2000
"""ECS caps a placement constraint expression at 2,000 characters (about 80 instance ids)."""


@dataclass(frozen=True, slots=True)
class RunTaskResult:
    task_arns: tuple[str, ...]
    failures: tuple[str, ...] = ()
    """ECS's failure reasons (RESOURCE:GPU, ...) when it could not place the task."""


def client_token(job_key_value: str, attempt: int, index: int) -> str:
    """RunTask's idempotency token: the same job, attempt and task always give the same token, so a retried
    Lambda gets the task it already started instead of a second copy. At most 64 printable characters."""
    digest = hashlib.sha256(job_key_value.encode()).hexdigest()[:32]
    token = f"fr-{digest}-a{attempt}-t{index}"
    if len(token) > MAX_CLIENT_TOKEN:
        raise ValueError(f"attempt {attempt} / task {index} make a clientToken longer than {MAX_CLIENT_TOKEN}")
    return token


def stop_reason(fault: Fault, job_id: str) -> str:
    """StopTask's reason (shown in the console and the task state change event)."""
    text = f"GPU Fault Responder: {fault.label} on {fault.host}; resuming job {job_id} from its checkpoint"
    return _clip(text, MAX_STOP_REASON)


def placement_exclusion(provider: ProviderInfo | None, hosts: Sequence[str]) -> list[dict[str, str]]:
    """A memberOf constraint that keeps the relaunch off `hosts`, where the capacity provider supports it.

    Managed Instances does not support the ec2InstanceId attribute: there the drain is what keeps the faulty
    host out, and hosts that failed later attempts cannot be excluded (docs/auto-resume.md, Limits).
    """
    if not hosts or (provider is not None and not provider.supports_instance_exclusion):
        return []
    kept: list[str] = []
    # Most recent first: when the list would not fit, the oldest failures are dropped.
    for host in reversed(list(hosts)):
        candidate = _exclusion_expression([host, *kept])
        if len(candidate) > MAX_EXCLUSION_EXPRESSION:
            break
        kept.insert(0, host)
    return [{"type": "memberOf", "expression": _exclusion_expression(kept)}] if kept else []


def _exclusion_expression(hosts: Sequence[str]) -> str:
    return "ec2InstanceId !in [" + ", ".join(f"'{host}'" for host in hosts) + "]"


def resume_environment(checkpoint_uri: str | None, attempt: int) -> dict[str, str]:
    """RESUME_FROM is always set (empty for a fresh start), so a value from an earlier attempt never survives."""
    return {RESUME_FROM_ENV: checkpoint_uri or "", RESUME_ATTEMPT_ENV: str(attempt)}


def with_environment(
    overrides: Mapping[str, Any], container_names: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """The task's overrides with `env` set in every container: existing values of those names are replaced,
    every other variable and override (command, cpu, taskRoleArn, ...) is kept as it was."""
    merged: dict[str, Any] = json.loads(json.dumps(dict(overrides)))  # a deep copy of plain JSON
    container_overrides: list[dict[str, Any]] = merged.get("containerOverrides") or []
    by_name = {entry.get("name"): entry for entry in container_overrides}
    for name in container_names:
        entry = by_name.get(name)
        if entry is None:
            entry = {"name": name}
            container_overrides.append(entry)
            by_name[name] = entry
        kept = [item for item in entry.get("environment") or [] if item.get("name") not in env]
        entry["environment"] = [*kept, *({"name": key, "value": value} for key, value in env.items())]
    merged["containerOverrides"] = container_overrides
    return merged


def relaunch_tags(original: Mapping[str, str], attempt: int, resumed_from: str | None) -> list[dict[str, str]]:
    """The original tags plus the attempt and the checkpoint (job_from_tasks has checked they fit)."""
    tags = {key: value for key, value in original.items() if not key.lower().startswith("aws:")}
    tags[ATTEMPT_TAG] = str(attempt)
    tags[RESUMED_FROM_TAG] = _tail(resumed_from or "scratch", MAX_TAG_VALUE)
    if len(tags) > MAX_TAGS:
        raise ValueError(f"the relaunched task would carry {len(tags)} tags, ECS allows {MAX_TAGS}")
    return [{"key": key, "value": value} for key, value in tags.items()]


def build_run_task_request(
    spec: TaskSpec,
    *,
    cluster_arn: str,
    container_names: Sequence[str],
    attempt: int,
    checkpoint_uri: str | None,
    token: str,
    constraints: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """RunTask for one task of the job, started like the original: task definition, overrides, capacity
    provider (or launch type), network, group; plus the resume environment, the tags and the constraints."""
    request: dict[str, Any] = {
        "cluster": cluster_arn,
        "taskDefinition": spec.task_definition_arn,
        "count": 1,
        "clientToken": token,
        "overrides": with_environment(spec.overrides, container_names, resume_environment(checkpoint_uri, attempt)),
        "tags": relaunch_tags(spec.tags, attempt, checkpoint_uri),
    }
    if spec.capacity_provider_name:
        # Managed Instances requires a strategy and no launch type; the provider the task ran on is the one
        # the job asked for (DescribeTasks does not return the original strategy).
        request["capacityProviderStrategy"] = [{"capacityProvider": spec.capacity_provider_name, "weight": 1}]
    elif spec.launch_type:
        request["launchType"] = spec.launch_type
    if spec.network_configuration:
        request["networkConfiguration"] = spec.network_configuration
    if spec.group:
        request["group"] = spec.group
    if spec.started_by:
        request["startedBy"] = spec.started_by
    if spec.enable_execute_command:
        request["enableExecuteCommand"] = True
    if any(key.startswith("aws:ecs:") for key in spec.tags):
        request["enableECSManagedTags"] = True
    if constraints:
        request["placementConstraints"] = [dict(constraint) for constraint in constraints]
    return request


def chosen_checkpoint(planned: Checkpoint | None, fresh: Checkpoint | None) -> Checkpoint | None:
    """The checkpoint a relaunch uses: searched again once the tasks are stopped, so one written while the
    job waited for approval or for its tasks to stop is not lost; never older than the one planned."""
    if fresh is None:
        return planned
    if planned is None or fresh.step >= planned.step:
        return fresh
    return planned


class LaunchState(StrEnum):
    STARTED = "started"
    NO_CAPACITY = "no_capacity"
    SUPERSEDED = "superseded"


class Launch(_Payload):
    state: LaunchState
    attempt: int
    in_budget: int = 0
    max_attempts: int = 0
    launched: int = 0
    expected: int = 0
    failures: tuple[str, ...] = ()
    checkpoint: Checkpoint | None = None
    launched_at: datetime
    superseded_by: str | None = None


def _tail(text: str, limit: int) -> str:
    """The end of a long URI says more (the step folder) than its start."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]
