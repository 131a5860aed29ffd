"""The alert router's use case: one ECS event in, its facts recorded, every receiver brought up to date.

1. The event's facts are added to its instance's record, and the incidents derived again, in one conditional
   write: a new fault on an instance with no other history is written without a read first (the fast path:
   its Slack root and PagerDuty trigger go out after this one write); otherwise read, derive, write if the
   version is unchanged, and on a conflict read again and re-apply (facts are idempotent, so re-applying is
   always right).
2. Each receiver with something to send is flushed by whoever holds its lease, one thread per receiver, so
   a slow Slack never holds back PagerDuty. The lease holder sends until nothing is left, then releases the
   lease only if no new facts arrived meanwhile (with the write that records its last delivery, where it can);
   a worker that finds the lease held leaves its work to the holder. A failed receiver fails the event, which SQS
   redelivers: the retry finds the facts already recorded and only delivers what is still missing.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fault_responder.alerting.places import fleet_place
from fault_responder.alerting.store import ConcurrentUpdateError, InstanceStore, LeaseLostError, with_open_members
from fault_responder.core.domain import FleetMember, Incident
from fault_responder.events.ecs import EcsEvent, HealthChangeEvent, InstanceStateEvent, TaskStateEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, is_action, parse_action
from fault_responder.incidents.lifecycle import InstanceView, derive, facts_from_event
from fault_responder.incidents.record import (
    Backoff,
    Delivery,
    EventFacts,
    InstanceRecord,
    KnownIncident,
    Lease,
    ReportedAction,
)
from fault_responder.noise.fleet import (
    JOURNAL_PAGE,
    FleetIdentity,
    FleetView,
    GroupRecord,
    JournalEntry,
    Recent,
    Told,
    closed_identity,
    counts_in,
    crossing,
    derive_fleet,
    escalated,
    founders_of,
    group_arn,
    group_of,
    group_where,
    is_founder,
    is_group,
    latest_incidents,
    member_of,
    opened_identity,
    readable_journal,
    stale_recent,
    trimmed,
)
from fault_responder.noise.policy import Policy
from fault_responder.notification.contract import DeliveryError, LeaseEndingError, fenced
from fault_responder.notification.delivery import (
    FLEET_BATCH,
    FLEET_BATCH_WAIT,
    Courier,
    Step,
    StepKind,
    View,
    as_seen_by,
    pagerduty_subject,
    pending_since,
    plan,
    with_pending,
    without_pending,
)
from fault_responder.routing.router import Grouping, Receiver, Router

if TYPE_CHECKING:
    from fault_responder.events.cloudwatch import AlarmEvent

log = logging.getLogger(__name__)

Counter = Callable[[str, str, str], None]
"""count(metric, dimension name, dimension value)."""
Gauge = Callable[[str, str, str, float], None]
"""measure(metric, dimension name, dimension value, amount)."""

MAX_WRITE_CONFLICTS = 10
MAX_STEPS_PER_FLUSH = 200
SWEEP_LIMIT = 2000
"""Records one sweep run reconciles at most; the rest wait for the next run."""
SWEEP_MARGIN_SECONDS = 10.0
"""A bound on one worker's loop; far above what one instance ever needs."""
BACKOFF_FIRST_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 900.0
"""The sweep tries a receiver that failed again at its next run, then after 1, 2, 4, 8 and every 15 minutes."""
MAX_FORGET = 50
"""Stale recent members a member's write forgets at most (the rest go with the next ones)."""
LEASE_SKEW_SECONDS = 1.0
"""A call to a receiver must end this long before its lease does: clocks of two Lambdas may differ a little."""


class DeliveryPendingError(Exception):
    """Some receivers could not be brought up to date; the event must be retried (SQS redelivers it)."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = failures
        summary = "; ".join(f"{receiver}: {reason}" for receiver, reason in sorted(failures.items()))
        super().__init__(f"{len(failures)} receiver(s) not up to date: {summary}")


@dataclass(slots=True)
class _Flushed:
    sent: list[str] = field(default_factory=list)
    failure: str | None = None


class AlertService:
    def __init__(
        self,
        store: InstanceStore,
        router: Router,
        courier: Courier,
        settings: lifecycle.Settings,
        *,
        count: Counter = lambda metric, dimension, value: None,
        measure: Gauge = lambda metric, dimension, value, amount: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        epoch: Callable[[], float] = time.time,
        workers: int = 8,
        policy: Policy | None = None,
        grouping: Grouping | None = None,
        on_silence: Callable[[], None] | None = None,
    ) -> None:
        self.store = store
        self.router = router
        self.receivers: dict[str, Receiver] = dict(router.config.receivers)
        self.courier = courier
        self.settings = settings
        self.count = count
        self.measure = measure
        self.clock = clock
        self.epoch = epoch
        self.policy = policy
        self.grouping = grouping if grouping is not None and grouping.enabled else None
        self.on_silence = on_silence
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver")
        self._scouts = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scout")

    def handle(self, raw: dict[str, Any], *, seconds_left: float = 60.0) -> dict[str, Any]:
        """Process one EventBridge envelope. Raises on malformed input (pydantic ValidationError,
        UnsupportedEventError, BadAction) and DeliveryPendingError when a receiver could not be brought up to date."""
        if is_action(raw):
            return self.act(parse_action(raw), seconds_left=seconds_left)
        event = parse_ecs_event(raw)
        kind = _kind(event)
        self.count("EventsReceived", "Kind", kind)
        facts = facts_from_event(event)
        if facts is None:
            self.count("EventsIgnored", "Kind", kind)
            return {"event_id": event.id, "kind": kind, "ignored": "nothing in this event to act on", "receivers": {}}
        changed, outcomes = self._record(facts, seconds_left)
        if not changed:
            self.count("EventsIgnored", "Kind", kind)
        elsewhere = lifecycle.closed_elsewhere(event)
        if elsewhere is not None:
            outcomes = {**outcomes, **self._close_elsewhere(elsewhere, seconds_left)}
        return {
            "event_id": event.id,
            "kind": kind,
            "ignored": None if changed else "already known",
            "receivers": outcomes,
        }

    def _close_elsewhere(self, facts: EventFacts, seconds_left: float) -> dict[str, list[str]]:
        """An alarm's OK on the page the reconciliation sweep made for the alarm as a whole (its clusters unknown),
        when that page is open: one read for the alarm's OK, and no record made when there is none."""
        record = self.store.load(facts.instance.container_instance_arn)
        if record is None or not any(k.status == "OPEN" for known in record.incidents.values() for k in known):
            return {}
        _, outcomes = self._record(facts, seconds_left)
        return {f"{name} (clusters unknown)": sent for name, sent in outcomes.items()}

    def act(self, action: IncidentAction, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """A person's action on an incident (fault_responder.incidents.incident_actions), recorded on the incident's
        record as a fact and delivered like an event's: PagerDuty's acknowledge or resolve, the root, the thread."""
        self.count("EventsReceived", "Kind", "incident_action")
        arn = action.record
        if arn is None and action.dedup_key is not None:
            arn = self.store.page_record(action.dedup_key)
        result: dict[str, Any] = {"event_id": action.key, "kind": "incident_action", "receivers": {}}
        if arn is not None and is_group(arn):
            return {**result, **self._act_on_fleet(arn, action, seconds_left)}
        record = self.store.load(arn) if arn is not None else None
        if record is None:
            # An alert the responder never sent (another integration on the same PagerDuty service), or a record
            # that has aged out: there is nothing to update.
            self.count("EventsIgnored", "Kind", "incident_action")
            return {**result, "ignored": "no incident of the responder has this id or dedup key"}
        if action.kind is ActionKind.SILENCE and self.on_silence is not None:
            self.on_silence()  # the silence was just made: read the silences again before deriving
        reported = _reported(action, self.clock())
        changed, outcomes = self._record(EventFacts(action.key, record.instance, action=reported), seconds_left)
        if not changed:
            self.count("EventsIgnored", "Kind", "incident_action")
        self.count("IncidentActions", "Action", f"{action.via.value}:{action.kind.value}")
        return {**result, "ignored": None if changed else "already known", "receivers": outcomes}

    def _act_on_fleet(self, arn: str, action: IncidentAction, seconds_left: float) -> dict[str, Any]:
        """An action on a fleet incident: written with the group's fleet identities, then the group's receivers
        brought up to date (PagerDuty's acknowledge, the fleet root, its thread)."""
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        for _ in range(MAX_WRITE_CONFLICTS):
            group = self.store.load_group(arn)
            if group is None or self.grouping is None:
                self.count("EventsIgnored", "Kind", "incident_action")
                return {"ignored": "no fleet incident of the responder has this id or dedup key"}
            if not group.add_action(_reported(action, self.clock())):
                self.count("EventsIgnored", "Kind", "incident_action")
                outcomes = self._collect(self._submit_group(arn, owner, until))
                return {"ignored": "already known", "receivers": outcomes}
            try:
                self.store.commit_fleets(group, acted=True, listed=group.open_fleet is not None)
                break
            except ConcurrentUpdateError:
                continue
        else:
            raise ConcurrentUpdateError(f"{arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")
        self.count("IncidentActions", "Action", f"{action.via.value}:{action.kind.value}")
        return {"ignored": None, "receivers": self._collect(self._submit_group(arn, owner, until))}

    def observe(self, facts: EventFacts, *, seconds_left: float = 60.0) -> bool:
        """Facts found with no event (the reconciliation sweep, fault_responder.operations.reconcile), recorded and
        delivered exactly as an event's: True if they were news. Raises DeliveryPendingError as handle does."""
        changed, _ = self._record(facts, seconds_left)
        return changed

    def _record(self, facts: EventFacts, seconds_left: float) -> tuple[bool, dict[str, list[str]]]:
        """An event's facts written, its groups joined, every receiver brought up to date."""
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        applied = self._apply(facts, owner, until)
        record, held, changed = applied.record, applied.held, applied.changed
        groups: list[str] = []
        touched = _touched(facts, record)
        if applied.alone:
            # A lone fault: its page goes out now, while its member is written (no fleet incident can mute it).
            # Its member is written from a copy taken first: the deliveries note what they send on the record they
            # are given, from their own threads, and a copy taken while they write would read a changing dict.
            grouped = copy.deepcopy(record)
            jobs = self._submit(
                record,
                self.derive(record),
                held=held,
                owner=owner,
                until=until,
                target=self._instance_target(record.arn),
            )
            _, groups = self._group(grouped, touched, applied.registered)
            for arn in groups:
                jobs.update(self._submit_group(arn, owner, until))
            return changed, self._collect(jobs)
        if changed or touched:
            # Also when nothing changed: a copy of a health event retried after a failure between the write of
            # its facts and its group's must still make the instance a member (writing a member twice is harmless).
            record, groups = self._group(record, touched, applied.registered)
        view = self.derive(record)
        self._count_drain(facts, view, changed)
        return changed, self._deliver_all(record, view, held=held, groups=groups, owner=owner, until=until)

    def reconcile(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring an instance's receivers up to date with what its facts mean now, with no new event: a hold-down
        that ended, a silence that expired, a delivery left unfinished. Raises DeliveryPendingError as handle
        does. `sweeping`: a receiver that failed recently is left alone until its backoff ends, and a record with
        nothing open whose every receiver was told is taken off the sweep's list."""
        record = self.store.load(arn)
        if record is None:
            return {"instance": arn, "receivers": {}}
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        record, held, changed = self._settle(record, None, owner, until)
        groups: list[str] = []
        if changed:
            record, groups = self._group(record, set(record.incidents))
        view = self.derive(record)
        outcomes = self._deliver_all(
            record, view, held=held, groups=groups, owner=owner, until=until, sweeping=sweeping
        )
        result: dict[str, Any] = {"instance": arn, "receivers": outcomes}
        if sweeping:
            result.update(self._told(arn, self.store.load(arn), self.derive))
        return result

    def reconcile_group(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring a group's fleet incidents and their receivers up to date (the sweep: an open fleet incident whose
        closer died, member updates that waited for the next batch, a delivery left unfinished)."""
        head = self.store.load_group(arn)
        if head is None or self.grouping is None:
            return {"group": arn, "receivers": {}}
        fleet = head.fleet()
        if fleet is not None:
            self._close_if_empty(arn, fleet.id, looking=True)
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        outcomes = self._collect(self._submit_group(arn, owner, until, sweeping=sweeping))
        result: dict[str, Any] = {"group": arn, "receivers": outcomes}
        if sweeping:
            result.update(self._told(arn, self.load_fleets(arn), self._derive_any))
        return result

    def _told(
        self, arn: str, record: InstanceRecord | GroupRecord | None, derive: Callable[[Any], View]
    ) -> dict[str, Any]:
        """After the sweep's delivery: whether the record still has something open, since when a closure has waited
        to be told (its first failed delivery), and the record taken off the sweep's list when nothing is left."""
        if record is None:
            return {"open": False, "pending_since": None}
        view = derive(record)
        is_open = any(incident.is_open for incident in view.incidents)
        pending = [
            name
            for name, receiver in self.receivers.items()
            if plan(name, receiver, view, record, dashboard_url=self.courier.dashboard_url)
        ]
        notes = isinstance(record, InstanceRecord) and isinstance(view, InstanceView) and self.holds_notes(record, view)
        if not is_open and not pending and not notes:
            self.store.unlist(arn, record.version)
        since = [b.since for name, b in record.backoff.items() if name in pending]
        return {"open": is_open, "pending_since": None if is_open or not since else min(since)}

    def sweep(self, *, seconds_left: float, limit: int = SWEEP_LIMIT) -> dict[str, int]:
        """Reconcile every record on the sweep's list (something open, or a closure not told to every receiver
        yet), as time alone may have changed what it means (a hold-down or a quiet deadline ended, fleet updates
        waited, a run died mid-delivery, a receiver is back). Bounded by `limit` records and the time left; what
        is not reached now is reached by the next run. Reports how long the oldest closure has waited."""
        ends = self.epoch() + seconds_left
        tally = {"records": 0, "failed": 0, "deferred": 0, "closures_pending": 0}
        oldest: float | None = None
        for arn in self.store.open_records():
            left = ends - self.epoch()
            if tally["records"] >= limit or left < SWEEP_MARGIN_SECONDS:
                tally["deferred"] += 1
                continue
            tally["records"] += 1
            try:
                if is_group(arn):
                    result = self.reconcile_group(arn, seconds_left=left, sweeping=True)
                else:
                    result = self.reconcile(arn, seconds_left=left, sweeping=True)
            except Exception as error:  # one record's failure must not stop the sweep of the others
                tally["failed"] += 1
                self.count("SweepFailures", "Kind", type(error).__name__)
                log.warning("the sweep could not bring %s up to date (the next run tries again): %s", arn, error)
                result = self._pending_after_failure(arn)
            since = result.get("pending_since")
            if since is not None:
                tally["closures_pending"] += 1
                oldest = since if oldest is None else min(oldest, since)
        age = 0.0 if oldest is None else max(0.0, (self.epoch() - oldest) / 60)
        self.measure("PendingClosureAgeMinutes", "Sweep", "closures", age)
        return tally

    def open_incidents(self, *, limit: int = SWEEP_LIMIT) -> list[Incident]:
        """The open incidents and fleet incidents as derived now, of at most `limit` records on the sweep's list (what a
        silence mutes, to tell its channels: fault_responder.alerting.announce)."""
        found: list[Incident] = []
        for number, arn in enumerate(self.store.open_records()):
            if number >= limit:
                log.warning("open incidents: only the first %d records on the sweep's list were read", limit)
                break
            if is_group(arn):
                head = self.load_fleets(arn)
                incidents = self.derive_fleet(head).incidents if head is not None else []
            else:
                record = self.store.load(arn)
                incidents = self.derive(record).incidents if record is not None else []
            found.extend(incident for incident in incidents if incident.is_open)
        return found

    def _pending_after_failure(self, arn: str) -> dict[str, Any]:
        """What a failed reconciliation left: a closure whose delivery failed is still pending."""
        try:
            record = self.load_fleets(arn) if is_group(arn) else self.store.load(arn)
        except Exception:  # the record itself cannot be read: counted by the failure already
            return {}
        if record is None:
            return {}
        return self._told(arn, record, self._derive_any) if record.backoff else {}

    def derive_fleet(self, group: GroupRecord) -> FleetView:
        if self.grouping is None:
            return FleetView()
        return derive_fleet(
            group, self.grouping, self.router.route, self.clock(), self.policy, accounts=self.settings.accounts
        )

    def derive(self, record: InstanceRecord) -> InstanceView:
        now = self.clock()
        view = derive(record, self.settings, self.router.route, now, self.policy)
        for incident in view.incidents:
            if self._untold_notes(record, incident):
                # Where the notices the workflow held back go once nothing holds them back: the fleet incident the
                # incident belongs to, if any (one read of the group's head, only while such a notice waits).
                incident.fleet_place = fleet_place(
                    self.store,
                    incident,
                    self.grouping,
                    route=self.router.route,
                    now=now,
                    policy=self.policy,
                    accounts=self.settings.accounts,
                )
        return view

    def _untold_notes(self, record: InstanceRecord, incident: Incident) -> bool:
        """Whether a notice the workflow held back from some receivers of the incident is still to be told to one of
        them (by the receiver's delivery that records it: the incident's own, or its PagerDuty alert's)."""
        for entry in incident.timeline:
            note = entry.note
            if note is None:
                continue
            for name in note.held:
                receiver = self.receivers.get(name)
                if receiver is None or name not in incident.receivers:
                    continue  # (no longer routed to it: nothing is told to it any more)
                if receiver.pagerduty is not None and not note.pagerduty:
                    continue
                subject = pagerduty_subject(incident.fingerprint) if receiver.pagerduty is not None else incident.id
                if entry.key not in record.delivery(name, subject).steps:
                    return True
        return False

    def holds_notes(self, record: InstanceRecord, view: InstanceView) -> bool:
        """Whether the record keeps a held-back notice not told yet: it stays on the sweep's list until it is, open
        incident or not (the sweep tells it once nothing holds it back)."""
        return any(self._untold_notes(record, incident) for incident in view.incidents)

    # --- 1. Facts ---------------------------------------------------------------------------------------

    def _apply(self, facts: EventFacts, owner: str, until: float) -> _Applied:
        arn = facts.instance.container_instance_arn
        stored: InstanceRecord | None
        if facts.health and facts.status is None and facts.task is None:
            fresh = InstanceRecord(arn, facts.instance)
            fresh.add(facts)
            view = self.derive(fresh)
            fresh.incidents = view.known
            leases, intents = self._claims(fresh, view, owner, until)
            # While the facts are written, look whether the fault is alone in its group (no fleet incident to join,
            # no threshold it crosses): then its page need not wait for its member to be written.
            scouts = self._scout(view)
            try:
                committed = self.store.commit_checks(fresh, list(fresh.health), leases=leases, deliveries=intents)
                self._count_incidents({}, fresh.incidents)
                return _Applied(
                    committed.record, committed.leases, changed=True, alone=_alone(scouts), registered=_heads(scouts)
                )
            except ConcurrentUpdateError as conflict:
                stored = conflict.stored
        else:
            stored = self.store.load(arn)
            scouts = []
        record, held, changed = self._settle(stored or InstanceRecord(arn, facts.instance), facts, owner, until)
        return _Applied(record, held, changed=changed, registered=_heads(scouts))

    def _scout(self, view: InstanceView) -> list[_Scout]:
        """For each new fault that could join a group, its registration among the group's recent members, written
        in the background: the head it returns says whether the fault is alone."""
        grouping = self.grouping
        if grouping is None:
            return []
        scouts: list[_Scout] = []
        for incident in view.incidents:
            if not incident.is_open or incident.instance.drill or incident.instance.is_alarm:
                continue
            group = group_of(incident, grouping, self.settings.accounts)
            instance = incident.instance.container_instance_arn
            recent = Recent.of(member_of(incident, 0))
            head = self._scouts.submit(
                self.store.register, group_arn(group), group, group_where(incident), instance, recent
            )
            scouts.append(_Scout(incident, grouping, head))
        return scouts

    def _settle(
        self, stored: InstanceRecord, facts: EventFacts | None, owner: str, until: float
    ) -> tuple[InstanceRecord, dict[str, Lease], bool]:
        """Add the facts (if any) and write what changed, identities included, re-reading on a conflict."""
        arn = stored.arn
        for _ in range(MAX_WRITE_CONFLICTS):
            record = stored
            changed = record.add(facts) if facts is not None else False
            view = self.derive(record)
            changed = _identities_changed(record.incidents, view.known) or changed
            if not changed:
                return record, {}, False
            before = record.incidents
            record.incidents = view.known
            # Leases only: an intent written here would overwrite the whole delivery as this worker read it, and a
            # root another worker posted since (deliveries do not move the version this write is conditioned on)
            # would be forgotten, and posted again. The flush records its intent under the lease instead.
            leases, _ = self._claims(record, view, owner, until)
            forget = _forgotten(record, view)
            try:
                # On the sweep's list while anything is left to tell (a closure PagerDuty has not heard of yet).
                listed = bool(leases) or self.holds_notes(record, view)
                committed = self.store.commit(record, leases=leases, forget=forget, listed=listed)
                self._count_incidents(before, view.known)
                return committed.record, committed.leases, True
            except ConcurrentUpdateError as conflict:
                reloaded = conflict.stored if conflict.stored is not None else self.store.load(arn)
                if reloaded is None:
                    if facts is None:
                        raise
                    reloaded = InstanceRecord(arn, facts.instance)
                stored = reloaded
        raise ConcurrentUpdateError(f"{arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")

    def _claims(
        self, record: InstanceRecord, view: InstanceView, owner: str, until: float
    ) -> tuple[list[Lease], list[Delivery]]:
        """The leases to take with the write (receivers with work), and the intents of first root posts, so
        that a new fault's first page needs no further write (the fast path only: a new check's incident has no
        delivery another worker could have written meanwhile)."""
        leases: list[Lease] = []
        intents: list[Delivery] = []
        now = self.clock()
        for name, receiver in self.receivers.items():
            steps = plan(name, receiver, view, record, dashboard_url=self.courier.dashboard_url)
            if not steps:
                continue
            leases.append(Lease(name, owner, until))
            for step in steps:
                marker = step.marker(receiver)
                sent = record.delivery(name, step.subject)
                if step.kind == StepKind.POST_ROOT and marker and pending_since(sent, marker) is None:
                    intents.append(with_pending(sent, marker, now, owner))
        return leases, intents

    # --- 2. Groups ---------------------------------------------------------------------------------------

    def _group(
        self, record: InstanceRecord, checks: set[str], registered: dict[str, GroupRecord] | None = None
    ) -> tuple[InstanceRecord, list[str]]:
        """Write the instance's member of each group its changed checks belong to, open or close the group's fleet
        incident when that member makes it so, and note which open fleet incident the instance's incidents count in
        (they are muted from then on). Returns the record as stored and the groups whose fleet incidents changed."""
        if self.grouping is None or record.instance.drill or record.instance.is_alarm:
            return record, []  # a drill, or an alarm (one incident by itself), is never a member of a fleet incident
        latest = latest_incidents(self.derive(record).incidents)
        groups: list[str] = []
        joined: dict[str, str] = {}
        for check in sorted(checks):
            incident = latest.get(check)
            if incident is None:
                continue
            membership = self._membership(incident, record.version, (registered or {}).get(incident.id))
            if membership.fleet is not None:
                joined[incident.id] = membership.fleet
            if membership.changed and (membership.head is None or self._fleet_due(membership.head)):
                groups.append(membership.arn)
        if joined:
            record = self._join(record, joined)
        return record, groups

    def _membership(self, incident: Incident, version: int, registered: GroupRecord | None = None) -> _Membership:
        """One instance's member of its group written; the fleet incident opened, joined, left or closed as that
        member makes it. Every step costs the same whatever the group's size. `registered`: the head as the member's
        registration among the recent members returned it already (a new fault's look-ahead)."""
        grouping = _required_grouping(self.grouping)
        group = group_of(incident, grouping, self.settings.accounts)
        arn, where = group_arn(group), group_where(incident)
        instance = incident.instance.container_instance_arn
        written = self.store.put_member(arn, group, where, instance, member_of(incident, version))
        member = written.stored
        for _ in range(MAX_WRITE_CONFLICTS):
            head: GroupRecord | None
            if member.is_open:
                # Registered among the recent members, or told the open fleet incident: one conditional write, which
                # sees every member registered before it.
                head = registered or self.store.register(arn, group, where, instance, Recent.of(member))
            else:
                head = self.store.load_group(arn)
            registered = None
            fleet = head.fleet() if head is not None else None
            if head is None or fleet is None:
                if head is not None and not member.is_open and instance in head.recent:
                    self.store.forget_recent(arn, [instance])
                if not member.is_open or head is None:
                    return _Membership(arn)
                opened = self._open_if_crossed(head, member)
                if opened is _RETRY:
                    continue
                if opened is None:
                    return _Membership(arn)
                # A fleet incident opened: this member is one of its founders, or opened before its window.
                return _Membership(arn, fleet=str(opened) or None, changed=True)
            if not counts_in(fleet, member):
                return _Membership(arn)
            if member.is_open:
                escalated = self._escalate(head, fleet, member)
                if member.fleet == fleet.id:
                    # Founding, or joined before (a copy, a newer report): only a fault worse than it was is news.
                    return _Membership(arn, fleet=fleet.id, changed=escalated)
                if is_founder(fleet, member):
                    self.store.mark_member(arn, member, fleet=fleet.id, told=Told.FOUNDING)
                    return _Membership(arn, fleet=fleet.id, changed=escalated)  # counted when the fleet opened
                # The join is claimed on the member before it is counted: of two deliveries of its reports at once
                # (two threads of a batch, two invocations), only the one whose mark changed it counts it.
                if not self.store.mark_member(arn, member, fleet=fleet.id, told=Told.JOINED):
                    return _Membership(arn, fleet=fleet.id, changed=escalated)  # the other counted it
                after = self.store.advance(arn, fleet.id, joined=True)
                if after is None:
                    continue  # the fleet incident closed meanwhile: look again
                self._tell(arn, after, fleet, member, told=Told.JOINED, at=member.opened_at)
                return _Membership(arn, fleet=fleet.id, changed=True, head=None if escalated else after)
            if (member.told == Told.LEFT.value and member.fleet == fleet.id) or not self.store.mark_member(
                arn, member, fleet=fleet.id, told=Told.LEFT
            ):
                # Told already (a copy, or another delivery claimed the leave): the fleet incident may still be
                # waiting to close (its closer died).
                return _Membership(arn, changed=self._close_if_empty(arn, fleet.id))
            after = self.store.advance(arn, fleet.id, joined=False)
            if after is None:
                continue
            self._tell(arn, after, fleet, member, told=Told.LEFT, at=member.closed_at or member.opened_at)
            if self._close_if_empty(arn, fleet.id):
                return _Membership(arn, changed=True)  # closed: every receiver has news
            return _Membership(arn, changed=True, head=after)
        raise ConcurrentUpdateError(f"{arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")

    def _escalate(self, head: GroupRecord, fleet: FleetIdentity, member: FleetMember) -> bool:
        """Write on the open fleet incident's identity what this member makes it (more severe, or a fault of another
        kind than the others'); True when that changed it. Rare: a fleet's members are mostly one fault."""
        for _ in range(MAX_WRITE_CONFLICTS):
            changed = escalated(fleet, Recent.of(member))
            if changed is None:
                return False
            head.incidents = [changed if k.id == fleet.id else k for k in head.incidents]
            try:
                self.store.commit_fleets(head)
                return True
            except ConcurrentUpdateError:
                reloaded = self.store.load_group(head.arn)
                current = reloaded.fleet() if reloaded is not None else None
                if reloaded is None or current is None or current.id != fleet.id:
                    return False
                head, fleet = reloaded, current
        return False

    def _tell(
        self, arn: str, head: GroupRecord, fleet: FleetIdentity, member: FleetMember, *, told: Told, at: datetime
    ) -> None:
        """The journal entry the fleet's thread names the member by, under the number `advance` took (the member was
        marked before: a delivery that dies between the mark and here leaves the member uncounted and unnamed in the
        thread, never counted twice; the sweep closes a fleet incident whose count fell short)."""
        entry = JournalEntry(head.journal_seq, fleet.id, told, member, at, self.epoch())
        self.store.append_journal(arn, entry)

    def _open_if_crossed(self, head: GroupRecord, member: FleetMember) -> str | object | None:
        """Open the group's fleet incident if `threshold` of its recent members (this one included) opened within
        the window: its id when this member is one of its founders ("" when it opened before the fleet's window),
        _RETRY when someone else changed the fleet incidents meanwhile, None when the threshold is not crossed."""
        grouping = _required_grouping(self.grouping)
        window = grouping.window
        stale = stale_recent(head, window)
        if stale:
            self.store.forget_recent(head.arn, stale[:MAX_FORGET])
        moment = crossing([recent.opened_at for recent in head.recent.values()], grouping.threshold, window)
        if moment is None:
            return None
        founders = founders_of(head, moment, window)
        identity = opened_identity(head, moment, window, founders, now=self.clock())
        head.incidents = trimmed([*head.incidents, identity])
        # Counted now: the founders it remembers. One it cannot (a burst past MAX_FOUNDERS before anyone looked) is
        # counted when it is next reported, as a member that joins: never twice.
        head.open_fleet, head.joined = identity.id, len(identity.founders)
        try:
            self.store.commit_fleets(head, forget=sorted(head.recent))
        except ConcurrentUpdateError:
            return _RETRY
        self.count("FleetIncidentsOpened", "Group", "fleet")
        return identity.id if member.instance.container_instance_arn in founders else ""

    def _close_if_empty(self, arn: str, fleet_id: str, *, looking: bool = False) -> bool:
        """Close the fleet incident if none of its members is open: only if nobody joined since this looked (the
        close is conditional on the head's version). True when it closed. The members are looked at only once as
        many left as joined, unless `looking` (the sweep: a closer that died, a member counted twice)."""
        for _ in range(MAX_WRITE_CONFLICTS):
            head = self.store.load_group(arn)
            fleet = head.fleet() if head is not None else None
            if head is None or fleet is None or fleet.id != fleet_id or fleet.since is None:
                return False
            if not looking and head.left < head.joined:
                return False
            if self.store.open_members(arn, fleet.since, limit=1):
                return False
            last = [e.at for e in self.store.journal(arn, max(head.journal_seq - 1, 0), limit=1)]
            closed = closed_identity(head, fleet, max([fleet.anchor, *last]))
            head.incidents = [closed if k.id == fleet.id else k for k in head.incidents]
            head.open_fleet = None
            try:
                # Kept on the sweep's list until every receiver was told it is over (the sweep takes it off).
                self.store.commit_fleets(head, expected_version=head.version, listed=True)
            except ConcurrentUpdateError:
                continue
            return True
        return False

    def _join(self, record: InstanceRecord, joined: dict[str, str]) -> InstanceRecord:
        """Mark the instance's incidents as members of the fleet incidents they joined (once)."""
        for _ in range(MAX_WRITE_CONFLICTS):
            marked = False
            for known in record.incidents.values():
                for identity in known:
                    fleet = joined.get(identity.id)
                    if fleet is not None and identity.fleet != fleet and identity.status == "OPEN":
                        identity.fleet = fleet
                        marked = True
            if not marked:
                return record
            try:
                return self.store.commit(record).record
            except ConcurrentUpdateError as conflict:
                reloaded = conflict.stored if conflict.stored is not None else self.store.load(record.arn)
                if reloaded is None:
                    raise
                record = reloaded
        raise ConcurrentUpdateError(f"{record.arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")

    # --- 3. Deliveries ------------------------------------------------------------------------------------

    def _deliver_all(
        self,
        record: InstanceRecord,
        view: InstanceView,
        *,
        held: dict[str, Lease],
        groups: list[str],
        owner: str,
        until: float,
        sweeping: bool = False,
    ) -> dict[str, list[str]]:
        """Flush every receiver with work, the instance's and its groups' fleet incidents', all at once."""
        target = self._instance_target(record.arn)
        jobs = self._submit(record, view, held=held, owner=owner, until=until, target=target, sweeping=sweeping)
        for arn in groups:
            jobs.update(self._submit_group(arn, owner, until, sweeping=sweeping))
        return self._collect(jobs)

    def _fleet_due(self, head: GroupRecord) -> bool:
        """Whether a receiver of the group's open fleet incident may have something due now, from the head alone: a
        root or page not sent yet, a batch of member updates full, or the last one a minute old. False only when
        nothing can be due: the member updates wait for their batch, and nothing else is read for them."""
        fleet = head.fleet()
        if fleet is None:
            return True
        now = self.clock()
        incident = self.derive_fleet(head).incident(fleet.id)
        if incident is None:
            return True
        for name in incident.receivers:
            if name in incident.muted:
                continue
            receiver = self.receivers[name]
            subject = pagerduty_subject(incident.fingerprint) if receiver.pagerduty is not None else fleet.id
            sent = head.delivery(name, subject)
            if sent.ts is None and sent.alert is None:
                return True  # nothing sent yet
            if sent.last_at is None or now - sent.last_at >= FLEET_BATCH_WAIT:
                return True
            told = sent.cursor if sent.cursor is not None else fleet.first_seq
            if receiver.pagerduty is None and head.journal_seq - told >= FLEET_BATCH:
                return True
        return False

    def _submit_group(
        self, arn: str, owner: str, until: float, *, sweeping: bool = False
    ) -> dict[str, Future[_Flushed]]:
        """Flush the group's receivers that have work. Whether they have is decided from the head and the journal
        alone (the member counts and lists are read by the flush, when a message is rendered)."""
        head = self.load_fleets(arn, counts=False)
        if head is None:
            return {}
        target = self._group_target(arn)
        jobs = self._submit(
            head, self.derive_fleet(head), held={}, owner=owner, until=until, target=target, sweeping=sweeping
        )
        return {f"{name} (fleet)": job for name, job in jobs.items()}

    def load_fleets(self, arn: str, *, counts: bool = True) -> GroupRecord | None:
        """The group's head, and what deriving its fleet incidents reads beside it (all bounded): the open fleet
        incident's open members (`counts`), and the journal entries some receiver has not been told yet."""
        head = self.store.load_group(arn)
        if head is None:
            return None
        if counts:
            with_open_members(self.store, head)
        # The receivers that keep a thread (or post webhook messages) of each fleet incident: PagerDuty keeps none.
        receivers = {
            incident.id: [name for name in incident.receivers if self.receivers[name].pagerduty is None]
            for incident in self.derive_fleet(head).incidents
        }
        after = _untold_from(head, receivers)
        if after is not None:
            entries = self.store.journal(arn, after, limit=JOURNAL_PAGE)
            head.journal = readable_journal(entries, after, self.epoch())
        return head

    def _collect(self, jobs: dict[str, Future[_Flushed]]) -> dict[str, list[str]]:
        outcomes = {name: job.result() for name, job in jobs.items()}
        failures = {name: outcome.failure for name, outcome in outcomes.items() if outcome.failure}
        if failures:
            raise DeliveryPendingError(failures)
        return {name: outcome.sent for name, outcome in outcomes.items()}

    def _submit(
        self,
        record: InstanceRecord | GroupRecord,
        view: View,
        *,
        held: dict[str, Lease],
        owner: str,
        until: float,
        target: _Target,
        sweeping: bool = False,
    ) -> dict[str, Future[_Flushed]]:
        arn = record.arn
        now = self.epoch()
        jobs: dict[str, Future[_Flushed]] = {}
        for name, receiver in self.receivers.items():
            lease = held.get(name)
            fresh = lease is not None
            if lease is None:
                if not plan(name, receiver, view, record, dashboard_url=self.courier.dashboard_url):
                    continue
                backoff = record.backoff.get(name)
                if sweeping and backoff is not None and backoff.retry_at > now:
                    continue  # failed recently: the sweep tries it again when its backoff ends
                candidate = Lease(name, owner, until)
                if not self.store.take_lease(arn, candidate, now):
                    continue  # its holder delivers this event's facts before it lets go
                lease = candidate
            # A lease taken with this worker's write comes with the record as that write left it; a lease taken
            # afterwards may follow another holder's deliveries, which `record` (read earlier) does not show.
            jobs[name] = self._pool.submit(self._flush, name, receiver, lease, record, target, fresh=fresh)
        return jobs

    def _instance_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.store.load(arn), derive=self._derive_any)

    def _group_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.load_fleets(arn), derive=self._derive_any)

    def _derive_any(self, record: InstanceRecord | GroupRecord) -> View:
        return self.derive_fleet(record) if isinstance(record, GroupRecord) else self.derive(record)

    def _flush(
        self,
        name: str,
        receiver: Receiver,
        lease: Lease,
        record: InstanceRecord | GroupRecord,
        target: _Target,
        *,
        fresh: bool = True,
    ) -> _Flushed:
        """Send what `name` is missing until nothing is, then let go of its lease. Unless `record` is `fresh` (as
        the write that took the lease left it), it is read again first: what was delivered before the lease was
        taken is never delivered again. Every call to the receiver is fenced by the lease: it must end before the
        lease can, or it is not made (a holder that stalled never sends after someone else took over). A failure
        is remembered with a backoff the sweep honours."""
        flushed = _Flushed()
        local = record
        channel = "pagerduty" if receiver.pagerduty is not None else "slack"
        try:
            if not fresh:
                local = self._reload(target, record)
            planned: tuple[View, list[Step]] | None = None
            while True:
                view, steps = planned or self._plan(name, receiver, local, target)
                planned = None
                if not steps:
                    if self.store.release(local.arn, lease, local.version):
                        return flushed
                    local = self._reload(target, local)
                    continue
                if len(flushed.sent) >= MAX_STEPS_PER_FLUSH:
                    raise RuntimeError(f"more than {MAX_STEPS_PER_FLUSH} steps for one receiver")
                step = steps[0]
                with fenced(lease.until - LEASE_SKEW_SECONDS, clock=self.epoch):
                    told = self._perform(name, receiver, lease, local=local, view=view, step=step)
                flushed.sent.append(step.describe())
                self.count("NotificationsSent", "Channel", channel)
                released, planned, local = self._record_told(
                    name, receiver, lease, local=local, target=target, step=step, told=told
                )
                if released:
                    return flushed
        except LeaseLostError as error:
            flushed.failure = f"lease lost: {error}"
        except LeaseEndingError as error:
            flushed.failure = str(error)
        except DeliveryError as error:
            self.count("NotificationsFailed", "Channel", channel)
            flushed.failure = str(error)
            self._back_off(local, name, lease)
        except Exception as error:  # a bug must fail the event (and reach the DLQ with its reason), not vanish
            self.count("NotificationsFailed", "Channel", channel)
            flushed.failure = f"{type(error).__name__}: {error}"
            self._back_off(local, name, lease)
        self.store.drop_lease(local.arn, lease)
        return flushed

    def _record_told(
        self,
        name: str,
        receiver: Receiver,
        lease: Lease,
        *,
        local: InstanceRecord | GroupRecord,
        target: _Target,
        step: Step,
        told: tuple[Delivery, Delivery],
    ) -> tuple[bool, tuple[View, list[Step]] | None, InstanceRecord | GroupRecord]:
        """Records what `step` told the receiver (`told`: before and after it). When that was the last thing the
        receiver was missing, the lease goes with the same write (one write, where recording then releasing took
        two), unless facts arrived meanwhile. Returns whether the lease was released, what is still missing where
        that is known (None: look again), and the record to go on from."""
        before, after = told
        local.deliveries[(name, step.subject)] = after
        pages = step.kind is StepKind.TRIGGER and before.incident != after.incident
        batch = step.batch and isinstance(local, GroupRecord)
        if pages or batch:
            self.store.record_delivery(local.arn, lease, after)
            if pages:
                # PagerDuty's webhooks name only the dedup key: remember whose alert it is (once per incident).
                self.store.remember_page(step.subject.removeprefix("pd:"), local.arn)
            # A fleet's journal is read a page at a time: the next page, with the cursor just recorded.
            return False, None, self._reload(target, local) if batch else local
        try:
            planned = self._plan(name, receiver, local, target)
        except Exception:
            self.store.record_delivery(local.arn, lease, after)  # what was sent is recorded whatever fails next
            raise
        if not planned[1] and self.store.record_and_release(local.arn, lease, after, local.version):
            return True, None, local
        self.store.record_delivery(local.arn, lease, after)
        if planned[1]:
            return False, planned, local
        return False, None, self._reload(target, local)  # facts arrived: what they change is sent before letting go

    def _back_off(self, record: InstanceRecord | GroupRecord, name: str, lease: Lease) -> None:
        """Remember the receiver's failure: the sweep tries again at its next run, then waits 1, 2, 4, ... up to 15
        minutes between tries (an event tries at once: news is worth a try). A flush that completes clears it."""
        now = self.epoch()
        before = record.backoff.get(name)
        failures = (before.failures if before is not None else 0) + 1
        wait = 0.0 if failures == 1 else min(BACKOFF_FIRST_SECONDS * 2 ** (failures - 2), BACKOFF_MAX_SECONDS)
        since = before.since if before is not None else now
        try:
            self.store.back_off(record.arn, lease, Backoff(name, failures, since, now + wait))
        except LeaseLostError:
            return  # another holder took over meanwhile: its outcome is what counts

    def _perform(
        self,
        name: str,
        receiver: Receiver,
        lease: Lease,
        *,
        local: InstanceRecord | GroupRecord,
        view: View,
        step: Step,
    ) -> tuple[Delivery, Delivery]:
        """Makes the step's call to the receiver (writing first, where the step has a marker, that it is on its way):
        what the receiver was told before it, and after it. Recording `after` is the caller's."""
        arn = local.arn
        before = as_seen_by(local.delivery(name, step.subject), lease.owner)
        marker = step.marker(receiver)
        if marker is not None and pending_since(local.delivery(name, step.subject), marker) is None:
            intent = with_pending(before, marker, self.clock(), lease.owner)
            self.store.record_delivery(arn, lease, intent)
            local.deliveries[(name, step.subject)] = intent
        try:
            after = self.courier.perform(name, receiver, step, view, before)
        except DeliveryError as error:
            if marker is not None and not error.unknown_outcome:
                # Known not to have landed: no need to look for it next time.
                cleared = without_pending(local.delivery(name, step.subject), marker)
                self.store.record_delivery(arn, lease, cleared)
            raise
        return before, after

    def _plan(
        self, name: str, receiver: Receiver, local: InstanceRecord | GroupRecord, target: _Target
    ) -> tuple[View, list[Step]]:
        view = target.derive(local)
        return view, plan(name, receiver, view, local, dashboard_url=self.courier.dashboard_url)

    @staticmethod
    def _reload(target: _Target, local: InstanceRecord | GroupRecord) -> InstanceRecord | GroupRecord:
        reloaded = target.load()
        if reloaded is None:
            raise LeaseLostError(f"{local.arn} is gone")
        return reloaded

    # --- Metrics ------------------------------------------------------------------------------------------

    def _count_incidents(self, before: dict[str, list[KnownIncident]], after: dict[str, list[KnownIncident]]) -> None:
        """Counted after the write that made the change, so a conflicting writer that re-reads counts nothing twice."""
        opened, resolved = incident_transitions(before, after)
        for fault_class in opened:
            self.count("IncidentsOpened", "Class", fault_class)
        for fault_class in resolved:
            self.count("IncidentsResolved", "Class", fault_class)

    def _count_drain(self, facts: EventFacts, view: InstanceView, changed: bool) -> None:
        if not changed or facts.status is None or facts.status.status != "DRAINING":
            return
        alert = next((a for a in view.alerts if a.key == f"drain:{facts.status.event_id}"), None)
        if alert is not None and alert.drain is not None:
            self.count("DrainAttributions", "Attribution", alert.drain.cause.value)


@dataclass(frozen=True, slots=True)
class _Applied:
    """An event's facts written: the record as stored, the leases taken with the write, whether anything was new,
    and whether it is a new fault alone in its group (its page need not wait for the group)."""

    record: InstanceRecord
    held: dict[str, Lease]
    changed: bool
    alone: bool = False
    registered: dict[str, GroupRecord] = field(default_factory=dict)
    """Incident id -> its group's head as registering its member returned it (the look-ahead of a new fault)."""


@dataclass(frozen=True, slots=True)
class _Scout:
    incident: Incident
    grouping: Grouping
    head: Future[GroupRecord]


def _heads(scouts: list[_Scout]) -> dict[str, GroupRecord]:
    """The heads the registrations returned, by incident (those that failed are registered again)."""
    heads: dict[str, GroupRecord] = {}
    for scout in scouts:
        with contextlib.suppress(Exception):
            heads[scout.incident.id] = scout.head.result()
    return heads


def _alone(scouts: list[_Scout]) -> bool:
    """Whether every new fault is alone in its group: no open fleet incident it would count in, and no threshold it
    crosses with the members registered before it. Anything unknown (a write that failed) is not alone."""
    if not scouts:
        return False
    for scout in scouts:
        try:
            head = scout.head.result()
        except Exception:  # the member is written next anyway, and that path registers it again
            return False
        if head.fleet() is not None:
            return False
        opened = [recent.opened_at for recent in head.recent.values()]
        if crossing(opened, scout.grouping.threshold, scout.grouping.window) is not None:
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Membership:
    """What writing one member did to its group: the fleet incident its incident counts in (None: none), and
    whether the group's fleet incidents changed (someone joined or left, one opened or closed)."""

    arn: str
    fleet: str | None = None
    changed: bool = False
    head: GroupRecord | None = None
    """The head as the member's journal entry left it, when that is all that changed: whether a receiver has
    anything due is decided from it, with no further read (fault_responder.notification.delivery batches member
    updates)."""


_RETRY = object()
"""Someone else changed the group's fleet incidents meanwhile: read the head again."""


def _required_grouping(grouping: Grouping | None) -> Grouping:
    if grouping is None:
        raise RuntimeError("fleet incidents are off (no grouping)")
    return grouping


def _untold_from(head: GroupRecord, receivers: dict[str, list[str]]) -> int | None:
    """The journal number after which some receiver of a fleet incident (`receivers`: by fleet id) has not been
    told its entries yet; None when no receiver has anything left to read."""
    froms: list[int] = []
    for fleet in head.incidents:
        last = head.journal_seq if fleet.status == "OPEN" else (fleet.last_seq or fleet.first_seq)
        if last <= fleet.first_seq:
            continue
        told = [head.delivery(name, fleet.id).cursor for name in receivers.get(fleet.id, [])]
        told += [d.cursor for (_, subject), d in head.deliveries.items() if subject == fleet.id]
        start = min(fleet.first_seq if cursor is None else cursor for cursor in told) if told else last
        if start < last:
            froms.append(start)
    return min(froms) if froms else None


@dataclass(frozen=True, slots=True)
class _Target:
    """How a flush re-reads and re-derives what it delivers (an instance, or a group)."""

    load: Callable[[], InstanceRecord | GroupRecord | None]
    derive: Callable[[InstanceRecord | GroupRecord], View]


def _touched(facts: EventFacts, record: InstanceRecord) -> set[str]:
    """The checks whose incidents an event may have changed: its own, or all of them when the instance left or a
    person acted (which incident an action is about is decided when incidents are derived; an instance has a few
    checks, and writing an unchanged member again is harmless)."""
    checks = {record.check_key(fact.check_type) for fact in facts.health}
    if facts.action is not None or (facts.status is not None and facts.status.status == "INACTIVE"):
        checks |= set(record.incidents)
    return checks


def _reported(action: IncidentAction, now: datetime) -> ReportedAction:
    """The action as a fact; never later than now (a clock that runs ahead must not close an incident in the
    future)."""
    return ReportedAction(
        key=action.key,
        kind=action.kind.value,
        via=action.via.value,
        by=action.by,
        at=min(action.at, now),
        incident=action.incident,
        dedup_key=action.dedup_key,
        note=action.note,
    )


def incident_transitions(
    before: dict[str, list[KnownIncident]], after: dict[str, list[KnownIncident]]
) -> tuple[list[str], list[str]]:
    """The classes of the incidents that became open, and of those that became closed, between two versions of a
    record's identities.

    A new incident counts as opened even when it is already over (a fault learned late is an incident, told to Slack
    as resolved), and then as closed too; one a late event re-opens counts as opened again. So, per class, the
    incidents opened minus those resolved is the number open.
    """
    was = {identity.id: identity.status for known in before.values() for identity in known}
    opened: list[str] = []
    resolved: list[str] = []
    for known in after.values():
        for identity in known:
            fault_class = identity.fault_class or "unknown"
            previous = was.get(identity.id)
            if previous is None or (previous != "OPEN" and identity.status == "OPEN"):
                opened.append(fault_class)
            if identity.status != "OPEN" and previous in (None, "OPEN"):
                resolved.append(fault_class)
    return opened, resolved


def _identities_changed(known: dict[str, list[KnownIncident]], derived: dict[str, list[KnownIncident]]) -> bool:
    return known != derived


def _forgotten(record: InstanceRecord, view: InstanceView) -> list[tuple[str, str]]:
    """Deliveries about incidents the record no longer keeps (trimmed): their state goes with them."""
    subjects = {incident.id for incident in view.incidents} | {alert.key for alert in view.alerts}
    subjects |= {pagerduty_subject(incident.fingerprint) for incident in view.incidents}
    return [key for key in record.deliveries if key[1] not in subjects]


def _kind(event: EcsEvent | AlarmEvent) -> str:
    if isinstance(event, HealthChangeEvent):
        return "health_change"
    if isinstance(event, InstanceStateEvent):
        return "instance_state"
    if isinstance(event, TaskStateEvent):
        return "task_state"
    return "alarm_contributor_state" if event.detail_type.startswith("CloudWatch Alarm Contributor") else "alarm_state"
