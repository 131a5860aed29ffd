"""The instance store: what the service needs from persistence, and an in-memory implementation.

Three ports, by what their callers need: `Records` (an instance's facts and incidents, the sweep's list, what a
record is remembered by), `Leases` (a receiver's lease, and what its holder records) and `Fleets` (groups, their
members and journal). Each caller takes only the ports it uses; `StorePorts` carries the three together, as the
alert service is built with them (one table keeps all three, so they are usually one object, passed for each).

The DynamoDB implementation is fault_responder.adapters.dynamodb_store; the in-memory one serves the
routing CLI (`make route`) and unit tests. Both keep the same contract:
- facts and incidents are written only if the record is still at the version read (`commit`), or, for the
  first facts of checks on an instance with no instance-level facts, without reading first
  (`commit_checks`, the fast path of a new fault);
- a receiver's lease is taken only if it is free or its owner's invocation is over, and a delivery is
  recorded only by the lease's owner;
- a lease is released only if no facts arrived since the owner last looked (otherwise the owner looks again).

Groups (fleet incidents, fault_responder.noise.fleet) live beside the instances: a group's record (its head) is small
and bounded, each member is its own entry, written only if it is newer than the member stored (by its instance
record's version), an open member is also listed by the moment it opened, and what a fleet incident's thread
must name is a journal numbered by the head. The fleet identities are written only if they are still at the
version read (and a close only if the head's version did not move: nobody joined since). Leases and deliveries
work the same on a group's key as on an instance's.

The sweep visits the records on its list: those with something open, and those with a closure not yet told to
every receiver (a commit says so with `listed`); `unlist` takes a record off once it is told.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from fault_responder.core.domain import FleetMember, InstanceRef
from fault_responder.incidents.record import Backoff, Delivery, InstanceRecord, Lease
from fault_responder.noise.fleet import (
    LISTED_MEMBERS,
    Group,
    GroupRecord,
    JournalEntry,
    MemberWrite,
    Recent,
    Told,
    already_told,
    is_group,
)


class ConcurrentUpdateError(Exception):
    """Someone else changed the record since it was read; `stored` is what is there now, if known."""

    def __init__(self, message: str, stored: InstanceRecord | None = None) -> None:
        super().__init__(message)
        self.stored = stored


class LeaseLostError(Exception):
    """The lease expired and another worker took it: this worker must stop delivering."""


class RecordTooLargeError(Exception):
    """The record would not fit DynamoDB's item limit even after dropping what can be dropped."""


@dataclass(slots=True)
class Committed:
    record: InstanceRecord
    """The record as stored after the write."""
    leases: dict[str, Lease] = field(default_factory=dict)
    """The leases the caller now holds, by receiver."""


class Records(Protocol):
    """An instance's record (its facts and incidents), the sweep's list, and what a record is remembered by: a
    PagerDuty alert's dedup key, a step of the training auto-resume notifier already sent."""

    def load(self, arn: str) -> InstanceRecord | None: ...

    def commit(
        self,
        record: InstanceRecord,
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
        forget: Sequence[tuple[str, str]] = (),
        listed: bool = False,
    ) -> Committed:
        """Write facts and incidents if the stored version is still record.version (0: nothing stored yet),
        record the given deliveries (intents to post), drop the forgotten ones, take the leases that are free.
        The record is on the sweep's list if it has an open incident, or if `listed` (something is still to be told).
        Raises ConcurrentUpdateError."""
        ...

    def commit_checks(
        self,
        record: InstanceRecord,
        checks: Sequence[str],
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
    ) -> Committed:
        """The fast path for a new fault: write these checks' facts and incidents without having read the
        record. Refused (ConcurrentUpdateError with the stored record) when any of these checks already has
        facts, or the instance has instance-level facts (statuses, tasks, quarantine, notices)."""
        ...

    def unlist(self, arn: str, version: int) -> bool:
        """Take the record (an instance's or a group's) off the sweep's list if it is still at `version`."""
        ...

    def open_records(self) -> Iterator[str]:
        """The ARNs of the records (instances and groups) on the sweep's list: with an open incident or fleet
        incident, or something still to be told. Groups come first."""
        ...

    def remember_page(self, dedup_key: str, arn: str) -> None:
        """Note which record a PagerDuty alert (by dedup key) belongs to: PagerDuty's webhooks name only the key."""
        ...

    def page_record(self, dedup_key: str) -> str | None:
        """The record a PagerDuty alert belongs to (remember_page), or None."""
        ...

    def delivered(self, key: str) -> bool:
        """Whether a delivery step of the training auto-resume notifier (by key) already went out."""
        ...

    def mark_delivered(self, key: str) -> None: ...


class Leases(Protocol):
    """A receiver's lease on a record (an instance's or a group's), and what only its holder writes: what the receiver
    was told, and its backoff after a failure."""

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        """Take the receiver's lease if it is free or expired (its `until` before `now`)."""
        ...

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        """Record what the receiver was told; raises LeaseLostError unless `lease` is still held."""
        ...

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        """Release the lease if the record is still at `version`, and forget the receiver's backoff (it is up to
        date); False (lease kept) if facts arrived meanwhile. Raises LeaseLostError if the lease is not held any
        more."""
        ...

    def record_and_release(self, arn: str, lease: Lease, delivery: Delivery, version: int) -> bool:
        """`record_delivery` then `release`, in one write: for the last thing the receiver was missing. False, with
        nothing written, if facts arrived since `version` (the holder then records the delivery alone and looks
        again). Raises LeaseLostError if the lease is not held any more."""
        ...

    def drop_lease(self, arn: str, lease: Lease) -> None:
        """Release the lease whatever the version (after a failure: someone else may try at once)."""
        ...

    def back_off(self, arn: str, lease: Lease, backoff: Backoff) -> None:
        """Record the receiver's failure (by the lease's holder; LeaseLostError otherwise). `release` clears it."""
        ...


class Fleets(Protocol):
    """Groups (fault_responder.noise.fleet): a group's head, its members, its journal and its fleet identities."""

    def load_group(self, arn: str) -> GroupRecord | None:
        """The group's head (bounded, whatever the number of members), or None."""
        ...

    def register(self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: Recent) -> GroupRecord:
        """Note the instance's open member among the group's recent ones unless a fleet incident is open, and return
        the head as it is after (with the recent members, each written before this one included), or as it is
        when a fleet incident is open. Creates the head if there is none. One write, bounded."""
        ...

    def forget_recent(self, arn: str, instance_arns: Sequence[str]) -> None:
        """Take these instances off the group's recent members (closed, or too old to count)."""
        ...

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> MemberWrite:
        """Write an instance's member of a group unless the stored one is as new or newer (by version), keeping what
        the fleet's thread was told of it while its incident is the same, and list it by the moment it opened while
        it is open. Costs the same whatever the group's size."""
        ...

    def mark_member(self, arn: str, member: FleetMember, *, fleet: str, told: Told) -> bool:
        """Note that the member's incident counts in `fleet` and what its thread was told, as one conditional write:
        True only for the call that made the change. False when the stored member is another incident by now, or
        already shows `told` or a later step in `fleet` (FOUNDING and JOINED, then LEFT): of two deliveries claiming
        the same join or leave at once, one wins."""
        ...

    def open_members(
        self, arn: str, since: datetime, until: datetime | None = None, *, limit: int
    ) -> list[FleetMember]:
        """At most `limit` open members that opened in [since, until], oldest first."""
        ...

    def count_open(self, arn: str, since: datetime) -> int:
        """How many open members opened at or after `since`."""
        ...

    def advance(self, arn: str, fleet: str, *, joined: bool) -> GroupRecord | None:
        """Take the next journal number for the open fleet incident `fleet`, and count one more member that `joined`
        (or left): the head as it is after, or None when `fleet` is not the open one any more."""
        ...

    def append_journal(self, arn: str, entry: JournalEntry) -> None: ...

    def journal(self, arn: str, after: int, *, limit: int) -> list[JournalEntry]:
        """At most `limit` journal entries numbered after `after`, in order."""
        ...

    def commit_fleets(
        self,
        record: GroupRecord,
        *,
        acted: bool = False,
        expected_version: int | None = None,
        listed: bool = False,
        forget: Sequence[str] = (),
    ) -> GroupRecord:
        """Write the group's fleet identities, its open fleet (its id and member count) and people's actions if the
        identities are still at record.incidents_version and, with `expected_version`, the head's version did not
        move; raises ConcurrentUpdateError (without `stored`) otherwise. `acted`: an action was added, which also
        moves the head's version (a lease holder flushing the group then reads it again before letting go).
        `forget`: recent members to take off (a fleet incident opening counts them). On the sweep's list while a
        fleet incident is open, or `listed`."""
        ...


@dataclass(frozen=True, slots=True)
class StorePorts:
    """The three ports together: what the alert service is built with, each of its parts taking only those it uses.

    One table keeps all three (fault_responder.adapters.dynamodb_store and MemoryInstanceStore implement them), so
    the three are usually one object: `StorePorts(store, store, store)`, each checked against its own port."""

    records: Records
    leases: Leases
    fleets: Fleets


class MemoryInstanceStore:
    """Records, Leases and Fleets in a dict, with the same conditional semantics (one lock makes each call atomic)."""

    def __init__(self) -> None:
        self._records: dict[str, InstanceRecord] = {}
        self._groups: dict[str, GroupRecord] = {}
        self._members: dict[str, dict[str, FleetMember]] = {}
        self._journal: dict[str, dict[int, JournalEntry]] = {}
        self._listed: set[str] = set()
        self._delivered: set[str] = set()
        self._pages: dict[str, str] = {}
        self._lock = threading.Lock()

    def load(self, arn: str) -> InstanceRecord | None:
        with self._lock:
            stored = self._records.get(arn)
            return copy.deepcopy(stored)

    def commit(
        self,
        record: InstanceRecord,
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
        forget: Sequence[tuple[str, str]] = (),
        listed: bool = False,
    ) -> Committed:
        with self._lock:
            stored = self._records.get(record.arn)
            if (stored.version if stored else 0) != record.version:
                raise ConcurrentUpdateError(
                    f"{record.arn} changed since version {record.version}", copy.deepcopy(stored)
                )
            written = copy.deepcopy(record)
            written.version = record.version + 1
            written.leases = dict(stored.leases) if stored else {}
            written.deliveries = dict(stored.deliveries) if stored else {}
            for key in forget:
                written.deliveries.pop(key, None)
            self._list(written.arn, _has_open(written) or listed)
            return self._finish(written, leases, deliveries)

    def commit_checks(
        self,
        record: InstanceRecord,
        checks: Sequence[str],
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
    ) -> Committed:
        with self._lock:
            stored = self._records.get(record.arn)
            if stored is not None:
                instance_facts = stored.statuses or stored.tasks or stored.quarantine or stored.notices
                if instance_facts or any(check in stored.health for check in checks):
                    raise ConcurrentUpdateError(f"{record.arn} has facts already", copy.deepcopy(stored))
                written = copy.deepcopy(stored)
                written.version += 1
            else:
                written = InstanceRecord(record.arn, record.instance, version=1)
            for check in checks:
                written.health[check] = list(record.health[check])
                written.incidents[check] = copy.deepcopy(record.incidents.get(check, []))
            self._list(written.arn, _has_open(written) or written.arn in self._listed)
            return self._finish(written, leases, deliveries)

    def unlist(self, arn: str, version: int) -> bool:
        with self._lock:
            stored = self._any(arn)
            if stored is None or stored.version != version:
                return False
            self._listed.discard(arn)
            return True

    def _list(self, arn: str, listed: bool) -> None:
        if listed:
            self._listed.add(arn)
        else:
            self._listed.discard(arn)

    def _finish(self, written: InstanceRecord, leases: Sequence[Lease], deliveries: Sequence[Delivery]) -> Committed:
        for delivery in deliveries:
            written.deliveries[(delivery.receiver, delivery.subject)] = copy.deepcopy(delivery)
        held: dict[str, Lease] = {}
        for lease in leases:
            if lease.receiver not in written.leases:
                written.leases[lease.receiver] = lease
                held[lease.receiver] = lease
        self._records[written.arn] = written
        return Committed(copy.deepcopy(written), held)

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        with self._lock:
            stored = self._any(arn)
            if stored is None:
                return False
            current = stored.leases.get(lease.receiver)
            if current is not None and current.until >= now:
                return False
            stored.leases[lease.receiver] = lease
            return True

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        with self._lock:
            stored = self._held(arn, lease)
            stored.deliveries[(delivery.receiver, delivery.subject)] = copy.deepcopy(delivery)

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        return self._release(arn, lease, version, None)

    def record_and_release(self, arn: str, lease: Lease, delivery: Delivery, version: int) -> bool:
        return self._release(arn, lease, version, delivery)

    def _release(self, arn: str, lease: Lease, version: int, delivery: Delivery | None) -> bool:
        """The lease and its backoff removed (and `delivery` recorded), if the record is still at `version`."""
        with self._lock:
            stored = self._held(arn, lease)
            if stored.version != version:
                return False
            if delivery is not None:
                stored.deliveries[(delivery.receiver, delivery.subject)] = copy.deepcopy(delivery)
            del stored.leases[lease.receiver]
            stored.backoff.pop(lease.receiver, None)
            return True

    def back_off(self, arn: str, lease: Lease, backoff: Backoff) -> None:
        with self._lock:
            self._held(arn, lease).backoff[backoff.receiver] = backoff

    def drop_lease(self, arn: str, lease: Lease) -> None:
        with self._lock:
            stored = self._any(arn)
            if stored is not None and stored.leases.get(lease.receiver) == lease:
                del stored.leases[lease.receiver]

    def _any(self, arn: str) -> InstanceRecord | GroupRecord | None:
        return self._groups.get(arn) if is_group(arn) else self._records.get(arn)

    def _held(self, arn: str, lease: Lease) -> InstanceRecord | GroupRecord:
        stored = self._any(arn)
        if stored is None or stored.leases.get(lease.receiver) != lease:
            raise LeaseLostError(f"lease of {lease.receiver} on {arn} is not held by {lease.owner}")
        return stored

    def delivered(self, key: str) -> bool:
        return key in self._delivered

    def mark_delivered(self, key: str) -> None:
        self._delivered.add(key)

    def remember_page(self, dedup_key: str, arn: str) -> None:
        with self._lock:
            self._pages[dedup_key] = arn

    def page_record(self, dedup_key: str) -> str | None:
        with self._lock:
            return self._pages.get(dedup_key)

    # --- Groups ---

    def load_group(self, arn: str) -> GroupRecord | None:
        with self._lock:
            return copy.deepcopy(self._groups.get(arn))

    def register(self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: Recent) -> GroupRecord:
        with self._lock:
            stored = self._groups.setdefault(arn, GroupRecord(arn, group, where))
            if stored.open_fleet is None:
                stored.recent[instance_arn] = member
            return copy.deepcopy(stored)

    def forget_recent(self, arn: str, instance_arns: Sequence[str]) -> None:
        with self._lock:
            stored = self._groups.get(arn)
            if stored is None:
                return
            for instance_arn in instance_arns:
                stored.recent.pop(instance_arn, None)

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> MemberWrite:
        with self._lock:
            members = self._members.setdefault(arn, {})
            current = members.get(instance_arn)
            if current is not None and current.version >= member.version:
                return MemberWrite(current, current, written=False)
            stored = carried(current, member)
            members[instance_arn] = stored
            return MemberWrite(stored, current, written=True)

    def mark_member(self, arn: str, member: FleetMember, *, fleet: str, told: Told) -> bool:
        with self._lock:
            members = self._members.get(arn, {})
            key = member.instance.container_instance_arn
            current = members.get(key)
            if current is None or current.incident != member.incident:
                return False
            if current.fleet == fleet and current.told in already_told(told):
                return False
            members[key] = replace(current, fleet=fleet, told=told.value)
            return True

    def open_members(
        self, arn: str, since: datetime, until: datetime | None = None, *, limit: int
    ) -> list[FleetMember]:
        with self._lock:
            found = [
                m
                for m in self._members.get(arn, {}).values()
                if m.is_open and since <= m.opened_at and (until is None or m.opened_at <= until)
            ]
        ordered = sorted(found, key=lambda m: (m.opened_at, m.instance.container_instance_arn))
        return ordered[:limit]

    def count_open(self, arn: str, since: datetime) -> int:
        with self._lock:
            return sum(1 for m in self._members.get(arn, {}).values() if m.is_open and m.opened_at >= since)

    def advance(self, arn: str, fleet: str, *, joined: bool) -> GroupRecord | None:
        with self._lock:
            stored = self._groups.get(arn)
            if stored is None or stored.open_fleet != fleet:
                return None
            stored.version += 1
            stored.journal_seq += 1
            if joined:
                stored.joined += 1
            else:
                stored.left += 1
            return copy.deepcopy(stored)

    def append_journal(self, arn: str, entry: JournalEntry) -> None:
        with self._lock:
            self._journal.setdefault(arn, {})[entry.seq] = entry

    def journal(self, arn: str, after: int, *, limit: int) -> list[JournalEntry]:
        with self._lock:
            entries = self._journal.get(arn, {})
            return [entries[seq] for seq in sorted(entries) if seq > after][:limit]

    def commit_fleets(
        self,
        record: GroupRecord,
        *,
        acted: bool = False,
        expected_version: int | None = None,
        listed: bool = False,
        forget: Sequence[str] = (),
    ) -> GroupRecord:
        with self._lock:
            stored = self._groups.get(record.arn)
            if record.incidents_version == 0 and stored is None:
                stored = GroupRecord(record.arn, record.group, record.where)
                self._groups[record.arn] = stored
            if stored is None or stored.incidents_version != record.incidents_version:
                raise ConcurrentUpdateError(f"{record.arn}: its fleet incidents changed since they were read")
            if expected_version is not None and stored.version != expected_version:
                raise ConcurrentUpdateError(f"{record.arn}: a member joined or left since it was read")
            stored.incidents = copy.deepcopy(record.incidents)
            stored.actions = copy.deepcopy(record.actions)
            if stored.open_fleet != record.open_fleet:
                stored.open_fleet = record.open_fleet
                stored.joined, stored.left = record.joined, 0
            stored.incidents_version += 1
            for instance_arn in forget:
                stored.recent.pop(instance_arn, None)
            if acted:
                stored.version += 1
            self._list(record.arn, stored.open_fleet is not None or listed)
            return copy.deepcopy(stored)

    def open_records(self) -> Iterator[str]:
        with self._lock:
            instances = sorted(arn for arn in self._listed if not is_group(arn))
            groups = sorted(arn for arn in self._listed if is_group(arn))
        # Groups first: a few records that stand for many instances (a fleet's thread waits for no instance).
        yield from groups + instances


def with_open_members(store: Fleets, head: GroupRecord) -> GroupRecord:
    """The head with its open fleet incident's open members read beside it: how many, and the oldest
    LISTED_MEMBERS of them (what its root and page show)."""
    fleet = head.fleet()
    if fleet is not None and fleet.since is not None:
        head.open_count = store.count_open(head.arn, fleet.since)
        head.listed = store.open_members(head.arn, fleet.since, limit=LISTED_MEMBERS)
    return head


def carried(current: FleetMember | None, member: FleetMember) -> FleetMember:
    """The member to store over `current`: what the fleet's thread was told of it carries over while it is the same
    incident (a newer report of one fault is not a new member)."""
    if current is None or current.incident != member.incident:
        return replace(member, fleet=None, told=None)
    return replace(member, fleet=current.fleet, told=current.told)


def _has_open(record: InstanceRecord) -> bool:
    return any(k.status == "OPEN" for known in record.incidents.values() for k in known)
