"""What moto's ECS does not model, and the training auto-resume workflow depends on (docs/sandbox.md#ecs).

Installed as patches on moto's ECS backend and response classes, so it works in decorator mode and with the
in-process moto server alike. While installed:

- Capacity providers can be seeded with a type and, for Managed Instances, an
  `autoRepairConfiguration` (creating one through the API crashes moto and poisons every later
  DescribeCapacityProviders).
- Container instances can belong to a capacity provider (`capacityProviderName`), and RunTask with a
  capacity provider strategy places only on that provider's instances.
- RunTask honours `memberOf` constraints of the form `ec2InstanceId in [...]` / `ec2InstanceId !in [...]`
  (moto ignores every constraint), rejects an `ec2InstanceId` constraint on a Managed Instances provider
  as ECS would (the attribute is not supported there), replays a `clientToken` like ECS (same request ->
  the same tasks; a different request -> ConflictException), and reports `failures` when it places nothing.
- Failures can be injected: the next N RunTask calls answer `failures: [{reason: RESOURCE:GPU}]`, or the next
  N tasks started stop before they run.
- Container instances have health (docs/sandbox.md#ecs): DescribeContainerInstances with
  include=CONTAINER_INSTANCE_HEALTH shows each instance's `healthStatus` as seeded (`set_health`; an instance
  never seeded is OK, its CONTAINER_RUNTIME check OK since it registered), and refuses more than 100 instances a
  call as ECS does. ListContainerInstances is paginated like ECS (maxResults up to 100, nextToken), with pages of
  `list_page_size` (default 100).
- Tasks have a lifecycle, opt-in: with `start_after_describes` = N > 0 a new task is PENDING until the Nth
  DescribeTasks of it, which shows it RUNNING; with `stop_after_describes` = N > 0 a stopped task is STOPPING
  until the Nth DescribeTasks shows it STOPPED. With 0 (the default) tasks are RUNNING / STOPPED at once, as
  in moto. (moto's own lifecycle moves every RUNNING task towards STOPPED each time it is described; that is
  switched off.) StopTask on a task already stopping or stopped changes nothing (moto would release its
  resources a second time).

Only what the workflow needs is modelled; other constraint expressions are ignored, as moto does.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from moto.core.exceptions import JsonRESTError
from moto.core.responses import ActionResult
from moto.ecs import models as ecs_models
from moto.ecs.exceptions import InvalidParameterException
from moto.ecs.responses import EC2ContainerServiceResponse
from moto.moto_api import state_manager

DEFAULT_ACCOUNT = "123456789012"
DEFAULT_REGION = "us-east-1"
MANAGED_INSTANCES = "MANAGED_INSTANCES"
MAX_DESCRIBED = 100
"""DescribeContainerInstances: at most 100 container instances a call."""
MAX_PAGE = 100
"""ListContainerInstances: maxResults between 1 and 100."""
_NEVER = 10**9
_INSTANCE_SET = re.compile(r"^\s*ec2InstanceId\s+(?P<op>!in|not_in|in)\s+\[(?P<items>[^\]]*)\]\s*$")


class ConflictException(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ConflictException", message)


@dataclass
class _Countdown:
    remaining: int
    target: str
    early_stop: tuple[str, str] | None = None
    """(reason, stop code) when the task stops on its own instead of running; the stop happens then."""


@dataclass
class EcsEmulation:
    """Use as a context manager (or install()/uninstall()); one installed at a time per process."""

    account_id: str = DEFAULT_ACCOUNT
    region: str = DEFAULT_REGION
    start_after_describes: int = 0
    stop_after_describes: int = 0
    run_task_requests: list[dict[str, Any]] = field(default_factory=list)
    """Every RunTask request that reached ECS, in order (for assertions and reports)."""
    list_page_size: int = 100
    """ListContainerInstances' page size when the caller gives no maxResults (ECS: 100)."""
    describe_requests: list[dict[str, Any]] = field(default_factory=list)
    """Every DescribeContainerInstances request (cluster, instances, include), in order."""
    _health: dict[str, dict[str, Any]] = field(default_factory=dict)
    _provider_types: dict[str, str] = field(default_factory=dict)
    _run_failures: deque[str] = field(default_factory=deque)
    _early_stops: deque[tuple[str, str]] = field(default_factory=deque)
    _pinned: deque[str] = field(default_factory=deque)
    _countdowns: dict[str, _Countdown] = field(default_factory=dict)
    _tokens: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # --- Seeding ---------------------------------------------------------------------------------

    def seed_capacity_provider(
        self, cluster: str, name: str, *, provider_type: str = "EC2_AUTOSCALING", auto_repair: str | None = None
    ) -> str:
        """A capacity provider as DescribeCapacityProviders shows it; returns its ARN."""
        backend = self.backend
        asg = {"autoScalingGroupArn": _asg_arn(self.region, self.account_id, name)}
        # moto's model has no attributes for these; its serializer picks them up by the API's member names.
        provider: Any = ecs_models.CapacityProvider(self.account_id, self.region, name, asg, None)
        provider.type = provider_type
        if provider_type == MANAGED_INSTANCES:
            provider.auto_scaling_group_provider = None
            provider.cluster = cluster.rsplit("/", 1)[-1]
            provider.managed_instances_provider = {
                "infrastructureRoleArn": f"arn:aws:iam::{self.account_id}:role/ecsInfrastructureRole",
                "propagateTags": "NONE",
                **({"autoRepairConfiguration": {"actionsStatus": auto_repair}} if auto_repair else {}),
            }
        backend.capacity_providers[name] = provider
        self._provider_types[name] = provider_type
        return str(provider.capacity_provider_arn)

    def assign_instance(self, cluster: str, container_instance_arn: str, provider: str) -> None:
        """Make a registered container instance part of `provider` (its capacityProviderName)."""
        self._container_instance(cluster, container_instance_arn).capacity_provider_name = provider

    def set_health(self, container_instance_arn: str, overall: str, details: list[dict[str, Any]]) -> None:
        """The instance's healthStatus from now on, as DescribeContainerInstances shows it: `details` are
        InstanceHealthCheckResult objects (type, status, statusReason, lastUpdated, lastStatusChange; datetimes)."""
        with self._lock:
            self._health[container_instance_arn] = {"overallStatus": overall, "details": list(details)}

    def place_next_on(self, ec2_instance_id: str) -> None:
        """Seeding aid: the next RunTask places on this instance (Managed Instances cannot be targeted by a
        constraint, and a scenario must still say where its tasks run)."""
        self._pinned.append(ec2_instance_id)

    # --- Faults ----------------------------------------------------------------------------------

    def fail_run_tasks(self, count: int, reason: str = "RESOURCE:GPU") -> None:
        """The next `count` RunTask calls place nothing and report `reason`, as ECS does without capacity."""
        self._run_failures.extend([reason] * count)

    def stop_started_tasks_early(
        self,
        count: int,
        reason: str = "Essential container in task exited",
        stop_code: str = "EssentialContainerExited",
    ) -> None:
        """The next `count` tasks RunTask starts stop instead of reaching RUNNING."""
        self._early_stops.extend([(reason, stop_code)] * count)

    # --- Installation ----------------------------------------------------------------------------

    @property
    def backend(self) -> ecs_models.EC2ContainerServiceBackend:
        return ecs_models.ecs_backends[self.account_id][self.region]

    def install(self) -> EcsEmulation:
        with _install_lock:
            if _installed.active is not None:
                raise RuntimeError("an EcsEmulation is already installed")
            _installed.active = self
            state_manager.set_transition("ecs::task", {"progression": "manual", "times": _NEVER})
            for owner, name, replacement in _PATCHES:
                _originals[(owner, name)] = getattr(owner, name)
                setattr(owner, name, replacement)
        return self

    def uninstall(self) -> None:
        with _install_lock:
            if _installed.active is not self:
                return
            for (owner, name), original in _originals.items():
                setattr(owner, name, original)
            _originals.clear()
            state_manager.unset_transition("ecs::task")
            _installed.active = None

    def __enter__(self) -> EcsEmulation:
        return self.install()

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()

    # --- What the patches call -------------------------------------------------------------------

    def run_task(self, response: EC2ContainerServiceResponse) -> ActionResult:
        request = {
            name: response._get_param(name)
            for name in (
                "cluster",
                "taskDefinition",
                "count",
                "overrides",
                "startedBy",
                "tags",
                "launchType",
                "networkConfiguration",
                "group",
                "capacityProviderStrategy",
                "placementConstraints",
                "clientToken",
            )
        }
        with self._lock:
            self.run_task_requests.append({key: value for key, value in request.items() if value is not None})
            replay = self._replay(request)
            if replay is not None:
                return replay
            failure = self._run_failures.popleft() if self._run_failures else None
            if failure is None:
                task = self._place(request)
                failure = None if task is not None else self._no_placement_reason(request)
            tasks = [task] if failure is None and task is not None else []
            if request.get("clientToken"):
                self._tokens[request["clientToken"]] = (_fingerprint(request), [t.task_arn for t in tasks])
        failures = [{"arn": _cluster_arn(self, request), "reason": failure}] if failure else []
        return ActionResult({"tasks": tasks, "failures": failures})

    def describe_container_instances(self, response: EC2ContainerServiceResponse) -> ActionResult:
        cluster = response._get_param("cluster") or "default"
        arns = response._get_param("containerInstances") or []
        include = response._get_param("include") or []
        with self._lock:
            self.describe_requests.append({"cluster": cluster, "containerInstances": list(arns), "include": include})
        if len(arns) > MAX_DESCRIBED:
            raise InvalidParameterException(
                f"containerInstances can have at most {MAX_DESCRIBED} items; {len(arns)} were given."
            )
        instances, failures = self.backend.describe_container_instances(cluster, arns)
        shown: list[Any] = list(instances)
        if "CONTAINER_INSTANCE_HEALTH" in include:
            shown = [_WithHealth(instance, self._health_of(instance)) for instance in instances]
        return ActionResult({"failures": failures, "containerInstances": shown})

    def list_container_instances(self, response: EC2ContainerServiceResponse) -> ActionResult:
        cluster = response._get_param("cluster") or "default"
        arns = self.backend.list_container_instances(cluster, status=response._get_param("status"))
        size = int(response._get_param("maxResults") or self.list_page_size)
        if not 1 <= size <= MAX_PAGE:
            raise InvalidParameterException(f"maxResults must be between 1 and {MAX_PAGE}.")
        token = response._get_param("nextToken")
        start = int(token) if token and token.isdigit() else 0
        page: dict[str, Any] = {"containerInstanceArns": arns[start : start + size]}
        if start + size < len(arns):
            page["nextToken"] = str(start + size)
        return ActionResult(page)

    def _health_of(self, instance: Any) -> dict[str, Any]:
        with self._lock:
            seeded = self._health.get(instance.container_instance_arn)
        if seeded is not None:
            return seeded
        registered = instance.registered_at
        check = {"type": "CONTAINER_RUNTIME", "status": "OK", "lastUpdated": registered, "lastStatusChange": registered}
        return {"overallStatus": "OK", "details": [check]}

    def after_describe(self, tasks: list[Any]) -> None:
        with self._lock:
            for task in tasks:
                countdown = self._countdowns.get(task.task_arn)
                if countdown is None:
                    continue
                countdown.remaining -= 1
                if countdown.remaining > 0:
                    continue
                del self._countdowns[task.task_arn]
                if countdown.early_stop is not None:
                    reason, stop_code = countdown.early_stop
                    _originals[(ecs_models.EC2ContainerServiceBackend, "stop_task")](
                        self.backend, task.cluster_arn, task.task_arn, reason
                    )
                    task.stop_code = stop_code
                task.last_status = countdown.target

    def stop_task(self, backend: Any, cluster: str, task_arn: str, reason: str) -> Any:
        existing = _find_task(backend, task_arn)
        if existing is not None and existing.last_status in ("STOPPING", "STOPPED"):
            return existing
        task = _originals[(ecs_models.EC2ContainerServiceBackend, "stop_task")](backend, cluster, task_arn, reason)
        task.stop_code = "UserInitiated"
        with self._lock:
            self._countdowns.pop(task.task_arn, None)
            if self.stop_after_describes > 0:
                task.last_status = "STOPPING"
                self._countdowns[task.task_arn] = _Countdown(self.stop_after_describes, "STOPPED")
        return task

    # --- Helpers ---------------------------------------------------------------------------------

    def _replay(self, request: dict[str, Any]) -> ActionResult | None:
        token = request.get("clientToken")
        if not token or token not in self._tokens:
            return None
        fingerprint, arns = self._tokens[token]
        if fingerprint != _fingerprint(request):
            raise ConflictException(f"The clientToken {token} was already used with different parameters.")
        tasks = [task for arn in arns if (task := _find_task(self.backend, arn)) is not None]
        return ActionResult({"tasks": tasks, "failures": []})

    def _place(self, request: dict[str, Any]) -> Any | None:
        backend = self.backend
        cluster = backend._get_cluster(request.get("cluster") or "default")
        definition = backend.describe_task_definition(request["taskDefinition"])
        needs = backend._calculate_task_resource_requirements(definition)
        provider = _strategy_provider(request)
        pinned = self._pinned.popleft() if self._pinned else None
        for instance in self._candidates(cluster.name, provider, request.get("placementConstraints") or []):
            if pinned is not None and instance.ec2_instance_id != pinned:
                continue
            if not backend._can_be_placed(instance, needs):
                continue
            task = ecs_models.Task(
                cluster,
                definition,
                instance.container_instance_arn,
                needs,
                backend=backend,
                group=request.get("group") or f"family:{definition.family}",
                launch_type=request.get("launchType") or ("EC2" if not provider else ""),
                overrides=request.get("overrides") or {},
                started_by=request.get("startedBy") or "",
                tags=request.get("tags") or [],
                networking_configuration=request.get("networkConfiguration"),
                capacity_provider_name=provider,
            )
            backend.update_container_instance_resources(instance, needs)
            backend.update_cluster_resources(cluster, 1)
            backend.tasks.setdefault(cluster.name, {})[task.task_arn] = task
            self._start_lifecycle(task)
            return task
        return None

    def _start_lifecycle(self, task: Any) -> None:
        if self._early_stops:
            task.last_status = "PENDING"
            early_stop = self._early_stops.popleft()
            self._countdowns[task.task_arn] = _Countdown(max(1, self.start_after_describes), "STOPPED", early_stop)
        elif self.start_after_describes > 0:
            task.last_status = "PENDING"
            self._countdowns[task.task_arn] = _Countdown(self.start_after_describes, "RUNNING")

    def _candidates(self, cluster: str, provider: str | None, constraints: list[dict[str, Any]]) -> Iterator[Any]:
        allowed = _instance_filter(constraints)
        if allowed is not None and provider and self._provider_types.get(provider) == MANAGED_INSTANCES:
            raise InvalidParameterException(
                "Managed Instances capacity providers do not support the ec2InstanceId attribute in placement "
                "constraints."
            )
        for instance in self.backend.container_instances.get(cluster, {}).values():
            if instance.status != "ACTIVE":
                continue
            if provider and getattr(instance, "capacity_provider_name", None) not in (None, provider):
                continue
            if allowed is not None and not allowed(instance.ec2_instance_id):
                continue
            yield instance

    def _no_placement_reason(self, request: dict[str, Any]) -> str:
        # ECS names the resource that ran out; moto models CPU and memory only.
        return "ATTRIBUTE" if request.get("placementConstraints") else "RESOURCE:CPU"

    def _container_instance(self, cluster: str, arn: str) -> Any:
        instances = self.backend.container_instances.get(cluster.rsplit("/", 1)[-1], {})
        return instances[arn.rsplit("/", 1)[-1]]


class _WithHealth:
    """A container instance as DescribeContainerInstances shows it with include=CONTAINER_INSTANCE_HEALTH (moto's
    serializer reads members by attribute name; everything but healthStatus is the instance's own)."""

    def __init__(self, instance: Any, health: dict[str, Any]) -> None:
        self._instance = instance
        self.health_status = health

    def __getattr__(self, name: str) -> Any:
        return getattr(self._instance, name)


@dataclass
class _Installed:
    active: EcsEmulation | None = None


_installed = _Installed()
_install_lock = threading.Lock()
_originals: dict[tuple[type, str], Callable[..., Any]] = {}


def _emulation() -> EcsEmulation:
    if _installed.active is None:
        raise RuntimeError("EcsEmulation is not installed")
    return _installed.active


def _patched_run_task(self: EC2ContainerServiceResponse) -> ActionResult:
    return _emulation().run_task(self)


def _patched_describe_container_instances(self: EC2ContainerServiceResponse) -> ActionResult:
    return _emulation().describe_container_instances(self)


def _patched_list_container_instances(self: EC2ContainerServiceResponse) -> ActionResult:
    return _emulation().list_container_instances(self)


def _patched_describe_tasks(self: Any, cluster_str: str, tasks: list[str]) -> list[Any]:
    described = _originals[(ecs_models.EC2ContainerServiceBackend, "describe_tasks")](self, cluster_str, tasks)
    _emulation().after_describe(described)
    return list(described)


def _patched_stop_task(self: Any, cluster_str: str, task_str: str, reason: str) -> Any:
    return _emulation().stop_task(self, cluster_str, task_str, reason)


_PATCHES: list[tuple[type, str, Callable[..., Any]]] = [
    (EC2ContainerServiceResponse, "run_task", _patched_run_task),
    (EC2ContainerServiceResponse, "describe_container_instances", _patched_describe_container_instances),
    (EC2ContainerServiceResponse, "list_container_instances", _patched_list_container_instances),
    (ecs_models.EC2ContainerServiceBackend, "describe_tasks", _patched_describe_tasks),
    (ecs_models.EC2ContainerServiceBackend, "stop_task", _patched_stop_task),
]


@contextmanager
def emulated_ecs(**settings: Any) -> Iterator[EcsEmulation]:
    with EcsEmulation(**settings) as emulation:
        yield emulation


def _instance_filter(constraints: list[dict[str, Any]]) -> Callable[[str], bool] | None:
    """A predicate over EC2 instance ids from the `memberOf ec2InstanceId [!]in [...]` constraints, if any."""
    checks: list[Callable[[str], bool]] = []
    for constraint in constraints:
        if constraint.get("type") != "memberOf":
            continue
        match = _INSTANCE_SET.match(constraint.get("expression") or "")
        if match is None:
            continue
        items = frozenset(item.strip().strip("'\"") for item in match["items"].split(",") if item.strip())
        checks.append(_member_check(items, inside=match["op"] == "in"))
    if not checks:
        return None
    return lambda instance: all(check(instance) for check in checks)


def _member_check(items: frozenset[str], *, inside: bool) -> Callable[[str], bool]:
    def check(instance: str) -> bool:
        return (instance in items) == inside

    return check


def _strategy_provider(request: dict[str, Any]) -> str | None:
    strategy = request.get("capacityProviderStrategy") or []
    return strategy[0]["capacityProvider"] if strategy else None


def _fingerprint(request: dict[str, Any]) -> str:
    relevant = {key: value for key, value in request.items() if key != "clientToken"}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()


def _find_task(backend: Any, task_arn: str) -> Any | None:
    for tasks in backend.tasks.values():
        if task_arn in tasks:
            return tasks[task_arn]
    return None


def _cluster_arn(emulation: EcsEmulation, request: dict[str, Any]) -> str:
    return str(emulation.backend._get_cluster(request.get("cluster") or "default").arn)


def _asg_arn(region: str, account: str, name: str) -> str:
    group_id = "00000000-0000-0000-0000-000000000000"
    return f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:{group_id}:autoScalingGroupName/{name}"
