"""A flush lets go of its lease in the write that records its last delivery, and only when no fact arrived meanwhile.

The alert service against the Slack and PagerDuty stand-ins over HTTP (built as tests/integration/test_fencing.py
builds it), with the in-memory store, whose writes are counted: a flush that ends with nothing left to send records
its last delivery and releases the lease in one write (`record_and_release`). When another worker writes a fact
between the holder's look and that write, the write is refused; the holder records the delivery alone, reads the
record again, sends what the new fact changed and only then lets go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService, DeliveryPendingError
from fault_responder.alerting.store import MemoryInstanceStore
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents.lifecycle import facts_from_event
from fault_responder.incidents.record import Delivery, Lease
from sandbox.standins import SANDBOX_ROUTING_KEY, StandIns
from tests.conftest import load_event, vary
from tests.integration.test_fencing import router


class CountingStore(MemoryInstanceStore):
    """The in-memory store, counting its releases and the outcomes of `record_and_release`; `before_last_write`,
    when set, runs once just before the first `record_and_release` (another worker writing meanwhile)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()
        self.folded: list[bool] = []
        self.before_last_write: Any = None

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        self.calls["release"] += 1
        return super().release(arn, lease, version)

    def record_and_release(self, arn: str, lease: Lease, delivery: Delivery, version: int) -> bool:
        if self.before_last_write is not None:
            meanwhile, self.before_last_write = self.before_last_write, None
            meanwhile()
        released = super().record_and_release(arn, lease, delivery, version)
        self.folded.append(released)
        return released


@pytest.fixture
def stand_ins() -> Iterator[StandIns]:
    with StandIns(pagerduty_routing_keys={SANDBOX_ROUTING_KEY}) as running:
        yield running


def service(store: CountingStore, stand_ins: StandIns) -> AlertService:
    return router(store, stand_ins)[0]


def daemon_fault(gpu: dict[str, Any]) -> dict[str, Any]:
    """A second check of the same instance IMPAIRED (a daemon), a little later: a second incident."""
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")
    same = {
        key: gpu["detail"][key]
        for key in ("containerInstanceArn", "clusterArn", "capacityProviderName", "ec2InstanceId")
        if key in gpu["detail"]
    }
    return vary(daemon, event_id="daemon-meanwhile", **same)


def roots(stand_ins: StandIns) -> list[dict[str, Any]]:
    return [m for messages in stand_ins.slack_channels().values() for m in messages if not m["thread_ts"]]


def test_a_flush_with_nothing_left_releases_its_lease_with_the_last_delivery(stand_ins: StandIns) -> None:
    # Given a new GPU fault, paged to PagerDuty and posted to Slack
    store = CountingStore()
    gpu = load_event("aws-docs/health-change-accelerated-compute-xid46.json")

    # When the service handles it
    outcome = service(store, stand_ins).handle(gpu)

    # Then Slack's flush ended with one write that recorded its last delivery and let go of its lease; PagerDuty's,
    # whose last step opened the alert, recorded it, remembered whose alert the dedup key is, then let go
    # (a receiver left behind would have raised DeliveryPendingError)
    assert sorted(outcome["receivers"]) == ["gpu-alerts", "gpu-oncall"], outcome["receivers"]
    assert store.folded == [True]
    assert store.calls["release"] == 1
    stored = store.load(gpu["detail"]["containerInstanceArn"])
    assert stored is not None and stored.leases == {} and stored.backoff == {}
    assert len(roots(stand_ins)) == 1 and len(stand_ins.pagerduty_alerts()) == 1


def test_a_fact_written_before_the_last_delivery_is_recorded_is_sent_before_the_lease_goes(stand_ins: StandIns) -> None:
    # Given a GPU fault handled by one worker, and a second worker that writes a daemon fault of the same instance
    # just before the first records its last delivery (the second worker's own flush finds the lease taken)
    store = CountingStore()
    gpu = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    daemon = daemon_fault(gpu)
    facts = facts_from_event(parse_ecs_event(daemon))
    assert facts is not None

    def another_worker_writes() -> None:
        stored = store.load(gpu["detail"]["containerInstanceArn"])
        assert stored is not None
        stored.add(facts)
        store.commit(stored)

    store.before_last_write = another_worker_writes

    # When the first worker handles the GPU fault
    outcome = service(store, stand_ins).handle(gpu)

    # Then Slack's first try to record its root and let go was refused, and its flush went on: the daemon's incident
    # was posted by the same flush, and every lease was let go in the end. (PagerDuty's flush lets go with a write of
    # its own after its trigger, before or after the daemon's fact was written: what that fact pages is the other
    # worker's to send once the lease is free, so its pages are not counted here.)
    assert store.folded[0] is False and store.folded[-1] is True
    assert outcome["receivers"]
    stored = store.load(gpu["detail"]["containerInstanceArn"])
    assert stored is not None and stored.leases == {}
    assert len(roots(stand_ins)) == 2
    # and the delivery whose write was refused was recorded all the same: nothing was sent twice
    opened = [r["body"]["dedup_key"] for r in stand_ins.requests if r.get("effect") == "opened"]
    assert opened and len(opened) == len(set(opened))


def test_a_delivery_is_recorded_even_when_planning_what_follows_it_fails(
    stand_ins: StandIns, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a service whose look at what Slack still misses fails once, right after the root was posted
    store = CountingStore()
    alerts = service(store, stand_ins)
    gpu = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    looks: Counter[str] = Counter()
    plan = alerts.dispatch._plan

    def failing_once(name: str, *arguments: Any) -> Any:
        looks[name] += 1
        if name == "gpu-alerts" and looks[name] == 2:
            raise RuntimeError("a bug in what follows the root")
        return plan(name, *arguments)

    monkeypatch.setattr(alerts.dispatch, "_plan", failing_once)

    # When the fault is handled (the flush fails, and the event with it), then handled again, as SQS redelivers it
    with pytest.raises(DeliveryPendingError):
        alerts.handle(gpu)
    failed = store.load(gpu["detail"]["containerInstanceArn"])
    alerts.handle(gpu)

    # Then the root posted before the failure was recorded as posted (its ts), not left as on its way
    assert failed is not None
    told = [delivery for (receiver, _), delivery in failed.deliveries.items() if receiver == "gpu-alerts"]
    assert [bool(delivery.ts) for delivery in told] == [True], told
    # and the retry posted no second root
    assert len(roots(stand_ins)) == 1
    stored = store.load(gpu["detail"]["containerInstanceArn"])
    assert stored is not None and stored.leases == {}
