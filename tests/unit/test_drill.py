"""Drills (docs/drills.md): the event a drill sends, how the pipeline labels and handles it, how hops are judged,
and what the reports print. Pure parts only; the CLI against moto and the sandbox is in
tests/integration/test_drill_cli.py and the drill-* scenarios."""

from __future__ import annotations

import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.adapters.drill_aws import INJECTOR_FAMILY, inject_command, injector_task_definition
from fault_responder.adapters.serialization import check_from_dict, check_to_dict
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import DRILL_MARK, DRILL_SOURCE, MAX_DRILL_AUTHOR
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import Delivery, InstanceRecord, KnownIncident
from fault_responder.noise.policy import Policy, QuietWhenHandled
from fault_responder.notification.delivery import pagerduty_subject
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.operations.drill import (
    DrillReport,
    DrillTarget,
    Hop,
    HopResult,
    Milestone,
    Observation,
    Receivers,
    RecoveryReport,
    follow,
    health_entry,
    observe,
    render_recovery,
    render_report,
)
from fault_responder.resume.fault import NotResumableError, fault_from_event
from fault_responder.routing.matchers import incident_labels, matches_all, parse_matchers
from fault_responder.routing.router import Router, load_routing
from tests.unit.test_fleet import START, Clock

TARGET = DrillTarget("us-west-2", "123456789012", "my-cluster", "abc123", xid=79, capacity_provider="gpu-training")
RECEIVERS = Receivers(slack=frozenset({"drill-slack"}), pagerduty=frozenset({"drill-pagerduty"}))


def envelope(entry: dict[str, Any], *, source: str | None = None) -> dict[str, Any]:
    """What EventBridge delivers for a PutEvents entry."""
    return {
        "version": "0",
        "id": f"evt-{entry['Time'].timestamp():.0f}-{json.loads(entry['Detail'])['overallStatus']}",
        "detail-type": entry["DetailType"],
        "source": source or entry["Source"],
        "account": "123456789012",
        "time": entry["Time"].strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "us-west-2",
        "resources": entry["Resources"],
        "detail": json.loads(entry["Detail"]),
    }


def drill_event(status: str, at: datetime, **kwargs: Any) -> dict[str, Any]:
    return envelope(health_entry(TARGET, status, at), **kwargs)


# --- What a drill sends --------------------------------------------------------------------------------


def test_the_drill_event_is_an_ecs_health_change_with_the_drill_source() -> None:
    entry = health_entry(TARGET, "IMPAIRED", START)
    detail = json.loads(entry["Detail"])
    assert (entry["Source"], entry["DetailType"], entry["EventBusName"]) == (
        DRILL_SOURCE,
        "ECS Container Instance Health Change",
        "default",
    )
    assert detail["containerInstanceArn"] == "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/abc123"
    assert detail["healthChecks"] == [
        {
            "type": "ACCELERATED_COMPUTE",
            "status": "IMPAIRED",
            "statusReason": "XID_79",
            "lastStatusChange": "2026-04-11T01:00:00+00:00",
            "lastUpdated": "2026-04-11T01:00:00+00:00",
        }
    ]
    assert "statusReason" not in json.loads(health_entry(TARGET, "OK", START)["Detail"])["healthChecks"][0]


def test_a_drill_parses_as_a_drill_and_an_ecs_event_never_does() -> None:
    assert parse_ecs_event(drill_event("IMPAIRED", START)).is_drill
    assert not parse_ecs_event(drill_event("IMPAIRED", START, source="aws.ecs")).is_drill


def test_an_event_of_any_other_source_is_rejected() -> None:
    with pytest.raises(ValidationError):
        parse_ecs_event(drill_event("IMPAIRED", START, source="fault-responder.drill.evil"))


def test_a_drill_is_kept_apart_from_the_instance_it_names() -> None:
    facts = lifecycle.facts_from_event(parse_ecs_event(drill_event("IMPAIRED", START)))
    assert facts is not None
    instance = facts.instance
    assert instance.drill
    assert instance.container_instance_arn == TARGET.container_instance_arn + DRILL_MARK == TARGET.record_arn
    assert instance.container_instance_id == "abc123"
    assert lifecycle.fingerprint(instance, "ACCELERATED_COMPUTE") == "drill/my-cluster/abc123/ACCELERATED_COMPUTE"


def test_a_real_event_is_never_labelled_a_drill_whatever_its_arn_says() -> None:
    event = drill_event("IMPAIRED", START, source="aws.ecs")
    event["detail"]["containerInstanceArn"] += DRILL_MARK
    facts = lifecycle.facts_from_event(parse_ecs_event(event))
    assert facts is not None and not facts.instance.drill
    assert not lifecycle.fingerprint(facts.instance, "ACCELERATED_COMPUTE").startswith("drill/")


def test_the_resume_workflow_refuses_a_drill() -> None:
    event = parse_ecs_event(drill_event("IMPAIRED", START))
    with pytest.raises(NotResumableError, match="drill"):
        fault_from_event(event, frozenset({"ACCELERATED_COMPUTE"}))  # type: ignore[arg-type]


def test_the_drill_event_names_who_started_it_and_the_incident_says_so() -> None:
    # Given a drill run by alice, When its event becomes facts and the facts an incident
    target = dataclasses.replace(TARGET, author="alice")
    entry = health_entry(target, "IMPAIRED", START)
    assert json.loads(entry["Detail"])["drill"] == {"startedBy": "alice"}
    facts = lifecycle.facts_from_event(parse_ecs_event(envelope(entry)))
    assert facts is not None and [fact.by for fact in facts.health] == ["alice"]
    record = InstanceRecord(facts.instance.container_instance_arn, facts.instance)
    record.add(facts)
    [incident] = lifecycle.derive(record, lifecycle.Settings(), Router(load_routing("default.yaml")).route).incidents

    # Then it says who started it, and it started when it reported its fault
    assert (incident.started_by, incident.opened_at) == ("alice", START)


def test_who_started_a_drill_is_one_bounded_line_and_is_kept_with_its_facts() -> None:
    event = envelope(health_entry(dataclasses.replace(TARGET, author="eve\n" + "x" * 500), "IMPAIRED", START))
    facts = lifecycle.facts_from_event(parse_ecs_event(event))
    assert facts is not None
    [by] = [fact.by for fact in facts.health]
    assert by is not None and len(by) == MAX_DRILL_AUTHOR and by.startswith("eve x") and "\n" not in by
    record = InstanceRecord(facts.instance.container_instance_arn, facts.instance)
    record.add(facts)
    _, stored, _ = check_from_dict(check_to_dict(record, "ACCELERATED_COMPUTE"))
    assert [fact.by for fact in stored] == [by]


def test_only_a_drill_event_can_name_an_author() -> None:
    event = envelope(health_entry(dataclasses.replace(TARGET, author="alice"), "IMPAIRED", START), source="aws.ecs")
    facts = lifecycle.facts_from_event(parse_ecs_event(event))
    assert facts is not None and [fact.by for fact in facts.health] == [None]
    record = InstanceRecord(facts.instance.container_instance_arn, facts.instance)
    record.add(facts)
    assert "by" not in check_to_dict(record, "ACCELERATED_COMPUTE")["facts"][0]


def test_a_drill_event_whose_author_cannot_be_read_still_pages_naming_nobody() -> None:
    event = drill_event("IMPAIRED", START)
    event["detail"]["drill"] = {"startedBy": ["not", "text"]}
    facts = lifecycle.facts_from_event(parse_ecs_event(event))
    assert facts is not None and [fact.by for fact in facts.health] == [None]


# --- The pipeline with a drill -------------------------------------------------------------------------


class Pipeline:
    """The router's service with the default routing file, quiet-when-handled on the drill's provider."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        routing = load_routing("default.yaml")
        pagerduty = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
        quiet = QuietWhenHandled(frozenset({"gpu-training"}), frozenset({"ACCELERATED_COMPUTE"}))
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(hold_down=routing.flapping.hold_down),
            clock=self.clock,
            policy=Policy(quiet=quiet, pagerduty_receivers=pagerduty),
        )

    def put(self, event: dict[str, Any]) -> None:
        self.service.handle(copy.deepcopy(event))

    def sent(self, service: str, action: str) -> list[Any]:
        return [s for s in self.channels.sent if s.service == service and s.action == action]


def test_a_drill_pages_through_the_drill_receivers_says_drill_and_resolves_at_its_ok() -> None:
    pipeline = Pipeline()
    pipeline.put(drill_event("IMPAIRED", START))
    [root] = pipeline.sent("slack", "post")
    [trigger] = pipeline.sent("pagerduty", "trigger")
    assert (root.receiver, trigger.receiver) == ("drill-slack", "drill-pagerduty")
    assert "DRILL: XID 79" in root.text
    assert trigger.text.startswith("DRILL: XID 79") and trigger.target.startswith("drill/")
    # The routing file's 10-minute hold-down does not hold a drill's OK (it is the drill's own, not a flap).
    pipeline.clock.now = START + timedelta(minutes=5, seconds=2)
    pipeline.put(drill_event("OK", START + timedelta(seconds=2)))
    [resolve] = pipeline.sent("pagerduty", "resolve")
    assert resolve.target == trigger.target
    record = pipeline.store.load(TARGET.record_arn)
    assert record is not None and [k.status for k in record.incidents["ACCELERATED_COMPUTE"]] == ["CLOSED"]


def test_a_drill_on_a_training_provider_still_pages_and_its_labels_say_drill() -> None:
    pipeline = Pipeline()
    pipeline.put(drill_event("IMPAIRED", START))
    assert len(pipeline.sent("pagerduty", "trigger")) == 1  # quiet-when-handled does not apply: no workflow runs
    record = pipeline.store.load(TARGET.record_arn)
    assert record is not None
    view = pipeline.service.derive(record)
    labels = incident_labels(view.incidents[0])
    assert labels["drill"] == "true"
    assert matches_all(parse_matchers(["drill=true", "instance=abc123"]), labels)


def test_a_real_fault_is_labelled_not_a_drill_and_routed_as_before() -> None:
    pipeline = Pipeline()
    pipeline.put(drill_event("IMPAIRED", START, source="aws.ecs"))
    [root] = pipeline.sent("slack", "post")
    assert root.receiver == "gpu-alerts" and "DRILL" not in root.text
    record = pipeline.store.load(TARGET.container_instance_arn)
    assert record is not None
    assert incident_labels(pipeline.service.derive(record).incidents[0])["drill"] == "false"


# --- Hops ----------------------------------------------------------------------------------------------


def record_with(incident_id: str, *, status: str = "OPEN", deliveries: list[Delivery] | None = None) -> InstanceRecord:
    record = InstanceRecord(TARGET.record_arn, TARGET.instance_ref())
    record.incidents["ACCELERATED_COMPUTE"] = [
        KnownIncident(incident_id, "ACCELERATED_COMPUTE", START, ["drill-slack", "drill-pagerduty"], status=status)
    ]
    for delivery in deliveries or []:
        record.deliveries[(delivery.receiver, delivery.subject)] = delivery
    return record


INCIDENT = TARGET.incident_id(START)
SUBJECT = pagerduty_subject(TARGET.fingerprint)


def test_the_incident_id_is_the_one_the_router_gives() -> None:
    pipeline = Pipeline()
    pipeline.put(drill_event("IMPAIRED", START))
    record = pipeline.store.load(TARGET.record_arn)
    assert record is not None and [k.id for k in record.incidents["ACCELERATED_COMPUTE"]] == [INCIDENT]


def test_no_record_reaches_no_hop() -> None:
    seen = observe(None, INCIDENT, SUBJECT, RECEIVERS)
    assert not any(seen.reached.values())
    assert seen.why_not[Hop.INCIDENT] == "no incident in the incidents table"


def test_hops_are_reached_as_the_table_shows_them() -> None:
    root = Delivery("drill-slack", INCIDENT, channel="C1", ts="1.0")
    trigger = Delivery("drill-pagerduty", SUBJECT, alert="trigger", incident=INCIDENT)
    opened = observe(record_with(INCIDENT), INCIDENT, SUBJECT, RECEIVERS)
    assert opened.reached == {Hop.INCIDENT: True, Hop.SLACK: False, Hop.PAGERDUTY: False, Hop.RESOLVE: False}
    assert opened.why_not[Hop.SLACK] == "no Slack root for drill-slack"
    paged = observe(record_with(INCIDENT, deliveries=[root, trigger]), INCIDENT, SUBJECT, RECEIVERS)
    assert paged.reached == {Hop.INCIDENT: True, Hop.SLACK: True, Hop.PAGERDUTY: True, Hop.RESOLVE: False}
    resolved = Delivery("drill-pagerduty", SUBJECT, alert="resolve")
    closed = observe(record_with(INCIDENT, status="CLOSED", deliveries=[root, resolved]), INCIDENT, SUBJECT, RECEIVERS)
    assert all(closed.reached.values())


def test_a_trigger_for_another_incident_is_not_this_drills_page() -> None:
    other = Delivery("drill-pagerduty", SUBJECT, alert="trigger", incident="drill/my-cluster/abc123/X@earlier")
    seen = observe(record_with(INCIDENT, deliveries=[other]), INCIDENT, SUBJECT, RECEIVERS)
    assert not seen.reached[Hop.PAGERDUTY]
    assert seen.why_not[Hop.PAGERDUTY] == "no trigger sent to drill-pagerduty"


def test_a_closed_incident_whose_page_was_not_resolved_is_not_resolved() -> None:
    trigger = Delivery("drill-pagerduty", SUBJECT, alert="trigger", incident=INCIDENT)
    seen = observe(record_with(INCIDENT, status="CLOSED", deliveries=[trigger]), INCIDENT, SUBJECT, RECEIVERS)
    assert not seen.reached[Hop.RESOLVE]
    assert "PagerDuty was not sent its resolve" in seen.why_not[Hop.RESOLVE]


def test_a_routing_file_that_sends_drills_to_no_pager_fails_that_hop_and_says_why() -> None:
    seen = observe(record_with(INCIDENT), INCIDENT, SUBJECT, Receivers(frozenset({"drill-slack"}), frozenset()))
    assert seen.why_not[Hop.PAGERDUTY] == "routed to no PagerDuty receiver (receivers: drill-slack, drill-pagerduty)"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def scripted(reached_at: dict[Hop, float], clock: FakeClock) -> Any:
    """An observation function: each hop is reached from its time on."""

    def look() -> Observation:
        reached = {hop: clock.now >= at for hop, at in reached_at.items()}
        return Observation(reached, {hop: f"{hop.value} not yet" for hop in Hop})

    return look


TIMEOUTS = dict.fromkeys(Hop, 10.0)


def test_a_hop_that_times_out_is_named_and_the_next_keeps_its_own_latency() -> None:
    clock = FakeClock()
    look = scripted({Hop.INCIDENT: 100.5, Hop.SLACK: 1e9, Hop.PAGERDUTY: 101.0}, clock)
    results = follow(
        [Hop.INCIDENT, Hop.SLACK, Hop.PAGERDUTY],
        look,
        started=100.0,
        timeouts=TIMEOUTS,
        clock=clock,
        sleep=clock.sleep,
        poll=0.5,
    )
    assert [(r.hop, r.ok, r.seconds) for r in results] == [
        (Hop.INCIDENT, True, 0.5),
        (Hop.SLACK, False, None),
        (Hop.PAGERDUTY, True, 1.0),
    ]
    assert results[1].detail == "slack not yet" and results[1].timeout == 10.0


def test_no_incident_ends_the_drill_there() -> None:
    clock = FakeClock()
    results = follow(
        [Hop.INCIDENT, Hop.SLACK, Hop.PAGERDUTY],
        scripted({Hop.INCIDENT: 1e9}, clock),
        started=100.0,
        timeouts=TIMEOUTS,
        clock=clock,
        sleep=clock.sleep,
        poll=1.0,
    )
    assert [(r.hop, r.ok) for r in results] == [(Hop.INCIDENT, False), (Hop.SLACK, False), (Hop.PAGERDUTY, False)]
    assert clock.now == pytest.approx(110.0)  # waited the incident's timeout, no more


def test_the_report_names_the_failed_hop_and_exits_1() -> None:
    report = DrillReport(TARGET, INCIDENT)
    report.hops = [
        HopResult(Hop.EVENT, True, 0.04),
        HopResult(Hop.INCIDENT, True, 1.25),
        HopResult(Hop.SLACK, False, None, 30.0, "no Slack root for drill-slack"),
        HopResult(Hop.PAGERDUTY, True, 1.5),
        HopResult(Hop.RESOLVE, True, 0.75),
    ]
    text = render_report(report)
    assert report.exit_status == 1
    assert "  3. slack     Slack root posted             FAILED  after 30s: no Slack root for drill-slack\n" in text
    assert "  5. resolve   resolved                      ok         0.8s since the OK\n" in text
    assert text.endswith("Drill FAILED at: slack\n")


def test_a_report_with_every_hop_passes() -> None:
    report = DrillReport(TARGET, INCIDENT, [HopResult(hop, True, 0.1) for hop in Hop])
    assert report.exit_status == 0 and render_report(report).endswith("Drill passed: every hop reached.\n")


# --- The DCGM drill ------------------------------------------------------------------------------------


def test_the_recovery_report_prints_each_milestone_beside_the_reference() -> None:
    injected = datetime(2026, 4, 11, 6, 6, 15, tzinfo=UTC)
    report = RecoveryReport("gpu-test", "ci-1", injected)
    report.reached = {
        Milestone.IMPAIRED: injected + timedelta(minutes=2, seconds=1),
        Milestone.PAGED: injected + timedelta(minutes=2, seconds=4),
        Milestone.DRAINING: injected + timedelta(minutes=3, seconds=10),
    }
    report.missing = {Milestone.REPLACEMENT: "not seen within 1800s"}
    text = render_recovery(report)
    assert "  to IMPAIRED                             2m01.0s   about 2m00.0s\n" in text
    assert "  to the page                             2m04.0s   —\n" in text
    assert "  to a replacement registered         not reached   about 4m00.0s\n" in text
    assert "  NOT REACHED to a replacement registered: not seen within 1800s\n" in text
    assert report.exit_status == 1


def test_the_injector_is_privileged_in_the_host_pid_namespace_and_reserves_no_gpu_or_cpu() -> None:
    definition = injector_task_definition(inject_command(79))
    [container] = definition["containerDefinitions"]
    assert definition["family"] == INJECTOR_FAMILY
    assert (definition["pidMode"], container["privileged"], container["cpu"]) == ("host", True, 0)
    assert "resourceRequirements" not in container
    assert container["command"] == [
        "dcgmi", "test", "--inject", "--gpuid", "0", "-f", "230", "-v", "79",
        "--host", "unix:///hostdcgm/nv-hostengine",
    ]  # fmt: skip
    assert definition["volumes"] == [{"name": "host-dcgm", "host": {"sourcePath": "/run/nvidia-dcgm"}}]
    assert container["mountPoints"] == [{"sourceVolume": "host-dcgm", "containerPath": "/hostdcgm"}]
