"""The alarms' reconciliation (fault_responder.operations.alarm_reconcile) over the alert service, with an in-memory
store and what CloudWatch answers: a GPU alarm whose contributor events were lost pages each hot cluster once, with
the identity its contributor event would have given it; the events arriving before, after, late or twice page
nothing more; an alarm whose contributors cannot be read is paged as a whole, resolved by the alarm's OK or once its
contributors are known; an own-health alarm whose event was lost is found too; the alarm's OK leaves nothing open."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.incidents.alarms import FOUND_CONTRIBUTOR, FOUND_UNKNOWN_CLUSTERS
from fault_responder.incidents.record import FOUND_BY_SWEEP, InstanceRecord, KnownIncident
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.operations import alarm_reconcile
from fault_responder.operations.alarm_reconcile import (
    AlarmReconciler,
    Contributors,
    ContributorsUnavailableError,
    ObservedAlarm,
    ObservedContributor,
    Transition,
    UnreadableAlarm,
    accounted_for,
    past_episodes,
)
from fault_responder.routing.router import Router, load_routing
from tests.conftest import load_event

PREFIX = "gpu-fault-responder."
TEMPERATURE = "gpu-fault-responder.gpu-temperature"
ROUTER_ERRORS = "gpu-fault-responder.router-errors"
START = datetime(2026, 4, 11, 2, 14, 5, 318000, tzinfo=UTC)
THREE_OF_ELEVEN = "Threshold Crossed: 3 out of 11 time series evaluated to ALARM"


def arn(name: str) -> str:
    return f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{name}"


def key(contributor: str | None = None, name: str = TEMPERATURE) -> str:
    """The PagerDuty dedup key of the alarm, or of one of its contributors (`*`: the alarm paged as a whole)."""
    return f"cloudwatch-alarm/us-west-2/{name}" + (f"/{contributor}" if contributor else "")


@dataclass(frozen=True)
class Hot:
    """A cluster whose hottest GPU is above 90 °C: one contributor of the temperature alarm."""

    id: str
    cluster: str
    value: float
    since: datetime

    @property
    def reason(self) -> str:
        return (
            "Threshold Crossed: 1 datapoint was greater than the threshold (90.0). The most recent datapoint which "
            f"crossed the threshold: [{self.value} (11/04/26 02:13:00)]."
        )

    @property
    def record(self) -> str:
        return f"{arn(TEMPERATURE)}#contributor/{self.id}"

    def observed(self) -> ObservedContributor:
        return ObservedContributor(self.id, (("ClusterName", self.cluster),), self.reason, self.since)


TRAINING = Hot("8f3a2c1d9e4b7a60", "gpu-training", 93.0, START + timedelta(milliseconds=84))
INFERENCE = Hot("1c7e5b9d3f2a8046", "gpu-inference", 91.5, START + timedelta(milliseconds=293))
BATCH = Hot("a1b2c3d4e5f60718", "gpu-batch", 95.0, START + timedelta(seconds=60))
THREE = (TRAINING, INFERENCE, BATCH)
UNKNOWN = f"{arn(TEMPERATURE)}#contributor/*"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}+0000"


def contributor_event(hot: Hot, state: str = "ALARM", at: datetime | None = None, copy_of: str = "") -> dict[str, Any]:
    """The contributor's state change as CloudWatch puts it on the bus (copy_of: the same event id again)."""
    at = at or hot.since
    raw = load_event("alarm/gpu-temperature-contributor-alarm.json")
    raw["id"] = copy_of or f"{hot.id}-{state}-{at.timestamp():.3f}"
    raw["time"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["detail"]["alarmContributor"] = {"id": hot.id, "attributes": {"ClusterName": hot.cluster}}
    reason = hot.reason if state == "ALARM" else "Threshold Crossed: no datapoint was greater than the threshold."
    raw["detail"]["state"] = {"value": state, "reason": reason, "timestamp": _stamp(at)}
    return raw


def alarm_event(
    name: str, state: str, at: datetime, *, previous: str, previous_at: datetime, reason: str = ""
) -> dict[str, Any]:
    raw = load_event("alarm/router-errors-alarm.json")
    raw["id"] = f"{name}-{state}-{at.timestamp():.3f}"
    raw["time"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    raw["resources"] = [arn(name)]
    detail = raw["detail"]
    detail["alarmName"] = name
    detail["state"] = {"value": state, "reason": reason or f"{state} now", "timestamp": _stamp(at)}
    detail["previousState"] = {"value": previous, "reason": f"{previous} before", "timestamp": _stamp(previous_at)}
    detail.pop("configuration", None)
    return raw


@dataclass
class CloudWatch:
    """What CloudWatch answers: the alarms, each one's contributors in ALARM (or why they cannot be read), and their
    history."""

    alarms: dict[str, ObservedAlarm] = field(default_factory=dict)
    contributing: dict[str, list[ObservedContributor]] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)
    transitions: dict[str, list[Transition]] = field(default_factory=dict)
    unreadable: list[UnreadableAlarm] = field(default_factory=list)
    broken: bool = False
    now: datetime = START
    asked: list[str] = field(default_factory=list)

    def set(self, name: str, state: str, since: datetime, reason: str | None = None, *hot: Hot) -> None:
        self.alarms[name] = ObservedAlarm(name, arn(name), state, reason, since, since)
        if hot or state != "ALARM":
            self.contributing[name] = [h.observed() for h in hot]

    def alarms_with(self, prefix: str) -> Iterator[ObservedAlarm | UnreadableAlarm]:
        if self.broken:
            raise RuntimeError("DescribeAlarms: ThrottlingException")
        yield from self.unreadable
        yield from (alarm for name, alarm in sorted(self.alarms.items()) if name.startswith(prefix))

    def contributors(self, name: str, limit: int) -> Contributors:
        self.asked.append(name)
        if name in self.refused:
            raise ContributorsUnavailableError(self.refused[name])
        listed = self.contributing.get(name, [])
        if len(listed) > limit:
            return Contributors(tuple(listed[:limit]), self.now, complete=False, why=f"more than {limit} in ALARM")
        return Contributors(tuple(listed), self.now)

    def history(self, name: str, since: datetime, *, contributors: bool, limit: int) -> list[Transition]:
        items = [
            t for t in self.transitions.get(name, []) if t.at >= since and (t.contributor is not None) == contributors
        ]
        return sorted(items, key=lambda t: t.at, reverse=True)[:limit]


class _Source:
    """The AlarmSource view of a CloudWatch (its `alarms` is a method there)."""

    def __init__(self, cloudwatch: CloudWatch) -> None:
        self.cloudwatch = cloudwatch

    def alarms(self, prefix: str) -> Iterator[ObservedAlarm | UnreadableAlarm]:
        return self.cloudwatch.alarms_with(prefix)

    def contributors(self, name: str, limit: int) -> Contributors:
        return self.cloudwatch.contributors(name, limit)

    def history(self, name: str, since: datetime, *, contributors: bool, limit: int) -> list[Transition]:
        return self.cloudwatch.history(name, since, contributors=contributors, limit=limit)


class World:
    def __init__(self) -> None:
        self.now = START + timedelta(minutes=5)
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        self.cloudwatch = CloudWatch(now=self.now)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels, clock=lambda: self.now),
            lifecycle.Settings(),
            clock=lambda: self.now,
        )

    def later(self, minutes: float) -> None:
        self.now += timedelta(minutes=minutes)
        self.cloudwatch.now = self.now

    def reconcile(self, *, max_findings: int = 1000) -> dict[str, int]:
        reconciler = AlarmReconciler(
            source=_Source(self.cloudwatch),
            records=self.store,
            observe=lambda facts, left: self.service.observe(facts, seconds_left=left),
            prefix=PREFIX,
            redeliver=lambda record, left: self.service.reconcile(record, seconds_left=left),
            max_findings=max_findings,
        )
        return reconciler.run(started=self.now, seconds_left=60)

    def handle(self, event: dict[str, Any]) -> dict[str, Any]:
        return self.service.handle(event)

    def sent(self, action: str, target: str | None = None, service: str = "pagerduty") -> int:
        return sum(
            1
            for s in self.channels.sent
            if s.service == service and s.action == action and (target is None or s.target == target)
        )

    def record(self, record_arn: str) -> InstanceRecord:
        record = self.store.load(record_arn)
        assert record is not None, record_arn
        return record

    def incidents(self, record_arn: str) -> list[KnownIncident]:
        record = self.store.load(record_arn)
        return [k for known in (record.incidents.values() if record else []) for k in known]

    def still_open(self, *record_arns: str) -> list[str]:
        return [k.id for record_arn in record_arns for k in self.incidents(record_arn) if k.status == "OPEN"]


def _hot_alarm(world: World, *hot: Hot, reason: str = THREE_OF_ELEVEN) -> None:
    world.cloudwatch.set(TEMPERATURE, "ALARM", START, reason, *hot)


ALL_RECORDS = (arn(TEMPERATURE), UNKNOWN, *(hot.record for hot in THREE))


# --- Contributor events lost --------------------------------------------------------------------------------


def test_a_gpu_alarm_whose_contributor_events_were_lost_pages_every_hot_cluster_once() -> None:
    # Given the temperature alarm in ALARM with 3 of its 11 clusters above 90 °C, and no event reached the responder
    world = World()
    _hot_alarm(world, *THREE)

    # When the reconciliation runs twice
    first = world.reconcile()
    second = world.reconcile()

    # Then each hot cluster was paged once and posted once, naming its cluster, marked as found by the sweep
    assert first["alarm_missed_contributor"] == 3 and second["alarm_missed_contributor"] == 0
    for hot in THREE:
        assert world.sent("trigger", key(hot.id)) == 1
        (incident,) = world.incidents(hot.record)
        assert incident.status == "OPEN" and incident.found == FOUND_CONTRIBUTOR
        assert f"on cluster {hot.cluster}" in (incident.title or "")
    assert world.sent("post", service="slack") == 3
    # and the alarm's own ALARM is recorded, told to no one, as its event would have made it
    (own,) = world.incidents(arn(TEMPERATURE))
    assert own.receivers == [] and own.found == FOUND_BY_SWEEP
    assert world.sent("trigger") == 3
    assert world.store.load(UNKNOWN) is None


def test_an_incident_the_sweep_opened_is_the_one_its_contributor_event_would_have_opened() -> None:
    # Given one world where the contributor event came, and one where the reconciliation found the contributor
    by_event, by_sweep = World(), World()
    by_event.handle(contributor_event(TRAINING))
    _hot_alarm(by_sweep, TRAINING, reason="Threshold Crossed: 1 out of 11 time series evaluated to ALARM")
    by_sweep.reconcile()

    # Then both incidents have the same id, fingerprint (dedup key) and title: a late event merges into it
    (event_made,) = by_event.incidents(TRAINING.record)
    (sweep_made,) = by_sweep.incidents(TRAINING.record)
    assert sweep_made.id == event_made.id
    assert sweep_made.title == event_made.title == "GPU temperature 93 °C on cluster gpu-training (threshold 90 °C)"
    assert sweep_made.fault_class == event_made.fault_class and sweep_made.severity == event_made.severity


@pytest.mark.parametrize("copies", [1, 2])
def test_contributor_events_after_the_sweep_late_or_twice_page_nothing_more(copies: int) -> None:
    # Given the reconciliation paged the three hot clusters
    world = World()
    _hot_alarm(world, *THREE)
    world.reconcile()
    sent = len(world.channels.sent)

    # When their contributor events arrive late, each `copies` times
    world.later(7)
    results = [world.handle(contributor_event(hot)) for hot in THREE for _ in range(copies)]

    # Then every one is already known: nothing is sent, and the incidents stay marked as found by the sweep
    assert all(result["ignored"] == "already known" for result in results)
    assert len(world.channels.sent) == sent
    assert all(world.incidents(hot.record)[0].found == FOUND_CONTRIBUTOR for hot in THREE)


def test_contributor_events_before_the_sweep_leave_it_only_the_cluster_no_event_told() -> None:
    # Given two clusters' contributor events came (one of them twice), the third's was lost
    world = World()
    world.handle(contributor_event(TRAINING))
    world.handle(contributor_event(TRAINING, copy_of="same"))
    world.handle(contributor_event(TRAINING, copy_of="same"))
    world.handle(contributor_event(INFERENCE))
    _hot_alarm(world, *THREE)

    # When the reconciliation runs
    tally = world.reconcile()

    # Then it pages the third cluster only: each cluster was paged exactly once, and only the third is marked found
    assert tally["alarm_missed_contributor"] == 1
    assert [world.sent("trigger", key(hot.id)) for hot in THREE] == [1, 1, 1]
    assert [world.incidents(hot.record)[0].found for hot in THREE] == [None, None, FOUND_CONTRIBUTOR]


def test_a_contributor_event_with_another_timestamp_than_the_answer_joins_the_incident_the_sweep_opened() -> None:
    # Given the reconciliation opened gpu-training's incident from DescribeAlarmContributors' timestamp
    world = World()
    _hot_alarm(world, TRAINING, reason="Threshold Crossed: 1 out of 11 time series evaluated to ALARM")
    world.reconcile()
    (opened,) = world.incidents(TRAINING.record)

    # When its contributor event arrives saying a moment earlier (another clock, another rounding)
    world.handle(contributor_event(TRAINING, at=TRAINING.since - timedelta(milliseconds=40)))

    # Then it is the same incident, paged once
    (after,) = world.incidents(TRAINING.record)
    assert after.id == opened.id and after.status == "OPEN"
    assert world.sent("trigger", key(TRAINING.id)) == 1


def test_a_contributor_the_answer_no_longer_lists_is_resolved_and_its_late_ok_adds_nothing() -> None:
    # Given the three clusters paged by the reconciliation
    world = World()
    _hot_alarm(world, *THREE)
    world.reconcile()

    # When gpu-training cooled down (CloudWatch lists the other two) and its OK event was lost too
    world.later(5)
    _hot_alarm(world, INFERENCE, BATCH)
    tally = world.reconcile()

    # Then its incident is resolved, its page resolved once; the other two stay open
    assert tally["alarm_recovered"] == 1
    assert world.sent("resolve", key(TRAINING.id)) == 1
    assert world.still_open(TRAINING.record) == []
    assert len(world.still_open(INFERENCE.record, BATCH.record)) == 2
    # and its OK event, arriving late with the moment it really cooled down, resolves nothing again
    world.handle(contributor_event(TRAINING, "OK", at=START + timedelta(minutes=7)))
    assert world.sent("resolve", key(TRAINING.id)) == 1
    assert world.sent("trigger", key(TRAINING.id)) == 1


def test_the_alarms_ok_leaves_nothing_open_when_no_contributor_ok_came() -> None:
    # Given the three clusters paged by the reconciliation
    world = World()
    _hot_alarm(world, *THREE)
    world.reconcile()

    # When the alarm goes OK: its own OK event arrives, its contributors' OK events are lost
    world.later(10)
    ok_at = world.now - timedelta(minutes=1)
    world.cloudwatch.set(TEMPERATURE, "OK", ok_at, "Threshold Crossed: no time series evaluated to ALARM")
    world.handle(alarm_event(TEMPERATURE, "OK", ok_at, previous="ALARM", previous_at=START))
    tally = world.reconcile()

    # Then every cluster's page is resolved once, and nothing of the alarm is open
    assert tally["alarm_recovered"] == 3
    assert [world.sent("resolve", key(hot.id)) for hot in THREE] == [1, 1, 1]
    assert world.still_open(*ALL_RECORDS) == []
    assert world.reconcile()["alarm_recovered"] == 0


# --- Contributors that cannot be read -------------------------------------------------------------------


def test_an_alarm_whose_contributors_cannot_be_read_is_paged_as_a_whole_saying_how_many_series() -> None:
    # Given the alarm in ALARM (3 of 11 series) and DescribeAlarmContributors refused
    world = World()
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered AccessDeniedException"

    # When the reconciliation runs twice
    first = world.reconcile()
    second = world.reconcile()

    # Then the alarm is paged once, as a whole, saying how many clusters are hot, that which ones is unknown, and why
    assert first["alarm_unknown_clusters"] == 1 and second["alarm_unknown_clusters"] == 0
    assert first["alarm_contributors_unavailable"] == 1
    assert world.sent("trigger") == 1 and world.sent("trigger", key("*")) == 1
    (page,) = [s for s in world.channels.sent if s.action == "trigger"]
    assert page.text.startswith("GPU temperature above the threshold on 3 of 11 clusters (which ones is unknown)")
    assert "AccessDeniedException" in page.body
    (incident,) = world.incidents(UNKNOWN)
    assert incident.found == FOUND_UNKNOWN_CLUSTERS and incident.severity == "critical"


def test_the_alarms_ok_event_resolves_the_page_as_a_whole_at_once() -> None:
    # Given the alarm paged as a whole
    world = World()
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "this SDK (botocore 1.35.99) has no DescribeAlarmContributors"
    world.reconcile()

    # When the alarm's OK event arrives (no reconciliation has run since)
    ok_at = START + timedelta(minutes=8)
    world.later(4)
    result = world.handle(alarm_event(TEMPERATURE, "OK", ok_at, previous="ALARM", previous_at=START))

    # Then the page is resolved by that event, once, and nothing of the alarm is open
    assert world.sent("resolve", key("*")) == 1
    assert any(name.endswith("(clusters unknown)") for name in result["receivers"])
    assert world.still_open(*ALL_RECORDS) == []
    # and a copy of the event resolves nothing again
    world.handle(alarm_event(TEMPERATURE, "OK", ok_at, previous="ALARM", previous_at=START))
    assert world.sent("resolve", key("*")) == 1


def test_an_alarms_ok_event_makes_no_record_when_it_was_never_paged_as_a_whole() -> None:
    world = World()
    world.handle(alarm_event(TEMPERATURE, "OK", START, previous="ALARM", previous_at=START - timedelta(minutes=3)))

    assert world.store.load(UNKNOWN) is None
    assert world.sent("trigger") == 0 and world.sent("post", service="slack") == 0


def test_the_page_as_a_whole_is_resolved_once_the_contributors_are_known_and_each_cluster_paged() -> None:
    # Given the alarm paged as a whole, its contributors refused
    world = World()
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered AccessDeniedException"
    world.reconcile()

    # When the permission is fixed and the reconciliation runs again
    world.later(5)
    del world.cloudwatch.refused[TEMPERATURE]
    tally = world.reconcile()

    # Then each cluster is paged, and the page as a whole is resolved: the clusters' own incidents name them
    assert tally["alarm_missed_contributor"] == 3 and tally["alarm_explained"] == 1
    assert [world.sent("trigger", key(hot.id)) for hot in THREE] == [1, 1, 1]
    assert world.sent("resolve", key("*")) == 1
    assert world.still_open(UNKNOWN) == []


def test_contributor_events_that_account_for_every_series_leave_the_alarm_unpaged() -> None:
    # Given every hot cluster's contributor event came, and the contributors cannot be read
    world = World()
    for hot in THREE:
        world.handle(contributor_event(hot))
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered AccessDeniedException"

    # When the reconciliation runs
    tally = world.reconcile()

    # Then the alarm is not paged as a whole: its 3 series in ALARM are the 3 open incidents
    assert tally["alarm_unknown_clusters"] == 0
    assert world.sent("trigger") == 3 and world.sent("trigger", key("*")) == 0


def test_the_page_as_a_whole_comes_back_when_the_series_are_no_longer_accounted_for_within_the_episode() -> None:
    # Given the alarm paged as a whole, then its three contributor events came (the page resolved: accounted for)
    world = World()
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered AccessDeniedException"
    world.reconcile()
    for hot in THREE:
        world.handle(contributor_event(hot))
    world.later(5)
    assert world.reconcile()["alarm_explained"] == 1
    world.service.sweep(seconds_left=60)  # (the minute sweep: the page, resolved and told, leaves the Open list)
    assert UNKNOWN not in set(world.store.open_records())

    # When gpu-batch's OK event comes while the alarm's reason still counts three series in ALARM
    world.handle(contributor_event(BATCH, "OK", at=world.now - timedelta(minutes=1)))
    world.later(5)
    tally = world.reconcile()

    # Then the alarm is paged as a whole again, from now: a new incident, a new page
    assert tally["alarm_unknown_clusters"] == 1
    first, second = sorted(world.incidents(UNKNOWN), key=lambda k: k.anchor)
    assert (first.status, second.status) == ("CLOSED", "OPEN") and second.anchor == world.now
    assert world.sent("trigger", key("*")) == 2


def test_fewer_contributor_incidents_than_series_in_alarm_page_the_alarm_saying_how_many_are_known() -> None:
    # Given one of the three hot clusters' events came
    world = World()
    world.handle(contributor_event(TRAINING))
    _hot_alarm(world, *THREE)
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered AccessDeniedException"

    # When the reconciliation runs
    world.reconcile()

    # Then the alarm is paged as a whole too, and says one of the series has an incident of its own
    (page,) = [s for s in world.channels.sent if s.action == "trigger" and s.target == key("*")]
    assert "1 of them has an incident of its own" in page.body


def test_more_contributors_than_a_run_reads_pages_those_read_and_the_alarm_for_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a run reads at most 2 contributors, and 3 are in ALARM
    monkeypatch.setattr(alarm_reconcile, "MAX_CONTRIBUTORS", 2)
    world = World()
    _hot_alarm(world, *THREE)

    # When the reconciliation runs
    tally = world.reconcile()

    # Then the two read are paged, the alarm is paged as a whole for the rest, and nothing is closed
    assert tally["alarm_missed_contributor"] == 2 and tally["alarm_unknown_clusters"] == 1
    assert world.sent("trigger", key("*")) == 1
    (page,) = [s for s in world.channels.sent if s.action == "trigger" and s.target == key("*")]
    assert "more than 2 in ALARM" in page.body and "2 of them have incidents of their own" in page.body
    assert world.sent("resolve") == 0


def test_an_alarm_whose_reason_counts_no_series_is_paged_as_a_whole_until_one_contributor_is_known() -> None:
    world = World()
    world.cloudwatch.set(TEMPERATURE, "ALARM", START, "Threshold Crossed: some series breached")
    world.cloudwatch.refused[TEMPERATURE] = "DescribeAlarmContributors answered ResourceNotFoundException"
    world.reconcile()

    (page,) = [s for s in world.channels.sent if s.action == "trigger"]
    assert page.text.startswith("GPU temperature above the threshold on clusters not known")


def test_an_alarm_in_alarm_whose_answer_lists_no_contributor_is_paged_as_a_whole_and_closes_nothing() -> None:
    # Given gpu-training's incident open (its event came), and CloudWatch listing no contributor of the alarm in ALARM
    # (an alarm that is not a GROUP BY query answers so, or an answer behind the alarm's state)
    world = World()
    world.handle(contributor_event(TRAINING))
    world.cloudwatch.set(TEMPERATURE, "ALARM", START, THREE_OF_ELEVEN)
    world.cloudwatch.contributing[TEMPERATURE] = []

    # When the reconciliation runs
    tally = world.reconcile()

    # Then gpu-training stays open, and the alarm is paged as a whole for the two series no incident accounts for
    assert tally["alarm_recovered"] == 0 and tally["alarm_unknown_clusters"] == 1
    assert len(world.still_open(TRAINING.record)) == 1
    (page,) = [s for s in world.channels.sent if s.action == "trigger" and s.target == key("*")]
    assert "DescribeAlarmContributors lists no contributor in ALARM" in page.body


# --- Own-health alarms ----------------------------------------------------------------------------------


def test_an_own_health_alarm_whose_event_was_lost_pages_once_and_its_lost_ok_resolves_it() -> None:
    # Given the router-errors alarm in ALARM, its event lost
    world = World()
    world.cloudwatch.set(ROUTER_ERRORS, "ALARM", START, "Threshold Crossed: 1 datapoint [2.0] was greater than 0.0")

    # When the reconciliation runs, its ALARM event then arrives late, and a second run follows
    first = world.reconcile()
    late = world.handle(
        alarm_event(ROUTER_ERRORS, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1))
    )
    world.reconcile()

    # Then it paged once, critical, marked found by the sweep; the late event added nothing
    assert first["alarm_missed_alarm"] == 1
    assert world.sent("trigger", key(name=ROUTER_ERRORS)) == 1
    assert late["ignored"] == "already known"
    (incident,) = world.incidents(arn(ROUTER_ERRORS))
    assert incident.found == FOUND_BY_SWEEP and incident.severity == "critical"
    # and when it went OK with that event lost too, the next run resolves it
    world.later(10)
    world.cloudwatch.set(ROUTER_ERRORS, "OK", world.now - timedelta(minutes=2), "Threshold Crossed: 0.0")
    assert world.reconcile()["alarm_recovered"] == 1
    assert world.sent("resolve", key(name=ROUTER_ERRORS)) == 1
    assert world.still_open(arn(ROUTER_ERRORS)) == []


def test_an_ok_older_than_the_incident_closes_nothing() -> None:
    # Given router-errors' ALARM event came at START, and CloudWatch's answer (read before it) still says OK
    world = World()
    world.handle(alarm_event(ROUTER_ERRORS, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1)))
    world.cloudwatch.set(ROUTER_ERRORS, "OK", START - timedelta(minutes=1), "Threshold Crossed: 0.0")

    # When the reconciliation runs
    tally = world.reconcile()

    # Then the incident stays open: the next look decides
    assert tally["alarm_recovered"] == 0
    assert len(world.still_open(arn(ROUTER_ERRORS))) == 1


def test_an_episode_between_two_looks_is_told_closed_from_the_start_and_never_paged() -> None:
    # Given router-errors went to ALARM and back between two looks, both events lost, and so did gpu-training's
    # contributor while the temperature alarm stayed in ALARM for another cluster
    world = World()
    began, ended = START + timedelta(minutes=1), START + timedelta(minutes=3)
    world.cloudwatch.set(ROUTER_ERRORS, "OK", ended, "Threshold Crossed: 0.0")
    world.cloudwatch.transitions[ROUTER_ERRORS] = [Transition("ALARM", began, "errors"), Transition("OK", ended, "ok")]
    world.handle(contributor_event(INFERENCE))
    _hot_alarm(world, INFERENCE, reason="Threshold Crossed: 1 out of 11 time series evaluated to ALARM")
    training = TRAINING.observed()
    world.cloudwatch.transitions[TEMPERATURE] = [
        Transition("ALARM", began, TRAINING.reason, training),
        Transition("OK", ended, "cooled", training),
    ]

    # When the reconciliation runs twice
    first = world.reconcile()
    second = world.reconcile()

    # Then each episode is an incident closed from the start, with its duration, posted in Slack and never paged
    assert first["alarm_past_episode"] == 2 and second["alarm_past_episode"] == 0
    for record_arn, dedup in ((arn(ROUTER_ERRORS), key(name=ROUTER_ERRORS)), (TRAINING.record, key(TRAINING.id))):
        (incident,) = world.incidents(record_arn)
        assert incident.status == "CLOSED" and incident.opened_at == began and incident.closed_at == ended
        assert world.sent("trigger", dedup) == 0
    assert world.sent("trigger") == 1  # gpu-inference's, from its event
    assert world.sent("post", service="slack") == 3


def test_an_ok_in_the_history_closes_an_incident_whose_ok_was_lost_before_the_alarm_fired_again() -> None:
    # Given router-errors' incident opened by its event, then OK and ALARM again between two looks, both events lost
    world = World()
    world.handle(alarm_event(ROUTER_ERRORS, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1)))
    ok_at, again = START + timedelta(minutes=2), START + timedelta(minutes=4)
    world.cloudwatch.set(ROUTER_ERRORS, "ALARM", again, "Threshold Crossed: 3.0")
    world.cloudwatch.transitions[ROUTER_ERRORS] = [Transition("OK", ok_at, "ok"), Transition("ALARM", again, "again")]

    # When the reconciliation runs
    world.reconcile()

    # Then the first incident closed when it went OK, and the second is a new one, paged
    first, second = sorted(world.incidents(arn(ROUTER_ERRORS)), key=lambda k: k.anchor)
    assert first.status == "CLOSED" and first.closed_at == ok_at
    assert second.status == "OPEN" and second.opened_at == again and second.found == FOUND_BY_SWEEP
    assert world.sent("trigger", key(name=ROUTER_ERRORS)) == 2 and world.sent("resolve", key(name=ROUTER_ERRORS)) == 1


# --- What is left alone, and bounds ---------------------------------------------------------------------


def test_the_incidents_of_an_alarm_that_no_longer_exists_are_closed() -> None:
    world = World()
    world.handle(alarm_event(ROUTER_ERRORS, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1)))

    tally = world.reconcile()

    assert tally["alarm_gone"] == 1
    assert world.still_open(arn(ROUTER_ERRORS)) == []


def test_when_describe_alarms_fails_nothing_is_concluded() -> None:
    world = World()
    world.handle(alarm_event(ROUTER_ERRORS, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1)))
    world.cloudwatch.broken = True

    tally = world.reconcile()

    assert tally["alarm_failed"] == 1 and tally["alarm_gone"] == 0
    assert len(world.still_open(arn(ROUTER_ERRORS))) == 1


def test_an_unreadable_alarm_is_counted_and_nothing_is_decided_about_it() -> None:
    world = World()
    world.cloudwatch.unreadable.append(UnreadableAlarm(TEMPERATURE, "StateValue: Field required"))

    tally = world.reconcile()

    assert tally["alarm_unreadable"] == 1 and tally["alarms"] == 0
    assert world.channels.sent == []


def test_another_stacks_alarms_are_left_alone() -> None:
    world = World()
    world.cloudwatch.set("other-stack.router-errors", "ALARM", START, "errors")

    tally = world.reconcile()

    assert tally["alarms"] == 0 and world.channels.sent == []


def test_a_run_records_at_most_its_findings_and_the_next_run_goes_on() -> None:
    # Given the alarm with three hot clusters, and runs that may record two findings each
    world = World()
    _hot_alarm(world, *THREE)

    # When the reconciliation runs, then again
    first = world.reconcile(max_findings=2)
    paged_first = world.sent("trigger")
    second = world.reconcile(max_findings=2)

    # Then the first recorded the alarm's own ALARM and one cluster, and left the rest (nothing closed) to the next
    assert (first["alarm_missed_alarm"], first["alarm_missed_contributor"], first["alarm_deferred"]) == (1, 1, 1)
    assert paged_first == 1 and world.sent("resolve") == 0
    assert second["alarm_missed_contributor"] == 2
    assert world.sent("trigger") == 3


# --- Decisions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "open_contributors", "accounted"),
    [
        (THREE_OF_ELEVEN, 3, True),
        (THREE_OF_ELEVEN, 4, True),
        (THREE_OF_ELEVEN, 2, False),
        ("Threshold Crossed: 1 out of 1 time series evaluated to ALARM", 0, False),
        ("no count here", 1, True),
        ("no count here", 0, False),
        (None, 0, False),
    ],
)
def test_open_contributor_incidents_account_for_the_series_the_reason_counts(
    reason: str | None, open_contributors: int, accounted: bool
) -> None:
    assert accounted_for(reason, open_contributors) is accounted


def test_past_episodes_are_whole_episodes_in_time_order_whatever_order_the_history_came_in() -> None:
    a, b, c, d = (START + timedelta(minutes=m) for m in (1, 2, 3, 4))
    history = [
        Transition("OK", START, "before"),  # the end of an episode that began before the history read
        Transition("ALARM", a, "1"),
        Transition("INSUFFICIENT_DATA", b, "gap"),
        Transition("OK", c, "2"),
        Transition("ALARM", d, "still going"),
    ]

    for order in (history, list(reversed(history)), copy.copy(history[2:] + history[:2])):
        assert [(began.at, ended.at) for began, ended in past_episodes(order)] == [(a, c)]


def test_hundreds_of_hot_clusters_are_each_paged_once_in_one_run_and_the_next_adds_nothing() -> None:
    # Given the alarm in ALARM for 300 of its 400 clusters, no contributor event
    world = World()
    many = [Hot(f"{n:016x}", f"gpu-{n}", 91.0, START) for n in range(300)]
    _hot_alarm(world, *many, reason="Threshold Crossed: 300 out of 400 time series evaluated to ALARM")

    # When the reconciliation runs twice
    first = world.reconcile()
    second = world.reconcile()

    # Then every cluster is paged once, by the first run; nothing is paged as a whole
    assert first["alarm_missed_contributor"] == 300 and second["alarm_missed_contributor"] == 0
    assert world.sent("trigger") == 300 and len({s.target for s in world.channels.sent if s.action == "trigger"}) == 300
    assert world.sent("trigger", key("*")) == 0


def test_a_run_stops_starting_work_before_its_time_is_up_and_closes_nothing_it_did_not_read() -> None:
    # Given a run whose clock moves a second with every look at it, with 30 seconds to go
    world = World()
    _hot_alarm(world, *THREE)
    world.reconcile()
    _hot_alarm(world, TRAINING)  # two clusters cooled down, their OK events lost
    ticks = iter(range(10_000))
    reconciler = AlarmReconciler(
        source=_Source(world.cloudwatch),
        records=world.store,
        observe=lambda facts, left: world.service.observe(facts, seconds_left=left),
        prefix=PREFIX,
        epoch=lambda: float(next(ticks)),
    )

    # When it runs with less time than the 10-second margin
    tally = reconciler.run(started=world.now, seconds_left=5)

    # Then it read nothing and closed nothing: the next run does
    assert tally["alarms"] == 0 and tally["alarm_deferred"] == 1 and tally["alarm_recovered"] == 0
    assert world.reconcile()["alarm_recovered"] == 2


def test_an_alarm_of_your_own_on_a_clusters_metric_found_by_the_sweep_names_the_cluster_its_event_would() -> None:
    # Given an alarm you added, `<stack>.gpu-memory`, on a metric with a ClusterName dimension: in one world its event
    # came, in the other the reconciliation found it
    name = "gpu-fault-responder.gpu-memory"
    event = alarm_event(name, "ALARM", START, previous="OK", previous_at=START - timedelta(days=1))
    event["detail"]["configuration"] = {
        "metrics": [
            {
                "id": "m",
                "metricStat": {
                    "metric": {"namespace": "N", "name": "M", "dimensions": {"ClusterName": "gpu-training"}}
                },
            }
        ]
    }
    by_event, by_sweep = World(), World()
    by_event.handle(event)
    by_sweep.cloudwatch.alarms[name] = ObservedAlarm(
        name, arn(name), "ALARM", "ALARM now", START, START, "gpu-training"
    )
    by_sweep.reconcile()

    # Then both are the same incident, on the same cluster (routes and silences may name it)
    made = [world.record(arn(name)) for world in (by_event, by_sweep)]
    assert made[0].instance.cluster_arn == made[1].instance.cluster_arn
    assert made[1].instance.cluster_arn == "arn:aws:ecs:us-west-2:123456789012:cluster/gpu-training"
    assert [k.id for k in by_sweep.incidents(arn(name))] == [k.id for k in by_event.incidents(arn(name))]
