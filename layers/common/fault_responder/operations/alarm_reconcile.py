"""The reconciliation of the stack's CloudWatch alarms: what CloudWatch says now (and since the last look) against the
incidents table, so that an alarm whose state change events were lost is told all the same (docs/alarms.md).

CloudWatch puts an alarm's state changes, and its contributors', on the bus best effort, as ECS does its events. The
reconciliation reads the stack's alarms (DescribeAlarms, by the stack's name prefix) and turns what it sees into the
facts their events would have added, with the identities those events give them (fault_responder.incidents.alarms:
the same records, the same states at the same moments), so that an event arriving before, after, late or twice adds
nothing, and nothing pages twice:

- An alarm in ALARM whose record has no open incident gets its ALARM, at the moment it entered it
  (StateTransitionedTimestamp), and so the incident its event would have opened, marked "found by the sweep: the
  event was missed". An own-health alarm pages; the own ALARM of a multi time series (GPU) alarm is told to no one,
  as always: its contributors are.
- A multi time series alarm in ALARM: each contributor in ALARM (DescribeAlarmContributors) whose record has no open
  incident gets its ALARM, and so the incident its contributor event would have opened, naming its cluster ("found by
  the sweep: the contributor event was missed"). When the answer was complete, an open contributor incident it does
  not list any more is closed (that series is OK), as is the alarm's unknown-clusters page (below).
- Where the contributors cannot be read (an SDK or an account without the API, access refused, an alarm that is not
  a GROUP BY query) and the open contributor incidents do not account for the series the alarm's reason counts in
  ALARM, the alarm is paged as a whole, on its unknown-clusters record: how many series are in ALARM, and that their
  clusters are unknown. When the contributors are accounted for later (read, or their events came), that page is
  resolved: their own incidents name the clusters. The alarm's OK resolves it too.
- An alarm in OK closes every incident of it still open (its own, its contributors', its unknown-clusters page), at
  the moment it went OK: an alarm is OK only when every series is. An OK older than the incident (CloudWatch's
  answer read before an event that was handled since) closes nothing; the next look decides.
- An alarm that went to ALARM and back between two looks, both its events lost, is found in its history
  (DescribeAlarmHistory; a contributor's too): told as an incident closed from the start, with its duration, and
  never paged.
- The open incidents of an alarm that no longer exists (deleted, or renamed by a stack update) are closed.

Every fact found this way carries the run's event id (fault_responder.operations.reconcile.run_event_id), which marks
it as the sweep's, and a fact found never rewrites one an event reported.

The decisions are pure; AlarmReconciler runs them over an AlarmSource (fault_responder.adapters.cloudwatch_alarms) and
the alert service's event path, bounded by the time it is given and the contributors and history items one alarm may
have read per run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from fault_responder.core.domain import InstanceRef
from fault_responder.incidents.alarms import (
    PER_CONTRIBUTOR,
    alarm_arn_parts,
    alarm_check_type,
    alarm_of,
    alarm_ref,
    contributor_ref,
    series_in_alarm,
    unknown_clusters_ref,
)
from fault_responder.incidents.record import EventFacts, HealthFact, InstanceRecord, bounded_id, clip
from fault_responder.operations.reconcile import (
    MARGIN_SECONDS,
    Counter,
    Observe,
    Records,
    Redeliver,
    run_event_id,
)

log = logging.getLogger(__name__)

MAX_CONTRIBUTORS = 500
"""Contributors of one alarm read per run at most: a Metrics Insights alarm evaluates at most 500 series."""
MAX_HISTORY = 500
"""History items of one alarm read per run at most (newest first)."""
DEFAULT_MAX_FINDINGS = 1000
"""Findings one run records at most; the rest wait for the next run."""
ALARM = "ALARM"
OK = "OK"


# --- What CloudWatch says -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedAlarm:
    """One of the stack's alarms as DescribeAlarms shows it."""

    name: str
    arn: str
    state: str
    """ALARM, OK or INSUFFICIENT_DATA."""
    reason: str | None = None
    since: datetime | None = None
    """When it entered its state (StateTransitionedTimestamp; StateUpdatedTimestamp where the answer has no other)."""
    updated: datetime | None = None
    """StateUpdatedTimestamp: the last change of its state or its reason."""
    cluster: str | None = None
    """The ClusterName dimension of its metric, if it has one (as its events' configuration shows it)."""


@dataclass(frozen=True, slots=True)
class ObservedContributor:
    """One series of a multi time series alarm, in ALARM, as DescribeAlarmContributors lists it."""

    id: str
    attributes: tuple[tuple[str, str], ...] = ()
    reason: str | None = None
    since: datetime | None = None
    """StateTransitionedTimestamp: when it entered ALARM (absent: not reported)."""


@dataclass(frozen=True, slots=True)
class Contributors:
    """What DescribeAlarmContributors answered for one alarm."""

    listed: tuple[ObservedContributor, ...]
    at: datetime
    """When the answer was read: what it does not list was not in ALARM then."""
    complete: bool = True
    """False when not every page was read (more than MAX_CONTRIBUTORS, or a page failed): what it does not list may
    still be in ALARM."""
    why: str | None = None
    """Why it is not complete."""


class ContributorsUnavailableError(Exception):
    """The alarm's contributors cannot be read: an SDK or an account without DescribeAlarmContributors, access
    refused, an alarm that is not a GROUP BY query, a failure. The reason is what the page says."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Transition:
    """One state change from an alarm's history (DescribeAlarmHistory): of the alarm itself, or of one contributor."""

    state: str
    at: datetime
    reason: str | None = None
    contributor: ObservedContributor | None = None


@dataclass(frozen=True, slots=True)
class UnreadableAlarm:
    """An alarm (or an answer) that could not be read: nothing is decided about it, the next run looks again."""

    name: str
    reason: str


class AlarmSource(Protocol):
    """What the reconciliation asks CloudWatch (fault_responder.adapters.cloudwatch_alarms)."""

    def alarms(self, prefix: str) -> Iterator[ObservedAlarm | UnreadableAlarm]:
        """The metric alarms whose names start with `prefix`, page by page."""
        ...

    def contributors(self, name: str, limit: int) -> Contributors:
        """The alarm's contributors in ALARM, at most `limit`. Raises ContributorsUnavailableError."""
        ...

    def history(self, name: str, since: datetime, *, contributors: bool, limit: int) -> list[Transition]:
        """The alarm's state changes since `since` (its contributors' with `contributors`), at most `limit`, the newest
        first. Raises when CloudWatch would not answer."""
        ...


# --- Decisions (pure) ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """Facts the reconciliation adds to one record, and what kind of finding they are (the metric's dimension):
    missed_alarm, missed_contributor, recovered, unknown_clusters, explained, past_episode, gone."""

    kind: str
    facts: EventFacts


def open_since(record: InstanceRecord | None, check: str) -> datetime | None:
    """When the record's open incident of `check` opened (the earliest, if several); None when none is open."""
    if record is None:
        return None
    opened = [
        identity.opened_at or identity.anchor
        for identity in record.incidents.get(record.check_key(check), [])
        if identity.status == "OPEN"
    ]
    return min(opened) if opened else None


def knows(record: InstanceRecord | None, check: str, status: str, at: datetime) -> bool:
    """Whether the record has this state at this moment already (an event reported it, or a look before found it)."""
    if record is None:
        return False
    return any(fact.identity == (status, at) for fact in record.health.get(record.check_key(check), []))


def _knows_between(
    record: InstanceRecord | None, check: str, start: datetime, end: datetime, *, status: str | None = None
) -> bool:
    if record is None:
        return False
    facts = record.health.get(record.check_key(check), [])
    return any(start <= fact.at <= end and status in (None, fact.status) for fact in facts)


def _fact(check: str, status: str, at: datetime, event_id: str, reason: str | None) -> HealthFact:
    return HealthFact(
        check_type=check, status=bounded_id(status, 64), at=at, event_id=event_id, reason=clip(reason or None)
    )


def firing(
    instance: InstanceRef, record: InstanceRecord | None, check: str, at: datetime, reason: str | None, *, event_id: str
) -> EventFacts | None:
    """The ALARM an event would have added, for a series (an alarm, a contributor) CloudWatch says is in ALARM since
    `at`: None when its record has an open incident already (its event came, or a look before found it) or knows
    that state at that moment."""
    if open_since(record, check) is not None or knows(record, check, ALARM, at):
        return None
    return EventFacts(event_id, instance, health=(_fact(check, ALARM, at, event_id, reason),))


def ending(record: InstanceRecord | None, check: str, at: datetime, reason: str, *, event_id: str) -> EventFacts | None:
    """An OK at `at` for a record whose incident is open and opened no later than `at`: None otherwise (nothing
    open; or an OK older than the incident, which is CloudWatch's answer read before an event handled since)."""
    opened = open_since(record, check)
    if record is None or opened is None or at < opened:
        return None
    return EventFacts(event_id, record.instance, health=(_fact(check, OK, at, event_id, reason),))


def accounted_for(reason: str | None, open_contributors: int) -> bool:
    """Whether the open contributor incidents account for the series the alarm's reason counts in ALARM ("3 out of 11
    time series evaluated to ALARM"); with no readable count, whether any is open."""
    counted = series_in_alarm(reason)
    if counted is None:
        return open_contributors > 0
    return open_contributors >= counted[0]


def unknown_clusters_reason(alarm: ObservedAlarm, why: str, known: int) -> str:
    """What the page of an alarm whose clusters are unknown says besides its title: the alarm's reason, why the
    clusters are unknown, and how many of its series have incidents of their own (their events came, or they were
    read before the answer broke off)."""
    said = (alarm.reason or "CloudWatch gave no reason.").rstrip()
    own = ""
    if known:
        own = (
            " 1 of them has an incident of its own." if known == 1 else f" {known} of them have incidents of their own."
        )
    return f"{said} Which clusters is unknown: {why}.{own}"


def past_episodes(transitions: Iterable[Transition]) -> list[tuple[Transition, Transition]]:
    """(ALARM, the OK that ended it) for each episode the transitions hold whole, oldest first. An ALARM without a
    later OK is still going (the alarm's state says so); an OK without its ALARM began before the history read."""
    episodes: list[tuple[Transition, Transition]] = []
    started: Transition | None = None
    for transition in _in_order(transitions):
        if transition.state == ALARM and started is None:
            started = transition
        elif transition.state == OK and started is not None:
            episodes.append((started, transition))
            started = None
    return episodes


def from_history(
    instance: InstanceRef,
    record: InstanceRecord | None,
    check: str,
    transitions: Iterable[Transition],
    *,
    event_id: str,
) -> list[Finding]:
    """What one series' history (the alarm's, or one contributor's) adds to its record: the OK of an incident that
    was open before the history read begins (its OK event lost), and each episode that began and ended since."""
    ordered = _in_order(transitions)
    findings: list[Finding] = []
    first_alarm = next((t.at for t in ordered if t.state == ALARM), None)
    ended = next((t for t in ordered if t.state == OK and (first_alarm is None or t.at < first_alarm)), None)
    if ended is not None:
        closing = ending(record, check, ended.at, ended.reason or "the alarm is OK", event_id=event_id)
        if closing is not None:
            findings.append(Finding("recovered", closing))
    for episode in past_episodes(ordered):
        facts = past_episode(instance, record, check, episode, event_id=event_id)
        if facts is not None:
            # Only its OK is news when its ALARM is known (an event came, or a look found it): a recovery.
            whole = any(fact.status == ALARM for fact in facts.health)
            findings.append(Finding("past_episode" if whole else "recovered", facts))
    return findings


def _in_order(transitions: Iterable[Transition]) -> list[Transition]:
    return sorted(transitions, key=lambda t: (t.at, t.state == OK))


def past_episode(
    instance: InstanceRef,
    record: InstanceRecord | None,
    check: str,
    episode: tuple[Transition, Transition],
    *,
    event_id: str,
) -> EventFacts | None:
    """An episode that began and ended between two looks: its ALARM, unless the record knows a state within it (its
    event came), and its OK, unless the record knows an OK within it. None when it knows both."""
    began, ended = episode
    facts: list[HealthFact] = []
    if not _knows_between(record, check, began.at, ended.at):
        facts.append(_fact(check, ALARM, began.at, event_id, began.reason))
    if not _knows_between(record, check, began.at, ended.at, status=OK):
        facts.append(_fact(check, OK, ended.at, event_id, ended.reason))
    if not facts:
        return None
    return EventFacts(event_id, instance, health=tuple(facts))


# --- A run --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class AlarmTally:
    alarms: int = 0
    contributors: int = 0
    missed_alarm: int = 0
    missed_contributor: int = 0
    recovered: int = 0
    unknown_clusters: int = 0
    explained: int = 0
    past_episode: int = 0
    gone: int = 0
    already_known: int = 0
    contributors_unavailable: int = 0
    unreadable: int = 0
    failed: int = 0
    deferred: int = 0

    def as_dict(self) -> dict[str, int]:
        """Keyed `alarms`, `alarm_contributors`, `alarm_<finding>`: beside the instance reconciliation's tally."""
        return {("alarms" if name == "alarms" else f"alarm_{name}"): getattr(self, name) for name in self.__slots__}


@dataclass
class _Look:
    """One alarm's look: what this run knows of its records."""

    alarm: ObservedAlarm
    check: str
    open: list[str]
    """Its records on the table's Open list (its own, its contributors', its unknown-clusters one)."""


@dataclass
class AlarmReconciler:
    """One run of the alarms' reconciliation, bounded by the time left and `max_findings`."""

    source: AlarmSource
    records: Records
    observe: Observe
    prefix: str
    """The stack's alarms' names begin with it (`<stack name>.`)."""
    lookback: timedelta = timedelta(minutes=15)
    """How far back an alarm's history is read: at least the time between two looks, with room for a look missed."""
    redeliver: Redeliver | None = None
    """Tried once more at the end of the run for a record whose findings were written but not all delivered: a finding
    that closed its last incident takes it off the table's Open index, so no sweep would."""
    count: Counter = lambda metric, dimension, value: None
    epoch: Callable[[], float] = lambda: 0.0
    max_findings: int = DEFAULT_MAX_FINDINGS
    _ends: float = 0.0
    _tally: AlarmTally = field(default_factory=AlarmTally)
    _findings: int = 0
    _undelivered: list[str] = field(default_factory=list)

    def run(
        self, *, started: datetime, seconds_left: float, open_records: Iterable[str] | None = None
    ) -> dict[str, int]:
        """`open_records`: the open records to consider (those of the source's account and Region, read once for
        several runs: fault_responder.operations.organization); default: the table's. An open alarm record the
        source does not list is closed as gone, so a run over one account's alarms must be given that account's."""
        self._ends = self.epoch() + seconds_left
        self._tally = AlarmTally()
        self._findings = 0
        self._undelivered = []
        event_id = run_event_id(started)
        by_alarm: dict[str, list[str]] = {}
        for arn in self.records.open_records() if open_records is None else open_records:
            alarm = alarm_of(arn)
            if alarm is not None:
                by_alarm.setdefault(alarm, []).append(arn)
        seen: set[str] = set()
        listed_whole = True
        try:
            for observed in self.source.alarms(self.prefix):
                if isinstance(observed, UnreadableAlarm):
                    self._unreadable(observed)
                    continue
                if not observed.name.startswith(self.prefix):
                    continue
                seen.add(observed.arn)
                if not self._room():
                    self._tally.deferred += 1
                    continue
                self._tally.alarms += 1
                look = _Look(observed, alarm_check_type(observed.name), by_alarm.get(observed.arn, []))
                try:
                    self._reconcile(look, event_id, started)
                except Exception as error:  # one alarm's failure must not stop the others; the next run looks again
                    self._failed(observed.name, error)
        except Exception as error:  # DescribeAlarms refused or failed: nothing concluded about the alarms not seen
            listed_whole = False
            self._failed(self.prefix, error)
        if listed_whole:
            for alarm, arns in sorted(by_alarm.items()):
                if alarm not in seen and self._room():
                    self._gone(alarm, arns, event_id, started)
        self._deliver_again()
        return self._tally.as_dict()

    # --- One alarm ---------------------------------------------------------------------------------------

    def _reconcile(self, look: _Look, event_id: str, started: datetime) -> None:
        alarm, check = look.alarm, look.check
        own = alarm_ref(alarm.arn, alarm.cluster)
        if own is None:
            self._unreadable(UnreadableAlarm(alarm.name, "its ARN is not a CloudWatch alarm's"))
            return
        per_contributor = check in PER_CONTRIBUTOR
        self._history(look, event_id, started, per_contributor=per_contributor)
        own_record = self.records.load(own.container_instance_arn)
        if alarm.state == ALARM:
            at = alarm.since or started
            self._record("missed_alarm", firing(own, own_record, check, at, alarm.reason, event_id=event_id))
            if per_contributor:
                self._contributors(look, event_id, started)
        elif alarm.state == OK and alarm.since is not None:
            for arn in look.open:
                record = own_record if arn == own.container_instance_arn else self.records.load(arn)
                closing = ending(record, check, alarm.since, "the alarm is OK", event_id=event_id)
                self._record("recovered", closing)

    def _contributors(self, look: _Look, event_id: str, started: datetime) -> None:
        """Each contributor in ALARM is the incident its event would have opened; what a complete answer no longer
        lists is closed. Where the contributors cannot be read (or not all of them), the alarm is paged as a whole
        unless its open contributor incidents account for the series its reason counts in ALARM."""
        alarm, check = look.alarm, look.check
        parts, unknown = alarm_arn_parts(alarm.arn), unknown_clusters_ref(alarm.arn)
        if parts is None or unknown is None:
            return
        region, account, _ = parts
        answer: Contributors | None = None
        why: str | None = None
        try:
            answer = self.source.contributors(alarm.name, MAX_CONTRIBUTORS)
        except ContributorsUnavailableError as unavailable:
            why = unavailable.reason
        read_at = answer.at if answer is not None else started
        open_arns = set(look.open)
        unknown_arn = unknown.container_instance_arn
        listed: set[str] = set()
        for contributor in answer.listed if answer is not None else ():
            if not self._room():
                self._tally.deferred += 1
                return  # the rest, and what they would close, wait for the next run
            self._tally.contributors += 1
            ref = contributor_ref(alarm.arn, region, account, contributor.id, dict(contributor.attributes))
            arn = ref.container_instance_arn
            listed.add(arn)
            record = self.records.load(arn) if arn in open_arns else None
            at = contributor.since or read_at
            self._record("missed_contributor", firing(ref, record, check, at, contributor.reason, event_id=event_id))
        others = sorted(open_arns - {alarm.arn, unknown_arn})
        unknown_record = self.records.load(unknown_arn) if unknown_arn in open_arns else None
        if answer is not None and answer.complete and answer.listed:
            for arn in others:
                if arn not in listed:
                    self._record(
                        "recovered", ending(self.records.load(arn), check, read_at, _NOT_LISTED, event_id=event_id)
                    )
            known = f"the clusters are known: DescribeAlarmContributors lists {len(answer.listed)} in ALARM"
            self._record("explained", ending(unknown_record, check, read_at, known, event_id=event_id))
            return
        # Not read, not all read, or none listed while the alarm is in ALARM (an alarm that is not a GROUP BY query,
        # or an answer behind the alarm's state): nothing is closed; the alarm is paged as a whole unless accounted for.
        self._tally.contributors_unavailable += 1
        if why is None and answer is not None:
            why = answer.why or "DescribeAlarmContributors lists no contributor in ALARM"
        why = why or "not every contributor could be read"
        log.warning("the contributors of %s could not be read: %s", alarm.name, why)
        firing_now = listed | {arn for arn in others if open_since(self.records.load(arn), check) is not None}
        if accounted_for(alarm.reason, len(firing_now)):
            accounted = "the series in ALARM are accounted for by their contributor incidents"
            self._record("explained", ending(unknown_record, check, read_at, accounted, event_id=event_id))
            return
        at = alarm.since or started
        if unknown_record is None:
            unknown_record = self.records.load(unknown_arn)  # (closed, it is off the Open list: read it all the same)
        if knows(unknown_record, check, ALARM, at):
            at = started  # paged as a whole earlier in this episode, then accounted for: a new page from now
        reason = unknown_clusters_reason(alarm, why, len(firing_now))
        self._record("unknown_clusters", firing(unknown, unknown_record, check, at, reason, event_id=event_id))

    def _history(self, look: _Look, event_id: str, started: datetime, *, per_contributor: bool) -> None:
        """Episodes that began and ended between two looks, both their events lost: read from the alarm's history
        when its state changed within the lookback (and, for a multi time series alarm in ALARM, always: its
        contributors come and go while it stays in ALARM)."""
        alarm, check = look.alarm, look.check
        since = started - self.lookback
        changed = alarm.updated is None or alarm.updated >= since or (alarm.since is not None and alarm.since >= since)
        contributors = per_contributor and (changed or alarm.state == ALARM)
        if not changed and not contributors:
            return
        parts = alarm_arn_parts(alarm.arn)
        own = alarm_ref(alarm.arn, alarm.cluster)
        if parts is None or own is None:
            return
        region, account, _ = parts
        series: dict[str, tuple[InstanceRef, list[Transition]]] = {}
        for wanted in ([False] if changed else []) + ([True] if contributors else []):
            try:
                transitions = self.source.history(alarm.name, since, contributors=wanted, limit=MAX_HISTORY)
            except Exception as error:  # the current state is still reconciled; the next run reads it again
                self._failed(f"{alarm.name} history", error)
                continue
            for transition in transitions:
                ref = own
                if transition.contributor is not None:
                    attributes = dict(transition.contributor.attributes)
                    ref = contributor_ref(alarm.arn, region, account, transition.contributor.id, attributes)
                series.setdefault(ref.container_instance_arn, (ref, []))[1].append(transition)
        for arn, (ref, transitions) in sorted(series.items()):
            if not any(transition.state == OK for transition in transitions):
                continue  # nothing ended: the state CloudWatch shows now says the rest
            for finding in from_history(ref, self.records.load(arn), check, transitions, event_id=event_id):
                if not self._room():
                    self._tally.deferred += 1
                    return
                self._record(finding.kind, finding.facts)

    def _gone(self, alarm: str, arns: Sequence[str], event_id: str, started: datetime) -> None:
        """An alarm DescribeAlarms no longer lists (deleted, or renamed by a stack update): its open incidents close."""
        parts = alarm_arn_parts(alarm)
        if parts is None:
            return
        check = alarm_check_type(parts[2])
        for arn in arns:
            if not self._room():
                self._tally.deferred += 1
                return
            try:
                record = self.records.load(arn)
            except Exception as error:
                self._failed(arn, error)
                continue
            self._record("gone", ending(record, check, started, "the alarm no longer exists", event_id=event_id))

    # --- Recording ---------------------------------------------------------------------------------------

    def _record(self, kind: str, facts: EventFacts | None) -> None:
        """Record what was found through the event path, which reads the record again before it writes: a change
        meanwhile is merged, never overwritten."""
        if facts is None:
            return
        arn = facts.instance.container_instance_arn
        self._findings += 1
        try:
            changed = self.observe(facts, max(0.0, self._ends - self.epoch()))
        except Exception as error:  # one record's failure must not stop the run; the next run tries again
            self._failed(arn, error)
            self._undelivered.append(arn)
            return
        if not changed:
            self._tally.already_known += 1
            return
        setattr(self._tally, kind, getattr(self._tally, kind) + 1)
        self.count("ReconcileFindings", "Finding", f"alarm_{kind}")
        log.info("reconciliation: alarm %s", kind, extra={"record": arn, "finding": f"alarm_{kind}"})

    def _deliver_again(self) -> None:
        for arn in self._undelivered:
            if self.redeliver is None or not self._time_left():
                return
            try:
                self.redeliver(arn, max(0.0, self._ends - self.epoch()))
            except Exception as error:  # still failing: logged and counted (docs/operations.md#bounds)
                self.count("ReconcileFailures", "Kind", type(error).__name__)
                log.warning("the reconciliation could not deliver what it found about %s: %s", arn, error)

    def _failed(self, what: str, error: Exception) -> None:
        self._tally.failed += 1
        self.count("ReconcileFailures", "Kind", type(error).__name__)
        log.warning("the alarms' reconciliation failed on %s (the next run tries again): %s", what, error)

    def _unreadable(self, item: UnreadableAlarm) -> None:
        self._tally.unreadable += 1
        self.count("ReconcileFindings", "Finding", "alarm_unreadable")
        log.warning(
            "reconciliation: CloudWatch's description could not be read; nothing decided about it",
            extra={"alarm": item.name, "reason": item.reason},
        )

    def _time_left(self) -> bool:
        return self._ends - self.epoch() >= MARGIN_SECONDS

    def _room(self) -> bool:
        return self._time_left() and self._findings < self.max_findings


_NOT_LISTED = "OK again: DescribeAlarmContributors no longer lists it in ALARM"
