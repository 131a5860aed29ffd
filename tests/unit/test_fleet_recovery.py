"""A fleet incident through its recovery and at any size, with the in-memory store: members leaving update its one
root and thread, never open a new one, never page again, and the alert resolves when the last member closes,
however each member closes and in whatever order."""

from __future__ import annotations

import random
import re
from datetime import timedelta
from typing import Any

import pytest

from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via
from fault_responder.noise.fleet import group_arn
from tests.conftest import load_event, vary
from tests.unit.test_fleet import GROUP, START, World, _at, instance_arn, report, storm

FLEET_KEY = "fleet/my-cluster/my-capacity-provider/ACCELERATED_COMPUTE"


def inactive(number: int, at: Any, copy: int = 0) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    return vary(
        load_event("state/inactive.json"),
        event_id=f"i{number}-inactive-{copy}",
        time=stamp,
        containerInstanceArn=instance_arn(number),
        ec2InstanceId=f"i-{number:017x}",
        capacityProviderName="my-capacity-provider",
        updatedAt=stamp,
    )


def resolved_by_a_person(world: World, number: int) -> dict[str, Any]:
    record = world.store.load(instance_arn(number))
    assert record is not None
    [incident] = [k for known in record.incidents.values() for k in known if k.status == "OPEN"]
    action = IncidentAction(
        key=f"slack:resolve{number}",
        kind=ActionKind.RESOLVE,
        via=Via.SLACK,
        by="Jane (U0JANEDOE1)",
        at=world.clock.now,
        record=record.arn,
        incident=incident.id,
    )
    return action.envelope("us-west-2", "123456789012")


def handle(world: World, events: list[dict[str, Any]]) -> None:
    for event in events:
        world.clock.now = max(world.clock.now, _at(event))
        world.service.handle(event)


def fleet_roots(world: World) -> list[Any]:
    return [root for root in world.roots() if "FLEET" in root.body]


def fleet_pages(world: World) -> list[str]:
    return [s.action for s in world.channels.sent if s.service == "pagerduty" and s.target == FLEET_KEY]


def names_in_slack(world: World) -> set[str]:
    text = "\n".join(s.body for s in world.channels.sent if s.service == "slack")
    return set(re.findall(r"i-[0-9a-f]{17}", text))


@pytest.mark.parametrize("order", ["in time order", "shuffled"])
def test_a_hundred_hosts_failing_then_recovering_is_one_root_one_alert_resolved_at_the_end(order: str) -> None:
    # Given 100 instances of one provider impaired within two minutes, each reported twice
    world = World()
    world.clock.now = START
    handle(world, storm(100, reports=2))
    world.clock.now += timedelta(minutes=2)
    world.service.sweep(seconds_left=600)
    roots_in_storm, pages_in_storm = len(world.roots()), fleet_pages(world)
    assert pages_in_storm[-1] == "trigger"

    # When every instance leaves the cluster, each reported twice, with sweeps in between
    recovery = [inactive(n, START + timedelta(minutes=20, seconds=6 * n), copy) for n in range(100) for copy in (0, 1)]
    if order == "shuffled":
        random.Random(11).shuffle(recovery)
    for index, event in enumerate(recovery):
        world.clock.now = max(world.clock.now, _at(event))
        world.service.handle(event)
        if index % 25 == 0:
            world.service.sweep(seconds_left=600)
    world.clock.now += timedelta(minutes=5)
    world.service.sweep(seconds_left=600)

    # Then recovery posted no root of its own, never triggered the fleet's alert again, and resolved it once
    assert len(world.roots()) == roots_in_storm
    assert len(fleet_roots(world)) == 1
    assert fleet_pages(world)[len(pages_in_storm) :] == ["resolve"]
    # and the fleet incident is closed, its root says so, and every instance was named in Slack
    [fleet] = world.fleets()
    assert fleet.status == "CLOSED" and fleet.fleet is not None and fleet.fleet.total == 100
    updates = [s for s in world.channels.sent if s.service == "slack" and s.action == "update"]
    assert "RESOLVED FLEET" in updates[-1].body
    assert names_in_slack(world) >= {f"i-{n:017x}" for n in range(100)}
    # and nothing is left on the sweep's list
    assert list(world.store.open_records()) == []


def test_members_leaving_the_cluster_before_their_faults_reported_do_not_open_new_fleets() -> None:
    # Given a storm whose instances' INACTIVE carries a time before their fault (a clock behind, a late fault event)
    world = World()
    world.clock.now = START
    handle(world, storm(30, reports=1))
    # When they leave, one by one, with sweeps between
    for number in range(30):
        world.service.handle(inactive(number, START - timedelta(hours=1)))
        world.service.sweep(seconds_left=600)
    # Then there is one fleet incident, closed, and one fleet root
    assert len(fleet_roots(world)) == 1
    assert [fleet.status for fleet in world.fleets()] == ["CLOSED"]
    assert fleet_pages(world)[-1] == "resolve"


def test_the_alert_resolves_when_the_last_member_closes_however_each_closes() -> None:
    # Given a fleet incident of 12 members
    world = World()
    world.clock.now = START
    handle(world, storm(12, reports=1))
    later = START + timedelta(minutes=30)
    # When members close every way a member can: OK, INACTIVE, a person's resolve, the reconciliation sweep
    closing: list[Any] = []
    for number in range(12):
        how = number % 4
        if how == 0:
            closing.append(("event", report(number, "OK", later + timedelta(seconds=number))))
        elif how == 1:
            closing.append(("event", inactive(number, later + timedelta(seconds=number))))
        elif how == 2:
            closing.append(("person", number))
        else:
            closing.append(("found", number))
    random.Random(5).shuffle(closing)
    world.clock.now = later + timedelta(minutes=1)
    for index, (kind, what) in enumerate(closing):
        if kind == "event":
            world.service.handle(what)
        elif kind == "person":
            world.service.handle(resolved_by_a_person(world, what))
        else:
            world.service.observe(_found_ok(world, what))
        # Then the fleet's alert stays open while a member is, and resolves with the last one
        assert fleet_pages(world).count("resolve") == (1 if index == len(closing) - 1 else 0), (index, kind)
    [fleet] = world.fleets()
    assert fleet.status == "CLOSED"
    assert fleet_pages(world).count("resolve") == 1


def _found_ok(world: World, number: int) -> Any:
    """What the reconciliation sweep records when ECS describes the instance's check OK (no event said so)."""
    from fault_responder.events.parse import parse_ecs_event  # noqa: PLC0415
    from fault_responder.incidents.lifecycle import facts_from_event  # noqa: PLC0415
    from fault_responder.incidents.record import RECONCILED_PREFIX  # noqa: PLC0415

    event = report(number, "OK", world.clock.now)
    event["id"] = f"{RECONCILED_PREFIX}{number}"
    facts = facts_from_event(parse_ecs_event(event))
    assert facts is not None
    return facts


def test_a_fleet_of_two_thousand_pages_once_names_every_host_and_keeps_its_record_small() -> None:
    # Given 2,000 instances of one provider impaired within three minutes, each reported twice, shuffled
    world = World()
    world.clock.now = START
    events = [
        report(n, "IMPAIRED", START + timedelta(seconds=180 * n / 2000), copy) for n in range(2000) for copy in (0, 1)
    ]
    random.Random(3).shuffle(events)
    handle(world, events)
    world.clock.now += timedelta(minutes=2)
    world.service.sweep(seconds_left=3600)

    # Then on-call got at most the members before the threshold and the fleet's alert, a root each
    assert world.pages_opened() <= 3
    assert len(world.roots()) <= 3
    # and the fleet incident counts every member, and its thread and root name every one
    [fleet] = world.fleets()
    assert fleet.fleet is not None and (fleet.fleet.total, fleet.fleet.open) == (2000, 2000)
    assert names_in_slack(world) >= {f"i-{n:017x}" for n in range(2000)} - _paged_alone(world)
    # and the group's record holds no member: they are entries of their own, read a page at a time
    head = world.store.load_group(group_arn(GROUP))
    assert head is not None and not head.listed and not head.journal
    assert len(head.deliveries) <= 2 * len(world.service.receivers)


def _paged_alone(world: World) -> set[str]:
    keys = {s.target for s in world.channels.sent if s.service == "pagerduty" and not s.target.startswith("fleet/")}
    return {f"i-{int(key.split('/')[1], 16):017x}" for key in keys}


def test_a_fleet_of_warnings_that_a_critical_fault_joins_pages_as_critical_at_once() -> None:
    # Given three instances with a restart-the-application XID (warnings: Slack only) that open a fleet incident
    world = World()
    world.clock.now = START
    for number in range(3):
        event = report(number, "IMPAIRED", START + timedelta(seconds=number))
        event["detail"]["healthChecks"][0]["statusReason"] = "XID_13"
        handle(world, [event])
    assert fleet_pages(world) == []
    # When a fourth instance joins it with XID 79 (critical)
    handle(world, [report(3, "IMPAIRED", START + timedelta(seconds=3))])
    # Then the fleet incident is critical, and PagerDuty is paged for it at once (not with its members' next batch)
    [fleet] = world.fleets()
    assert fleet.classification.severity.value == "critical"
    assert fleet_pages(world) == ["trigger"]
