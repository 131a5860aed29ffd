"""The instance store: what the service needs from persistence, and an in-memory implementation.

The DynamoDB implementation is fault_responder.adapters.dynamodb_store; the in-memory one serves the
routing CLI (`make route`) and unit tests. Both keep the same contract:
- facts and incidents are written only if the record is still at the version read (`commit`), or, for the
  first facts of checks on an instance with no instance-level facts, without reading first
  (`commit_checks`, the fast path of a new fault);
- a receiver's lease is taken only if it is free or its owner's invocation is over, and a delivery is
  recorded only by the lease's owner;
- a lease is released only if no facts arrived since the owner last looked (otherwise the owner looks again).

Groups (fleet incidents, fault_responder.fleet) live beside the instances: a member is written only if it is
newer than the member stored (by its instance record's version); the fleet identities only if they are still
at the version read. Leases and deliveries work the same on a group's key as on an instance's.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from fault_responder.domain import FleetMember, InstanceRef
from fault_responder.fleet import MAX_MEMBERS, Group, GroupRecord, is_group
from fault_responder.record import Delivery, InstanceRecord, Lease


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


class InstanceStore(Protocol):
    def load(self, arn: str) -> InstanceRecord | None: ...

    def commit(
        self,
        record: InstanceRecord,
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
        forget: Sequence[tuple[str, str]] = (),
    ) -> Committed:
        """Write facts and incidents if the stored version is still record.version (0: nothing stored yet),
        record the given deliveries (intents to post), drop the forgotten ones, take the leases that are free.
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

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        """Take the receiver's lease if it is free or expired (its `until` before `now`)."""
        ...

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        """Record what the receiver was told; raises LeaseLostError unless `lease` is still held."""
        ...

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        """Release the lease if the record is still at `version`; False (lease kept) if facts arrived
        meanwhile. Raises LeaseLostError if the lease is not held any more."""
        ...

    def drop_lease(self, arn: str, lease: Lease) -> None:
        """Release the lease whatever the version (after a failure: someone else may try at once)."""
        ...

    def delivered(self, key: str) -> bool:
        """Whether a delivery step of the training auto-resume notifier (by key) already went out."""
        ...

    def mark_delivered(self, key: str) -> None: ...

    def remember_page(self, dedup_key: str, arn: str) -> None:
        """Note which record a PagerDuty alert (by dedup key) belongs to: PagerDuty's webhooks name only the key."""
        ...

    def page_record(self, dedup_key: str) -> str | None:
        """The record a PagerDuty alert belongs to (remember_page), or None."""
        ...

    def load_group(self, arn: str) -> GroupRecord | None: ...

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> GroupRecord:
        """Write an instance's member of a group unless the stored one is as new or newer (by version), and
        return the group as stored. A group already holding MAX_MEMBERS others does not take a new one."""
        ...

    def commit_fleets(self, record: GroupRecord, *, acted: bool = False) -> GroupRecord:
        """Write the group's fleet identities and people's actions if they are still at record.incidents_version;
        raises ConcurrentUpdateError (without `stored`) otherwise. `acted`: an action was added, which also moves
        the group's version (a lease holder draining the group then reads it again before letting go)."""
        ...

    def open_records(self) -> Iterator[str]:
        """The ARNs of the records (instances and groups) with an open incident or fleet incident."""
        ...


class MemoryInstanceStore:
    """InstanceStore in a dict, with the same conditional semantics (one lock makes each call atomic)."""

    def __init__(self) -> None:
        self._records: dict[str, InstanceRecord] = {}
        self._groups: dict[str, GroupRecord] = {}
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
            return self._finish(written, leases, deliveries)

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
        with self._lock:
            stored = self._held(arn, lease)
            if stored.version != version:
                return False
            del stored.leases[lease.receiver]
            return True

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

    def load_group(self, arn: str) -> GroupRecord | None:
        with self._lock:
            return copy.deepcopy(self._groups.get(arn))

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> GroupRecord:
        with self._lock:
            stored = self._groups.get(arn) or GroupRecord(arn, group, where)
            current = stored.members.get(instance_arn)
            room = current is not None or len(stored.members) < MAX_MEMBERS
            if room and (current is None or current.version < member.version):
                stored.members[instance_arn] = member
                stored.version += 1
            self._groups[arn] = stored
            return copy.deepcopy(stored)

    def commit_fleets(self, record: GroupRecord, *, acted: bool = False) -> GroupRecord:
        with self._lock:
            stored = self._groups.get(record.arn)
            if stored is None or stored.incidents_version != record.incidents_version:
                raise ConcurrentUpdateError(f"{record.arn}: its fleet incidents changed since they were read")
            stored.incidents = copy.deepcopy(record.incidents)
            stored.actions = copy.deepcopy(record.actions)
            stored.incidents_version += 1
            if acted:
                stored.version += 1
            return copy.deepcopy(stored)

    def open_records(self) -> Iterator[str]:
        with self._lock:
            instances = [
                arn
                for arn, record in self._records.items()
                if any(k.status == "OPEN" for known in record.incidents.values() for k in known)
            ]
            groups = [arn for arn, group in self._groups.items() if any(k.status == "OPEN" for k in group.incidents)]
        yield from sorted(instances) + sorted(groups)
