"""Actions in time order (docs/reliability.md): a person's action applies to the incident of its alert that was open at
the action's time, or to none, whatever order the facts and the actions arrive in.

The property, through AlertService with the in-memory store and the channels that record what would be sent (so
PagerDuty's trigger, acknowledge and resolve and the Slack roots are the ones the router sends): for random histories
of one check of one instance (IMPAIRED and OK at random times, with or without a hold-down, maybe INACTIVE; acknowledge,
unacknowledge and resolve by dedup key as PagerDuty's webhooks name them, acknowledge and resolve by incident id as
Slack's buttons name them, at random times), every envelope delivered once or twice in any order, each processed at or
after its own time, then the sweep, gives

- the same incidents (status, end, why, who resolved, who acknowledged) as every envelope delivered once in time order;
- the incidents of the reference: each action applies to the incident open at its time (a Slack press: the incident
  whose reports contain its id's anchor, if open at its time), else to none, in time order, where "open" is as the
  facts alone make it (the same history without its actions);
- PagerDuty told what the incidents say: its alert open at the end if and only if an incident is, and acknowledged
  when the open incident was acknowledged from Slack; and each incident's Slack root showing the same in both orders.

An action reaches the router only once its record exists (a Slack root or a PagerDuty alert came from it), and
PagerDuty's dedup key leads to the record from the first page on: each run starts with the key known and a fact first.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import given, settings
from hypothesis import strategies as st

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Incident, PersonAction
from fault_responder.core.timefmt import iso_utc
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via, parse_action
from fault_responder.incidents.record import ActionFact, InstanceRecord, ReportedAction
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from tests.conftest import health_check, load_event, vary
from tests.unit.test_lifecycle import INSTANCE, KEY, inactive

START = datetime(2026, 4, 11, tzinfo=UTC)
HORIZON = 180
"""Minutes: every fact and action of a history falls within them."""
END = START + timedelta(minutes=HORIZON + 120)
"""When the sweep runs after everything: every hold-down is over."""
PAGER = "gpu-oncall"
CHANNEL = "gpu-alerts"
SAMPLE = "aws-docs/health-change-accelerated-compute-xid46.json"


@dataclass(frozen=True)
class Fact:
    status: str
    """IMPAIRED or OK (the check), or INACTIVE (the instance left)."""
    at: datetime

    def envelope(self) -> dict[str, Any]:
        stamp = self.at.strftime("%Y-%m-%dT%H:%M:%SZ")
        if self.status == "INACTIVE":
            return inactive(updatedAt=stamp)
        event = health_check(
            load_event(SAMPLE),
            status=self.status,
            lastStatusChange=stamp,
            lastUpdated=stamp,
            statusReason=None if self.status == "OK" else "XID_79",
        )
        return vary(event, event_id=f"{self.status}-{stamp}", time=stamp, overallStatus=self.status)


@dataclass(frozen=True)
class Act:
    number: int
    kind: ActionKind
    via: Via
    at: datetime
    anchor: datetime | None = None
    """A Slack press: the anchor of the incident id its button names."""

    @property
    def by(self) -> str:
        return f"Person {self.number}"

    def reported(self) -> ReportedAction:
        """As the router records it (service._reported)."""
        parsed = parse_action(self.envelope())
        return ReportedAction(
            parsed.key, parsed.kind.value, parsed.via.value, parsed.by, parsed.at, parsed.incident, parsed.dedup_key
        )

    def envelope(self) -> dict[str, Any]:
        slack = self.via is Via.SLACK
        action = IncidentAction(
            key=f"{self.via.value}:a{self.number}",
            kind=self.kind,
            via=self.via,
            by=self.by,
            at=self.at,
            record=INSTANCE if slack else None,
            incident=f"{KEY}@{iso_utc(self.anchor)}" if slack and self.anchor else None,
            dedup_key=None if slack else KEY,
        )
        return action.envelope("us-west-2", "123456789012")


@dataclass(frozen=True)
class History:
    facts: tuple[Fact, ...]
    acts: tuple[Act, ...]
    hold_down: timedelta

    def envelopes(self) -> list[tuple[datetime, dict[str, Any]]]:
        """Each envelope with its time, in time order (a fact before an action of the same moment)."""
        timed = [(f.at, 0, f.envelope()) for f in self.facts] + [(a.at, 1, a.envelope()) for a in self.acts]
        return [(at, envelope) for at, _, envelope in sorted(timed, key=lambda item: (item[0], item[1]))]


def _minutes(value: int) -> datetime:
    return START + timedelta(minutes=value)


_PAGERDUTY_KINDS = [ActionKind.ACKNOWLEDGE, ActionKind.UNACKNOWLEDGE, ActionKind.RESOLVE]
_SLACK_KINDS = [ActionKind.ACKNOWLEDGE, ActionKind.RESOLVE]


@st.composite
def histories(draw: st.DrawFn) -> History:
    # The check's transitions in time order, mostly alternating (so a history has several episodes), sometimes not (a
    # second report of a fault, an OK of nothing).
    minutes = sorted(draw(st.lists(st.integers(0, HORIZON), min_size=1, max_size=6, unique=True)))
    facts: list[Fact] = []
    status = "IMPAIRED"
    for minute in minutes:
        facts.append(Fact(status, _minutes(minute)))
        if draw(st.integers(0, 9)) < 7:
            status = "OK" if status == "IMPAIRED" else "IMPAIRED"
    if draw(st.integers(0, 3)) == 0:
        facts.append(Fact("INACTIVE", _minutes(draw(st.integers(0, HORIZON)))))
    reports = [f.at for f in facts if f.status == "IMPAIRED"]
    # Actions at any moment, and often close to a transition (just before or after an episode begins or ends).
    near = st.tuples(st.sampled_from([f.at for f in facts]), st.integers(-10, 30)).map(
        lambda pair: pair[0] + timedelta(seconds=30 * pair[1])
    )
    anywhere = st.integers(0, 2 * HORIZON + 20).map(lambda half: START + timedelta(seconds=30 * half))
    acts: list[Act] = []
    for number in range(draw(st.integers(0, 5))):
        via = draw(st.sampled_from([Via.PAGERDUTY, Via.SLACK]))
        at = max(START, draw(near | anywhere))
        if via is Via.PAGERDUTY:
            acts.append(Act(number, draw(st.sampled_from(_PAGERDUTY_KINDS)), via, at))
            continue
        # A button names an incident by the report that first made it known; sometimes by another moment.
        anchors = st.sampled_from(reports) if reports else st.nothing()
        anchor = draw(anchors | st.integers(0, HORIZON).map(_minutes))
        acts.append(Act(number, draw(st.sampled_from(_SLACK_KINDS)), via, at, anchor))
    hold_down = draw(st.sampled_from([timedelta(0), timedelta(minutes=10)]))
    return History(tuple(facts), tuple(acts), hold_down)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


class Run:
    """One instance's router, its PagerDuty dedup key already known (an action only comes for an alert it raised)."""

    def __init__(self, hold_down: timedelta) -> None:
        self.clock = Clock()
        self.store = MemoryInstanceStore()
        self.store.remember_page(KEY, INSTANCE)
        self.channels = RecordingChannels()
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels, clock=self.clock),
            lifecycle.Settings(hold_down=hold_down),
            clock=self.clock,
            workers=2,
        )

    def deliver(self, arrivals: list[tuple[datetime, dict[str, Any]]]) -> Run:
        """Each envelope processed at its processing time (never before its own time), then the sweep at END."""
        for at, envelope in arrivals:
            self.process(at, envelope)
        self.sweep(END)
        return self

    def process(self, at: datetime, envelope: dict[str, Any]) -> None:
        self.clock.now = max(self.clock.now, at)
        self.service.handle(envelope)

    def sweep(self, at: datetime) -> None:
        self.clock.now = at
        self.service.reconcile(INSTANCE)

    def incidents(self) -> list[Incident]:
        record = self.store.load(INSTANCE)
        return self.service.derive(record).incidents if record is not None else []

    def pagerduty(self) -> list[str]:
        return [s.action for s in self.channels.sent if s.service == "pagerduty" and s.target == KEY]

    def roots(self) -> dict[datetime, str]:
        """Each incident's Slack root as last sent (posted, then updated in place), by when the incident opened."""
        record = self.store.load(INSTANCE)
        assert record is not None
        shown: dict[datetime, str] = {}
        for incident in self.incidents():
            delivery = record.deliveries.get((CHANNEL, incident.id))
            if of_an_episode(incident) and delivery is not None and delivery.ts is not None:
                [*_, last] = [s for s in self.channels.sent if s.service == "slack" and s.ts == delivery.ts]
                shown[incident.opened_at] = last.body
        return shown


def facts_alone(history: History) -> list[Incident]:
    """The incidents the history's facts make, with no action, as of the sweep at END."""
    return derived([(END, fact) for fact in history.facts], history.hold_down)


ROUTE = Router(load_routing("default.yaml")).route


def derived(arrivals: list[tuple[datetime, Fact | Act]], hold_down: timedelta) -> list[Incident]:
    """Facts and actions added to the instance's record one by one, its incidents derived after each at its processing
    time as the router does (their identities kept), and at the end as of the sweep at END. Pure: no store, no
    delivery."""
    sample = lifecycle.facts_from_event(parse_ecs_event(Fact("IMPAIRED", START).envelope()))
    assert sample is not None
    record = InstanceRecord(INSTANCE, sample.instance)
    settings = lifecycle.Settings(hold_down=hold_down)
    for at, item in arrivals:
        if isinstance(item, Act):
            record.add_action(item.reported())
        else:
            facts = lifecycle.facts_from_event(parse_ecs_event(item.envelope()))
            assert facts is not None
            record.add(facts)
        record.incidents = lifecycle.derive(record, settings, ROUTE, at).known
    return lifecycle.derive(record, settings, ROUTE, END).incidents


T = TypeVar("T")


def in_any_order(
    timed: list[tuple[datetime, T]], order: random.Random, *, fact_first: bool
) -> list[tuple[datetime, T]]:
    """Every item once or twice, shuffled (`fact_first`: a fact first, as an action reaches the router only once its
    record exists), each processed at or some minutes after the later of its own time and the one processed before."""
    copies = timed + [item for item in timed if order.random() < 0.3]
    order.shuffle(copies)
    if fact_first:
        first = next(index for index, (_, item) in enumerate(copies) if _is_fact(item))
        copies.insert(0, copies.pop(first))
    arrivals: list[tuple[datetime, T]] = []
    now = START
    for at, item in copies:
        now = max(now, at) + timedelta(minutes=order.choice([0, 0, 1, 5, 20, 60]))
        arrivals.append((now, item))
    return arrivals


def _is_fact(item: object) -> bool:
    if isinstance(item, dict):
        return item["source"] == "aws.ecs"
    return isinstance(item, Fact)


def _person(person: PersonAction | None) -> tuple[str, str, datetime] | None:
    return None if person is None else (person.by, person.via, person.at)


Summary = tuple[datetime, str, datetime | None, str | None, Any, Any]


def summary(incidents: list[Incident]) -> list[Summary]:
    """The incidents of the check's episodes by when they opened: status, end, why, who resolved, who acknowledged
    (no ids: those depend on what was learned first)."""
    return [
        (i.opened_at, i.status, i.closed_at, i.close_reason, _person(i.resolved_by), _person(i.acknowledged))
        for i in sorted(incidents, key=lambda i: i.opened_at)
        if of_an_episode(i)
    ]


def of_an_episode(incident: Incident) -> bool:
    """An incident some episode of the facts makes, not one a late report left with none (lifecycle's orphans: merged
    into another, or an identity its episode no longer contains). Those have no timeline; every episode's has its
    first report, and none is ever open (checked apart)."""
    return bool(incident.timeline)


_WHERE = {Via.SLACK: "from Slack", Via.PAGERDUTY: "in PagerDuty"}


def reference(history: History, by_facts: list[Incident]) -> list[Summary]:
    """What the incidents must be: the incidents the facts alone make, each with the actions taken while it was open
    (by dedup key: any of the alert's; by id: the one whose reports contain the anchor), applied in time order."""
    expected: list[Summary] = []
    for incident in sorted(filter(of_an_episode, by_facts), key=lambda i: i.opened_at):
        opened, ends = incident.opened_at, incident.closed_at

        def open_at(moment: datetime, opened: datetime = opened, ends: datetime | None = ends) -> bool:
            return opened <= moment and (ends is None or moment < ends)

        def contains(moment: datetime, opened: datetime = opened, ends: datetime | None = ends) -> bool:
            return opened <= moment and (ends is None or moment <= ends)

        status, closed, reason = incident.status, ends, incident.close_reason
        resolved: tuple[str, str, datetime] | None = None
        acknowledged: tuple[str, str, datetime] | None = None
        mine = [
            a for a in history.acts if open_at(a.at) and (a.via is Via.PAGERDUTY or (a.anchor and contains(a.anchor)))
        ]
        for act in sorted(mine, key=lambda a: (a.at, f"{a.via.value}:a{a.number}")):
            if closed is not None and act.at >= closed:
                continue
            if act.kind is ActionKind.RESOLVE:
                status, closed, reason = "CLOSED", act.at, f"resolved by {act.by} {_WHERE[act.via]}"
                resolved = (act.by, act.via.value, act.at)
            elif act.kind is ActionKind.ACKNOWLEDGE:
                acknowledged = (act.by, act.via.value, act.at)
            elif act.kind is ActionKind.UNACKNOWLEDGE:
                acknowledged = None
        expected.append((opened, status, closed, reason, resolved, acknowledged))
    return expected


def check_pagerduty(run: Run) -> None:
    """PagerDuty's alert is open at the end if and only if an incident is; an acknowledgement from Slack of the open
    incident was sent for the alert as it stands (after its last resolve)."""
    told = run.pagerduty()
    alert = [action for action in told if action in ("trigger", "resolve")]
    live = [i for i in run.incidents() if i.is_open and PAGER in i.receivers]
    assert (alert[-1:] == ["trigger"]) == bool(live), (told, [i.id for i in live])
    if live and live[0].acknowledged is not None and live[0].acknowledged.via == "slack":
        since = told[len(told) - 1 - told[::-1].index("resolve") :] if "resolve" in told else told
        assert "acknowledge" in since, told


@settings(max_examples=60, deadline=None)
@given(history=histories(), order=st.randoms(use_true_random=False))
def test_actions_apply_to_the_incident_open_at_their_time_whatever_the_order_of_arrival(
    history: History, order: random.Random
) -> None:
    # Given a history of facts and actions, and the incidents its facts alone make
    timed = history.envelopes()
    by_facts = facts_alone(history)
    # When it is delivered in time order, and in any order with copies
    in_time = Run(history.hold_down).deliver(timed)
    shuffled = Run(history.hold_down).deliver(in_any_order(timed, order, fact_first=True))
    # Then both give the reference's incidents: each action on the incident open at its time, or on none
    expected = reference(history, by_facts)
    assert summary(in_time.incidents()) == expected
    assert summary(shuffled.incidents()) == expected
    assert not any(i.is_open for i in shuffled.incidents() if not of_an_episode(i))
    # And PagerDuty and the Slack roots were told the same
    check_pagerduty(in_time)
    check_pagerduty(shuffled)
    assert shuffled.roots() == in_time.roots()


@settings(max_examples=300, deadline=None)
@given(history=histories(), order=st.randoms(use_true_random=False))
def test_which_incident_an_action_is_about_does_not_depend_on_what_was_recorded_before_it(
    history: History, order: random.Random
) -> None:
    # Given a history of facts and actions
    items: list[tuple[datetime, Fact | Act]] = [(f.at, f) for f in history.facts] + [(a.at, a) for a in history.acts]
    # When they are recorded in any order with copies, an action even before every fact, incidents derived after each
    found = derived(in_any_order(items, order, fact_first=False), history.hold_down)
    # Then the incidents are the reference's: each action on the incident open at its time, or on none
    assert summary(found) == reference(history, facts_alone(history))


# --- The case, and the rule's edges --------------------------------------------------------------------


def paged_twice() -> Run:
    """A fault at 00:01 that paged, the check OK at 00:10, the hold-down (10 min) over at the sweep at 00:25, and the
    next fault of the check at 00:40, paged."""
    run = Run(timedelta(minutes=10))
    run.process(_minutes(1), Fact("IMPAIRED", _minutes(1)).envelope())
    run.process(_minutes(10), Fact("OK", _minutes(10)).envelope())
    run.sweep(_minutes(25))
    run.process(_minutes(40), Fact("IMPAIRED", _minutes(40)).envelope())
    assert run.pagerduty() == ["trigger", "resolve", "trigger"]
    return run


def test_a_late_pagerduty_resolve_of_an_earlier_fault_leaves_the_next_fault_open_and_paged() -> None:
    # Given two faults of one check, the first resolved by a person in PagerDuty at 00:05, its webhook late
    run = paged_twice()
    # When the webhook is processed at 00:45, after the next fault opened
    run.process(_minutes(45), Act(1, ActionKind.RESOLVE, Via.PAGERDUTY, _minutes(5)).envelope())
    # Then the live incident stays open and its alert triggered; the earlier one says who resolved it, and when
    earlier, live = run.incidents()
    assert live.is_open and live.resolved_by is None
    assert run.pagerduty() == ["trigger", "resolve", "trigger"]
    assert earlier.resolved_by is not None
    assert (earlier.resolved_by.by, earlier.closed_at) == ("Person 1", _minutes(5))


def test_an_action_taken_while_no_incident_was_open_is_kept_and_about_none() -> None:
    # Given two faults of one check; When someone acknowledges in PagerDuty at 00:20, between them
    run = paged_twice()
    run.process(_minutes(45), Act(1, ActionKind.ACKNOWLEDGE, Via.PAGERDUTY, _minutes(20)).envelope())
    # Then neither is acknowledged, nothing is sent, and the action is kept
    assert [i.acknowledged for i in run.incidents()] == [None, None]
    assert run.pagerduty() == ["trigger", "resolve", "trigger"]
    record = run.store.load(INSTANCE)
    assert record is not None and [a.key for a in record.actions] == ["pagerduty:a1"]


def test_a_press_on_the_root_of_a_fault_that_is_over_never_acts_on_the_next_one() -> None:
    # Given two faults of one check; When Resolve is pressed at 00:45 on the first one's root (a stale view)
    run = paged_twice()
    run.process(_minutes(45), Act(1, ActionKind.RESOLVE, Via.SLACK, _minutes(45), anchor=_minutes(1)).envelope())
    # Then both stay as they were
    earlier, live = run.incidents()
    assert live.is_open and earlier.resolved_by is None and earlier.closed_at == _minutes(10)
    assert run.pagerduty() == ["trigger", "resolve", "trigger"]


def test_a_press_on_a_root_that_a_late_relapse_merged_counts_for_the_incident_it_is_now_part_of() -> None:
    # Given two faults of one check, and Acknowledge pressed at 00:45 on the second one's root
    run = paged_twice()
    run.process(_minutes(45), Act(1, ActionKind.ACKNOWLEDGE, Via.SLACK, _minutes(45), anchor=_minutes(40)).envelope())
    # When a report at 00:15 arrives late: the check relapsed within the hold-down, so the two are one fault
    run.process(_minutes(50), Fact("IMPAIRED", _minutes(15)).envelope())
    # Then the incident the second is now part of is the one acknowledged, and PagerDuty heard of it
    [merged] = [i for i in run.incidents() if of_an_episode(i)]
    assert merged.is_open and merged.opened_at == _minutes(1)
    assert merged.acknowledged is not None and merged.acknowledged.by == "Person 1"
    assert run.pagerduty()[-1] == "acknowledge"


def test_an_action_stored_matched_to_the_wrong_incident_counts_for_the_one_open_at_its_time() -> None:
    # Given an instance's record as written before: a PagerDuty resolve taken at 00:05 stored as matched to the
    # incident its alert was last triggered for when it arrived (the next fault, opened at 00:40)
    run = paged_twice()
    record = run.store.load(INSTANCE)
    assert record is not None
    live = f"{KEY}@{iso_utc(_minutes(40))}"
    record.actions = [ActionFact("pagerduty:e1", live, "resolve", "pagerduty", "Tenex Engineer", _minutes(5))]
    # When its incidents are derived
    earlier, current = run.service.derive(record).incidents
    # Then the resolve counts for the fault open at 00:05, and the live one stays open
    assert current.is_open and current.resolved_by is None
    assert earlier.resolved_by is not None and earlier.closed_at == _minutes(5)


def test_a_press_naming_a_report_after_the_instance_left_is_about_no_incident_whichever_report_came_first() -> None:
    # Given a fault at 00:00, the instance gone at 01:33, and a late report of the fault at 01:47; a Slack press at
    # 00:00 names the incident by that late report (as its id is in the orders where that report arrived first)
    history = History(
        facts=(
            Fact("IMPAIRED", _minutes(0)),
            Fact("IMPAIRED", _minutes(107)),
            Fact("INACTIVE", _minutes(93)),
        ),
        acts=(
            Act(0, ActionKind.ACKNOWLEDGE, Via.SLACK, _minutes(0), anchor=_minutes(107)),
            Act(1, ActionKind.ACKNOWLEDGE, Via.PAGERDUTY, _minutes(10)),
        ),
        hold_down=timedelta(0),
    )
    late_first = sorted(history.envelopes(), key=lambda item: item[1]["id"] != "IMPAIRED-2026-04-11T01:47:00Z")
    # When it arrives in time order, and with the late report first
    in_time = Run(history.hold_down).deliver(history.envelopes())
    reordered = Run(history.hold_down).deliver([(max(at, _minutes(107)), envelope) for at, envelope in late_first])
    # Then in both the press is about no incident: the acknowledgement is PagerDuty's, and the thread shows only it
    expected = reference(history, facts_alone(history))
    assert expected[0][-1] == ("Person 1", "pagerduty", _minutes(10))
    assert summary(in_time.incidents()) == summary(reordered.incidents()) == expected
    assert reordered.roots() == in_time.roots()
