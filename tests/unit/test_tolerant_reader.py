"""A tolerant reader: only what names the instance and the check is required. Any other field of an event's detail
that is missing, of another JSON type, unparseable or out of range is read as absent (counted as SchemaDrift, with a
log line), and the fault still pages; times and numbers are bounded where the event is parsed, so nothing one event
holds reaches arithmetic or storage, nor makes another event fail.

Through AlertService with the in-memory store and the recording channels, as the router runs it."""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any

import pytest
from pydantic import ValidationError

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.events.ecs import (
    Container,
    HealthChangeDetail,
    HealthCheck,
    InstanceStateDetail,
    TaskStateDetail,
    Tolerant,
)
from fault_responder.events.envelope import MAX_COUNT
from fault_responder.events.parse import parse_ecs_event
from fault_responder.events.xid import parse_xid
from fault_responder.incidents import lifecycle
from fault_responder.noise.fleet import group_arn
from fault_responder.noise.policy import Policy
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Grouping, Router, load_routing
from tests.conftest import EVENTS, health_check, load_event, vary

NOW = datetime(2026, 12, 1, tzinfo=UTC)
XID79 = "incident-xid79/01-impaired-xid79.json"
XID79_KEY = "gpu-inference/f957585523c3d58c95844b6b2d8ce234/ACCELERATED_COMPUTE"


class World:
    """The router's AlertService on the in-memory store, the default routing file and recording channels."""

    def __init__(self, threshold: int | None = None) -> None:
        routing = load_routing("default.yaml")
        self.now = NOW
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        grouping = routing.grouping if threshold is None else Grouping(threshold=threshold)
        receivers = frozenset(name for name, receiver in routing.receivers.items() if receiver.pagerduty is not None)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(),
            clock=self.clock,
            grouping=grouping,
            policy=Policy(pagerduty_receivers=receivers),
        )

    def clock(self) -> datetime:
        return self.now

    def sent(self, *, targets: bool = True) -> list[tuple[str, ...]]:
        """What was sent, in a stable order (each receiver is sent to from its own thread)."""
        return sorted((s.service, s.action, str(s.receiver), s.target if targets else "") for s in self.channels.sent)

    def pages_opened(self) -> int:
        opened, open_keys = 0, set()
        for sent in self.channels.sent:
            if sent.service == "pagerduty" and sent.action == "trigger" and sent.target not in open_keys:
                opened += 1
                open_keys.add(sent.target)
            elif sent.service == "pagerduty" and sent.action == "resolve":
                open_keys.discard(sent.target)
        return opened


def counted(out: str, metric: str) -> list[str]:
    """The dimension value of every `metric` count in the EMF lines Powertools printed."""
    values = []
    for line in out.splitlines():
        if line.startswith('{"_aws"'):
            emf = json.loads(line)
            [directive] = emf["_aws"]["CloudWatchMetrics"]
            if directive["Metrics"][0]["Name"] == metric:
                [[dimension]] = directive["Dimensions"]
                values.append(emf[dimension])
    return values


def drift_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "fault_responder.events.ecs" and r.getMessage().startswith("schema")]


# --- Every field of AWS's samples but the required ones, mutated three ways ----------------------------------


REQUIRED = {
    "ECS Container Instance Health Change": {"clusterArn", "containerInstanceArn"},
    "ECS Container Instance State Change": {"clusterArn", "containerInstanceArn", "status"},
    "ECS Task State Change": {"clusterArn", "containerInstanceArn", "taskArn", "lastStatus"},
}
REQUIRED_IN_A_CHECK = {"type", "status"}
MODELS: dict[str, type[Tolerant]] = {
    "ECS Container Instance Health Change": HealthChangeDetail,
    "ECS Container Instance State Change": InstanceStateDetail,
    "ECS Task State Change": TaskStateDetail,
}
# ECS's samples: the tolerant models read them. CloudWatch's alarm events are read strictly (a hostile one is
# dead-lettered: tests/unit/test_alarm_contributors.py, tests/unit/test_alarms.py).
SAMPLES = sorted(
    path.name
    for path in (EVENTS / "aws-docs").glob("*.json")
    if json.loads(path.read_text(encoding="utf-8"))["detail-type"] in MODELS
)
_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:?\d\d)?")


def fields_of(sample: str) -> Iterator[tuple[Any, ...]]:
    """The path of every field of the sample's detail (a health check's and a container's too) but the required."""
    event = load_event(f"aws-docs/{sample}")
    detail = event["detail"]
    for key in detail:
        if key not in REQUIRED[event["detail-type"]]:
            yield (key,)
    for key in (detail.get("healthChecks") or [{}])[0]:
        if key not in REQUIRED_IN_A_CHECK:
            yield ("healthChecks", 0, key)
    for key in (detail.get("containers") or [{}])[0]:
        yield ("containers", 0, key)


def another_type(value: Any) -> Any:
    if isinstance(value, bool):
        return "true"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return 7
    if isinstance(value, list):
        return {"unexpected": value[:1]}
    return ["unexpected"]  # an object, or null


def unparseable(value: Any) -> Any:
    if isinstance(value, bool):
        return 2
    if isinstance(value, int | float):
        return 10**40  # a number no version, count or code can be
    if isinstance(value, str):
        return "not a time" if _ISO_TIME.fullmatch(value) else "\x00\x1f"
    return json.dumps(value)  # a list or an object sent as its JSON text


def mutated(sample: str, path: tuple[Any, ...], way: str) -> dict[str, Any]:
    event = load_event(f"aws-docs/{sample}")
    parent = event["detail"]
    for step in path[:-1]:
        parent = parent[step]
    if way == "missing":
        del parent[path[-1]]
    elif way == "another JSON type":
        parent[path[-1]] = another_type(parent[path[-1]])
    else:
        parent[path[-1]] = unparseable(parent[path[-1]])
    return event


def modelled(detail_type: str, path: tuple[Any, ...]) -> bool:
    nested: dict[str, type[Tolerant]] = {"healthChecks": HealthCheck, "containers": Container}
    model = nested[path[0]] if len(path) > 1 else MODELS[detail_type]
    name = path[-1]
    return any((field.alias or field_name) == name for field_name, field in model.model_fields.items())


@cache
def unmutated(sample: str, *, targets: bool) -> tuple[tuple[str, ...], ...]:
    world = World()
    world.service.handle(load_event(f"aws-docs/{sample}"))
    return tuple(world.sent(targets=targets))


CASES = [
    pytest.param(sample, path, way, id=f"{sample}:{'.'.join(map(str, path))}:{way}")
    for sample in SAMPLES
    for path in fields_of(sample)
    for way in ("missing", "another JSON type", "unparseable")
]


@pytest.mark.parametrize(("sample", "path", "way"), CASES)
def test_any_field_but_the_required_may_drift_and_the_fault_still_pages(
    sample: str, path: tuple[Any, ...], way: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one of AWS's samples with one field of its detail missing, of another JSON type, or unparseable
    event = mutated(sample, path, way)
    world = World()

    # When the router handles it
    world.service.handle(event)

    # Then it is handled as the sample is: a fault pages the same receivers (a Health Change whose checks cannot be
    # read pages as a fault of an unknown check), and a state or task change tells what the sample tells
    changed_check = path == ("healthChecks",)
    assert tuple(world.sent(targets=not changed_check)) == unmutated(sample, targets=not changed_check)
    if load_event(f"aws-docs/{sample}")["detail"].get("overallStatus") == "IMPAIRED":
        assert world.pages_opened() == 1
    # and a field we read that came as another type is reported as schema drift, by its path
    if way == "another JSON type" and modelled(event["detail-type"], path):
        field = ".".join(str(step) for step in ("detail", *path) if not isinstance(step, int))
        assert field in counted(capsys.readouterr().out, "SchemaDrift")


def test_every_sample_has_fields_to_mutate_beyond_the_required() -> None:
    # (So the test above covers each kind of event: the health checks' own fields and the containers' too.)
    paths = {sample: list(fields_of(sample)) for sample in SAMPLES}
    assert ("healthChecks", 0, "lastStatusChange") in paths["health-change-accelerated-compute-xid46.json"]
    assert ("version",) in paths["instance-state-change-active.json"]
    assert ("containers", 0, "name") in paths["task-state-change-ec2-running.json"]
    assert all(len(found) >= 5 for found in paths.values())


# --- Go's zero time in one event never poisons its group -----------------------------------------------------

START = datetime(2026, 4, 11, 1, 0, tzinfo=UTC)
CLUSTER_GROUP = (
    ("cluster", "my-cluster"),
    ("capacity_provider", "my-capacity-provider"),
    ("check_type", "ACCELERATED_COMPUTE"),
)


def impaired(number: int, at: datetime, last_status_change: str | None = None) -> dict[str, Any]:
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event = health_check(
        load_event("aws-docs/health-change-accelerated-compute-xid46.json"),
        lastStatusChange=last_status_change or stamp,
        lastUpdated=stamp,
        statusReason="XID_79",
    )
    return vary(
        event,
        event_id=f"i{number}",
        time=stamp,
        containerInstanceArn=f"arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/{number:032x}",
        ec2InstanceId=f"i-{number:017x}",
    )


@pytest.mark.parametrize("poison", ["0001-01-01T00:00:00Z", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59Z"])
def test_a_check_time_out_of_range_never_poisons_the_group_of_its_instance(poison: str) -> None:
    # Given a Health Change whose lastStatusChange is Go's zero time (or as far from now), grouped with 3 as threshold
    world = World(threshold=3)
    world.now = START + timedelta(minutes=5)
    first = impaired(0, START, last_status_change=poison)

    # When it is handled, then five more instances of the same cluster, provider and check fail
    world.service.handle(first)
    for number in range(1, 6):
        world.service.handle(impaired(number, START + timedelta(seconds=number)))

    # Then every event was handled (none raised, so none would be dead-lettered) and paged as grouping says: the
    # first two instances alone, then one fleet incident naming all six
    assert world.pages_opened() == 3
    group = world.service.load_fleets(group_arn(CLUSTER_GROUP))
    assert group is not None
    [fleet] = world.service.derive_fleet(group).incidents
    assert fleet.is_open and fleet.fleet is not None and (fleet.fleet.total, fleet.fleet.open) == (6, 6)
    # and the poisoned check took place when its event says, not in year 1
    record = world.store.load(first["detail"]["containerInstanceArn"])
    assert record is not None
    assert [fact.at for fact in record.health["ACCELERATED_COMPUTE"]] == [START]


@pytest.mark.parametrize(
    ("time", "reason"),
    [
        ("0001-01-01T00:00:00Z", "before 2015-01-01"),
        ("1970-01-01T00:00:00Z", "before 2015-01-01"),
        ("three days from now", "after the event was received"),
        (1_700_000_000, "ISO 8601 text, not a JSON number"),
    ],
)
def test_an_event_time_out_of_range_is_refused_at_once_with_the_reason(time: Any, reason: str) -> None:
    # Given an event whose own time (the time of every fact without one) is out of range
    if time == "three days from now":
        time = (datetime.now(UTC) + timedelta(days=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = vary(load_event(XID79), time=time)

    # When it is parsed, Then it is refused at once (the router dead-letters it as malformed), saying why
    with pytest.raises(ValidationError, match=reason):
        parse_ecs_event(event)


def test_detail_times_are_bounded_by_the_events_own_time_so_a_replay_reads_the_same() -> None:
    # Given an old event (AWS's 2016 sample) whose updatedAt is an hour after its time, and one a week after it
    sample = load_event("aws-docs/instance-state-change-active.json")
    soon = vary(sample, updatedAt="2016-12-06T17:41:06Z")
    late = vary(sample, updatedAt="2016-12-13T16:41:06Z")

    # When they are parsed years later, Then the first is read and the second is absent
    assert parse_ecs_event(soon).detail.updated_at == datetime(2016, 12, 6, 17, 41, 6, tzinfo=UTC)
    assert parse_ecs_event(late).detail.updated_at is None


# --- Strict where it need not be: the XID 79 fault still pages ----------------------------------------------


def _without_overall_status() -> dict[str, Any]:
    event = load_event(XID79)
    del event["detail"]["overallStatus"]
    return event


@pytest.mark.parametrize(
    ("event", "field"),
    [
        (_without_overall_status(), "detail.overallStatus"),
        (vary(load_event(XID79), capacityProviderName={"name": "gpu-p5-managed"}), "detail.capacityProviderName"),
        (health_check(load_event(XID79), lastStatusChange="27/08/2026 14:03"), "detail.healthChecks.lastStatusChange"),
    ],
    ids=["overallStatus missing", "capacityProviderName not a string", "a check time that does not parse"],
)
def test_the_xid79_fault_pages_whatever_else_its_detail_holds(
    event: dict[str, Any], field: str, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given the XID 79 Health Change with a field we only show drifted
    world = World()

    # When the router handles it
    with caplog.at_level(logging.WARNING):
        world.service.handle(event)

    # Then the fault pages: its PagerDuty alert and its Slack root
    assert ("pagerduty", "trigger", "gpu-oncall", XID79_KEY) in world.sent()
    assert any(sent[:3] == ("slack", "post", "gpu-alerts") for sent in world.sent())
    # and the drift is counted by the field's path, and logged once naming the field and the event
    assert counted(capsys.readouterr().out, "SchemaDrift") == [field]
    [line] = drift_lines(caplog)
    assert line.__dict__["fields"] == [field] and line.__dict__["event_id"] == event["id"]


def test_a_health_change_whose_checks_and_status_cannot_be_read_still_pages() -> None:
    # Given an IMPAIRED event whose healthChecks and overallStatus both drifted away (renamed, say)
    event = vary(load_event(XID79), healthChecks="ACCELERATED_COMPUTE: IMPAIRED")
    del event["detail"]["overallStatus"]
    world = World()

    # When it is handled, Then it pages as a fault of an unknown check rather than being silenced
    world.service.handle(event)
    assert world.pages_opened() == 1


def test_a_check_without_its_type_or_status_is_refused_at_once() -> None:
    # Given a check that does not say which check failed, or how (the two things a check must say)
    for broken in ({"status": "IMPAIRED"}, {"type": "ACCELERATED_COMPUTE", "status": ["IMPAIRED"]}):
        event = vary(load_event(XID79), healthChecks=[broken])

        # When it is parsed, Then it is refused with the reason (never guessed at)
        with pytest.raises(ValidationError, match="healthChecks"):
            parse_ecs_event(event)


# --- Numbers: bounded, never an exception on every receive ------------------------------------------------


@pytest.mark.parametrize("version", [10**40, -1, MAX_COUNT + 1, 1.5, "14801", True])
def test_a_state_change_version_out_of_range_is_read_as_absent(
    version: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a manual drain whose detail.version is no whole number in 0..2**53-1
    event = vary(load_event("state/draining-manual.json"), version=version)
    world = World()

    # When the router handles it
    world.service.handle(event)

    # Then the drain is recorded without a version (ordered by its time, as ECS's unversioned facts are) and told
    record = world.store.load(event["detail"]["containerInstanceArn"])
    assert record is not None and [(s.status, s.version) for s in record.statuses] == [("DRAINING", None)]
    assert world.sent(targets=False) == list(unmutated_manual_drain())
    assert counted(capsys.readouterr().out, "SchemaDrift") == ["detail.version"]


@cache
def unmutated_manual_drain() -> tuple[tuple[str, ...], ...]:
    world = World()
    world.service.handle(load_event("state/draining-manual.json"))
    return tuple(world.sent(targets=False))


def test_the_largest_version_is_kept() -> None:
    event = vary(load_event("state/draining-manual.json"), version=MAX_COUNT)
    parsed = parse_ecs_event(event)
    assert parsed.detail.version == MAX_COUNT


@pytest.mark.parametrize(
    ("field", "attribute", "value"),
    [
        ("runningTasksCount", "running_tasks_count", 10**40),
        ("runningTasksCount", "running_tasks_count", -3),
        ("agentConnected", "agent_connected", "yes"),
        ("updatedAt", "updated_at", "0001-01-01T00:00:00Z"),
    ],
)
def test_other_state_fields_out_of_range_are_absent(field: str, attribute: str, value: Any) -> None:
    # Given a manual drain with one field out of its range (or of another type), When it is parsed
    detail = parse_ecs_event(vary(load_event("state/draining-manual.json"), **{field: value})).detail

    # Then that field is absent, and the status still read
    assert isinstance(detail, InstanceStateDetail)
    assert getattr(detail, attribute) is None and detail.status == "DRAINING"


def test_an_exit_code_out_of_range_makes_the_container_absent_never_the_task() -> None:
    # Given a task stopped by a Spot interruption whose container's exit code is no 32-bit code
    event = load_event("task/stopped-spot-interruption.json")
    event["detail"]["containers"][0]["exitCode"] = 2**40
    world = World()

    # When it is handled, Then the exit code is absent, and the stop is told as the sample's is
    detail = parse_ecs_event(copy.deepcopy(event)).detail
    assert isinstance(detail, TaskStateDetail) and detail.containers[0].exit_code is None
    world.service.handle(event)
    unchanged = World()
    unchanged.service.handle(load_event("task/stopped-spot-interruption.json"))
    assert world.sent() == unchanged.sent()


@pytest.mark.parametrize(
    ("reason", "xid"),
    [("XID_79", 79), ("XID_99999", 99999), ("XID_" + "9" * 5000, None), ("XID_123456", None)],
)
def test_an_xid_is_at_most_five_digits(reason: str, xid: int | None) -> None:
    assert parse_xid(reason) == xid
