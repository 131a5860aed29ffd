"""sandbox/drill_emulation.py: a drill's PutEvents reaches the sandbox's bus (and only while the step runs), and the
emulated ECS plays the repair AWS published when the DCGM injector runs, emitting each ECS event."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.events.models import EventsBackend

from fault_responder.adapters.drill_aws import INJECTOR_FAMILY as LAYER_INJECTOR_FAMILY
from fault_responder.adapters.drill_aws import inject_command, injector_task_definition
from sandbox.drill_emulation import INJECTOR_FAMILY, TIMELINE, DcgmReactions, DrillBridge
from sandbox.ecs_emulation import emulated_ecs
from sandbox.eventbridge import BusDelivery

ACCOUNT, REGION = "123456789012", "us-east-1"


class RecordingBus:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def put_event(self, event: dict[str, Any]) -> BusDelivery:
        self.events.append(event)
        return BusDelivery(["HealthChangeRule"], [])


class Clients:
    def client(self, name: str) -> Any:
        return boto3.client(name, region_name=REGION)  # type: ignore[call-overload]


@pytest.fixture
def moto(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """moto with the sandbox's ECS emulation (tasks stay RUNNING until stopped, as in a run)."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    with mock_aws(), emulated_ecs(account_id=ACCOUNT, region=REGION):
        yield


def test_the_sandbox_and_the_layer_name_the_same_injector() -> None:
    assert INJECTOR_FAMILY == LAYER_INJECTOR_FAMILY


def test_a_put_events_reaches_the_bus_while_the_bridge_is_up_and_moto_after(moto: None) -> None:
    bus, pumped, seen = RecordingBus(), threading.Event(), []
    original = EventsBackend.put_events
    events = boto3.client("events", region_name=REGION)
    entry = {
        "Source": "fault-responder.drill",
        "DetailType": "ECS Container Instance Health Change",
        "Detail": json.dumps({"overallStatus": "IMPAIRED"}),
        "Resources": ["arn:x"],
        "Time": datetime(2026, 4, 11, 1, 0, tzinfo=UTC),
    }
    with DrillBridge(bus, pumped.set, lambda e, d: seen.append(d.matched_rules), None, ACCOUNT, REGION):  # type: ignore[arg-type]
        response = events.put_events(Entries=[entry])
        assert pumped.wait(5)  # the pollers ran meanwhile
    assert response["FailedEntryCount"] == 0
    [event] = bus.events
    assert event["id"] == response["Entries"][0]["EventId"]
    assert (event["source"], event["detail"], event["time"], event["account"]) == (
        "fault-responder.drill",
        {"overallStatus": "IMPAIRED"},
        "2026-04-11T01:00:00Z",
        ACCOUNT,
    )
    assert seen == [["HealthChangeRule"]]
    assert EventsBackend.put_events is original
    events.put_events(Entries=[entry])
    assert len(bus.events) == 1


def test_a_malformed_entry_is_refused_as_eventbridge_refuses_it(moto: None) -> None:
    bus = RecordingBus()
    with DrillBridge(bus, lambda: None, lambda e, d: None, None, ACCOUNT, REGION):  # type: ignore[arg-type]
        response = boto3.client("events", region_name=REGION).put_events(
            Entries=[{"Source": "fault-responder.drill", "DetailType": "x", "Detail": "{not json"}]
        )
    assert response["FailedEntryCount"] == 1 and response["Entries"][0]["ErrorCode"] == "MalformedDetail"
    assert bus.events == []


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_injector_makes_the_instance_impaired_drained_replaced_and_gone_in_order(moto: None) -> None:
    ecs, ec2 = boto3.client("ecs", region_name=REGION), boto3.client("ec2", region_name=REGION)
    ecs.create_cluster(clusterName="gpu-test")
    ec2_id = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    old = ecs.register_container_instance(
        cluster="gpu-test", instanceIdentityDocument=json.dumps({"instanceId": ec2_id})
    )["containerInstance"]["containerInstanceArn"]
    ecs.register_task_definition(family="server", containerDefinitions=[{"name": "s", "image": "s", "memory": 64}])
    ecs.start_task(cluster="gpu-test", taskDefinition="server", containerInstances=[old])
    ecs.register_task_definition(**injector_task_definition(inject_command(48)))
    ecs.start_task(cluster="gpu-test", taskDefinition=INJECTOR_FAMILY, containerInstances=[old])
    emitted: list[dict[str, Any]] = []
    clock = Clock()
    reactions = DcgmReactions(Clients(), emitted.append, ACCOUNT, REGION, scale=1.0, clock=clock)

    reactions.tick()
    assert emitted == []  # noticed, nothing due yet
    kinds = []
    for _, at in TIMELINE:
        clock.now = at
        reactions.tick()
        kinds.append([(e["detail-type"], e["detail"].get("status") or e["detail"].get("lastStatus")) for e in emitted])
        emitted.clear()

    assert kinds == [
        [("ECS Container Instance Health Change", None)],
        [("ECS Container Instance State Change", "DRAINING")],
        [("ECS Task State Change", "STOPPED"), ("ECS Task State Change", "STOPPED")],
        [("ECS Container Instance State Change", "INACTIVE")],
    ]
    listed = ecs.list_container_instances(cluster="gpu-test")["containerInstanceArns"]
    assert old not in listed and len(listed) == 1
    on_new = ecs.describe_tasks(
        cluster="gpu-test", tasks=ecs.list_tasks(cluster="gpu-test", containerInstance=listed[0])["taskArns"]
    )
    assert [(t["taskDefinitionArn"].rsplit("/", 1)[-1], t["startedBy"]) for t in on_new["tasks"]] == [
        ("server:1", "ecs-auto-repair")
    ]


def test_the_impaired_event_carries_the_injected_xid(moto: None) -> None:
    ecs, ec2 = boto3.client("ecs", region_name=REGION), boto3.client("ec2", region_name=REGION)
    ecs.create_cluster(clusterName="gpu-test")
    ec2_id = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    arn = ecs.register_container_instance(
        cluster="gpu-test", instanceIdentityDocument=json.dumps({"instanceId": ec2_id})
    )["containerInstance"]["containerInstanceArn"]
    ecs.register_task_definition(**injector_task_definition(inject_command(48)))
    ecs.start_task(cluster="gpu-test", taskDefinition=INJECTOR_FAMILY, containerInstances=[arn])
    emitted: list[dict[str, Any]] = []
    clock = Clock()
    reactions = DcgmReactions(Clients(), emitted.append, ACCOUNT, REGION, scale=1.0, clock=clock)
    reactions.tick()
    clock.now = TIMELINE[0][1]
    reactions.tick()

    [event] = emitted
    assert (event["source"], event["detail"]["containerInstanceArn"], event["detail"]["ec2InstanceId"]) == (
        "aws.ecs",
        arn,
        ec2_id,
    )
    assert event["detail"]["healthChecks"][0]["statusReason"] == "XID_48"
