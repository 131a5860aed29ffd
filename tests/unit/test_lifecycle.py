"""The incident lifecycle through AlertService, with the in-memory store and channels that record what
would be sent (no AWS, no HTTP). The notifiers and the DynamoDB store have their own tests.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService, DeliveryPendingError
from fault_responder.alerting.store import ConcurrentUpdateError, MemoryInstanceStore, StorePorts
from fault_responder.core.domain import DrainCause, FaultClass, Incident, InstanceRef, Runbook, Severity
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import InstanceRecord, QuarantineFact
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels, Sent
from fault_responder.routing.router import Router, RoutingConfig, load_routing
from fault_responder.routing.runbooks import CLASS_RUNBOOKS, XID_RUNBOOKS
from tests.conftest import health_check, load_event, vary

INSTANCE = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/a1b2c3d4EXAMPLE"
KEY = "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"


class World:
    def __init__(self, routing: RoutingConfig | None = None) -> None:
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing or load_routing("default.yaml")),
            ReceiverCourier(self.channels),
            lifecycle.Settings(),
        )

    def send(self, event: dict[str, Any]) -> list[Sent]:
        self.channels.sent.clear()
        self.service.handle(event)
        return sorted(self.channels.sent, key=lambda sent: (sent.service, sent.action))

    def incidents(self, arn: str = INSTANCE) -> list[Incident]:
        record = self.store.load(arn)
        return self.service.derive(record).incidents if record is not None else []

    def incident(self, check_type: str = "ACCELERATED_COMPUTE", arn: str = INSTANCE) -> Incident:
        [incident] = [i for i in self.incidents(arn) if i.check_type == check_type][-1:]
        return incident

    def alerts(self, arn: str = INSTANCE) -> list[Any]:
        record = self.store.load(arn)
        return self.service.derive(record).alerts if record is not None else []


@pytest.fixture
def world() -> World:
    return World()


def what(sent: list[Sent]) -> list[tuple[str, str]]:
    return [(s.service, s.action) for s in sent]


def ok_event() -> dict[str, Any]:
    return load_event("health/accelerated-compute-xid46-ok.json")


def draining(**detail: Any) -> dict[str, Any]:
    return vary(load_event("state/draining-after-xid46.json"), **detail)


def inactive(**detail: Any) -> dict[str, Any]:
    fields = {"containerInstanceArn": INSTANCE, "updatedAt": "2026-04-11T01:05:00Z", **detail}
    return vary(load_event("state/inactive.json"), event_id="gone", **fields)


# --- Opening, updating, resolving -----------------------------------------------------------------


def test_impaired_opens_one_incident_paged_to_slack_and_pagerduty(world: World, xid46: dict[str, Any]) -> None:
    sent = world.send(xid46)
    assert what(sent) == [("pagerduty", "trigger"), ("slack", "post")]
    assert {s.receiver for s in sent} == {"gpu-alerts", "gpu-oncall"}
    incident = world.incident()
    assert incident.fingerprint == KEY
    assert (incident.status, incident.phase, incident.classification.xid) == ("OPEN", "IMPAIRED", 46)
    assert incident.route == "page-critical-and-error"


def test_ok_for_the_same_instance_and_check_resolves_it(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    sent = world.send(ok_event())
    assert what(sent) == [("pagerduty", "resolve"), ("slack", "reply"), ("slack", "update")]
    incident = world.incident()
    assert (incident.status, incident.phase) == ("CLOSED", "RESOLVED")
    assert incident.close_reason == "ACCELERATED_COMPUTE health check OK"


def test_the_same_event_again_sends_nothing(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    assert world.send(xid46) == []
    assert [entry.event_id for entry in world.incident().timeline] == [xid46["id"]]


def test_the_same_transition_reported_twice_is_one_fact(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    assert world.send(vary(xid46, event_id="another-report-of-it")) == []
    assert len(world.incident().timeline) == 1


def test_insufficient_data_shows_as_itself(world: World, xid46: dict[str, Any]) -> None:
    world.send(health_check(xid46, status="INSUFFICIENT_DATA", statusReason=None))
    incident = world.incident()
    assert (incident.phase, incident.classification.fault_class) == ("INSUFFICIENT_DATA", FaultClass.INSUFFICIENT_DATA)


# --- Out of order ---------------------------------------------------------------------------------


def test_an_ok_older_than_the_impaired_changes_nothing(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    late_ok = health_check(ok_event(), lastStatusChange="2026-04-11T00:40:00Z")
    assert world.send(late_ok) == []
    assert world.incident().status == "OPEN"


def test_an_impaired_arriving_after_its_ok_is_told_to_slack_as_resolved_and_never_pages(
    world: World, xid46: dict[str, Any]
) -> None:
    # Given the OK already known, When the IMPAIRED before it arrives late
    world.send(ok_event())
    sent = world.send(xid46)
    # Then on-call sees a resolved incident with its duration in Slack, and nothing pages
    assert what(sent) == [("slack", "post"), ("slack", "reply")]
    assert sent[0].text.startswith("RESOLVED after 7m 19s · XID 46")
    incident = world.incident()
    assert (incident.status, incident.close_reason) == ("CLOSED", "ACCELERATED_COMPUTE health check OK")


def test_a_drain_before_its_fault_is_reattributed_and_its_message_corrected_in_place(
    world: World, xid46: dict[str, Any]
) -> None:
    # Given a DRAINING with no fault known yet: a manual drain, announced on its own
    [announced] = world.send(draining(statusReason=None))
    assert (announced.service, announced.action) == ("slack", "post")
    assert "manual or scheduled" in announced.text
    # When the fault that explains it arrives
    sent = world.send(xid46)
    # Then the incident shows ECS auto-repair, pages with it, and the drain's message is corrected in place
    incident = world.incident()
    assert (incident.phase, incident.drain.cause) == ("DRAINING", DrainCause.ECS_AUTO_REPAIR)
    assert incident.drain.label == "ECS auto-repair (XID 46)"
    trigger = next(s for s in sent if s.action == "trigger")
    assert "ECS auto-repair (XID 46)" in trigger.text
    [correction] = [s for s in sent if s.action == "update" and s.ts == announced.ts]
    assert "now part of" in correction.text


def test_inactive_closes_what_an_older_event_opens_after_it(world: World, xid46: dict[str, Any]) -> None:
    # Given the instance already gone, When an IMPAIRED from before it left arrives
    world.send(inactive())
    sent = world.send(xid46)
    # Then the incident is closed from the start: told to Slack, never paged, never left open
    assert what(sent) == [("slack", "post"), ("slack", "reply")]
    incident = world.incident()
    assert (incident.status, incident.close_reason) == ("CLOSED", "the instance left the cluster")


def test_a_fault_reported_after_the_instance_left_is_closed_at_once(world: World, xid46: dict[str, Any]) -> None:
    world.send(inactive(updatedAt="2026-04-11T00:10:00Z"))
    world.send(xid46)
    assert world.incident().close_reason == "the instance had already left the cluster"


def test_inactive_closes_every_incident_on_the_instance(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(load_event("aws-docs/health-change-daemon-impaired.json"))
    sent = world.send(inactive())
    assert sorted((s.action, s.target) for s in sent if s.service == "pagerduty") == [
        ("resolve", KEY),
        ("resolve", "my-cluster/a1b2c3d4EXAMPLE/DAEMON"),
    ]
    assert all(not incident.is_open for incident in world.incidents())


def test_a_late_earlier_report_moves_the_start_but_keeps_the_incident(world: World, xid46: dict[str, Any]) -> None:
    # Given an incident known from its XID 79 report
    later = health_check(vary(xid46, event_id="later"), statusReason="XID_79", lastStatusChange="2026-04-11T00:50:00Z")
    world.send(later)
    first = world.incident()
    # When an earlier report of the same fault (no OK between) arrives
    sent = world.send(xid46)
    # Then it is the same incident (same root, no second page), now starting earlier, still XID 79
    incident = world.incident()
    assert incident.id == first.id
    assert incident.opened_at < first.opened_at
    assert incident.classification.xid == 79
    assert ("slack", "post") not in what(sent)
    assert ("pagerduty", "trigger") not in what(sent)


# --- Drains ---------------------------------------------------------------------------------------


def test_draining_after_impaired_is_attributed_to_ecs_auto_repair(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    sent = world.send(draining())
    assert what(sent) == [("pagerduty", "trigger"), ("slack", "reply"), ("slack", "update")]
    incident = world.incident()
    assert incident.phase == "DRAINING"
    assert (incident.drain.cause, incident.drain.label) == (DrainCause.ECS_AUTO_REPAIR, "ECS auto-repair (XID 46)")


def test_draining_with_no_fault_before_is_a_manual_or_scheduled_drain(world: World) -> None:
    sent = world.send(load_event("state/draining-manual.json"))
    assert [(s.service, s.action, s.receiver) for s in sent] == [("slack", "post", "gpu-alerts")]
    [alert] = world.alerts(arn=load_event("state/draining-manual.json")["detail"]["containerInstanceArn"])
    assert (alert.drain.cause, alert.severity) == (DrainCause.MANUAL_OR_SCHEDULED, Severity.INFO)


def test_two_different_drains_under_one_event_id_are_one_notice_and_its_delivery_ends(world: World) -> None:
    # Given a manual drain announced, then another state change that reuses its event id (a hostile or broken
    # producer: EventBridge gives each event its own id) with another version and time
    manual = load_event("state/draining-manual.json")
    arn = manual["detail"]["containerInstanceArn"]
    world.send(manual)
    version = int(manual["detail"].get("version") or 0)
    sent = world.send(vary(manual, version=version + 7, updatedAt="2026-04-11T03:00:00Z"))
    # Then the view holds one notice per key, and its delivery ends (no edit repeated against its own twin)
    keys = [alert.key for alert in world.alerts(arn=arn)]
    assert len(keys) == len(set(keys)) == 1
    assert len(sent) <= 1


def test_a_drain_reason_from_ecs_is_reported_when_no_fault_explains_it(world: World) -> None:
    world.send(draining(statusReason="Instance scheduled for retirement"))
    [alert] = world.alerts()
    assert (alert.drain.cause, alert.drain.label) == (
        DrainCause.ECS_REPORTED,
        "reported by ECS: Instance scheduled for retirement",
    )


def test_a_dedicated_drain_reason_field_is_read_if_aws_adds_one(world: World) -> None:
    world.send(draining(statusReason=None, drainReason="MAINTENANCE"))
    [alert] = world.alerts()
    assert alert.drain.reason == "MAINTENANCE"


def test_a_drain_after_our_quarantine_is_attributed_to_us(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    record = world.store.load(INSTANCE)
    assert record is not None
    record.add_quarantine(QuarantineFact(datetime(2026, 4, 11, 0, 50, tzinfo=UTC), "XID 46 on a training provider"))
    world.store.commit(record)
    world.send(draining())
    assert world.incident().drain.cause == DrainCause.FAULT_RESPONDER_QUARANTINE


def test_a_drain_soon_after_a_resolved_fault_is_still_auto_repair(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    world.send(draining(updatedAt="2026-04-11T01:20:00Z", statusReason=None))
    [alert] = world.alerts()
    assert alert.drain.cause == DrainCause.ECS_AUTO_REPAIR


def test_a_drain_outside_the_window_after_a_resolved_fault_is_manual(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    world.send(draining(updatedAt="2026-04-11T05:00:00Z", statusReason=None))
    [alert] = world.alerts()
    assert alert.drain.cause == DrainCause.MANUAL_OR_SCHEDULED


def test_an_instance_status_with_an_older_version_does_not_change_the_phase(
    world: World, xid46: dict[str, Any]
) -> None:
    world.send(xid46)
    first = draining()
    world.send(first)
    world.send(vary(first, event_id="older-version", version=first["detail"]["version"] - 1, status="ACTIVE"))
    assert world.incident().phase == "DRAINING"


def test_deregistering_goes_to_the_thread_without_paging(world: World) -> None:
    opened = load_event("incident-xid79/01-impaired-xid79.json")
    world.send(opened)
    sent = world.send(load_event("incident-xid79/04-deregistering.json"))
    assert what(sent) == [("slack", "reply"), ("slack", "update")]
    assert world.incident(arn=opened["detail"]["containerInstanceArn"]).phase == "DEREGISTERING"


def test_the_instance_leaving_the_cluster_resolves_the_incident(world: World) -> None:
    opened = load_event("incident-xid79/01-impaired-xid79.json")
    world.send(opened)
    sent = world.send(load_event("incident-xid79/05-inactive.json"))
    assert ("pagerduty", "resolve") in what(sent)
    assert world.incident(arn=opened["detail"]["containerInstanceArn"]).close_reason == "the instance left the cluster"


def test_an_instance_leaving_with_no_incident_says_nothing(world: World) -> None:
    assert world.send(load_event("state/inactive.json")) == []


# --- Tasks ----------------------------------------------------------------------------------------


def test_a_task_stopped_by_the_drain_joins_the_incident_thread(world: World) -> None:
    world.send(load_event("incident-xid79/01-impaired-xid79.json"))
    world.send(load_event("incident-xid79/02-draining.json"))
    sent = world.send(load_event("incident-xid79/03-task-stopped-draining.json"))
    assert what(sent) == [("slack", "reply"), ("slack", "update")]
    assert sent[0].text.startswith("TASK_STOPPED: Task llm-pretrain-70b")


def test_a_task_stopped_by_a_drain_with_no_incident_says_nothing(world: World) -> None:
    assert world.send(load_event("task/stopped-instance-draining.json")) == []


def test_a_spot_interruption_is_an_informational_notice(world: World) -> None:
    event = load_event("task/stopped-spot-interruption.json")
    sent = world.send(event)
    assert [(s.service, s.action, s.receiver) for s in sent] == [("slack", "post", "gpu-alerts")]
    [alert] = world.alerts(arn=event["detail"]["containerInstanceArn"])
    assert (alert.fault_class, alert.severity) == (FaultClass.TASK_INTERRUPTION, Severity.INFO)


def test_an_application_crash_is_not_an_infrastructure_stop(world: World) -> None:
    assert world.send(load_event("task/stopped-essential-container-exited.json")) == []


# --- Episodes, escalation, several checks ---------------------------------------------------------


def test_a_fault_after_recovery_is_a_new_incident_under_the_same_dedup_key(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    world.send(ok_event())
    again = health_check(vary(xid46, event_id="second-fault"), lastStatusChange="2026-04-11T01:30:00Z")
    sent = world.send(again)
    assert [(s.service, s.action, s.target) for s in sent if s.service == "pagerduty"] == [
        ("pagerduty", "trigger", KEY)
    ]
    assert ("slack", "post") in what(sent)
    first, second = world.incidents()
    assert (first.status, second.status, second.opened_count) == ("CLOSED", "OPEN", 2)


def test_a_more_severe_xid_on_an_open_incident_escalates_and_pages(world: World) -> None:
    restart_app = load_event("health/accelerated-compute-xid13-restart-app.json")
    assert {s.receiver for s in world.send(restart_app)} == {"gpu-alerts"}
    arn = restart_app["detail"]["containerInstanceArn"]
    critical = health_check(
        vary(restart_app, event_id="escalation"), statusReason="XID_79", lastStatusChange="2026-04-11T23:59:00Z"
    )
    sent = world.send(critical)
    assert ("pagerduty", "trigger") in what(sent)
    assert world.incident(arn=arn).classification.severity == Severity.CRITICAL


def test_the_most_severe_report_wins_whatever_order_they_arrive_in(world: World) -> None:
    restart_app = load_event("health/accelerated-compute-xid13-restart-app.json")
    critical = health_check(
        vary(restart_app, event_id="escalation"), statusReason="XID_79", lastStatusChange="2026-04-11T23:59:00Z"
    )
    world.send(critical)
    world.send(restart_app)
    arn = restart_app["detail"]["containerInstanceArn"]
    assert world.incident(arn=arn).classification.xid == 79


def test_impaired_with_no_health_check_listed_still_alerts(world: World, xid46: dict[str, Any]) -> None:
    world.send(vary(xid46, healthChecks=[]))
    incident = world.incident("UNKNOWN")
    assert incident.classification.fault_class == FaultClass.UNKNOWN_CHECK


def test_each_health_check_in_one_event_is_its_own_incident_with_its_own_pages(
    world: World, xid46: dict[str, Any]
) -> None:
    daemon = {
        "type": "DAEMON",
        "status": "IMPAIRED",
        "lastStatusChange": "2026-04-11T00:48:53Z",
        "lastUpdated": "2026-04-11T00:48:09Z",
        "statusReason": "Daemon task: x is unhealthy",
    }
    sent = world.send(vary(xid46, healthChecks=[*xid46["detail"]["healthChecks"], daemon]))
    assert sorted(s.target for s in sent if s.service == "pagerduty") == [KEY, "my-cluster/a1b2c3d4EXAMPLE/DAEMON"]
    assert len([s for s in sent if s.action == "post"]) == 2


def test_initializing_is_not_an_incident(world: World, xid46: dict[str, Any]) -> None:
    assert world.send(health_check(xid46, status="INITIALIZING", statusReason=None)) == []
    assert world.store.load(INSTANCE) is None


# --- Runbooks -------------------------------------------------------------------------------------


def test_an_incident_carries_the_runbook_of_its_xid(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    assert world.incident().runbook == XID_RUNBOOKS[46]


def test_an_escalated_incident_carries_the_runbook_of_its_most_severe_report(world: World) -> None:
    restart_app = load_event("health/accelerated-compute-xid13-restart-app.json")
    arn = restart_app["detail"]["containerInstanceArn"]
    world.send(restart_app)
    assert world.incident(arn=arn).runbook == XID_RUNBOOKS[13]

    world.send(
        health_check(
            vary(restart_app, event_id="xid79"), statusReason="XID_79", lastStatusChange="2026-04-11T23:59:00Z"
        )
    )

    assert world.incident(arn=arn).runbook == XID_RUNBOOKS[79]


def test_notices_carry_the_runbook_of_their_class(world: World) -> None:
    drain, spot = load_event("state/draining-manual.json"), load_event("task/stopped-spot-interruption.json")
    world.send(drain)
    world.send(spot)

    [drain_notice] = world.alerts(arn=drain["detail"]["containerInstanceArn"])
    [spot_notice] = world.alerts(arn=spot["detail"]["containerInstanceArn"])
    assert drain_notice.runbook == CLASS_RUNBOOKS[FaultClass.INSTANCE_LIFECYCLE]
    assert spot_notice.runbook == CLASS_RUNBOOKS[FaultClass.TASK_INTERRUPTION]


def routing_with_runbooks() -> RoutingConfig:
    """my-cluster's GPU faults have the team's own runbook; its drains keep the default link with their own line."""
    return RoutingConfig.model_validate(
        {
            "receivers": {"chat": {"slack": {"channel": "#gpu"}}},
            "routes": [
                {
                    "name": "my-cluster-gpu",
                    "match": {"cluster": "my-cluster", "check_type": "ACCELERATED_COMPUTE"},
                    "receivers": ["chat"],
                    "runbook": {"url": "https://wiki.example.com/gpu", "action": "Follow the GPU team's runbook."},
                },
                {
                    "name": "drains",
                    "match": {"kind": "instance_state"},
                    "receivers": ["chat"],
                    "runbook": {"action": "Ask in #capacity whether this drain was planned."},
                },
                {"name": "everything-else", "receivers": ["chat"]},
            ],
        }
    )


def test_a_route_runbook_replaces_the_default_for_what_it_routes(xid46: dict[str, Any]) -> None:
    world = World(routing_with_runbooks())
    world.send(xid46)

    assert world.incident().runbook == Runbook(
        "Follow the GPU team's runbook.", "https://wiki.example.com/gpu", "Runbook (wiki.example.com)"
    )


def test_a_route_runbook_with_only_an_action_keeps_the_default_link() -> None:
    world = World(routing_with_runbooks())
    drain = load_event("state/draining-manual.json")
    world.send(drain)

    [notice] = world.alerts(arn=drain["detail"]["containerInstanceArn"])
    default = CLASS_RUNBOOKS[FaultClass.INSTANCE_LIFECYCLE]
    assert notice.runbook == Runbook("Ask in #capacity whether this drain was planned.", default.url, default.link_text)


def test_what_a_route_without_a_runbook_routes_keeps_the_defaults() -> None:
    world = World(routing_with_runbooks())
    event = load_event("aws-docs/health-change-daemon-impaired.json")
    world.send(event)

    assert (
        world.incident("DAEMON", arn=event["detail"]["containerInstanceArn"]).runbook
        == CLASS_RUNBOOKS[FaultClass.DAEMON]
    )


# --- The store's contract -------------------------------------------------------------------------


def test_a_concurrent_writer_loses_the_conditional_write(world: World, xid46: dict[str, Any]) -> None:
    world.send(xid46)
    first = world.store.load(INSTANCE)
    second = world.store.load(INSTANCE)
    assert first is not None and second is not None
    world.store.commit(first)
    with pytest.raises(ConcurrentUpdateError):
        world.store.commit(second)


def test_a_write_conflict_is_retried_from_a_fresh_read(world: World, xid46: dict[str, Any]) -> None:
    # Given a store that loses the first write of the DRAINING to someone else's write
    world.send(xid46)
    store = world.store
    commit = store.commit
    calls = {"n": 0}

    def racing(record: InstanceRecord, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            other = store.load(INSTANCE)
            assert other is not None
            commit(other)  # someone else wrote meanwhile
        return commit(record, **kwargs)

    store.commit = racing  # type: ignore[method-assign]
    # When the DRAINING is handled, Then it is applied once, on the fresh record
    world.send(draining())
    assert calls["n"] == 2
    assert world.incident().phase == "DRAINING"


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


# --- A stale read never forgets a root posted meanwhile ---------------------------------------------------------


class _FlakySlack(RecordingChannels):
    """Slack refuses posts while `down` (a known failure: nothing landed)."""

    down = False

    def post_message(self, channel: str, message: Any, thread_ts: str | None = None, metadata: Any = None) -> Any:
        if self.down:
            raise DeliveryError("Slack", 500, "internal_error", retryable=True)
        return super().post_message(channel, message, thread_ts, metadata)


class _StaleOnce(MemoryInstanceStore):
    """Answers one load with a record read earlier (a worker that read before another worker delivered)."""

    stale: InstanceRecord | None = None

    def load(self, arn: str) -> InstanceRecord | None:
        if self.stale is not None:
            stale, self.stale = self.stale, None
            return stale
        return super().load(arn)


def test_a_worker_that_read_before_the_root_was_posted_does_not_post_it_again() -> None:
    # Given an incident whose root could not be posted yet (Slack refused it), as one worker reads the record
    store, channels = _StaleOnce(), _FlakySlack()
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        ReceiverCourier(channels),
        lifecycle.Settings(),
    )
    channels.down = True
    with pytest.raises(DeliveryPendingError):
        service.handle(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    stale = store.load(INSTANCE)
    # and another worker then posts the root (the sweep, or the event's retry) and lets go of its lease
    channels.down = False
    service.reconcile(INSTANCE)
    assert [s.action for s in channels.sent if s.service == "slack"] == ["post"]
    # When the first worker writes a new fact from what it read before, and delivers
    store.stale = stale
    service.handle(load_event("state/draining-after-xid46.json"))
    # Then the root it did not know of is not posted again: the drain is a reply in its thread and an update
    slack = [s.action for s in channels.sent if s.service == "slack"]
    assert slack.count("post") == 1, slack


def test_a_copy_of_an_event_read_before_the_root_was_posted_does_not_post_it_again() -> None:
    # Given a fault and its drain, whose root could not be posted yet, as a worker with a copy of the drain reads
    store, channels = _StaleOnce(), _FlakySlack()
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        ReceiverCourier(channels),
        lifecycle.Settings(),
    )
    drain = load_event("state/draining-after-xid46.json")
    channels.down = True
    for event in (load_event("aws-docs/health-change-accelerated-compute-xid46.json"), drain):
        with pytest.raises(DeliveryPendingError):
            service.handle(event)
    stale = store.load(INSTANCE)
    # and another worker then posts the root and lets go of its lease
    channels.down = False
    service.reconcile(INSTANCE)
    # When the copy (nothing new in it) is handled from what was read before: its worker takes the free lease
    store.stale = stale
    service.handle(drain)
    # Then it delivers from the record as it is now, not as it read it: the root is not posted again
    slack = [s.action for s in channels.sent if s.service == "slack"]
    assert slack.count("post") == 1, slack
