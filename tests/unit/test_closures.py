"""A closure is retried until every receiver has been told: the incident stays on the sweep's list while PagerDuty
(or Slack) has not heard it is over, the sweep tries again with a backoff, and how long the oldest closure has
waited is measured each run (the closure-pending alarm watches it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import health_check, load_event, vary

FAULT_AT = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
HOLD_DOWN = timedelta(minutes=10)


class FlakyPagerDuty(RecordingChannels):
    """PagerDuty answers 500 (after every retry) while `down`; `attempts` counts what reached it."""

    down = False
    attempts = 0

    def send(self, event: dict[str, object]) -> str:
        self.attempts += 1
        if self.down:
            raise DeliveryError("pagerduty", 500, "internal server error", retryable=True)
        return super().send(event)


class World:
    def __init__(self) -> None:
        self.now = FAULT_AT
        self.store = MemoryInstanceStore()
        self.channels = FlakyPagerDuty()
        self.measured: list[tuple[str, float]] = []
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels, clock=lambda: self.now),
            lifecycle.Settings(hold_down=HOLD_DOWN),
            clock=lambda: self.now,
            epoch=self.epoch,
            measure=lambda metric, dimension, value, amount: self.measured.append((metric, amount)),
        )

    def epoch(self) -> float:
        return self.now.timestamp()  # the clock moves: read it at each call

    def sweep(self, after: timedelta) -> dict[str, int]:
        self.now += after
        return self.service.sweep(seconds_left=60.0)

    def resolves(self) -> list[str]:
        return [s.target for s in self.channels.sent if s.service == "pagerduty" and s.action == "resolve"]


def report(status: str, at: datetime) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(
        load_event("aws-docs/health-change-accelerated-compute-xid46.json"),
        status=status,
        lastStatusChange=stamp,
        lastUpdated=stamp,
        statusReason=None if status == "OK" else "XID_79",
    )
    return vary(event, event_id=f"{status}-{stamp}", time=stamp, overallStatus=status)


def a_closure_pagerduty_does_not_take(world: World) -> None:
    """Fault, OK, the hold-down ends, and the sweep's resolve meets PagerDuty 500 through every retry."""
    world.service.handle(report("IMPAIRED", FAULT_AT))
    world.now = FAULT_AT + timedelta(minutes=1)
    world.service.handle(report("OK", world.now))
    world.channels.down = True
    world.sweep(HOLD_DOWN + timedelta(seconds=5))


def test_a_closure_the_sweep_cannot_deliver_stays_on_its_list_and_is_delivered_when_pagerduty_is_back() -> None:
    # Given a closure whose resolve failed at the sweep
    world = World()
    a_closure_pagerduty_does_not_take(world)
    assert world.resolves() == []
    # Then the incident is still on the sweep's list
    assert list(world.store.open_records()), "the closure left the sweep's list before PagerDuty was told"
    # When PagerDuty is back, Then the next run delivers the resolve, once, and the record leaves the list
    world.channels.down = False
    world.sweep(timedelta(minutes=1))
    world.sweep(timedelta(minutes=1))
    assert world.resolves() == ["my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"]
    assert list(world.store.open_records()) == []


def test_the_sweep_backs_off_a_receiver_that_keeps_failing() -> None:
    # Given a closure PagerDuty keeps refusing
    world = World()
    a_closure_pagerduty_does_not_take(world)
    tries = [world.channels.attempts]
    # When the sweep runs every minute for 20 minutes
    for _ in range(20):
        world.sweep(timedelta(minutes=1))
        tries.append(world.channels.attempts)
    # Then it tried at the next run, then after 1, 2, 4 and 8 minutes: six tries in all, not twenty-one
    tried_at = [minute for minute in range(1, len(tries)) if tries[minute] > tries[minute - 1]]
    assert tried_at == [1, 2, 4, 8, 16], tried_at
    # and each run measured how long the closure has waited, which grows past the alarm's 15 minutes
    ages = [amount for metric, amount in world.measured if metric == "PendingClosureAgeMinutes"]
    assert ages[0] == 0 and ages[-1] >= 20 and ages == sorted(ages)


def test_an_event_for_the_instance_tries_at_once_whatever_the_backoff() -> None:
    # Given a closure backed off after two failed runs
    world = World()
    a_closure_pagerduty_does_not_take(world)
    world.sweep(timedelta(minutes=1))
    before = world.channels.attempts
    # When PagerDuty is back and the instance leaves the cluster (news for it), Then the resolve goes at once
    world.channels.down = False
    world.now += timedelta(seconds=10)
    stamp = world.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    arn = load_event("aws-docs/health-change-accelerated-compute-xid46.json")["detail"]["containerInstanceArn"]
    gone = vary(load_event("state/inactive.json"), event_id="gone", time=stamp, updatedAt=stamp)
    world.service.handle(vary(gone, containerInstanceArn=arn))
    assert world.channels.attempts > before
    assert len(world.resolves()) == 1
    # and once told, the closure is measured as waiting no more
    world.sweep(timedelta(minutes=1))
    assert world.measured[-1] == ("PendingClosureAgeMinutes", 0.0)
    assert list(world.store.open_records()) == []
