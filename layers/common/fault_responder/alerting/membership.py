"""Fleet membership: an instance's incident as a member of its group, and the group's fleet incident opened, joined,
left or closed as its members make it (fault_responder.noise.fleet decides what a fleet is; this writes it).

Every step costs the same whatever the group's size: a member is its own entry, a new fault registers among the
group's recent members with one conditional write (in the background, while its facts are written: the head it
returns says whether the fault is alone and its page need not wait), and joins and leaves are claimed on the member
before they are counted on the head, so two deliveries of one report never count it twice.
"""

from __future__ import annotations

import contextlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from fault_responder.alerting.context import MAX_WRITE_CONFLICTS, Context
from fault_responder.alerting.store import ConcurrentUpdateError, Fleets, Records
from fault_responder.alerting.views import Views
from fault_responder.core.domain import FleetMember, Incident
from fault_responder.incidents.lifecycle import InstanceView
from fault_responder.incidents.record import InstanceRecord
from fault_responder.noise.fleet import (
    FleetIdentity,
    GroupRecord,
    JournalEntry,
    Recent,
    Told,
    closed_identity,
    counts_in,
    crossing,
    escalated,
    founders_of,
    group_arn,
    group_of,
    group_where,
    is_founder,
    latest_incidents,
    member_of,
    opened_identity,
    stale_recent,
    trimmed,
)
from fault_responder.routing.router import Grouping

MAX_FORGET = 50
"""Stale recent members a member's write forgets at most (the rest go with the next ones)."""


class FleetMembership:
    def __init__(self, fleets: Fleets, records: Records, views: Views, context: Context, *, workers: int) -> None:
        self.fleets = fleets
        self.records = records
        self.views = views
        self.context = context
        self._scouts = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scout")

    def scout(self, view: InstanceView) -> list[Scout]:
        """For each new fault that could join a group, its registration among the group's recent members, written
        in the background: the head it returns says whether the fault is alone."""
        grouping = self.context.grouping
        if grouping is None:
            return []
        scouts: list[Scout] = []
        for incident in view.incidents:
            if not incident.is_open or incident.instance.drill or incident.instance.is_alarm:
                continue
            group = group_of(incident, grouping, self.context.settings.accounts)
            instance = incident.instance.container_instance_arn
            recent = Recent.of(member_of(incident, 0))
            head = self._scouts.submit(
                self.fleets.register, group_arn(group), group, group_where(incident), instance, recent
            )
            scouts.append(Scout(incident, grouping, head))
        return scouts

    def group(
        self, record: InstanceRecord, checks: set[str], registered: dict[str, GroupRecord] | None = None
    ) -> tuple[InstanceRecord, list[str]]:
        """Write the instance's member of each group its changed checks belong to, open or close the group's fleet
        incident when that member makes it so, and note which open fleet incident the instance's incidents count in
        (they are muted from then on). Returns the record as stored and the groups whose fleet incidents changed."""
        if self.context.grouping is None or record.instance.drill or record.instance.is_alarm:
            return record, []  # a drill, or an alarm (one incident by itself), is never a member of a fleet incident
        latest = latest_incidents(self.views.derive(record).incidents)
        groups: list[str] = []
        joined: dict[str, str] = {}
        for check in sorted(checks):
            incident = latest.get(check)
            if incident is None:
                continue
            membership = self._membership(incident, record.version, (registered or {}).get(incident.id))
            if membership.fleet is not None:
                joined[incident.id] = membership.fleet
            if membership.changed and (membership.head is None or self.views.fleet_due(membership.head)):
                groups.append(membership.arn)
        if joined:
            record = self._join(record, joined)
        return record, groups

    def _membership(self, incident: Incident, version: int, registered: GroupRecord | None = None) -> _Membership:
        """One instance's member of its group written; the fleet incident opened, joined, left or closed as that
        member makes it. Every step costs the same whatever the group's size. `registered`: the head as the member's
        registration among the recent members returned it already (a new fault's look-ahead)."""
        grouping = _required_grouping(self.context.grouping)
        group = group_of(incident, grouping, self.context.settings.accounts)
        arn, where = group_arn(group), group_where(incident)
        instance = incident.instance.container_instance_arn
        written = self.fleets.put_member(arn, group, where, instance, member_of(incident, version))
        member = written.stored
        for _ in range(MAX_WRITE_CONFLICTS):
            head: GroupRecord | None
            if member.is_open:
                # Registered among the recent members, or told the open fleet incident: one conditional write, which
                # sees every member registered before it.
                head = registered or self.fleets.register(arn, group, where, instance, Recent.of(member))
            else:
                head = self.fleets.load_group(arn)
            registered = None
            fleet = head.fleet() if head is not None else None
            if head is None or fleet is None:
                if head is not None and not member.is_open and instance in head.recent:
                    self.fleets.forget_recent(arn, [instance])
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
                    self.fleets.mark_member(arn, member, fleet=fleet.id, told=Told.FOUNDING)
                    return _Membership(arn, fleet=fleet.id, changed=escalated)  # counted when the fleet opened
                # The join is claimed on the member before it is counted: of two deliveries of its reports at once
                # (two threads of a batch, two invocations), only the one whose mark changed it counts it.
                if not self.fleets.mark_member(arn, member, fleet=fleet.id, told=Told.JOINED):
                    return _Membership(arn, fleet=fleet.id, changed=escalated)  # the other counted it
                after = self.fleets.advance(arn, fleet.id, joined=True)
                if after is None:
                    continue  # the fleet incident closed meanwhile: look again
                self._tell(arn, after, fleet, member, told=Told.JOINED, at=member.opened_at)
                return _Membership(arn, fleet=fleet.id, changed=True, head=None if escalated else after)
            if (member.told == Told.LEFT.value and member.fleet == fleet.id) or not self.fleets.mark_member(
                arn, member, fleet=fleet.id, told=Told.LEFT
            ):
                # Told already (a copy, or another delivery claimed the leave): the fleet incident may still be
                # waiting to close (its closer died).
                return _Membership(arn, changed=self.close_if_empty(arn, fleet.id))
            after = self.fleets.advance(arn, fleet.id, joined=False)
            if after is None:
                continue
            self._tell(arn, after, fleet, member, told=Told.LEFT, at=member.closed_at or member.opened_at)
            if self.close_if_empty(arn, fleet.id):
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
                self.fleets.commit_fleets(head)
                return True
            except ConcurrentUpdateError:
                reloaded = self.fleets.load_group(head.arn)
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
        entry = JournalEntry(head.journal_seq, fleet.id, told, member, at, self.context.epoch())
        self.fleets.append_journal(arn, entry)

    def _open_if_crossed(self, head: GroupRecord, member: FleetMember) -> str | object | None:
        """Open the group's fleet incident if `threshold` of its recent members (this one included) opened within
        the window: its id when this member is one of its founders ("" when it opened before the fleet's window),
        _RETRY when someone else changed the fleet incidents meanwhile, None when the threshold is not crossed."""
        grouping = _required_grouping(self.context.grouping)
        window = grouping.window
        stale = stale_recent(head, window)
        if stale:
            self.fleets.forget_recent(head.arn, stale[:MAX_FORGET])
        moment = crossing([recent.opened_at for recent in head.recent.values()], grouping.threshold, window)
        if moment is None:
            return None
        founders = founders_of(head, moment, window)
        identity = opened_identity(head, moment, window, founders, now=self.context.clock())
        head.incidents = trimmed([*head.incidents, identity])
        # Counted now: the founders it remembers. One it cannot (a burst past MAX_FOUNDERS before anyone looked) is
        # counted when it is next reported, as a member that joins: never twice.
        head.open_fleet, head.joined = identity.id, len(identity.founders)
        try:
            self.fleets.commit_fleets(head, forget=sorted(head.recent))
        except ConcurrentUpdateError:
            return _RETRY
        self.context.count("FleetIncidentsOpened", "Group", "fleet")
        return identity.id if member.instance.container_instance_arn in founders else ""

    def close_if_empty(self, arn: str, fleet_id: str, *, looking: bool = False) -> bool:
        """Close the fleet incident if none of its members is open: only if nobody joined since this looked (the
        close is conditional on the head's version). True when it closed. The members are looked at only once as
        many left as joined, unless `looking` (the sweep: a closer that died, a member counted twice)."""
        for _ in range(MAX_WRITE_CONFLICTS):
            head = self.fleets.load_group(arn)
            fleet = head.fleet() if head is not None else None
            if head is None or fleet is None or fleet.id != fleet_id or fleet.since is None:
                return False
            if not looking and head.left < head.joined:
                return False
            if self.fleets.open_members(arn, fleet.since, limit=1):
                return False
            last = [e.at for e in self.fleets.journal(arn, max(head.journal_seq - 1, 0), limit=1)]
            closed = closed_identity(head, fleet, max([fleet.anchor, *last]))
            head.incidents = [closed if k.id == fleet.id else k for k in head.incidents]
            head.open_fleet = None
            try:
                # Kept on the sweep's list until every receiver was told it is over (the sweep takes it off).
                self.fleets.commit_fleets(head, expected_version=head.version, listed=True)
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
                return self.records.commit(record).record
            except ConcurrentUpdateError as conflict:
                reloaded = conflict.stored if conflict.stored is not None else self.records.load(record.arn)
                if reloaded is None:
                    raise
                record = reloaded
        raise ConcurrentUpdateError(f"{record.arn} kept changing: {MAX_WRITE_CONFLICTS} conflicting writes in a row")


@dataclass(frozen=True, slots=True)
class Scout:
    """A new fault's registration among its group's recent members, written in the background (`head`: the head it
    returns)."""

    incident: Incident
    grouping: Grouping
    head: Future[GroupRecord]


def heads(scouts: list[Scout]) -> dict[str, GroupRecord]:
    """The heads the registrations returned, by incident (those that failed are registered again)."""
    found: dict[str, GroupRecord] = {}
    for scout in scouts:
        with contextlib.suppress(Exception):
            found[scout.incident.id] = scout.head.result()
    return found


def alone(scouts: list[Scout]) -> bool:
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
