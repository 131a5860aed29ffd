"""The alert router's use case: one ECS event in, its facts recorded, every receiver brought up to date.

1. The event's facts are added to its instance's record, and the incidents derived again, in one conditional
   write: a new fault on an instance with no other history is written without a read first (the fast path:
   its Slack root and PagerDuty trigger go out after this one write); otherwise read, derive, write if the
   version is unchanged, and on a conflict read again and re-apply (facts are idempotent, so re-applying is
   always right).
2. Each receiver with something to send is drained by whoever holds its lease, one thread per receiver, so
   a slow Slack never holds back PagerDuty. The lease holder sends until nothing is left, then releases the
   lease only if no new facts arrived meanwhile; a worker that finds the lease held leaves its work to the
   holder. A failed receiver fails the event, which SQS redelivers: the retry finds the facts already
   recorded and only delivers what is still missing.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fault_responder import lifecycle
from fault_responder.adapters.http import DeliveryError
from fault_responder.delivery import (
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
from fault_responder.fleet import (
    FleetView,
    GroupRecord,
    derive_fleet,
    group_arn,
    group_of,
    group_where,
    is_group,
    latest_incidents,
    member_of,
)
from fault_responder.incident_actions import ActionKind, IncidentAction, is_action, parse_action
from fault_responder.lifecycle import InstanceView, derive, facts_from_event
from fault_responder.models.events import (
    EcsEvent,
    HealthChangeEvent,
    InstanceStateEvent,
    TaskStateEvent,
    parse_ecs_event,
)
from fault_responder.policy import Policy
from fault_responder.record import Delivery, EventFacts, InstanceRecord, KnownIncident, Lease, ReportedAction
from fault_responder.routing import Grouping, Receiver, Router
from fault_responder.store import ConcurrentUpdateError, InstanceStore, LeaseLostError

if TYPE_CHECKING:
    from fault_responder.models.alarms import AlarmStateChangeEvent

log = logging.getLogger(__name__)

Counter = Callable[[str, str, str], None]
"""count(metric, dimension name, dimension value)."""

MAX_WRITE_CONFLICTS = 10
MAX_STEPS_PER_DRAIN = 200
SWEEP_LIMIT = 2000
"""Records one sweep run reconciles at most; the rest wait for the next run."""
SWEEP_MARGIN_SECONDS = 10.0
"""A bound on one worker's loop; far above what one instance ever needs."""


class DeliveryPendingError(Exception):
    """Some receivers could not be brought up to date; the event must be retried (SQS redelivers it)."""

    def __init__(self, failures: dict[str, str]) -> None:
        self.failures = failures
        summary = "; ".join(f"{receiver}: {reason}" for receiver, reason in sorted(failures.items()))
        super().__init__(f"{len(failures)} receiver(s) not up to date: {summary}")


@dataclass(slots=True)
class _Drained:
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
        self.clock = clock
        self.epoch = epoch
        self.policy = policy
        self.grouping = grouping if grouping is not None and grouping.enabled else None
        self.on_silence = on_silence
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver")

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
        return {
            "event_id": event.id,
            "kind": kind,
            "ignored": None if changed else "already known",
            "receivers": outcomes,
        }

    def act(self, action: IncidentAction, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """A person's action on an incident (fault_responder.incident_actions), recorded on the incident's record as a
        fact and delivered like an event's: PagerDuty's acknowledge or resolve, the root, the thread."""
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
                outcomes = self._collect(self._submit_group(group, owner, until))
                return {"ignored": "already known", "receivers": outcomes}
            try:
                group = self.store.commit_fleets(group, acted=True)
                break
            except ConcurrentUpdateError:
                continue
        else:
            raise ConcurrentUpdateError(f"{arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")
        self.count("IncidentActions", "Action", f"{action.via.value}:{action.kind.value}")
        return {"ignored": None, "receivers": self._collect(self._submit_group(group, owner, until))}

    def observe(self, facts: EventFacts, *, seconds_left: float = 60.0) -> bool:
        """Facts found with no event (the reconciliation sweep, fault_responder.reconcile), recorded and delivered
        exactly as an event's: True if they were news. Raises DeliveryPendingError as handle does."""
        changed, _ = self._record(facts, seconds_left)
        return changed

    def _record(self, facts: EventFacts, seconds_left: float) -> tuple[bool, dict[str, list[str]]]:
        """An event's facts written, its groups joined, every receiver brought up to date."""
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        record, held, changed = self._apply(facts, owner, until)
        groups: list[GroupRecord] = []
        touched = _touched(facts, record)
        if changed or touched:
            # Also when nothing changed: a copy of a health event retried after a failure between the write of
            # its facts and its group's must still make the instance a member (writing a member twice is harmless).
            record, groups = self._group(record, touched)
        view = self.derive(record)
        self._count_drain(facts, view, changed)
        return changed, self._deliver_all(record, view, held=held, groups=groups, owner=owner, until=until)

    def reconcile(self, arn: str, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """Bring an instance's receivers up to date with what its facts mean now, with no new event: a hold-down
        that ended, a silence that expired, a delivery left unfinished. Raises DeliveryPendingError as handle
        does."""
        record = self.store.load(arn)
        if record is None:
            return {"instance": arn, "receivers": {}}
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        record, held, changed = self._settle(record, None, owner, until)
        groups: list[GroupRecord] = []
        if changed:
            record, groups = self._group(record, set(record.incidents))
        view = self.derive(record)
        return {
            "instance": arn,
            "receivers": self._deliver_all(record, view, held=held, groups=groups, owner=owner, until=until),
        }

    def reconcile_group(self, arn: str, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """Bring a group's fleet incidents and their receivers up to date (the sweep: a delivery left unfinished)."""
        group = self.store.load_group(arn)
        if group is None or self.grouping is None:
            return {"group": arn, "receivers": {}}
        owner = uuid.uuid4().hex
        until = self.epoch() + seconds_left
        group = self._settle_fleets(group)
        outcomes = self._collect(self._submit_group(group, owner, until))
        return {"group": arn, "receivers": outcomes}

    def sweep(self, *, seconds_left: float, limit: int = SWEEP_LIMIT) -> dict[str, int]:
        """Reconcile every record with something open, as time alone may have changed what it means (a hold-down
        or a quiet deadline ended, fleet updates waited, a run died mid-delivery). Bounded by `limit` records
        and the time left; what is not reached now is reached by the next run."""
        ends = self.epoch() + seconds_left
        tally = {"records": 0, "failed": 0, "deferred": 0}
        for arn in self.store.open_records():
            left = ends - self.epoch()
            if tally["records"] >= limit or left < SWEEP_MARGIN_SECONDS:
                tally["deferred"] += 1
                continue
            tally["records"] += 1
            try:
                if is_group(arn):
                    self.reconcile_group(arn, seconds_left=left)
                else:
                    self.reconcile(arn, seconds_left=left)
            except Exception as error:  # one record's failure must not stop the sweep of the others
                tally["failed"] += 1
                self.count("SweepFailures", "Kind", type(error).__name__)
                log.warning("the sweep could not bring %s up to date (the next run tries again): %s", arn, error)
        return tally

    def derive_fleet(self, group: GroupRecord) -> FleetView:
        if self.grouping is None:
            return FleetView()
        return derive_fleet(group, self.grouping, self.router.route, self.clock(), self.policy)

    def derive(self, record: InstanceRecord) -> InstanceView:
        return derive(record, self.settings, self.router.route, self.clock(), self.policy)

    # --- 1. Facts ---------------------------------------------------------------------------------------

    def _apply(self, facts: EventFacts, owner: str, until: float) -> tuple[InstanceRecord, dict[str, Lease], bool]:
        arn = facts.instance.container_instance_arn
        stored: InstanceRecord | None
        if facts.health and facts.status is None and facts.task is None:
            fresh = InstanceRecord(arn, facts.instance)
            fresh.add(facts)
            view = self.derive(fresh)
            fresh.incidents = view.known
            leases, intents = self._claims(fresh, view, owner, until)
            try:
                committed = self.store.commit_checks(fresh, list(fresh.health), leases=leases, deliveries=intents)
                self._count_incidents({}, fresh.incidents)
                return committed.record, committed.leases, True
            except ConcurrentUpdateError as conflict:
                stored = conflict.stored
        else:
            stored = self.store.load(arn)
        return self._settle(stored or InstanceRecord(arn, facts.instance), facts, owner, until)

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
            # would be forgotten, and posted again. The drain records its intent under the lease instead.
            leases, _ = self._claims(record, view, owner, until)
            forget = _forgotten(record, view)
            try:
                committed = self.store.commit(record, leases=leases, forget=forget)
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

    def _group(self, record: InstanceRecord, checks: set[str]) -> tuple[InstanceRecord, list[GroupRecord]]:
        """Write the instance's member of each group its changed checks belong to; note which open fleet
        incident its incidents joined (they are muted from then on). Returns the record as stored and the groups."""
        if self.grouping is None or record.instance.drill or record.instance.is_alarm:
            return record, []  # a drill, or an alarm (one incident by itself), is never a member of a fleet incident
        latest = latest_incidents(self.derive(record).incidents)
        groups: list[GroupRecord] = []
        joined: dict[str, str] = {}
        for check in sorted(checks):
            incident = latest.get(check)
            if incident is None:
                continue
            group = group_of(incident, self.grouping)
            arn = group_arn(group)
            stored = self.store.put_member(
                arn, group, group_where(incident), record.arn, member_of(incident, record.version)
            )
            if record.arn not in stored.members:
                self.count("FleetMembersNotGrouped", "Reason", "group full")
                continue
            stored = self._settle_fleets(stored)
            fleet = self.derive_fleet(stored).open_fleet_of(incident.id)
            if fleet is not None:
                joined[incident.id] = fleet.id
            groups.append(stored)
        if joined:
            record = self._join(record, joined)
        return record, groups

    def _settle_fleets(self, group: GroupRecord) -> GroupRecord:
        """Write the group's fleet identities when the derivation changed them (a fleet opened or closed)."""
        for _ in range(MAX_WRITE_CONFLICTS):
            view = self.derive_fleet(group)
            if view.known == group.incidents:
                return group
            opened = {k.id for k in view.known if k.status == "OPEN"} - {
                k.id for k in group.incidents if k.status == "OPEN"
            }
            group.incidents = view.known
            try:
                committed = self.store.commit_fleets(group)
            except ConcurrentUpdateError:
                reloaded = self.store.load_group(group.arn)
                if reloaded is None:
                    raise
                group = reloaded
                continue
            for _fleet in opened:
                self.count("FleetIncidentsOpened", "Group", "fleet")
            return committed
        raise ConcurrentUpdateError(f"{group.arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")

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
        groups: list[GroupRecord],
        owner: str,
        until: float,
    ) -> dict[str, list[str]]:
        """Drain every receiver with work, the instance's and its groups' fleet incidents', all at once."""
        target = self._instance_target(record.arn)
        jobs = self._submit(record, view, held=held, owner=owner, until=until, target=target)
        for group in groups:
            jobs.update(self._submit_group(group, owner, until))
        return self._collect(jobs)

    def _submit_group(self, group: GroupRecord, owner: str, until: float) -> dict[str, Future[_Drained]]:
        target = self._group_target(group.arn)
        jobs = self._submit(group, self.derive_fleet(group), held={}, owner=owner, until=until, target=target)
        return {f"{name} (fleet)": job for name, job in jobs.items()}

    def _collect(self, jobs: dict[str, Future[_Drained]]) -> dict[str, list[str]]:
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
    ) -> dict[str, Future[_Drained]]:
        arn = record.arn
        jobs: dict[str, Future[_Drained]] = {}
        for name, receiver in self.receivers.items():
            lease = held.get(name)
            fresh = lease is not None
            if lease is None:
                if not plan(name, receiver, view, record, dashboard_url=self.courier.dashboard_url):
                    continue
                candidate = Lease(name, owner, until)
                if not self.store.take_lease(arn, candidate, self.epoch()):
                    continue  # its holder delivers this event's facts before it lets go
                lease = candidate
            # A lease taken with this worker's write comes with the record as that write left it; a lease taken
            # afterwards may follow another holder's deliveries, which `record` (read earlier) does not show.
            jobs[name] = self._pool.submit(self._drain, name, receiver, lease, record, target, fresh=fresh)
        return jobs

    def _instance_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.store.load(arn), derive=self._derive_any)

    def _group_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.store.load_group(arn), derive=self._derive_any)

    def _derive_any(self, record: InstanceRecord | GroupRecord) -> View:
        return self.derive_fleet(record) if isinstance(record, GroupRecord) else self.derive(record)

    def _drain(
        self,
        name: str,
        receiver: Receiver,
        lease: Lease,
        record: InstanceRecord | GroupRecord,
        target: _Target,
        *,
        fresh: bool = True,
    ) -> _Drained:
        """Send what `name` is missing until nothing is, then let go of its lease. Unless `record` is `fresh` (as
        the write that took the lease left it), it is read again first: what was delivered before the lease was
        taken is never delivered again."""
        drained = _Drained()
        local = record
        channel = "pagerduty" if receiver.pagerduty is not None else "slack"
        try:
            if not fresh:
                reread = target.load()
                if reread is None:
                    raise LeaseLostError(f"{record.arn} is gone")
                local = reread
            while True:
                view = target.derive(local)
                steps = plan(name, receiver, view, local, dashboard_url=self.courier.dashboard_url)
                if not steps:
                    if self.store.release(local.arn, lease, local.version):
                        return drained
                    reloaded = target.load()
                    if reloaded is None:
                        raise LeaseLostError(f"{local.arn} is gone")
                    local = reloaded
                    continue
                if len(drained.sent) >= MAX_STEPS_PER_DRAIN:
                    raise RuntimeError(f"more than {MAX_STEPS_PER_DRAIN} steps for one receiver")
                self._perform(name, receiver, lease, local=local, view=view, step=steps[0])
                drained.sent.append(steps[0].describe())
                self.count("NotificationsSent", "Channel", channel)
        except LeaseLostError as error:
            drained.failure = f"lease lost: {error}"
        except DeliveryError as error:
            self.count("NotificationsFailed", "Channel", channel)
            drained.failure = str(error)
        except Exception as error:  # a bug must fail the event (and reach the DLQ with its reason), not vanish
            self.count("NotificationsFailed", "Channel", channel)
            drained.failure = f"{type(error).__name__}: {error}"
        self.store.drop_lease(local.arn, lease)
        return drained

    def _perform(
        self,
        name: str,
        receiver: Receiver,
        lease: Lease,
        *,
        local: InstanceRecord | GroupRecord,
        view: View,
        step: Step,
    ) -> None:
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
        self.store.record_delivery(arn, lease, after)
        local.deliveries[(name, step.subject)] = after
        if step.kind is StepKind.TRIGGER and before.incident != after.incident:
            # PagerDuty's webhooks name only the dedup key: remember whose alert it is (once per incident).
            self.store.remember_page(step.subject.removeprefix("pd:"), arn)

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
class _Target:
    """How a drain re-reads and re-derives what it delivers (an instance, or a group)."""

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


def _kind(event: EcsEvent | AlarmStateChangeEvent) -> str:
    if isinstance(event, HealthChangeEvent):
        return "health_change"
    if isinstance(event, InstanceStateEvent):
        return "instance_state"
    if isinstance(event, TaskStateEvent):
        return "task_state"
    return "alarm_state"
