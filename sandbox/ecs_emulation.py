"""What moto's ECS does not model, and the training auto-resume workflow depends on (docs/sandbox.md#ecs).

Installed as patches on moto's ECS backend and response classes (and two of its Auto Scaling methods), so it works
in decorator mode and with the in-process moto server alike. While installed:

- Capacity providers can be seeded with a type and, for Managed Instances, an
  `autoRepairConfiguration` (creating one through the API crashes moto and poisons every later
  DescribeCapacityProviders).
- Container instances can belong to a capacity provider (`capacityProviderName`), and RunTask with a
  capacity provider strategy places only on that provider's instances.
- RunTask honours `memberOf` constraints such as `ec2InstanceId in [...]` / `ec2InstanceId !in [...]` and the
  attribute clauses below (moto ignores every constraint), rejects an `ec2InstanceId` constraint on a Managed
  Instances provider as ECS would (the attribute is not supported there), replays a `clientToken` like ECS (same
  request -> the same tasks; a different request -> ConflictException), and reports `failures` when it places
  nothing.
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
  switched off.) DescribeTasks shows the times of a stop, which moto never sets: `stoppingAt` from the StopTask
  (or the early stop), `executionStoppedAt` and `stoppedAt` once STOPPED. StopTask on a task already stopping or
  stopped changes nothing (moto would release its resources a second time). A process emulated on a task (an
  emulated trainer) does each unit of its work inside `task_statuses_held()`, so its task does not turn STOPPED
  in the middle of a write: a container is STOPPED only once its process has exited.
- Container instances carry custom attributes (PutAttributes, through moto). ListContainerInstances honours a
  `filter` of cluster query language clauses joined by `and` (`attribute:NAME exists`, `attribute:NAME not_exists`,
  `attribute:NAME == VALUE`, `attribute:NAME != VALUE`, `ec2InstanceId in [...]`), applied before the pages are cut,
  and refuses any other expression; RunTask honours `memberOf` expressions made of the same clauses.
- A capacity provider can scale with a real (moto) Auto Scaling group (`seed_auto_scaling`): when the group's
  desired capacity rises, by SetDesiredCapacity or by the emulated managed scaling, a container instance registers
  `launch_delay_seconds` later (of `time.monotonic`), with the group's EC2 instance and the launch attributes. With
  managed scaling on, a RunTask that cannot be placed starts its task in PROVISIONING and raises the desired
  capacity by one (up to the group's maximum); the task is placed once an instance it fits on is there (ListTasks
  by container instance passes over it, where moto's filter would fail on a task with no instance). Launches
  and placements are evaluated on each RunTask, DescribeTasks, ListContainerInstances and
  DescribeContainerInstances (`catch_up`); nothing runs in the background.

Several accounts and Regions (docs/sandbox.md#accounts): moto keeps each account's and Region's ECS and Auto Scaling
apart (the account from the caller's credentials), and so does the emulation. A request is answered in the account
and Region it reached; the emulation's own seeding calls act in `account_id` and `region` unless made within
`at(account, region)`. Capacity providers and their groups are known per account and Region (two accounts may name
theirs alike); container instances and tasks by their ARNs, which name both.

Only what the workflow needs is modelled; other constraint expressions are ignored, as moto does.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.autoscaling import models as autoscaling_models
from moto.autoscaling.exceptions import ValidationError as AutoScalingValidationError
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
DEFAULT_LAUNCH_DELAY_SECONDS = 300.0
"""How long an instance the Auto Scaling group launches takes to register with ECS (a replacement's time)."""
_NEVER = 10**9
_AND = re.compile(r"\s+and\s+", re.IGNORECASE)
_ATTRIBUTE_CLAUSE = re.compile(
    r"^attribute:(?P<name>[A-Za-z0-9_./\\-]{1,128})\s+"
    r"(?P<op>==|equals|!=|not_equals|exists|!exists|not_exists)(?:\s+(?P<value>\S.*?))?$"
)
_INSTANCE_CLAUSE = re.compile(r"^ec2InstanceId\s+(?P<op>!in|not_in|in)\s+\[(?P<items>[^\]]*)\]$")
_OPERATORS = {
    "==": "==",
    "equals": "==",
    "!=": "!=",
    "not_equals": "!=",
    "exists": "exists",
    "!exists": "not_exists",
    "not_exists": "not_exists",
    "in": "in",
    "!in": "not_in",
    "not_in": "not_in",
}


class ConflictException(JsonRESTError):
    def __init__(self, message: str) -> None:
        super().__init__("ConflictException", message)


@dataclass
class _Countdown:
    remaining: int
    target: str
    early_stop: tuple[str, str] | None = None
    """(reason, stop code) when the task stops on its own instead of running; the stop happens then."""


Place = tuple[str, str]
"""(account, Region)."""


@dataclass
class _Group:
    """A capacity provider's Auto Scaling group, and what the emulation launches for it."""

    place: Place
    cluster: str
    provider: str
    name: str
    managed_scaling: bool
    launch_delay_seconds: float
    launch_attributes: dict[str, str]
    gpus: int
    seeded: int
    """The group's desired capacity when it was handed to the emulation: instances that exist already."""
    known: set[str]
    """EC2 instance ids of the group that are not to be launched again (seeded, or launched already)."""
    asks: deque[tuple[float, datetime]] = field(default_factory=deque)
    """(time.monotonic(), wall clock) of each instance asked for and not registered yet, oldest first."""
    launched: int = 0


@dataclass
class _Waiting:
    """A PROVISIONING task: placed once an instance it fits on is there."""

    task: Any
    cluster: str
    provider: str
    constraints: list[dict[str, Any]]
    asked_at: datetime
    place: Place


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
    launches: list[dict[str, Any]] = field(default_factory=list)
    """Every container instance an Auto Scaling group launched, in order: name (`<provider>-launched-<n>`),
    provider, cluster, auto_scaling_group, ec2_instance_id, container_instance_arn, instance_type, gpus,
    attributes, asked_at and registered_at (ISO 8601, UTC)."""
    _health: dict[str, dict[str, Any]] = field(default_factory=dict)
    _provider_types: dict[tuple[Place, str], str] = field(default_factory=dict)
    _groups: dict[tuple[Place, str], _Group] = field(default_factory=dict)
    """(account and Region, capacity provider name) -> its Auto Scaling group."""
    _waiting: list[_Waiting] = field(default_factory=list)
    _run_failures: deque[str] = field(default_factory=deque)
    _early_stops: deque[tuple[str, str]] = field(default_factory=deque)
    _pinned: deque[str] = field(default_factory=deque)
    _countdowns: dict[str, _Countdown] = field(default_factory=dict)
    _tokens: dict[str, tuple[str, list[str]]] = field(default_factory=dict)
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _here: threading.local = field(default_factory=threading.local)

    # --- Where -----------------------------------------------------------------------------------

    @property
    def place(self) -> Place:
        """The account and Region this thread acts in now: the request's (or `at`'s), else the emulation's own."""
        place: Place | None = getattr(self._here, "place", None)
        return place if place is not None else (self.account_id, self.region)

    @contextmanager
    def at(self, account: str, region: str) -> Iterator[None]:
        """What is done within acts in this account and Region (this thread only)."""
        before = getattr(self._here, "place", None)
        self._here.place = (account, region)
        try:
            yield
        finally:
            self._here.place = before

    # --- Seeding ---------------------------------------------------------------------------------

    def seed_capacity_provider(
        self, cluster: str, name: str, *, provider_type: str = "EC2_AUTOSCALING", auto_repair: str | None = None
    ) -> str:
        """A capacity provider as DescribeCapacityProviders shows it; returns its ARN. Its Auto Scaling group ARN is
        a made-up one until `seed_auto_scaling` names a real group."""
        backend = self.backend
        account, region = self.place
        asg = {"autoScalingGroupArn": _asg_arn(region, account, name)}
        # moto's model has no attributes for these; its serializer picks them up by the API's member names.
        provider: Any = ecs_models.CapacityProvider(account, region, name, asg, None)
        provider.type = provider_type
        if provider_type == MANAGED_INSTANCES:
            provider.auto_scaling_group_provider = None
            provider.cluster = cluster.rsplit("/", 1)[-1]
            provider.managed_instances_provider = {
                "infrastructureRoleArn": f"arn:aws:iam::{account}:role/ecsInfrastructureRole",
                "propagateTags": "NONE",
                **({"autoRepairConfiguration": {"actionsStatus": auto_repair}} if auto_repair else {}),
            }
        backend.capacity_providers[name] = provider
        self._provider_types[(self.place, name)] = provider_type
        return str(provider.capacity_provider_arn)

    def seed_auto_scaling(
        self,
        cluster: str,
        provider: str,
        group: str,
        *,
        managed_scaling: bool = False,
        launch_delay_seconds: float = DEFAULT_LAUNCH_DELAY_SECONDS,
        launch_attributes: Mapping[str, str] | None = None,
        gpus: int = 8,
    ) -> None:
        """`provider` (seeded, EC2_AUTOSCALING) scales with the Auto Scaling group named `group`, which exists in
        moto and holds the provider's instances: DescribeCapacityProviders shows the group's ARN and managed
        scaling's status. From now on, each instance the group's desired capacity rises above what it is now
        registers in `cluster`, as the provider's, `launch_delay_seconds` after the rise, with `launch_attributes`.
        With `managed_scaling`, a RunTask for the provider that cannot be placed waits in PROVISIONING."""
        with self._lock:
            if self._provider_types.get((self.place, provider)) != "EC2_AUTOSCALING":
                raise ValueError(f"{provider} is not a seeded EC2_AUTOSCALING capacity provider")
            asg = self._auto_scaling_group(group)
            settings: Any = self.backend.capacity_providers[provider].auto_scaling_group_provider
            settings["autoScalingGroupArn"] = asg.arn
            settings["managedScaling"]["status"] = "ENABLED" if managed_scaling else "DISABLED"
            self._groups[(self.place, provider)] = _Group(
                place=self.place,
                cluster=cluster.rsplit("/", 1)[-1],
                provider=provider,
                name=group,
                managed_scaling=managed_scaling,
                launch_delay_seconds=launch_delay_seconds,
                launch_attributes=dict(launch_attributes or {}),
                gpus=gpus,
                seeded=asg.desired_capacity or 0,
                known={state.instance.id for state in asg.instance_states},
            )

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

    # --- Capacity --------------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Register the instances whose launch delay has passed, then place the PROVISIONING tasks that now fit,
        oldest first. Every patched ECS call does this first; a test may call it too."""
        with self._lock:
            now = time.monotonic()
            for group in self._groups.values():
                with self.at(*group.place):
                    self._count_asks(group)
                    while group.asks and now - group.asks[0][0] >= group.launch_delay_seconds:
                        _, asked_at = group.asks.popleft()
                        self._launch(group, asked_at)
            self._place_waiting()

    def provisioning_tasks(self) -> list[dict[str, Any]]:
        """The tasks waiting in PROVISIONING for an instance, oldest first, as the last ECS call left them:
        task_arn, cluster, capacity_provider, placement_constraints, asked_at (ISO 8601, UTC)."""
        with self._lock:
            return [
                {
                    "task_arn": waiting.task.task_arn,
                    "cluster": waiting.cluster,
                    "capacity_provider": waiting.provider,
                    "placement_constraints": list(waiting.constraints),
                    "asked_at": _iso(waiting.asked_at),
                }
                for waiting in self._waiting
                if _still_provisioning(waiting.task)
            ]

    # --- Installation ----------------------------------------------------------------------------

    @property
    def backend(self) -> ecs_models.EC2ContainerServiceBackend:
        account, region = self.place
        return ecs_models.ecs_backends[account][region]

    @property
    def autoscaling(self) -> autoscaling_models.AutoScalingBackend:
        account, region = self.place
        return autoscaling_models.autoscaling_backends[account][region]

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
            self.catch_up()
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
        self.catch_up()
        instances, failures = self.backend.describe_container_instances(cluster, arns)
        shown: list[Any] = list(instances)
        if "CONTAINER_INSTANCE_HEALTH" in include:
            shown = [_WithHealth(instance, self._health_of(instance)) for instance in instances]
        return ActionResult({"failures": failures, "containerInstances": shown})

    def list_container_instances(self, response: EC2ContainerServiceResponse) -> ActionResult:
        cluster = response._get_param("cluster") or "default"
        expression = response._get_param("filter")
        query = _query(expression) if expression else None
        if expression and query is None:
            raise InvalidParameterException(
                f"The filter expression {expression!r} is not supported by the sandbox's ECS emulation: it takes "
                "attribute:NAME exists | not_exists | == VALUE | != VALUE and ec2InstanceId in [...] | !in [...], "
                "joined by `and`."
            )
        size = int(response._get_param("maxResults") or self.list_page_size)
        if not 1 <= size <= MAX_PAGE:
            raise InvalidParameterException(f"maxResults must be between 1 and {MAX_PAGE}.")
        self.catch_up()
        arns = self.backend.list_container_instances(cluster, status=response._get_param("status"))
        if query is not None:
            by_arn = {
                instance.container_instance_arn: instance
                for instance in self.backend.container_instances.get(cluster.rsplit("/", 1)[-1], {}).values()
            }
            arns = [arn for arn in arns if arn in by_arn and query.matches(by_arn[arn])]
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
                    _began_stopping(task)
                task.last_status = countdown.target
                if countdown.target == "STOPPED":
                    _stopped(task)

    @contextmanager
    def task_statuses_held(self) -> Iterator[None]:
        """While open, no task changes status (StopTask and the lifecycle's describes wait for it to close)."""
        with self._lock:
            yield

    def stop_task(self, backend: Any, cluster: str, task_arn: str, reason: str) -> Any:
        with self._lock:  # not while a process on the task is in the middle of a unit of work (task_statuses_held)
            existing = _find_task(backend, task_arn)
            if existing is not None and existing.last_status in ("STOPPING", "STOPPED"):
                return existing
            task = _originals[(ecs_models.EC2ContainerServiceBackend, "stop_task")](backend, cluster, task_arn, reason)
            task.stop_code = "UserInitiated"
            _began_stopping(task)
            self._countdowns.pop(task.task_arn, None)
            if self.stop_after_describes > 0:
                task.last_status = "STOPPING"
                self._countdowns[task.task_arn] = _Countdown(self.stop_after_describes, "STOPPED")
            else:
                _stopped(task)
        return task

    def desired_capacity_changed(self, group_name: str) -> None:
        """An Auto Scaling group's desired capacity was set: note the instances it now asks for."""
        with self._lock:
            for group in self._groups.values():
                if group.name == group_name and group.place == self.place:
                    self._count_asks(group)

    def check_desired_capacity(self, group_name: str, desired: int | None) -> None:
        """SetDesiredCapacity on a group the emulation scales is refused outside its size, as Auto Scaling does."""
        if desired is None or not any(g.name == group_name and g.place == self.place for g in self._groups.values()):
            return
        asg = self._auto_scaling_group(group_name)
        if asg.max_size is not None and desired > asg.max_size:
            raise AutoScalingValidationError(
                f"New SetDesiredCapacity value {desired} is above max value {asg.max_size} for the AutoScalingGroup."
            )
        if asg.min_size is not None and desired < asg.min_size:
            raise AutoScalingValidationError(
                f"New SetDesiredCapacity value {desired} is below min value {asg.min_size} for the AutoScalingGroup."
            )

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
        """The task RunTask starts: on an instance it fits on, else PROVISIONING with managed scaling, else None."""
        backend = self.backend
        cluster = backend._get_cluster(request.get("cluster") or "default")
        definition = backend.describe_task_definition(request["taskDefinition"])
        needs = backend._calculate_task_resource_requirements(definition)
        provider = _strategy_provider(request)
        constraints = request.get("placementConstraints") or []
        pinned = self._pinned.popleft() if self._pinned else None
        instance = self._fit(cluster.name, provider, constraints, needs, pinned)
        group = self._groups.get((self.place, provider or ""))
        if instance is None and (group is None or not group.managed_scaling):
            return None
        task = ecs_models.Task(
            cluster,
            definition,
            None,
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
        backend.tasks.setdefault(cluster.name, {})[task.task_arn] = task
        if instance is not None:
            self._put_on(task, instance)
        elif group is not None and provider is not None:
            task.last_status = "PROVISIONING"
            self._waiting.append(
                _Waiting(task, cluster.name, provider, list(constraints), datetime.now(UTC), self.place)
            )
            self._scale_out(group)
        return task

    def _fit(
        self,
        cluster: str,
        provider: str | None,
        constraints: list[dict[str, Any]],
        needs: dict[str, Any],
        pinned: str | None = None,
    ) -> Any | None:
        """The first instance the task may go on and has room for, if any."""
        for instance in self._candidates(cluster, provider, constraints):
            if pinned is not None and instance.ec2_instance_id != pinned:
                continue
            if self.backend._can_be_placed(instance, needs):
                return instance
        return None

    def _put_on(self, task: Any, instance: Any) -> None:
        """The task placed on the instance, its lifecycle started."""
        backend = self.backend
        task.container_instance_arn = instance.container_instance_arn
        task.last_status = "RUNNING"
        backend.update_container_instance_resources(instance, task.resource_requirements)
        backend.update_cluster_resources(backend._get_cluster(task.cluster_name), 1)
        self._start_lifecycle(task)

    def _start_lifecycle(self, task: Any) -> None:
        if self._early_stops:
            task.last_status = "PENDING"
            early_stop = self._early_stops.popleft()
            self._countdowns[task.task_arn] = _Countdown(max(1, self.start_after_describes), "STOPPED", early_stop)
        elif self.start_after_describes > 0:
            task.last_status = "PENDING"
            self._countdowns[task.task_arn] = _Countdown(self.start_after_describes, "RUNNING")

    def _candidates(self, cluster: str, provider: str | None, constraints: list[dict[str, Any]]) -> Iterator[Any]:
        queries = _placement_queries(constraints)
        names_instances = any(query.names_instances for query in queries)
        if names_instances and provider and self._provider_types.get((self.place, provider)) == MANAGED_INSTANCES:
            raise InvalidParameterException(
                "Managed Instances capacity providers do not support the ec2InstanceId attribute in placement "
                "constraints."
            )
        for instance in list(self.backend.container_instances.get(cluster, {}).values()):
            if instance.status != "ACTIVE":
                continue
            if provider and getattr(instance, "capacity_provider_name", None) not in (None, provider):
                continue
            if all(query.matches(instance) for query in queries):
                yield instance

    def _no_placement_reason(self, request: dict[str, Any]) -> str:
        # ECS names the resource that ran out; moto models CPU and memory only.
        return "ATTRIBUTE" if request.get("placementConstraints") else "RESOURCE:CPU"

    def _container_instance(self, cluster: str, arn: str) -> Any:
        instances = self.backend.container_instances.get(cluster.rsplit("/", 1)[-1], {})
        return instances[arn.rsplit("/", 1)[-1]]

    def _auto_scaling_group(self, name: str) -> Any:
        groups = self.autoscaling.autoscaling_groups
        if name not in groups:
            raise ValueError(f"no Auto Scaling group named {name!r} in moto")
        return groups[name]

    def _count_asks(self, group: _Group) -> None:
        """One ask per instance the group's desired capacity wants beyond those seeded and launched: new asks are
        timed now; a lowered capacity withdraws the newest."""
        if group.name not in self.autoscaling.autoscaling_groups:
            return
        desired = self._auto_scaling_group(group.name).desired_capacity or 0
        owed = max(0, desired - group.seeded - group.launched)
        while len(group.asks) < owed:
            group.asks.append((time.monotonic(), datetime.now(UTC)))
        while len(group.asks) > owed:
            group.asks.pop()

    def _scale_out(self, group: _Group) -> None:
        """Managed scaling: one more instance for a PROVISIONING task, unless the group is at its maximum."""
        asg = self._auto_scaling_group(group.name)
        desired = asg.desired_capacity or 0
        if asg.max_size is None or desired < asg.max_size:
            self.autoscaling.set_desired_capacity(group.name, desired + 1)

    def _launch(self, group: _Group, asked_at: datetime) -> None:
        """Register one instance of the group with ECS, as the provider's, with the launch attributes."""
        backend = self.backend
        asg = self._auto_scaling_group(group.name)
        ec2_id = next((s.instance.id for s in asg.instance_states if s.instance.id not in group.known), None)
        if ec2_id is None:  # moto launched none for this ask (the group was changed around it): launch one here
            reservation = asg.ec2_backend.run_instances(
                asg.image_id, 1, None, [], instance_type=asg.instance_type, is_instance_type_default=False
            )
            ec2_id = reservation.instances[0].id
        group.known.add(ec2_id)
        instance: Any = backend.register_container_instance(group.cluster, ec2_id)
        arn = instance.container_instance_arn
        instance.capacity_provider_name = group.provider
        if group.launch_attributes:
            backend.put_attributes(
                group.cluster,
                [{"name": name, "value": value, "targetId": arn} for name, value in group.launch_attributes.items()],
            )
        group.launched += 1
        self.launches.append(
            {
                "name": f"{group.provider}-launched-{group.launched}",
                "account": group.place[0],
                "region": group.place[1],
                "provider": group.provider,
                "cluster": group.cluster,
                "auto_scaling_group": group.name,
                "ec2_instance_id": ec2_id,
                "container_instance_arn": arn,
                "instance_type": instance.attributes.get("ecs.instance-type"),
                "gpus": group.gpus,
                "attributes": dict(group.launch_attributes),
                "asked_at": _iso(asked_at),
                "registered_at": _iso(datetime.now(UTC)),
            }
        )

    def _place_waiting(self) -> None:
        """Each PROVISIONING task, oldest first, onto an instance it now fits on (tasks stopped meanwhile leave)."""
        waiting: list[_Waiting] = []
        for entry in self._waiting:
            if not _still_provisioning(entry.task):
                continue
            with self.at(*entry.place):
                instance = self._fit(entry.cluster, entry.provider, entry.constraints, entry.task.resource_requirements)
                if instance is None:
                    waiting.append(entry)
                else:
                    self._put_on(entry.task, instance)
        self._waiting = waiting


class _WithHealth:
    """A container instance as DescribeContainerInstances shows it with include=CONTAINER_INSTANCE_HEALTH (moto's
    serializer reads members by attribute name; everything but healthStatus is the instance's own)."""

    def __init__(self, instance: Any, health: dict[str, Any]) -> None:
        self._instance = instance
        self.health_status = health

    def __getattr__(self, name: str) -> Any:
        return getattr(self._instance, name)


# --- The cluster query language ----------------------------------------------------------------------


@dataclass(frozen=True)
class _Clause:
    """One `subject operator [argument]` of a cluster query: on an attribute, or on the EC2 instance id."""

    attribute: str | None
    """The attribute's name; None for ec2InstanceId."""
    operator: str
    """==, !=, exists, not_exists (attributes); in, not_in (ec2InstanceId)."""
    values: frozenset[str] = frozenset()

    def holds(self, instance: Any) -> bool:
        if self.attribute is None:
            return (instance.ec2_instance_id in self.values) == (self.operator == "in")
        attributes: dict[str, Any] = instance.attributes
        if self.operator in ("exists", "not_exists"):
            return (self.attribute in attributes) == (self.operator == "exists")
        equal = self.attribute in attributes and attributes[self.attribute] in self.values
        return equal == (self.operator == "==")


@dataclass(frozen=True)
class _Query:
    """A cluster query language expression: clauses that must all hold."""

    clauses: tuple[_Clause, ...]

    @property
    def names_instances(self) -> bool:
        return any(clause.attribute is None for clause in self.clauses)

    def matches(self, instance: Any) -> bool:
        return all(clause.holds(instance) for clause in self.clauses)


def _query(expression: str) -> _Query | None:
    """The expression's clauses, or None when it has one the emulation does not understand."""
    clauses: list[_Clause] = []
    for text in _AND.split(expression.strip()):
        clause = _clause(text.strip())
        if clause is None:
            return None
        clauses.append(clause)
    return _Query(tuple(clauses))


def _clause(text: str) -> _Clause | None:
    if (match := _ATTRIBUTE_CLAUSE.match(text)) is not None:
        operator, value = _OPERATORS[match["op"]], match["value"]
        if (operator in ("exists", "not_exists")) != (value is None):
            return None
        return _Clause(match["name"], operator, frozenset() if value is None else frozenset({_unquoted(value)}))
    if (match := _INSTANCE_CLAUSE.match(text)) is not None:
        items = frozenset(_unquoted(item) for item in match["items"].split(",") if item.strip())
        return _Clause(None, _OPERATORS[match["op"]], items)
    return None


def _unquoted(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _placement_queries(constraints: list[dict[str, Any]]) -> list[_Query]:
    """The `memberOf` constraints the emulation understands; others are ignored, as moto ignores them all."""
    queries = []
    for constraint in constraints:
        if constraint.get("type") != "memberOf":
            continue
        query = _query(constraint.get("expression") or "")
        if query is not None:
            queries.append(query)
    return queries


# --- Installation ------------------------------------------------------------------------------------


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
    emulation = _emulation()
    with emulation.at(self.current_account, self.region):
        return emulation.run_task(self)


def _patched_describe_container_instances(self: EC2ContainerServiceResponse) -> ActionResult:
    emulation = _emulation()
    with emulation.at(self.current_account, self.region):
        return emulation.describe_container_instances(self)


def _patched_list_container_instances(self: EC2ContainerServiceResponse) -> ActionResult:
    emulation = _emulation()
    with emulation.at(self.current_account, self.region):
        return emulation.list_container_instances(self)


def _patched_describe_tasks(self: Any, cluster_str: str, tasks: list[str]) -> list[Any]:
    described = _originals[(ecs_models.EC2ContainerServiceBackend, "describe_tasks")](self, cluster_str, tasks)
    emulation = _emulation()
    with emulation.at(self.account_id, self.region_name):
        emulation.after_describe(described)
        # After the countdowns: a task placed now shows PENDING in this answer, as a new task does in RunTask's.
        emulation.catch_up()
    return list(described)


def _patched_list_tasks(
    self: Any,
    cluster_str: str | None = None,
    container_instance: str | None = None,
    family: str | None = None,
    started_by: str | None = None,
    service_name: str | None = None,
    desiredStatus: str | None = None,
) -> list[Any]:
    """moto's ListTasks, where a PROVISIONING task (no container instance yet) does not break the instance filter."""
    original = _originals[(ecs_models.EC2ContainerServiceBackend, "list_tasks")]
    tasks = original(self, cluster_str, None, family, started_by, service_name, desiredStatus)
    if container_instance:
        tasks = [t for t in tasks if t.container_instance_arn and container_instance in t.container_instance_arn]
    return list(tasks)


def _patched_stop_task(self: Any, cluster_str: str, task_str: str, reason: str) -> Any:
    emulation = _emulation()
    with emulation.at(self.account_id, self.region_name):
        return emulation.stop_task(self, cluster_str, task_str, reason)


def _patched_group_set_desired_capacity(self: Any, new_capacity: int | None) -> None:
    _originals[(autoscaling_models.FakeAutoScalingGroup, "set_desired_capacity")](self, new_capacity)
    emulation = _emulation()
    with emulation.at(self.account_id, self.region):
        emulation.desired_capacity_changed(self.name)


def _patched_backend_set_desired_capacity(self: Any, group_name: str, desired_capacity: int | None) -> None:
    emulation = _emulation()
    with emulation.at(self.account_id, self.region_name):
        emulation.check_desired_capacity(group_name, desired_capacity)
    _originals[(autoscaling_models.AutoScalingBackend, "set_desired_capacity")](self, group_name, desired_capacity)


_PATCHES: list[tuple[type, str, Callable[..., Any]]] = [
    (EC2ContainerServiceResponse, "run_task", _patched_run_task),
    (EC2ContainerServiceResponse, "describe_container_instances", _patched_describe_container_instances),
    (EC2ContainerServiceResponse, "list_container_instances", _patched_list_container_instances),
    (ecs_models.EC2ContainerServiceBackend, "describe_tasks", _patched_describe_tasks),
    (ecs_models.EC2ContainerServiceBackend, "list_tasks", _patched_list_tasks),
    (ecs_models.EC2ContainerServiceBackend, "stop_task", _patched_stop_task),
    (autoscaling_models.FakeAutoScalingGroup, "set_desired_capacity", _patched_group_set_desired_capacity),
    (autoscaling_models.AutoScalingBackend, "set_desired_capacity", _patched_backend_set_desired_capacity),
]


@contextmanager
def emulated_ecs(**settings: Any) -> Iterator[EcsEmulation]:
    with EcsEmulation(**settings) as emulation:
        yield emulation


def _still_provisioning(task: Any) -> bool:
    return bool(task.desired_status == "RUNNING" and task.last_status == "PROVISIONING")


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


def _began_stopping(task: Any) -> None:
    """The task's `stoppingAt`, which moto never sets: now, as it leaves RUNNING (the moment ECS tells its
    containers to stop). moto's serializer shows it by the API's member name."""
    task.stopping_at = datetime.now(UTC)


def _stopped(task: Any) -> None:
    """`executionStoppedAt` and `stoppedAt`, which moto never sets: now, as the task turns STOPPED."""
    task.execution_stopped_at = task.stopped_at = datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _asg_arn(region: str, account: str, name: str) -> str:
    group_id = "00000000-0000-0000-0000-000000000000"
    return f"arn:aws:autoscaling:{region}:{account}:autoScalingGroup:{group_id}:autoScalingGroupName/{name}"
