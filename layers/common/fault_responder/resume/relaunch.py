"""Training auto-resume: how a job is started again: the clientToken, where it may not land, the resume
environment and tags, the RunTask request, and the checkpoint it resumes from."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from fault_responder.resume.checkpoints import Checkpoint
from fault_responder.resume.config import _clip, _Payload
from fault_responder.resume.fault import Fault, ProviderInfo
from fault_responder.resume.jobs import ATTEMPT_TAG, MAX_TAGS, RESUMED_FROM_TAG, TaskSpec
from fault_responder.resume.spares import SpareUse

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


@dataclass(frozen=True, slots=True)
class KnownFault:
    """A GPU fault of a host, as one half of the stack knows it: claimed by an execution of this workflow
    (within the mass-fault window), or open on the alert side (a member of a group record)."""

    host: str
    since: datetime
    open: bool
    """Open on the alert side; False for a fault known only from its claim."""


@dataclass(frozen=True, slots=True)
class HostsToAvoid:
    """Where a relaunch of a job may not land, most important first (docs/auto-resume.md#never-on-a-faulting-host).

    First the job's own failed hosts, most recent first: few, and each proven bad for this job. Then every
    other host with a GPU fault, newest fault first: the oldest faults are the likeliest to have been drained
    or replaced since. Where a placement constraint cannot hold them all, the first ones are kept, and the
    check after placement (watch.misplaced_tasks) covers the rest.
    """

    failed: tuple[str, ...] = ()
    """The job's own failed hosts, most recent first."""
    faulting: tuple[str, ...] = ()
    """Hosts with a fault open on the alert side or claimed within the window, newest fault first."""
    open: frozenset[str] = frozenset()
    """The faulting hosts whose fault is open on the alert side."""

    @property
    def in_priority(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.failed, *self.faulting)))

    def __contains__(self, host: object) -> bool:
        return host in self.failed or host in self.faulting

    def why(self, host: str) -> str:
        """Why a task on `host` must not stay there, as the rest of a sentence "placed on <host>, ..."."""
        if host in self.open:
            return "which has an open GPU fault"
        if host in self.faulting:
            return "which has a GPU fault claimed within the mass-fault window"
        if host in self.failed:
            return "which failed this job before"
        raise ValueError(f"{host} is not a host to avoid")


def hosts_to_avoid(failed_hosts: Sequence[str], faults: Iterable[KnownFault]) -> HostsToAvoid:
    """The job's failed hosts (the ledger's order: oldest first) and the known faults, in the order of priority."""
    latest: dict[str, datetime] = {}
    open_hosts: set[str] = set()
    for fault in faults:
        if not fault.host:
            continue
        latest[fault.host] = max(fault.since, latest.get(fault.host, fault.since))
        if fault.open:
            open_hosts.add(fault.host)
    newest_first = sorted(latest, key=lambda host: (-latest[host].timestamp(), host))
    failed = tuple(dict.fromkeys(host for host in reversed(failed_hosts) if host))
    return HostsToAvoid(failed=failed, faulting=tuple(newest_first), open=frozenset(open_hosts))


def placement_exclusion(provider: ProviderInfo | None, hosts: Sequence[str]) -> list[dict[str, str]]:
    """A memberOf constraint that keeps the relaunch off `hosts` (most important first): see excludable_hosts."""
    kept = excludable_hosts(provider, hosts)
    return [{"type": "memberOf", "expression": _exclusion_expression(kept)}] if kept else []


def excludable_hosts(provider: ProviderInfo | None, hosts: Sequence[str]) -> tuple[str, ...]:
    """The hosts a placement constraint can keep a relaunch off: none where the capacity provider does not
    support it, else the first of `hosts` that fit ECS's expression limit (None: the EC2 launch type).

    Managed Instances does not support the ec2InstanceId attribute: there the drain keeps the faulty host out,
    and the check after placement the others (docs/auto-resume.md, Limits).
    """
    if provider is not None and not provider.supports_instance_exclusion:
        return ()
    kept: list[str] = []
    length = len(_exclusion_expression(()))
    for host in dict.fromkeys(hosts):
        added = len(f"'{host}'") + (len(", ") if kept else 0)
        if length + added > MAX_EXCLUSION_EXPRESSION:
            break
        kept.append(host)
        length += added
    return tuple(kept)


def _exclusion_expression(hosts: Sequence[str]) -> str:
    return "ec2InstanceId !in [" + ", ".join(f"'{host}'" for host in hosts) + "]"


def misplaced_stop_reason(job_id: str, placement: str) -> str:
    """StopTask's reason for a relaunched task found on a host to avoid (`placement`: "placed on <host>, ...")."""
    return _clip(f"GPU Fault Responder: {placement}; job {job_id} is relaunched elsewhere", MAX_STOP_REASON)


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
    stopped_at: datetime | None = None
    """When the job's tasks it replaces were told to stop (ECS's stoppingAt, the first of them: TaskWatch), which
    ends the training a job that trains on after the fault loses; None when ECS gave no time, or the attempt
    replaces a failed attempt's tasks (then the relaunch's time, `launched_at`, stands in for it)."""
    superseded_by: str | None = None
    capacity_providers: tuple[str, ...] = ()
    """The providers the attempt's tasks were started on (the check after placement looks at their faults)."""
    avoided: int = 0
    """How many hosts the relaunch had to keep off (HostsToAvoid.in_priority)."""
    excluded_hosts: tuple[str, ...] = ()
    """Those a placement constraint excluded; the rest (Managed Instances, past the expression limit) are
    checked after placement."""
    spare: SpareUse | None = None
    """Whether the attempt went to warm spares, and the pool's refill (None: launched before spares existed)."""


def _tail(text: str, limit: int) -> str:
    """The end of a long URI says more (the step folder) than its start."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]
