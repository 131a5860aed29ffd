"""What a `cli: [drill, ...]` step needs from the sandbox (docs/drills.md, docs/scenarios.md).

- **PutEvents reaches the stack's rules.** moto's EventBridge does not match with EventBridge's semantics or
  deliver to our targets; while the step runs, a PutEvents to the default bus (the drill's own, through boto3 and
  the moto server) goes onto the sandbox's EventBus instead, as every replayed event does, in the account and
  Region of the credentials that put it (a member account's default bus, through its forwarder, for a drill of a
  member account: sandbox/eventbridge.py).
- **The pollers keep polling.** The CLI waits for the incident while it runs, so the SQS event source mappings
  are drained in the background meanwhile, as Lambda's pollers would.
- **ECS reacts to the DCGM injector.** When a task of the injector's family runs on an instance, the emulated ECS
  plays what AWS's published run showed, with every wait scaled by SCALE: the instance is IMPAIRED (XID from the
  injector's `-v`), DRAINING (auto repair), a replacement registers and runs the old instance's tasks, and the
  old instance is deregistered (INACTIVE). Each step emits the ECS event a real one would.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from moto.ecs import models as ecs_models
from moto.events.models import EventsBackend

from sandbox.eventbridge import BusDelivery, EventBus

INJECTOR_FAMILY = "fault-responder-dcgm-injector"
"""fault_responder.adapters.drill_aws.INJECTOR_FAMILY (the sandbox does not import the layer at module level)."""
SCALE = 0.01
"""Emulated seconds per real second of AWS's published run: 2 minutes to IMPAIRED become 1.2 s."""
TIMELINE = (
    ("impaired", 120.0),
    ("draining", 180.0),
    ("replacement", 240.0),
    ("inactive", 600.0),
)
"""Seconds after the injection, as AWS's published run of this injection showed them (docs/drills.md)."""
PUMP_SECONDS = 0.05
DRAINING_STOP_REASON = "Task stopped during instance draining"

OnEvent = Callable[[dict[str, Any], BusDelivery], None]


@dataclass
class _Repair:
    cluster: str
    instance_arn: str
    xid: int
    started: float
    done: set[str] = field(default_factory=set)
    replacement: str | None = None


@dataclass
class DcgmReactions:
    """The emulated ECS side of a DCGM drill (see the module's docstring)."""

    aws: Any
    """sandbox.aws.AwsClients: boto3 clients on the sandbox's moto."""
    emit: Callable[[dict[str, Any]], None]
    account: str
    region: str
    scale: float = SCALE
    clock: Callable[[], float] = time.monotonic
    _repairs: dict[str, _Repair] = field(default_factory=dict)
    _seen_tasks: set[str] = field(default_factory=set)

    def tick(self) -> None:
        self._notice_injectors()
        for repair in list(self._repairs.values()):
            elapsed = (self.clock() - repair.started) / self.scale
            for step, at in TIMELINE:
                if step not in repair.done and elapsed >= at:
                    repair.done.add(step)
                    getattr(self, f"_{step}")(repair)

    def _notice_injectors(self) -> None:
        backend = ecs_models.ecs_backends[self.account][self.region]
        for cluster_tasks in list(backend.tasks.values()):
            for task in list(cluster_tasks.values()):
                arn = task.task_arn
                if arn in self._seen_tasks or task.last_status != "RUNNING" or not task.container_instance_arn:
                    continue
                if f":task-definition/{INJECTOR_FAMILY}:" not in task.task_definition_arn:
                    continue
                self._seen_tasks.add(arn)
                definition = backend.describe_task_definition(task.task_definition_arn)
                container: dict[str, Any] = dict(definition.container_definitions[0])
                command = [str(part) for part in container.get("command") or []]
                xid = int(command[command.index("-v") + 1]) if "-v" in command else 79
                instance = task.container_instance_arn
                if instance not in self._repairs:
                    self._repairs[instance] = _Repair(task.cluster_arn, instance, xid, self.clock())

    # --- The steps, as ECS takes them ---------------------------------------------------------------

    def _impaired(self, repair: _Repair) -> None:
        now = _now()
        check = {
            "type": "ACCELERATED_COMPUTE",
            "status": "IMPAIRED",
            "statusReason": f"XID_{repair.xid}",
            "lastStatusChange": now,
            "lastUpdated": now,
        }
        self.emit(
            self._event(
                "ECS Container Instance Health Change",
                repair,
                {"overallStatus": "IMPAIRED", "healthChecks": [check], **self._where(repair)},
            )
        )

    def _draining(self, repair: _Repair) -> None:
        ecs = self.aws.client("ecs")
        ecs.update_container_instances_state(
            cluster=repair.cluster, containerInstances=[repair.instance_arn], status="DRAINING"
        )
        self._state_change(repair, repair.instance_arn, "DRAINING")

    def _replacement(self, repair: _Repair) -> None:
        """Start before stop: a new instance of the same provider registers and runs the old one's tasks."""
        ecs, ec2 = self.aws.client("ecs"), self.aws.client("ec2")
        old = self._described(repair.instance_arn, repair.cluster)
        instance_type = _attribute(old, "ecs.instance-type") or "p5.48xlarge"
        ec2_id = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType=instance_type)[
            "Instances"
        ][0]["InstanceId"]
        document = {"instanceId": ec2_id, "region": self.region, "instanceType": instance_type}
        registered = ecs.register_container_instance(
            cluster=repair.cluster, instanceIdentityDocument=json.dumps(document)
        )["containerInstance"]
        repair.replacement = registered["containerInstanceArn"]
        backend = ecs_models.ecs_backends[self.account][self.region]
        cluster_name = repair.cluster.rsplit("/", 1)[-1]
        provider = getattr(_instance_model(backend, cluster_name, repair.instance_arn), "capacity_provider_name", None)
        if provider:
            _instance_model(backend, cluster_name, repair.replacement).capacity_provider_name = provider
        running = [
            task
            for task in ecs.describe_tasks(
                cluster=repair.cluster,
                tasks=ecs.list_tasks(cluster=repair.cluster, containerInstance=repair.instance_arn)["taskArns"]
                or ["-"],
            ).get("tasks", [])
            if task.get("lastStatus") == "RUNNING"
        ]
        for task in running:
            if INJECTOR_FAMILY not in task["taskDefinitionArn"]:
                ecs.start_task(
                    cluster=repair.cluster,
                    taskDefinition=task["taskDefinitionArn"],
                    containerInstances=[repair.replacement],
                    startedBy="ecs-auto-repair",
                )
        # Then the old instance's tasks stop, the stop timeout honoured (start before stop).
        for task in running:
            ecs.stop_task(cluster=repair.cluster, task=task["taskArn"], reason=DRAINING_STOP_REASON)
            self.emit(self._task_stopped(repair, task))

    def _inactive(self, repair: _Repair) -> None:
        self.aws.client("ecs").deregister_container_instance(
            cluster=repair.cluster, containerInstance=repair.instance_arn, force=True
        )
        self._state_change(repair, repair.instance_arn, "INACTIVE")
        del self._repairs[repair.instance_arn]

    # --- Events -------------------------------------------------------------------------------------

    def _state_change(self, repair: _Repair, arn: str, status: str) -> None:
        detail = {**self._where(repair), "status": status, "agentConnected": status != "INACTIVE", "updatedAt": _now()}
        self.emit(self._event("ECS Container Instance State Change", repair, detail))

    def _task_stopped(self, repair: _Repair, task: Mapping[str, Any]) -> dict[str, Any]:
        detail = {
            "clusterArn": repair.cluster,
            "taskArn": task["taskArn"],
            "containerInstanceArn": repair.instance_arn,
            "taskDefinitionArn": task["taskDefinitionArn"],
            "lastStatus": "STOPPED",
            "desiredStatus": "STOPPED",
            "stoppedReason": DRAINING_STOP_REASON,
            "stoppedAt": _now(),
            "containers": [],
        }
        return self._event("ECS Task State Change", repair, detail)

    def _where(self, repair: _Repair) -> dict[str, Any]:
        backend = ecs_models.ecs_backends[self.account][self.region]
        model = _instance_model(backend, repair.cluster.rsplit("/", 1)[-1], repair.instance_arn)
        where: dict[str, Any] = {"clusterArn": repair.cluster, "containerInstanceArn": repair.instance_arn}
        if model is not None:
            where["ec2InstanceId"] = model.ec2_instance_id
            provider = getattr(model, "capacity_provider_name", None)
            if provider:
                where["capacityProviderName"] = provider
        return where

    def _event(self, detail_type: str, repair: _Repair, detail: dict[str, Any]) -> dict[str, Any]:
        return {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": detail_type,
            "source": "aws.ecs",
            "account": self.account,
            "time": _now(),
            "region": self.region,
            "resources": [repair.instance_arn],
            "detail": detail,
        }

    def _described(self, arn: str, cluster: str) -> dict[str, Any]:
        found = self.aws.client("ecs").describe_container_instances(cluster=cluster, containerInstances=[arn])
        return dict((found.get("containerInstances") or [{}])[0])


class DrillBridge:
    """PutEvents onto the sandbox's bus, the pollers and the emulated ECS running, while a drill step runs."""

    def __init__(
        self,
        bus: EventBus,
        pump: Callable[[], None],
        on_event: OnEvent,
        reactions: DcgmReactions | None,
        account: str,
        region: str,
    ) -> None:
        self._bus = bus
        self._pump = pump
        self._on_event = on_event
        self._reactions = reactions
        self._account = account
        self._region = region
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sandbox-drill-pump", daemon=True)
        self._original: Any = None
        self.errors: list[str] = []

    def put(self, event: dict[str, Any]) -> BusDelivery:
        delivery = self._bus.put_event(event)
        self._on_event(event, delivery)
        return delivery

    def _emit(self, event: dict[str, Any]) -> None:
        self.put(event)

    def __enter__(self) -> DrillBridge:
        self._original = EventsBackend.put_events
        bridge = self

        def put_events(backend: Any, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
            default = [entry for entry in entries if entry.get("EventBusName") in (None, "", "default")]
            if len(default) != len(entries):
                return list(bridge._original(backend, entries))
            # The event is the caller's: its account and Region are those of the backend its credentials reached
            # (another account's, through its role, for a drill of a member account).
            return [bridge._put_entry(entry, backend.account_id, backend.region_name) for entry in entries]

        setattr(EventsBackend, "put_events", put_events)  # noqa: B010 - moto's method, replaced while the step runs
        if self._reactions is not None:
            self._reactions.emit = self._emit
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        setattr(EventsBackend, "put_events", self._original)  # noqa: B010

    def _put_entry(self, entry: Mapping[str, Any], account: str, region: str) -> dict[str, Any]:
        for name in ("Source", "DetailType", "Detail"):
            if not entry.get(name):
                return {"ErrorCode": "InvalidArgument", "ErrorMessage": f"Parameter {name} is not valid."}
        try:
            detail = json.loads(entry["Detail"])
        except ValueError:
            return {"ErrorCode": "MalformedDetail", "ErrorMessage": "Detail is malformed."}
        time_ = entry.get("Time")
        event = {
            "version": "0",
            "id": str(uuid.uuid4()),
            "detail-type": entry["DetailType"],
            "source": entry["Source"],
            "account": account,
            "time": _iso(time_) if time_ is not None else _now(),
            "region": region,
            "resources": list(entry.get("Resources") or []),
            "detail": detail,
        }
        self.put(event)
        return {"EventId": event["id"]}

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._pump()
                if self._reactions is not None:
                    self._reactions.tick()
            except Exception as error:  # reported with the step, never lost in a thread
                self.errors.append(f"{type(error).__name__}: {error}")
                return
            self._stop.wait(PUMP_SECONDS)


@contextmanager
def drill_bridge(
    bus: EventBus, pump: Callable[[], None], on_event: OnEvent, aws: Any, account: str, region: str
) -> Iterator[DrillBridge]:
    reactions = DcgmReactions(aws, lambda event: None, account, region)
    with DrillBridge(bus, pump, on_event, reactions, account, region) as bridge:
        yield bridge


def _instance_model(backend: Any, cluster_name: str, arn: str) -> Any:
    return backend.container_instances.get(cluster_name, {}).get(arn.rsplit("/", 1)[-1])


def _attribute(described: Mapping[str, Any], name: str) -> str | None:
    return next((a.get("value") for a in described.get("attributes") or [] if a.get("name") == name), None)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _iso(moment: Any) -> str:
    """PutEvents' Time arrives as epoch seconds (the JSON protocol) or, called in process, as a datetime."""
    if isinstance(moment, int | float):
        moment = datetime.fromtimestamp(moment, UTC)
    if isinstance(moment, datetime):
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return str(moment)
