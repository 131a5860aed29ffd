"""Flap damping: a check must hold OK for the hold-down before its incident resolves; a relapse within it is the
same incident, marked flapping. One page, however often it flaps."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Incident
from fault_responder.incidents import lifecycle
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels, Sent
from fault_responder.routing.router import Router, load_routing
from tests.conftest import health_check, load_event, vary

INSTANCE = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/a1b2c3d4EXAMPLE"
START = datetime(2026, 4, 11, 1, 0, tzinfo=UTC)
HOLD_DOWN = timedelta(minutes=10)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class World:
    def __init__(self, hold_down: timedelta = HOLD_DOWN) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        settings = lifecycle.Settings(hold_down=hold_down)
        router = Router(load_routing("default.yaml"))
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            router,
            ReceiverCourier(self.channels),
            settings,
            clock=self.clock,
        )

    def send(self, event: dict[str, Any]) -> list[Sent]:
        before = len(self.channels.sent)
        self.service.handle(event)
        return self.channels.sent[before:]

    def incidents(self) -> list[Incident]:
        record = self.store.load(INSTANCE)
        return self.service.derive(record).incidents if record is not None else []

    def pages(self, action: str) -> list[Sent]:
        return [s for s in self.channels.sent if s.service == "pagerduty" and s.action == action]


def report(status: str, at: datetime, number: int) -> dict[str, Any]:
    base = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(
        base,
        status=status,
        lastStatusChange=stamp,
        lastUpdated=stamp,
        statusReason=None if status == "OK" else "XID_79",
    )
    return vary(event, event_id=f"report-{number}", time=stamp, overallStatus=status)


def flaps(times: int, every: timedelta) -> list[dict[str, Any]]:
    """IMPAIRED, then OK half a period later, `times` times; the last OK ends it."""
    events = []
    for number in range(times):
        impaired_at = START + number * every
        events.append(report("IMPAIRED", impaired_at, 2 * number))
        events.append(report("OK", impaired_at + every / 2, 2 * number + 1))
    return events


def test_six_flaps_in_thirty_minutes_page_once_and_resolve_after_the_hold_down() -> None:
    # Given a check that goes IMPAIRED and OK again six times in 30 minutes
    world = World()
    events = flaps(6, timedelta(minutes=5))

    # When each report arrives as it happens
    for event in events:
        world.clock.now = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
        world.send(event)

    # Then there is one incident, flapping, recovering but not resolved: the last OK is younger than the hold-down
    [incident] = world.incidents()
    assert (incident.status, incident.phase, incident.relapses, incident.flapping) == ("OPEN", "RECOVERING", 5, True)
    assert incident.resolves_at == START + timedelta(minutes=27, seconds=30) + HOLD_DOWN
    assert len(world.pages("trigger")) == 1 and world.pages("resolve") == []
    assert len([s for s in world.channels.sent if s.service == "slack" and s.action == "post"]) == 1

    # When the hold-down passes with the check still OK (the next event for the instance, or the sweep)
    world.clock.now = incident.resolves_at
    world.service.reconcile(INSTANCE)

    # Then the incident resolves, and its one alert with it
    [incident] = world.incidents()
    assert (incident.status, incident.phase) == ("CLOSED", "RESOLVED")
    assert incident.closed_at == START + timedelta(minutes=27, seconds=30)
    assert len(world.pages("trigger")) == 1 and len(world.pages("resolve")) == 1


def test_a_check_that_held_ok_for_the_hold_down_opens_a_new_incident_when_it_fails_again() -> None:
    world = World()
    world.send(report("IMPAIRED", START, 1))
    world.send(report("OK", START + timedelta(minutes=1), 2))
    world.send(report("IMPAIRED", START + timedelta(minutes=1) + HOLD_DOWN, 3))
    first, second = world.incidents()
    assert (first.status, first.relapses, second.status) == ("CLOSED", 0, "OPEN")
    assert len(world.pages("trigger")) == 2


def test_flapping_is_the_same_incident_whatever_order_the_reports_arrive_in() -> None:
    # Given the six flaps delivered long after they happened, in any order
    expected = None
    for seed in range(8):
        world = World()
        world.clock.now = START + timedelta(hours=1)
        events = flaps(6, timedelta(minutes=5))
        random.Random(seed).shuffle(events)
        for event in events:
            world.send(event)

        # Then the facts make one flapping incident, the same in every order; an incident announced before a
        # late relapse joined it is closed as part of it
        current = [i for i in world.incidents() if i.merged_into is None]
        merged = [i for i in world.incidents() if i.merged_into is not None]
        [incident] = current
        assert all(i.merged_into == incident.id and i.status == "CLOSED" for i in merged)
        summary = (incident.status, incident.relapses, incident.opened_at, incident.closed_at)
        summary += ([e.key for e in incident.timeline],)
        assert expected is None or summary == expected
        expected = summary


def test_flaps_reported_as_they_happen_a_little_out_of_order_open_one_alert() -> None:
    for seed in range(8):
        # Given the six flaps, each delivered up to a minute late, so neighbours swap
        rng = random.Random(seed)
        world = World()
        events = flaps(6, timedelta(minutes=5))
        arrivals = sorted(events, key=lambda e: _at(e) + timedelta(seconds=rng.uniform(0, 60)))
        for event in arrivals:
            world.clock.now = max(world.clock.now, _at(event))
            world.send(event)
        world.clock.now += HOLD_DOWN
        world.service.reconcile(INSTANCE)

        # Then PagerDuty opened one alert, and it is resolved
        assert alerts_opened(world.pages("trigger") + world.pages("resolve"), world.channels.sent) == 1
        assert [i.status for i in world.incidents() if i.merged_into is None] == ["CLOSED"]


def _at(event: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(event["detail"]["healthChecks"][0]["lastStatusChange"].replace("Z", "+00:00"))


def alerts_opened(pages: list[Sent], sent: list[Sent]) -> int:
    """PagerDuty alerts opened: a trigger on a dedup key with no open alert opens one."""
    opened, open_keys = 0, set()
    for item in (s for s in sent if s in pages):
        if item.action == "trigger" and item.target not in open_keys:
            opened += 1
            open_keys.add(item.target)
        elif item.action == "resolve":
            open_keys.discard(item.target)
    return opened


def test_an_instance_that_leaves_while_recovering_closes_the_incident_when_it_recovered() -> None:
    world = World()
    world.send(report("IMPAIRED", START, 1))
    world.send(report("OK", START + timedelta(minutes=2), 2))
    gone = vary(
        load_event("state/inactive.json"),
        event_id="gone",
        containerInstanceArn=INSTANCE,
        updatedAt="2026-04-11T01:05:00Z",
    )
    world.send(gone)
    [incident] = world.incidents()
    assert (incident.status, incident.closed_at) == ("CLOSED", START + timedelta(minutes=2))


@pytest.mark.parametrize("hold_down", [timedelta(0)])
def test_without_a_hold_down_every_ok_resolves_at_once(hold_down: timedelta) -> None:
    world = World(hold_down)
    for event in flaps(3, timedelta(minutes=5)):
        world.send(event)
    assert [i.status for i in world.incidents()] == ["CLOSED"] * 3
    assert len(world.pages("trigger")) == 3
