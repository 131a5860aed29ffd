"""The incident lifecycle through AlertService with the in-memory store (no AWS, no HTTP).

Deliveries are recorded by a dispatcher that sends nothing; the notifiers have their own tests.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fault_responder import lifecycle
from fault_responder.dispatch import DeliveryFailure, Dispatcher
from fault_responder.domain import DrainCause, FaultClass, InstanceRef, Notification, NotificationAction, Severity
from fault_responder.routing import Router, load_routing
from fault_responder.service import AlertService
from fault_responder.store import ConcurrentUpdateError, MemoryIncidentStore
from tests.conftest import health_check, load_event, vary

INSTANCE = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/a1b2c3d4EXAMPLE"


class RecordingDispatcher(Dispatcher):
    def __init__(self) -> None:
        self.sent: list[tuple[Notification, list[str]]] = []

    def deliver(self, notification: Notification, receiver_names: list[str]) -> list[DeliveryFailure]:
        self.sent.append((notification, receiver_names))
        return []


class World:
    def __init__(self) -> None:
        self.store = MemoryIncidentStore()
        self.dispatcher = RecordingDispatcher()
        self.service = AlertService(
            self.store, Router(load_routing("default.yaml")), self.dispatcher, lifecycle.Settings()
        )

    def send(self, event: dict[str, Any]) -> list[tuple[Notification, list[str]]]:
        self.dispatcher.sent.clear()
        self.service.handle(event)
        return list(self.dispatcher.sent)

    def incident(self, check_type: str = "ACCELERATED_COMPUTE", arn: str = INSTANCE) -> Any:
        return self.store.load(arn)[0][check_type]


@pytest.fixture
def world() -> World:
    return World()


def ok_event() -> dict[str, Any]:
    return load_event("health/accelerated-compute-xid46-ok.json")


def draining(**detail: Any) -> dict[str, Any]:
    return vary(load_event("state/draining-after-xid46.json"), **detail)


def test_impaired_opens_one_incident_paged_to_slack_and_pagerduty(world: World, xid46: dict[str, Any]) -> None:
    # When
    sent = world.send(xid46)
    # Then
    [(notification, receivers)] = sent
    assert notification.action == NotificationAction.OPEN
    assert receivers == ["gpu-alerts", "gpu-oncall"]
    incident = world.incident()
    assert incident.fingerprint == "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
    assert (incident.status, incident.phase, incident.classification.xid) == ("OPEN", "IMPAIRED", 46)
    assert incident.route == "page-critical-and-error"


def test_ok_for_the_same_instance_and_check_resolves_it(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    [(notification, receivers)] = world.send(ok_event())
    assert notification.action == NotificationAction.RESOLVE
    assert receivers == ["gpu-alerts", "gpu-oncall"]
    incident = world.incident()
    assert (incident.status, incident.phase) == ("CLOSED", "RESOLVED")
    assert incident.close_reason == "ACCELERATED_COMPUTE health check OK"


def test_the_same_event_again_is_not_applied_twice(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    [(again, _)] = world.send(xid46)
    assert again.retry is True
    assert [entry.event_id for entry in world.incident().timeline] == [xid46["id"]]


def test_an_ok_older_than_the_impaired_is_stale_and_changes_nothing(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    late_ok = health_check(ok_event(), lastStatusChange="2026-04-11T00:40:00Z")
    assert world.send(late_ok) == []
    incident = world.incident()
    assert incident.status == "OPEN"
    assert incident.timeline[-1].stale is True


def test_an_impaired_arriving_after_a_newer_ok_does_not_page(world: World, xid46: dict[str, Any]) -> None:
    world.send(ok_event())
    assert world.send(xid46) == []
    assert world.incident().status == "CLOSED"


def test_draining_after_impaired_is_attributed_to_ecs_auto_repair(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    [(notification, receivers)] = world.send(draining())
    assert notification.action == NotificationAction.UPDATE
    assert notification.page is True
    assert receivers == ["gpu-alerts", "gpu-oncall"]
    incident = world.incident()
    assert incident.phase == "DRAINING"
    assert incident.drain.cause == DrainCause.ECS_AUTO_REPAIR
    assert incident.drain.label == "ECS auto-repair (XID 46)"


def test_draining_with_no_fault_before_is_a_manual_or_scheduled_drain(world: World) -> None:
    [(notification, receivers)] = world.send(load_event("state/draining-manual.json"))
    assert notification.action == NotificationAction.STANDALONE
    assert notification.alert.drain.cause == DrainCause.MANUAL_OR_SCHEDULED
    assert notification.alert.severity == Severity.INFO
    assert receivers == ["gpu-alerts"]


def test_a_drain_reason_from_ecs_is_reported_when_no_fault_explains_it(world: World) -> None:
    [(notification, _)] = world.send(draining(statusReason="Instance scheduled for retirement"))
    assert notification.alert.drain.cause == DrainCause.ECS_REPORTED
    assert notification.alert.drain.label == "reported by ECS: Instance scheduled for retirement"


def test_a_dedicated_drain_reason_field_is_read_if_aws_adds_one(world: World) -> None:
    [(notification, _)] = world.send(draining(statusReason=None, drainReason="MAINTENANCE"))
    assert notification.alert.drain.reason == "MAINTENANCE"


def test_a_drain_after_our_quarantine_is_attributed_to_us(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    _, state = world.store.load(INSTANCE)
    state.quarantined_at = datetime(2026, 4, 11, 0, 50, tzinfo=UTC)
    state.quarantine_reason = "XID 46 on a training capacity provider"
    world.store.save_instance_state(state)
    world.send(draining())
    assert world.incident().drain.cause == DrainCause.FAULT_RESPONDER_QUARANTINE


def test_a_drain_soon_after_a_resolved_fault_is_still_auto_repair(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    soon = vary(load_event("state/draining-after-xid46.json"), time="2026-04-11T01:20:00Z", statusReason=None)
    [(notification, _)] = world.send(soon)
    assert notification.alert.drain.cause == DrainCause.ECS_AUTO_REPAIR


def test_a_drain_outside_the_window_after_a_resolved_fault_is_manual(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    late = vary(load_event("state/draining-after-xid46.json"), time="2026-04-11T05:00:00Z", statusReason=None)
    [(notification, _)] = world.send(late)
    assert notification.alert.drain.cause == DrainCause.MANUAL_OR_SCHEDULED


def test_an_instance_state_change_with_an_old_version_is_ignored(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    first = draining()
    world.send(first)
    older = vary(first, event_id="older-version", version=first["detail"]["version"] - 1, status="ACTIVE")
    assert world.send(older) == []


def test_deregistering_goes_to_the_thread_without_paging(world: World) -> None:
    opened = load_event("incident-xid79/01-impaired-xid79.json")
    world.send(opened)
    [(notification, _)] = world.send(load_event("incident-xid79/04-deregistering.json"))
    assert (notification.action, notification.page) == (NotificationAction.UPDATE, False)
    assert world.incident(arn=opened["detail"]["containerInstanceArn"]).phase == "DEREGISTERING"


def test_the_instance_leaving_the_cluster_resolves_the_incident(world: World) -> None:
    opened = load_event("incident-xid79/01-impaired-xid79.json")
    world.send(opened)
    [(notification, _)] = world.send(load_event("incident-xid79/05-inactive.json"))
    assert (notification.action, notification.page) == (NotificationAction.RESOLVE, True)
    assert world.incident(arn=opened["detail"]["containerInstanceArn"]).close_reason == "the instance left the cluster"


def test_an_instance_leaving_with_no_incident_says_nothing(world: World) -> None:
    assert world.send(load_event("state/inactive.json")) == []


def test_a_task_stopped_by_the_drain_joins_the_incident_thread(world: World) -> None:
    world.send(load_event("incident-xid79/01-impaired-xid79.json"))
    world.send(load_event("incident-xid79/02-draining.json"))
    [(notification, _)] = world.send(load_event("incident-xid79/03-task-stopped-draining.json"))
    assert (notification.action, notification.page) == (NotificationAction.UPDATE, False)
    assert notification.entry.phase == "TASK_STOPPED"


def test_a_task_stopped_by_a_drain_with_no_incident_says_nothing(world: World) -> None:
    assert world.send(load_event("task/stopped-instance-draining.json")) == []


def test_a_spot_interruption_is_an_informational_notice(world: World) -> None:
    [(notification, receivers)] = world.send(load_event("task/stopped-spot-interruption.json"))
    assert notification.action == NotificationAction.STANDALONE
    assert (notification.alert.fault_class, notification.alert.severity) == (
        FaultClass.TASK_INTERRUPTION,
        Severity.INFO,
    )
    assert receivers == ["gpu-alerts"]


def test_an_application_crash_is_not_an_infrastructure_stop(world: World) -> None:
    assert world.send(load_event("task/stopped-essential-container-exited.json")) == []


def test_a_fault_after_recovery_reopens_the_incident(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    again = health_check(vary(xid46, event_id="second-fault"), lastStatusChange="2026-04-11T01:30:00Z")
    [(notification, _)] = world.send(again)
    assert notification.action == NotificationAction.OPEN
    incident = world.incident()
    assert (incident.status, incident.opened_count, incident.slack_threads) == ("OPEN", 2, [])


def test_a_more_severe_xid_on_an_open_incident_escalates_and_pages(world: World) -> None:
    restart_app = load_event("health/accelerated-compute-xid13-restart-app.json")
    [(_, receivers)] = world.send(restart_app)
    assert receivers == ["gpu-alerts"]
    arn = restart_app["detail"]["containerInstanceArn"]
    critical = health_check(
        vary(restart_app, event_id="escalation"), statusReason="XID_79", lastStatusChange="2026-04-11T23:59:00Z"
    )
    [(notification, receivers)] = world.send(critical)
    assert (notification.action, notification.page) == (NotificationAction.UPDATE, True)
    assert receivers == ["gpu-alerts", "gpu-oncall"]
    assert world.incident(arn=arn).classification.severity == Severity.CRITICAL


def test_impaired_with_no_health_check_listed_still_alerts(world: World, xid46: dict[str, Any]) -> None:
    [(notification, _)] = world.send(vary(xid46, healthChecks=[]))
    assert notification.incident.check_type == "UNKNOWN"
    assert notification.incident.classification.fault_class == FaultClass.UNKNOWN_CHECK


def test_each_health_check_in_one_event_is_its_own_incident(world: World, xid46: dict[str, Any]) -> None:
    daemon = {
        "type": "DAEMON",
        "status": "IMPAIRED",
        "lastStatusChange": "2026-04-11T00:48:53Z",
        "lastUpdated": "2026-04-11T00:48:09Z",
        "statusReason": "Daemon task: x is unhealthy",
    }
    event = vary(xid46, healthChecks=[*xid46["detail"]["healthChecks"], daemon])
    sent = world.send(event)
    assert sorted(n.incident.check_type for n, _ in sent) == ["ACCELERATED_COMPUTE", "DAEMON"]


def test_initializing_is_not_an_incident(world: World, xid46: dict[str, Any]) -> None:
    assert world.send(health_check(xid46, status="INITIALIZING", statusReason=None)) == []
    assert world.store.load(INSTANCE)[0] == {}


def test_a_concurrent_writer_loses_the_conditional_write(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    first = world.incident()
    second = world.incident()
    world.store.save_incident(first)
    with pytest.raises(ConcurrentUpdateError):
        world.store.save_incident(second)


def test_fingerprints_stay_within_the_pagerduty_dedup_key_limit() -> None:
    long_cluster = "c" * 255
    instance = InstanceRef(
        "us-east-1",
        "1",
        f"arn:aws:ecs:us-east-1:1:cluster/{long_cluster}",
        f"arn:aws:ecs:us-east-1:1:container-instance/{long_cluster}/abc",
        None,
        None,
    )
    key = lifecycle.fingerprint(instance, "ACCELERATED_COMPUTE")
    assert len(key) <= 255
    assert key == lifecycle.fingerprint(instance, "ACCELERATED_COMPUTE")
