"""The reconciliation sweep: what ECS says now about the watched clusters' container instances, against what the
incidents table knows, so that a missed event is not missed forever.

ECS delivers some events best effort, and a disabled rule or a lost event leaves an IMPAIRED instance unpaged, or
an incident open after its instance left the cluster. The sweep asks ECS (ListContainerInstances, then
DescribeContainerInstances with the instances' health) and turns what it sees into the facts an event would have
added, with the same identities (a check's status and lastStatusChange; an instance status's version), so that:

- an instance whose check is not OK and whose transition the record does not know gets the fact, and with it the
  incident an event would have opened, marked "found by the sweep: the event was missed";
- an open incident whose check ECS reports OK again gets the OK transition, and resolves as it would have;
- an open incident whose instance ECS no longer lists and reports INACTIVE (or no longer knows at all) gets an
  INACTIVE status, and closes as it would have;
- anything the record already knows adds nothing: a real event arriving before or after the sweep, or a second
  sweep, finds its facts known (the fact identities dedupe; a fact the sweep found never rewrites a report).

The decisions here are pure; Reconciler runs them over an inventory (the ECS adapter) and the alert service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from fault_responder.core.domain import InstanceRef
from fault_responder.core.timefmt import as_utc
from fault_responder.incidents.alarms import alarm_of
from fault_responder.incidents.record import (
    RECONCILED_PREFIX,
    EventFacts,
    HealthFact,
    InstanceRecord,
    StatusFact,
    bounded_id,
    clip,
)
from fault_responder.noise.fleet import is_group

log = logging.getLogger(__name__)

DESCRIBE_BATCH = 100
"""DescribeContainerInstances takes at most 100 container instances per call."""
DEFAULT_MAX_INSTANCES = 5000
"""Container instances one run describes at most; the rest wait for the next run."""
MARGIN_SECONDS = 10.0
"""Time kept back at the end of a run: a finding started later waits for the next run."""
GONE = "INACTIVE"
_NOT_FAULTS = frozenset({"OK", "INITIALIZING"})
_MAX_ARN = 1024


# --- What ECS says ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ObservedCheck:
    """One health check of a container instance as DescribeContainerInstances reports it."""

    type: str
    status: str
    last_status_change: datetime | None
    last_updated: datetime | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ObservedInstance:
    """A container instance as ECS describes it, with its health (include=CONTAINER_INSTANCE_HEALTH)."""

    cluster_arn: str
    container_instance_arn: str
    status: str
    """ACTIVE, DRAINING, ..., or INACTIVE (deregistered; ECS still describes it for a while)."""
    ec2_instance_id: str | None = None
    capacity_provider: str | None = None
    version: int | None = None
    """The instance's version, which ECS increments on every change (its state change events carry it too)."""
    overall_status: str | None = None
    checks: tuple[ObservedCheck, ...] = ()


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An instance (or a whole answer) that could not be read: nothing is decided about it, the next run looks again."""

    container_instance_arn: str
    reason: str


@dataclass(slots=True)
class Described:
    """One DescribeContainerInstances answer: the instances, those ECS does not know (failure MISSING), and those
    whose description could not be read."""

    instances: list[ObservedInstance] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unreadable: list[Unreadable] = field(default_factory=list)


class Inventory(Protocol):
    """What the sweep asks ECS (fault_responder.adapters.ecs_health)."""

    def clusters(self) -> Iterator[str]:
        """The account's cluster ARNs in this Region, page by page (when no clusters are named)."""
        ...

    def instance_pages(self, cluster: str) -> Iterator[list[str]]:
        """The cluster's container instance ARNs (every status but INACTIVE), one ListContainerInstances page
        at a time."""
        ...

    def describe(self, cluster: str, arns: Sequence[str]) -> Described:
        """At most DESCRIBE_BATCH instances, with their health."""
        ...


# --- Decisions (pure) -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Finding:
    """Facts the sweep adds to one instance's record, and what kind of finding they are (the metric's dimension)."""

    kind: str
    """missed_fault, recovered or gone."""
    facts: EventFacts


def run_event_id(started: datetime) -> str:
    """The event id of the facts one run finds: marks them as the sweep's
    (fault_responder.incidents.record.is_reconciled)."""
    return f"{RECONCILED_PREFIX}{as_utc(started).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def instance_ref(observed: ObservedInstance, known: InstanceRef | None = None) -> InstanceRef:
    """Where the instance is, as a health event would name it (Region and account from the cluster ARN)."""
    region, account = _region_account(observed.cluster_arn)
    return InstanceRef(
        region=bounded_id(region or (known.region if known else ""), 64),
        account=bounded_id(account or (known.account if known else ""), 64),
        cluster_arn=bounded_id(observed.cluster_arn, _MAX_ARN),
        container_instance_arn=bounded_id(observed.container_instance_arn, _MAX_ARN),
        ec2_instance_id=bounded_id(observed.ec2_instance_id, 256) if observed.ec2_instance_id else None,
        capacity_provider=bounded_id(observed.capacity_provider, 256) if observed.capacity_provider else None,
    )


def finding_for(
    observed: ObservedInstance, record: InstanceRecord | None, *, event_id: str, at: datetime
) -> Finding | None:
    """What the sweep adds for a described instance, or None when the record already knows all of it.

    - INACTIVE (deregistered, still described): the instance left; only news if an incident is open.
    - A check not OK whose transition (status, lastStatusChange) the record does not know: a missed fault.
    - A check OK whose transition is unknown, on a check with an open incident opened before it: a missed recovery.
    A check without lastStatusChange cannot be given an event's identity and is left alone.
    """
    if observed.status == GONE:
        return gone_finding(record, event_id=event_id, at=at, version=observed.version)
    open_checks = _open_checks(record)
    facts: list[HealthFact] = []
    for check in observed.checks:
        if check.last_status_change is None or check.status == "INITIALIZING":
            continue
        if _known(record, check):
            continue
        if check.status == "OK":
            opened = open_checks.get(check.type)
            if opened is None or check.last_status_change < opened:
                continue
        facts.append(
            HealthFact(
                check_type=bounded_id(check.type, 64),
                status=bounded_id(check.status, 64),
                at=check.last_status_change,
                event_id=event_id,
                reason=clip(check.reason or None),
                updated=check.last_updated,
            )
        )
    if not facts:
        return None
    kind = "missed_fault" if any(fact.status not in _NOT_FAULTS for fact in facts) else "recovered"
    known = record.instance if record is not None else None
    return Finding(kind, EventFacts(event_id, instance_ref(observed, known), health=tuple(facts)))


def gone_finding(
    record: InstanceRecord | None, *, event_id: str, at: datetime, version: int | None = None
) -> Finding | None:
    """The instance left the cluster (INACTIVE, or unknown to ECS): news only for a record with an open incident.

    With the instance's version (ECS still describes it) the fact has the identity its INACTIVE event would
    have; without it (ECS no longer knows the instance) it is dated when the sweep saw it gone."""
    if record is None or not _open_checks(record):
        return None
    if any(fact.status == GONE for fact in record.statuses):
        return None
    status = StatusFact(status=GONE, at=at, event_id=event_id, version=version, reason="not listed by ECS any more")
    return Finding("gone", EventFacts(event_id, record.instance, status=status))


def needs_record(observed: ObservedInstance, open_arns: set[str]) -> bool:
    """Whether deciding about this instance needs its record read (most healthy instances need no read)."""
    if observed.container_instance_arn in open_arns:
        return True
    return observed.status != GONE and any(
        check.status not in _NOT_FAULTS and check.last_status_change is not None for check in observed.checks
    )


def _open_checks(record: InstanceRecord | None) -> dict[str, datetime]:
    """Check type -> when its open incident opened, for the record's open incidents."""
    if record is None:
        return {}
    opened: dict[str, datetime] = {}
    for check, known in record.incidents.items():
        for identity in known:
            if identity.status == "OPEN":
                moment = identity.opened_at or identity.anchor
                opened[check] = min(opened.get(check, moment), moment)
    return opened


def _known(record: InstanceRecord | None, check: ObservedCheck) -> bool:
    if record is None:
        return False
    key = record.check_key(check.type)
    return any(fact.identity == (check.status, check.last_status_change) for fact in record.health.get(key, []))


def _region_account(arn: str) -> tuple[str | None, str | None]:
    parts = arn.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn":
        return None, None
    return parts[3] or None, parts[4] or None


# --- A run --------------------------------------------------------------------------------------------------


class Records(Protocol):
    """What a run needs from the incidents table (fault_responder.alerting.store.Records has it)."""

    def load(self, arn: str) -> InstanceRecord | None: ...

    def open_records(self) -> Iterator[str]: ...


Observe = Callable[[EventFacts, float], bool]
"""observe(facts, seconds_left) -> whether the facts changed the record (the alert service's event path)."""
Redeliver = Callable[[str, float], object]
"""redeliver(instance ARN, seconds_left): bring its receivers up to date with its facts (the sweep's reconcile)."""
Counter = Callable[[str, str, str], None]


@dataclass(slots=True)
class Tally:
    clusters: int = 0
    listed: int = 0
    described: int = 0
    missed_fault: int = 0
    recovered: int = 0
    gone: int = 0
    already_known: int = 0
    unreadable: int = 0
    failed: int = 0
    redelivered: int = 0
    deferred_clusters: int = 0

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.__slots__}


@dataclass
class Reconciler:
    """One run of the reconciliation sweep, bounded by `max_instances` described and by the time left."""

    inventory: Inventory
    records: Records
    observe: Observe
    clusters: Sequence[str] = ()
    """The watched clusters' ARNs; empty: every cluster the inventory lists."""
    redeliver: Redeliver | None = None
    """Tried once more at the end of the run for an instance whose findings were written but not all delivered:
    a finding that closed the instance's last incident takes it off the table's Open index, so no sweep would."""
    count: Counter = lambda metric, dimension, value: None
    epoch: Callable[[], float] = lambda: 0.0
    max_instances: int = DEFAULT_MAX_INSTANCES
    _ends: float = 0.0
    _tally: Tally = field(default_factory=Tally)
    _undelivered: list[str] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)
    """What ECS refused or failed on, cluster by cluster, in the last run (the run went on from each)."""

    def run(
        self, *, started: datetime, seconds_left: float, open_records: Iterable[str] | None = None
    ) -> dict[str, int]:
        """`open_records`: the open records to consider (those of the inventory's account and Region, read once for
        several runs: fault_responder.operations.organization); default: the table's."""
        self._ends = self.epoch() + seconds_left
        self._tally = Tally()
        self._undelivered = []
        self.failures = []
        event_id = run_event_id(started)
        # An alarm's records are the alarms' reconciliation's (operations/alarm_reconcile.py): a contributor's names its
        # cluster, and ECS, asked about it, would answer that no such instance is there.
        listed = self.records.open_records() if open_records is None else open_records
        open_arns = {arn for arn in listed if not is_group(arn) and alarm_of(arn) is None}
        seen: set[str] = set()
        complete: set[str] = set()
        watched = list(self.clusters) or list(self.inventory.clusters())
        for index, cluster in enumerate(watched):
            if not self._time_and_room():
                self._tally.deferred_clusters += len(watched) - index
                break
            self._tally.clusters += 1
            try:
                if self._reconcile_cluster(cluster, open_arns, seen, event_id, started):
                    complete.add(cluster)
            except Exception as error:  # ECS refused (a cluster deleted, a permission): the other clusters go on
                self._cluster_failed(cluster, error)
        self._reconcile_unlisted(open_arns - seen, complete, event_id, started)
        self._deliver_again()
        return self._tally.as_dict()

    def _reconcile_cluster(
        self, cluster: str, open_arns: set[str], seen: set[str], event_id: str, started: datetime
    ) -> bool:
        """Every instance of the cluster, page by page; True if the whole cluster was listed and described."""
        for page in self.inventory.instance_pages(cluster):
            self._tally.listed += len(page)
            for batch in _batches(page, DESCRIBE_BATCH):
                if not self._time_and_room():
                    return False
                described = self.inventory.describe(cluster, batch)
                self._tally.described += len(batch)
                self._unreadable(described.unreadable)
                seen.update(batch)
                for observed in described.instances:
                    if needs_record(observed, open_arns):
                        self._decide(observed.container_instance_arn, event_id, started, observed=observed)
                for arn in described.missing:
                    seen.discard(arn)  # listed, then gone before it was described: looked at with the unlisted
        return True

    def _reconcile_unlisted(self, unlisted: set[str], complete: set[str], event_id: str, started: datetime) -> None:
        """Open records not listed: gone if their cluster was listed whole and ECS confirms (INACTIVE or MISSING)."""
        by_cluster: dict[str, list[InstanceRecord]] = {}
        for arn in sorted(unlisted):
            if not self._time_left():
                return
            record = self.records.load(arn)
            if record is not None and record.instance.cluster_arn in complete:
                by_cluster.setdefault(record.instance.cluster_arn, []).append(record)
        for cluster, records in sorted(by_cluster.items()):
            for batch in _batches(records, DESCRIBE_BATCH):
                if not self._time_left():
                    return
                try:
                    described = self.inventory.describe(cluster, [record.arn for record in batch])
                except Exception as error:  # as for a cluster's listing: nothing concluded, the others go on
                    self._cluster_failed(cluster, error)
                    break
                self._unreadable(described.unreadable)
                read = {record.arn: record for record in batch}
                for observed in described.instances:
                    arn = observed.container_instance_arn
                    self._decide(arn, event_id, started, observed=observed, record=read.get(arn))
                for arn in described.missing:
                    self._decide(arn, event_id, started, observed=None, record=read.get(arn))

    def _decide(
        self,
        arn: str,
        event_id: str,
        started: datetime,
        *,
        observed: ObservedInstance | None,
        record: InstanceRecord | None = None,
    ) -> None:
        """Decide from the record (read now unless just read) and record what was found through the event path,
        which reads it again before it writes: a change meanwhile is merged, never overwritten."""
        try:
            record = record if record is not None else self.records.load(arn)
            if observed is None:
                finding = gone_finding(record, event_id=event_id, at=started)
            else:
                finding = finding_for(observed, record, event_id=event_id, at=started)
            if finding is None:
                return
            changed = self.observe(finding.facts, max(0.0, self._ends - self.epoch()))
        except Exception as error:  # one instance's failure must not stop the run; the next run tries again
            self._tally.failed += 1
            self._undelivered.append(arn)
            self.count("ReconcileFailures", "Kind", type(error).__name__)
            log.warning("the reconciliation could not record what it found about %s: %s", arn, error)
            return
        if not changed:
            self._tally.already_known += 1
            return
        setattr(self._tally, finding.kind, getattr(self._tally, finding.kind) + 1)
        self.count("ReconcileFindings", "Finding", finding.kind)
        log.info("reconciliation: %s", finding.kind, extra={"instance": arn, "finding": finding.kind})

    def _cluster_failed(self, cluster: str, error: Exception) -> None:
        """A cluster ECS would not list or describe: nothing is concluded about its instances this run."""
        self.failures.append(error)
        self._tally.failed += 1
        self.count("ReconcileFailures", "Kind", type(error).__name__)
        log.warning("the reconciliation could not read cluster %s (the next run tries again): %s", cluster, error)

    def _deliver_again(self) -> None:
        for arn in self._undelivered:
            if self.redeliver is None or not self._time_left():
                return
            try:
                self.redeliver(arn, max(0.0, self._ends - self.epoch()))
            except Exception as error:  # still failing: logged and counted; see docs/operations.md#bounds
                self.count("ReconcileFailures", "Kind", type(error).__name__)
                log.warning("the reconciliation could not deliver what it found about %s: %s", arn, error)
                continue
            self._tally.redelivered += 1

    def _unreadable(self, unreadable: Iterable[Unreadable]) -> None:
        for item in unreadable:
            self._tally.unreadable += 1
            self.count("ReconcileFindings", "Finding", "unreadable")
            log.warning(
                "reconciliation: ECS's description could not be read; nothing decided about it",
                extra={"instance": item.container_instance_arn, "reason": item.reason},
            )

    def _time_left(self) -> bool:
        return self._ends - self.epoch() >= MARGIN_SECONDS

    def _time_and_room(self) -> bool:
        return self._time_left() and self._tally.described < self.max_instances


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
