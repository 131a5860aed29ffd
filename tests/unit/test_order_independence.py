"""Order does not matter: property tests over generated fleets of incident lifecycles.

For any set of lifecycles (tests/lifecycles.py), delivering every event at least once, in any order, gives
the same incidents and the same picture for on-call as delivering them once in time order, and in every
order: one Slack root per incident, showing the same final content; every step of an incident replied in its
thread; no more PagerDuty alerts for a check than it had page-worthy incidents, and an alert open if and only
if its incident is open and pages; and an incident closed if and only if the last fact of its check is a
recovery.

A thread can hold more than its incident's steps: when an event that arrives late moves an incident's end (an OK
between two reports, which splits one fault into two), the replies already posted stay where on-call read
them, and what now belongs to another incident is in that incident's thread too. Those extra replies are
about facts of the same instance.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Incident
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import InstanceRecord
from fault_responder.notification.delivery import Courier, replies
from fault_responder.routing.router import Router, load_routing
from tests.fakes import FakeWorld
from tests.lifecycles import Lifecycle, delivered, fleet


@dataclass
class Outcome:
    incidents: dict[str, list[tuple[Any, ...]]]
    """Per instance, each incident as (fingerprint, opened, closed, status, phase, severity, title, drain,
    close reason, timeline keys): no ids, which depend on what was learned first."""
    roots: dict[tuple[str, str], tuple[str, str]]
    """(fingerprint, opened) -> the root message's final text and blocks."""
    open_alerts: set[str]


def run(events: list[dict[str, Any]], lifecycles: list[Lifecycle]) -> tuple[Outcome, FakeWorld, dict[str, Any]]:
    world = FakeWorld()
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        Courier(world, clock=_now),
        lifecycle.Settings(),
    )
    for event in events:
        service.handle(event)
    derived: dict[str, list[Incident]] = {}
    facts: dict[str, set[str]] = {}
    for item in lifecycles:
        record = store.load(item.container_instance_arn)
        derived[item.container_instance_arn] = service.derive(record).incidents if record else []
        facts[item.container_instance_arn] = _fact_keys(record) if record else set()
    by_id = {incident.id: incident for found in derived.values() for incident in found}
    roots = world.roots()
    outcome = Outcome(
        incidents={arn: sorted(_summary(i) for i in found) for arn, found in derived.items()},
        roots={_identity(by_id[i]): (m.text, repr(_as_seen(m.blocks))) for i, m in roots.items() if i in by_id},
        open_alerts=world.open_alerts(),
    )
    return outcome, world, {"derived": derived, "by_id": by_id, "facts": facts}


def _as_seen(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks as people see them: a button's value names the incident by its id, which depends on what was
    learned first (and which nobody sees); everything else is compared as sent."""
    seen = copy.deepcopy(blocks)
    for block in seen:
        for element in block.get("elements") or []:
            if isinstance(element, dict) and element.get("type") == "button":
                element["value"] = "<incident>"
    return seen


def _fact_keys(record: InstanceRecord) -> set[str]:
    """The timeline key of every fact of the instance (what a reply can be about)."""
    keys = {f"status:{fact.event_id}" for fact in record.statuses} | {f"task:{t.task_arn}" for t in record.tasks}
    for check, transitions in record.health.items():
        keys |= {f"health:{check}:{fact.status}:{fact.at.isoformat()}" for fact in transitions}
    return keys


def _now() -> datetime:
    return datetime(2026, 11, 1, 12, tzinfo=UTC)


def _identity(incident: Incident) -> tuple[str, str]:
    return incident.fingerprint, incident.opened_at.isoformat()


def _summary(incident: Incident) -> tuple[Any, ...]:
    return (
        incident.fingerprint,
        incident.opened_at.isoformat(),
        incident.closed_at.isoformat() if incident.closed_at else None,
        incident.status,
        incident.phase,
        incident.classification.severity.value,
        incident.classification.title,
        incident.drain.label if incident.drain else None,
        incident.close_reason,
        tuple(entry.key for entry in incident.timeline),
    )


def check_what_on_call_saw(world: FakeWorld, state: dict[str, Any], lifecycles: list[Lifecycle]) -> None:
    by_id: dict[str, Incident] = state["by_id"]
    # No fault unseen: every incident has exactly one Slack root (world.roots() refuses a second one), and
    # every step after the first is replied in its thread (besides, at most, other facts of the same
    # instance, replied before a late event moved the incident's end).
    roots = world.roots()
    assert set(roots) == set(by_id)
    for incident_id, root in roots.items():
        incident = by_id[incident_id]
        replied = {m.marker.split("|", 1)[1] for m in world.messages if m.thread_ts == root.ts and m.marker}
        expected = {entry.key for entry in replies(incident)}
        assert expected <= replied, (incident_id, expected - replied)
        assert replied - expected <= state["facts"][incident.instance.container_instance_arn], incident_id
    # No duplicate alert: a check never opened more PagerDuty alerts than it had page-worthy incidents (an
    # alert sent while a late event had not yet split a fault in two counts for the fault it was about);
    # an alert is open if and only if its incident is open and pages.
    for fingerprint in {i.fingerprint for i in by_id.values()}:
        alerts = [alert for alert in world.alerts if alert.dedup_key == fingerprint]
        paging = [i for i in by_id.values() if i.fingerprint == fingerprint and "gpu-oncall" in i.receivers]
        assert len(alerts) <= len(paging), (fingerprint, alerts, [i.id for i in paging])
    paged_open = {i.fingerprint for i in by_id.values() if i.is_open and "gpu-oncall" in i.receivers}
    assert world.open_alerts() == paged_open
    for alert in world.alerts:
        assert alert.incident in by_id, f"an alert for no incident: {alert}"
    # Closed if and only if the check's last fact is a recovery.
    for item in lifecycles:
        found: list[Incident] = state["derived"][item.container_instance_arn]
        for check in item.checks:
            last = [i for i in found if i.check_type == check][-1]
            assert (not last.is_open) == item.last_is_recovery(check), (check, last)


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 1_000_000), size=st.integers(1, 5), order=st.randoms(use_true_random=False))
def test_any_delivery_order_gives_the_same_incidents_and_the_same_view_for_on_call(
    seed: int, size: int, order: random.Random
) -> None:
    # Given a fleet of lifecycles, delivered once in time order, and delivered in any order with duplicates
    lifecycles, events = fleet(seed, size)
    reference, reference_world, reference_state = run(events, lifecycles)
    shuffled, shuffled_world, shuffled_state = run(delivered(events, order), lifecycles)
    # Then both give the same incidents, roots, threads and open alerts
    assert shuffled.incidents == reference.incidents
    assert shuffled.roots == reference.roots
    assert shuffled.open_alerts == reference.open_alerts
    # And what on-call saw holds the rules in both
    check_what_on_call_saw(reference_world, reference_state, lifecycles)
    check_what_on_call_saw(shuffled_world, shuffled_state, lifecycles)


def test_a_fault_reported_after_its_instance_left_is_one_incident_whatever_order_its_reports_arrive_in() -> None:
    # Given an instance that left the cluster at 00:00, and two reports of one fault (00:01, 00:02) that arrive
    # after that, the later one first
    from tests.conftest import health_check, load_event, vary  # noqa: PLC0415

    def impaired(minute: int) -> dict[str, Any]:
        stamp = f"2026-04-11T00:0{minute}:00Z"
        event = health_check(
            load_event("aws-docs/health-change-accelerated-compute-xid46.json"),
            lastStatusChange=stamp,
            lastUpdated=stamp,
            statusReason="XID_79",
        )
        return vary(event, event_id=f"impaired-{minute}", time=stamp)

    gone = vary(load_event("state/inactive.json"), event_id="gone", time="2026-04-11T00:00:00Z")
    gone["detail"].update(
        containerInstanceArn=impaired(1)["detail"]["containerInstanceArn"], updatedAt="2026-04-11T00:00:00Z"
    )
    outcomes = []
    for order in ([gone, impaired(2), impaired(1)], [gone, impaired(1), impaired(2)]):
        world = FakeWorld()
        store = MemoryInstanceStore()
        service = AlertService(
            StorePorts(store, store, store),
            Router(load_routing("default.yaml")),
            Courier(world, clock=_now),
            lifecycle.Settings(),
        )
        for event in order:
            service.handle(event)
        record = store.load(impaired(1)["detail"]["containerInstanceArn"])
        assert record is not None
        incidents = service.derive(record).incidents
        outcomes.append([(i.opened_at, i.closed_at, i.status, i.close_reason) for i in incidents])
    # Then it is one incident, closed from the start, whichever report arrived first
    assert outcomes[0] == outcomes[1]
    assert len(outcomes[0]) == 1
