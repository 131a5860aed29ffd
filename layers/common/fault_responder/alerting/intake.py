"""Intake: an event, a person's action or facts the reconciliation found, in; the facts recorded on their record, the
incidents derived again, the groups joined, and every receiver brought up to date (fault_responder.alerting.dispatch).

The facts are added to the instance's record, and the incidents derived again, in one conditional write: a new fault
on an instance with no other history is written without a read first (the fast path: its Slack root and PagerDuty
trigger go out after this one write, and its page need not wait for its group when it is alone); otherwise read,
derive, write if the version is unchanged, and on a conflict read again and re-apply (facts are idempotent, so
re-applying is always right). The leases of the receivers with work are taken with the same write.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fault_responder.alerting.context import MAX_WRITE_CONFLICTS, Context
from fault_responder.alerting.dispatch import Dispatch
from fault_responder.alerting.membership import FleetMembership, alone, heads
from fault_responder.alerting.store import ConcurrentUpdateError, Fleets, Records
from fault_responder.alerting.views import Views
from fault_responder.events.ecs import EcsEvent, HealthChangeEvent, InstanceStateEvent, TaskStateEvent
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, is_action, parse_action
from fault_responder.incidents.lifecycle import InstanceView, facts_from_event
from fault_responder.incidents.record import (
    Delivery,
    EventFacts,
    InstanceRecord,
    KnownIncident,
    Lease,
    ReportedAction,
)
from fault_responder.noise.fleet import GroupRecord, is_group
from fault_responder.notification.delivery import StepKind, pagerduty_subject, pending_since, plan, with_pending

if TYPE_CHECKING:
    from fault_responder.events.cloudwatch import AlarmEvent


class Intake:
    def __init__(
        self,
        records: Records,
        fleets: Fleets,
        *,
        views: Views,
        membership: FleetMembership,
        dispatch: Dispatch,
        context: Context,
        on_silence: Callable[[], None] | None = None,
    ) -> None:
        self.records = records
        self.fleets = fleets
        self.views = views
        self.membership = membership
        self.dispatch = dispatch
        self.context = context
        self.on_silence = on_silence

    def handle(self, raw: dict[str, Any], *, seconds_left: float = 60.0) -> dict[str, Any]:
        """Process one EventBridge envelope. Raises on malformed input (pydantic ValidationError,
        UnsupportedEventError, BadAction) and DeliveryPendingError when a receiver could not be brought up to date."""
        if is_action(raw):
            return self.act(parse_action(raw), seconds_left=seconds_left)
        event = parse_ecs_event(raw)
        kind = _kind(event)
        self.context.count("EventsReceived", "Kind", kind)
        facts = facts_from_event(event)
        if facts is None:
            self.context.count("EventsIgnored", "Kind", kind)
            return {"event_id": event.id, "kind": kind, "ignored": "nothing in this event to act on", "receivers": {}}
        changed, outcomes = self._record(facts, seconds_left)
        if not changed:
            self.context.count("EventsIgnored", "Kind", kind)
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
        record = self.records.load(facts.instance.container_instance_arn)
        if record is None or not any(k.status == "OPEN" for known in record.incidents.values() for k in known):
            return {}
        _, outcomes = self._record(facts, seconds_left)
        return {f"{name} (clusters unknown)": sent for name, sent in outcomes.items()}

    def act(self, action: IncidentAction, *, seconds_left: float = 60.0) -> dict[str, Any]:
        """A person's action on an incident (fault_responder.incidents.incident_actions), recorded on the incident's
        record as a fact and delivered like an event's: PagerDuty's acknowledge or resolve, the root, the thread."""
        self.context.count("EventsReceived", "Kind", "incident_action")
        arn = action.record
        if arn is None and action.dedup_key is not None:
            arn = self.records.page_record(action.dedup_key)
        result: dict[str, Any] = {"event_id": action.key, "kind": "incident_action", "receivers": {}}
        if arn is not None and is_group(arn):
            return {**result, **self._act_on_fleet(arn, action, seconds_left)}
        record = self.records.load(arn) if arn is not None else None
        if record is None:
            # An alert the responder never sent (another integration on the same PagerDuty service), or a record
            # that has aged out: there is nothing to update.
            self.context.count("EventsIgnored", "Kind", "incident_action")
            return {**result, "ignored": "no incident of the responder has this id or dedup key"}
        if action.kind is ActionKind.SILENCE and self.on_silence is not None:
            self.on_silence()  # the silence was just made: read the silences again before deriving
        reported = _reported(action, self.context.clock())
        changed, outcomes = self._record(EventFacts(action.key, record.instance, action=reported), seconds_left)
        if not changed:
            self.context.count("EventsIgnored", "Kind", "incident_action")
        self.context.count("IncidentActions", "Action", f"{action.via.value}:{action.kind.value}")
        return {**result, "ignored": None if changed else "already known", "receivers": outcomes}

    def _act_on_fleet(self, arn: str, action: IncidentAction, seconds_left: float) -> dict[str, Any]:
        """An action on a fleet incident: written with the group's fleet identities, then the group's receivers
        brought up to date (PagerDuty's acknowledge, the fleet root, its thread)."""
        owner = uuid.uuid4().hex
        until = self.context.epoch() + seconds_left
        for _ in range(MAX_WRITE_CONFLICTS):
            group = self.fleets.load_group(arn)
            if group is None or self.context.grouping is None:
                self.context.count("EventsIgnored", "Kind", "incident_action")
                return {"ignored": "no fleet incident of the responder has this id or dedup key"}
            if not group.add_action(_reported(action, self.context.clock())):
                self.context.count("EventsIgnored", "Kind", "incident_action")
                outcomes = self.dispatch.collect(self.dispatch.submit_group(arn, owner, until))
                return {"ignored": "already known", "receivers": outcomes}
            try:
                self.fleets.commit_fleets(group, acted=True, listed=group.open_fleet is not None)
                break
            except ConcurrentUpdateError:
                continue
        else:
            raise ConcurrentUpdateError(f"{arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")
        self.context.count("IncidentActions", "Action", f"{action.via.value}:{action.kind.value}")
        return {"ignored": None, "receivers": self.dispatch.collect(self.dispatch.submit_group(arn, owner, until))}

    def observe(self, facts: EventFacts, *, seconds_left: float = 60.0) -> bool:
        """Facts found with no event (the reconciliation sweep, fault_responder.operations.reconcile), recorded and
        delivered exactly as an event's: True if they were news. Raises DeliveryPendingError as handle does."""
        changed, _ = self._record(facts, seconds_left)
        return changed

    def _record(self, facts: EventFacts, seconds_left: float) -> tuple[bool, dict[str, list[str]]]:
        """An event's facts written, its groups joined, every receiver brought up to date."""
        owner = uuid.uuid4().hex
        until = self.context.epoch() + seconds_left
        applied = self._apply(facts, owner, until)
        record, held, changed = applied.record, applied.held, applied.changed
        groups: list[str] = []
        touched = _touched(facts, record)
        if applied.alone:
            # A lone fault: its page goes out now, while its member is written (no fleet incident can mute it).
            # Its member is written from a copy taken first: the deliveries note what they send on the record they
            # are given, from their own threads, and a copy taken while they write would read a changing dict.
            grouped = copy.deepcopy(record)
            jobs = self.dispatch.submit_instance(record, self.views.derive(record), held=held, owner=owner, until=until)
            _, groups = self.membership.group(grouped, touched, applied.registered)
            for arn in groups:
                jobs.update(self.dispatch.submit_group(arn, owner, until))
            return changed, self.dispatch.collect(jobs)
        if changed or touched:
            # Also when nothing changed: a copy of a health event retried after a failure between the write of
            # its facts and its group's must still make the instance a member (writing a member twice is harmless).
            record, groups = self.membership.group(record, touched, applied.registered)
        view = self.views.derive(record)
        self._count_drain(facts, view, changed)
        return changed, self.dispatch.deliver_all(record, view, held=held, groups=groups, owner=owner, until=until)

    def _apply(self, facts: EventFacts, owner: str, until: float) -> _Applied:
        arn = facts.instance.container_instance_arn
        stored: InstanceRecord | None
        if facts.health and facts.status is None and facts.task is None:
            fresh = InstanceRecord(arn, facts.instance)
            fresh.add(facts)
            view = self.views.derive(fresh)
            fresh.incidents = view.known
            leases, intents = self._claims(fresh, view, owner, until)
            # While the facts are written, look whether the fault is alone in its group (no fleet incident to join,
            # no threshold it crosses): then its page need not wait for its member to be written.
            scouts = self.membership.scout(view)
            try:
                committed = self.records.commit_checks(fresh, list(fresh.health), leases=leases, deliveries=intents)
                self._count_incidents({}, fresh.incidents)
                return _Applied(
                    committed.record, committed.leases, changed=True, alone=alone(scouts), registered=heads(scouts)
                )
            except ConcurrentUpdateError as conflict:
                stored = conflict.stored
        else:
            stored = self.records.load(arn)
            scouts = []
        record, held, changed = self.settle(stored or InstanceRecord(arn, facts.instance), facts, owner, until)
        return _Applied(record, held, changed=changed, registered=heads(scouts))

    def settle(
        self, stored: InstanceRecord, facts: EventFacts | None, owner: str, until: float
    ) -> tuple[InstanceRecord, dict[str, Lease], bool]:
        """Add the facts (if any) and write what changed, identities included, re-reading on a conflict."""
        arn = stored.arn
        for _ in range(MAX_WRITE_CONFLICTS):
            record = stored
            changed = record.add(facts) if facts is not None else False
            view = self.views.derive(record)
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
                listed = bool(leases) or self.views.holds_notes(record, view)
                committed = self.records.commit(record, leases=leases, forget=forget, listed=listed)
                self._count_incidents(before, view.known)
                return committed.record, committed.leases, True
            except ConcurrentUpdateError as conflict:
                reloaded = conflict.stored if conflict.stored is not None else self.records.load(arn)
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
        now = self.context.clock()
        for name, receiver in self.context.receivers.items():
            steps = plan(name, receiver, view, record, dashboard_url=self.context.courier.dashboard_url)
            if not steps:
                continue
            leases.append(Lease(name, owner, until))
            for step in steps:
                marker = step.marker(receiver)
                sent = record.delivery(name, step.subject)
                if step.kind == StepKind.POST_ROOT and marker and pending_since(sent, marker) is None:
                    intents.append(with_pending(sent, marker, now, owner))
        return leases, intents

    def _count_incidents(self, before: dict[str, list[KnownIncident]], after: dict[str, list[KnownIncident]]) -> None:
        """Counted after the write that made the change, so a conflicting writer that re-reads counts nothing twice."""
        opened, resolved = incident_transitions(before, after)
        for fault_class in opened:
            self.context.count("IncidentsOpened", "Class", fault_class)
        for fault_class in resolved:
            self.context.count("IncidentsResolved", "Class", fault_class)

    def _count_drain(self, facts: EventFacts, view: InstanceView, changed: bool) -> None:
        if not changed or facts.status is None or facts.status.status != "DRAINING":
            return
        alert = next((a for a in view.alerts if a.key == f"drain:{facts.status.event_id}"), None)
        if alert is not None and alert.drain is not None:
            self.context.count("DrainAttributions", "Attribution", alert.drain.cause.value)


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
