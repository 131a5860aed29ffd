"""Fleet incidents through AlertService with the in-memory store: a storm across a capacity provider pages once,
names every instance, and resolves when every member has recovered or left."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import FaultClass, InstanceRef, Severity
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import digest
from fault_responder.noise.fleet import MAX_FOUNDERS, Recent, fingerprint, group_arn
from fault_responder.noise.policy import Policy
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels, Sent
from fault_responder.routing.router import Grouping, Router, load_routing
from tests.conftest import health_check, load_event, vary

START = datetime(2026, 4, 11, 1, 0, tzinfo=UTC)
CLUSTER = "arn:aws:ecs:us-west-2:123456789012:cluster/my-cluster"
GROUP = (
    ("cluster", "my-cluster"),
    ("capacity_provider", "my-capacity-provider"),
    ("check_type", "ACCELERATED_COMPUTE"),
)


def instance_arn(number: int) -> str:
    return f"arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/{number:032x}"


def report(number: int, status: str, at: datetime, copy: int = 0) -> dict[str, Any]:
    base = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(
        base,
        status=status,
        lastStatusChange=stamp,
        lastUpdated=stamp,
        statusReason=None if status == "OK" else "XID_79",
    )
    return vary(
        event,
        event_id=f"i{number}-{status}-{copy}",
        time=stamp,
        overallStatus=status,
        containerInstanceArn=instance_arn(number),
        ec2InstanceId=f"i-{number:017x}",
    )


class Clock:
    def __init__(self) -> None:
        self.now = START + timedelta(minutes=5)

    def __call__(self) -> datetime:
        return self.now


class World:
    def __init__(self, threshold: int = 3) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        routing = load_routing("default.yaml")
        self.grouping = Grouping(threshold=threshold)
        receivers = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(),
            clock=self.clock,
            grouping=self.grouping,
            policy=Policy(pagerduty_receivers=receivers),
        )

    def pages_opened(self) -> int:
        opened, open_keys = 0, set()
        for sent in self.channels.sent:
            if sent.service != "pagerduty":
                continue
            if sent.action == "trigger" and sent.target not in open_keys:
                opened += 1
                open_keys.add(sent.target)
            elif sent.action == "resolve":
                open_keys.discard(sent.target)
        return opened

    def roots(self) -> list[Sent]:
        return [s for s in self.channels.sent if s.service == "slack" and s.action == "post" and s.thread_ts is None]

    def slack_text(self) -> str:
        posted = "\n".join(s.text for s in self.channels.sent if s.service == "slack")
        return posted

    def fleets(self) -> list[Any]:
        group = self.service.load_fleets(group_arn(GROUP))
        assert group is not None
        return self.service.derive_fleet(group).incidents


def storm(size: int, reports: int = 3) -> list[dict[str, Any]]:
    """`size` instances impaired within two minutes, each reported `reports` times."""
    events = []
    for number in range(size):
        at = START + timedelta(seconds=120 * number / size)
        events.extend(report(number, "IMPAIRED", at, copy) for copy in range(reports))
    return events


def test_a_storm_of_a_hundred_instances_pages_once_and_names_every_instance() -> None:
    # Given 100 instances of one provider with XID 79 within two minutes, each re-reported three times,
    # arriving in a random order
    world = World()
    world.clock.now = START
    events = storm(100)
    random.Random(7).shuffle(events)

    # When every event is handled as it arrives
    for event in events:
        world.clock.now = max(world.clock.now, _at(event))
        world.service.handle(event)
    world.clock.now += timedelta(minutes=1)
    world.service.reconcile_group(group_arn(GROUP))  # the sweep sends what waited to go out together

    # Then on-call got the first instances' own pages and one fleet incident, no more
    assert world.pages_opened() <= 5
    assert len(world.roots()) <= 10
    assert world.store.count_open(group_arn(GROUP), START - timedelta(days=1)) == 100
    [fleet] = world.fleets()
    assert fleet.is_open and fleet.fleet is not None
    assert (fleet.fleet.total, fleet.fleet.open, len(fleet.fleet.listed)) == (100, 100, 100)
    # and every instance is named in what Slack received (the fleet root or its thread) or had its own page
    slack = "\n".join(s.body for s in world.channels.sent if s.service == "slack")
    paged_alone = {s.target for s in world.channels.sent if s.service == "pagerduty" and "fleet" not in s.target}
    for number in range(100):
        name = f"i-{number:017x}"
        assert name in slack or any(f"{number:032x}" in key for key in paged_alone), name


def test_a_fleet_incident_resolves_when_every_member_recovered_or_left() -> None:
    world = World()
    for event in storm(5, reports=1):
        world.service.handle(event)
    for number in range(5):
        world.service.handle(report(number, "OK", START + timedelta(minutes=4, seconds=number)))
    [fleet] = world.fleets()
    assert fleet.status == "CLOSED"
    fleet_pages = [s for s in world.channels.sent if s.service == "pagerduty" and s.target.startswith("fleet/")]
    # (a trigger again as the fleet grows is an update of its one alert, not another alert)
    assert {s.action for s in fleet_pages[:-1]} == {"trigger"} and fleet_pages[-1].action == "resolve"


def test_two_faults_below_the_threshold_are_two_ordinary_incidents() -> None:
    world = World()
    for event in storm(2, reports=1):
        world.service.handle(event)
    assert world.pages_opened() == 2
    group = world.store.load_group(group_arn(GROUP))
    assert group is not None and group.incidents == [] and len(group.recent) == 2  # two recent members, no fleet


def test_the_fleet_is_the_same_whatever_order_its_members_arrive_in() -> None:
    summaries = set()
    for seed in range(5):
        world = World()
        events = storm(12, reports=2)
        random.Random(seed).shuffle(events)
        for event in events:
            world.service.handle(event)
        [fleet] = world.fleets()
        assert fleet.fleet is not None
        # (its id is anchored where it was first known, as an instance's incident is; what it is does not vary)
        summaries.add((fleet.opened_at, fleet.fleet.total, fleet.status, fleet.classification))
        assert world.pages_opened() == 3  # the two members before the threshold, and the fleet
    assert len(summaries) == 1


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["time"].replace("Z", "+00:00"))


def test_faults_at_the_same_moment_are_each_a_member_once() -> None:
    # Given five instances whose checks went IMPAIRED at the same second (a rack losing power), each reported twice
    world = World()
    for number in range(5):
        for copy in range(2):
            world.service.handle(report(number, "IMPAIRED", START, copy))

    # Then the fleet names each instance once, and counts five
    [fleet] = world.fleets()
    assert fleet.fleet is not None
    arns = [member.instance.container_instance_arn for member in fleet.fleet.listed]
    assert sorted(arns) == [instance_arn(number) for number in range(5)]
    assert "5 instances" in fleet.classification.title


def test_founders_past_the_ones_a_fleet_remembers_are_counted_once_when_they_report_again() -> None:
    # Given 105 members registered among the group's recent ones before anyone looked at the threshold (a burst of
    # routers that each registered its fault and had not looked yet), and the 106th one's fault, which opens the fleet
    # incident with all of them as its founders
    world = World()
    arn = group_arn(GROUP)
    where = InstanceRef("us-west-2", "123456789012", CLUSTER, "", None, "my-capacity-provider")
    recent = Recent(START, Severity.CRITICAL, FaultClass.XID_CRITICAL, "XID 79: GPU has fallen off the bus", 79)
    for number in range(105):
        world.store.register(arn, GROUP, where, instance_arn(number), recent)
    world.service.handle(report(105, "IMPAIRED", START))
    head = world.store.load_group(arn)
    assert head is not None and head.fleet() is not None
    fleet = head.fleet()
    assert fleet is not None and len(fleet.founders) == MAX_FOUNDERS

    # Then the head counts the founders the fleet remembers; and a founder it could not remember is counted once,
    # when its fault is next reported (twice here), as one that joins, while a remembered one is not counted again
    assert head.joined == MAX_FOUNDERS
    remembered = {instance_arn(n) for n in range(106) if digest(instance_arn(n), 24) in fleet.founders}
    forgotten = next(n for n in range(106) if instance_arn(n) not in remembered)
    known = next(n for n in range(106) if instance_arn(n) in remembered)
    for number in (forgotten, known, forgotten):
        world.service.handle(report(number, "IMPAIRED", START))
    again = world.store.load_group(arn)
    assert again is not None and again.joined == MAX_FOUNDERS + 1


# --- People's actions on a fleet incident ----------------------------------------------------------------------


def _fleet_action(kind: str, key: str, world: World, **fields: Any) -> dict[str, Any]:
    from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via  # noqa: PLC0415

    [fleet] = world.fleets()
    via = Via(fields.pop("via", "slack"))
    named = {"record": group_arn(GROUP), "incident": fleet.id} if via is Via.SLACK else {"dedup_key": fleet.dedup_key}
    action = IncidentAction(
        key=f"{via.value}:{key}",
        kind=ActionKind(kind),
        via=via,
        by="Jane (U0JANEDOE1)",
        at=world.clock.now,
        **named,
        **fields,
    )
    return action.envelope("us-west-2", "123456789012")


def _stormed(world: World, size: int = 5) -> None:
    world.clock.now = START
    for event in storm(size, reports=1):
        world.clock.now = max(world.clock.now, _at(event))
        world.service.handle(event)
    world.clock.now += timedelta(minutes=1)
    world.service.reconcile_group(group_arn(GROUP))


def test_acknowledging_a_fleet_incident_acknowledges_its_page_once_and_its_root_says_who() -> None:
    # Given a storm grouped into one fleet incident that paged
    world = World()
    _stormed(world)
    world.channels.sent.clear()
    # When someone presses the fleet root's Acknowledge, and the same action arrives again
    world.service.handle(_fleet_action("acknowledge", "a1", world))
    world.service.handle(_fleet_action("acknowledge", "a1", world))
    # Then PagerDuty hears one acknowledge for the fleet's dedup key, and the root names who
    acks = [s for s in world.channels.sent if s.service == "pagerduty" and s.action == "acknowledge"]
    assert [s.target for s in acks] == [fingerprint(GROUP)]
    updates = [s for s in world.channels.sent if s.service == "slack" and s.action == "update"]
    assert updates and "Jane (U0JANEDOE1) from Slack" in updates[-1].body
    assert "Acknowledge" not in updates[-1].body.split("\n")  # the button goes once someone is on it


def test_a_fleet_root_offers_acknowledge_only_and_a_resolve_in_pagerduty_keeps_the_fleet_open() -> None:
    world = World()
    _stormed(world)
    [root] = [s for s in world.roots() if "FLEET" in s.body]
    buttons = root.body.split("\n")
    assert "Acknowledge" in buttons
    assert "Resolve" not in buttons and "Silence 1 h" not in buttons
    world.channels.sent.clear()
    world.service.handle(_fleet_action("resolve", "e1", world, via="pagerduty"))
    [fleet] = world.fleets()
    assert fleet.is_open  # its members are still faulting: closing it would let each of them page
    assert any("the fleet stays open" in entry.text for entry in fleet.timeline)
    assert not [s for s in world.channels.sent if s.service == "pagerduty" and s.action == "trigger"]
