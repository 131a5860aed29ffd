"""The relaunch's warm spares, over ports (docs/auto-resume.md, "Warm spares"): taking free spares for a job's
tasks, all or none, and refilling their pool by as many instances as were taken, once per attempt.

What to take and how far to grow a group is decided in resume/spares.py; here it is done. A claim lost to a
concurrent relaunch reads the claims again; a refill is recorded before its Auto Scaling call and confirmed after
it, under its group's refill lease, so that a retried step or the group's next refill completes it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from fault_responder.core.timefmt import format_duration
from fault_responder.resume.config import ResumeConfig
from fault_responder.resume.fault import ProviderInfo
from fault_responder.resume.jobs import Job, TaskSpec
from fault_responder.resume.ports import EcsPort, ScalingPort, SpareRecords
from fault_responder.resume.relaunch import HostsToAvoid
from fault_responder.resume.spares import (
    REFILL_LEASE,
    REFILL_LEASE_WAIT,
    Refill,
    RefillLease,
    RefillLeaseBusy,
    RefillLeaseLost,
    RefillRecord,
    RefillState,
    ScalingError,
    SpareHost,
    SpareState,
    SpareUse,
    free_spares,
    refill,
    refill_to_complete,
    spare_owner,
    spread,
    unsupported_reason,
)

SPARE_CLAIM_ROUNDS = 5
"""Claims of spares tried per relaunch: a claim lost to a concurrent relaunch reads the claims again and retries."""
REFILL_RECORD_TTL = timedelta(days=1)
"""How long an attempt's refill record is kept: far past any retry of its step."""
REFILL_LEASE_POLL_SECONDS = 0.2
"""How often a refill waiting for its group's lease reads it again (a holder keeps it for a read, two writes and one
Auto Scaling call)."""


@dataclass
class SpareSteps:
    """A relaunch's spares: what it takes for its tasks, and the refill of their pool (ResumeSteps builds one per
    call, with its own ports)."""

    ecs: EcsPort
    records: SpareRecords
    clock: Callable[[], datetime]
    scaling: Callable[[], ScalingPort] | None = None
    """The providers' Auto Scaling groups, where taken spares are replaced; None: never refilled."""
    sleep: Callable[[float], None] = time.sleep
    """How a refill waits for its group's lease."""

    def take_spares(
        self,
        job: Job,
        specs: Sequence[TaskSpec],
        attempt: int,
        avoid: HostsToAvoid,
        *,
        providers: dict[str, ProviderInfo],
        config: ResumeConfig,
    ) -> tuple[SpareUse, tuple[str, ...]]:
        """Claim one free spare per task, all or none; returns what was done and the spares others hold."""
        if not config.spare_attribute:
            return SpareUse(state=SpareState.OFF), ()
        needed = len(specs)
        why_not = unsupported_reason(providers, [spec.capacity_provider_name for spec in specs], needed)
        if why_not is not None:
            return SpareUse(state=SpareState.NOT_SUPPORTED, needed=needed, detail=why_not), ()
        provider = str(specs[0].capacity_provider_name)
        hosts = self.ecs.spare_hosts(job.cluster_arn, config.spare_attribute)
        declared = sum(1 for host in hosts if host.capacity_provider == provider)
        if not declared:
            return SpareUse(state=SpareState.NONE_DECLARED, needed=needed), ()
        owner = spare_owner(job.key, attempt)
        cluster_name = job.cluster_arn.rsplit("/", 1)[-1]
        free: list[SpareHost] = []
        others: set[str] = set()
        for _ in range(SPARE_CLAIM_ROUNDS):
            now = self.clock()
            held = self.records.spare_claims(cluster_name, provider, now)
            mine = sorted(host for host, holder in held.items() if holder == owner)
            others = {host for host, holder in held.items() if holder != owner}
            free = free_spares(hosts, provider, avoid, others)
            if len(mine) >= needed:
                # A retried step: the first try claimed them (and its RunTasks carry the same clientTokens).
                return _used(mine[:needed], declared, len(free), needed), tuple(others)
            # Sorted: task i goes to the i-th spare, so a retried step (which reads its claim back, sorted) sends
            # the same RunTask requests, and their clientTokens replay instead of conflicting.
            chosen = sorted([*mine, *(host for host in spread(free, owner) if host not in mine)][:needed])
            if len(chosen) < needed:
                break
            until = now + timedelta(seconds=config.spare_hold_seconds)
            if self.records.claim_spares(cluster_name, provider, chosen, owner, now=now, until=until):
                return _used(chosen, declared, len(free), needed), tuple(others)
        none_free = SpareUse(state=SpareState.NONE_FREE, declared=declared, free=len(free), needed=needed)
        return none_free, tuple(sorted(others))

    def refill_spares(
        self, job: Job, attempt: int, providers: dict[str, ProviderInfo], spare: SpareUse, config: ResumeConfig
    ) -> Refill | None:
        """Ask the provider's Auto Scaling group for as many instances as the spares taken, once per attempt.

        Through the attempt's refill record (resume.spares.RefillRecord): the refill, with the desired capacity it
        computed, is recorded before the Auto Scaling call and confirmed after it. A try that stops between the two
        (the function timed out or ran out of memory; the workflow retries the step) leaves the record unconfirmed,
        and the retry sets that capacity, unless the group has it already (refill_to_complete): the refill is done
        once, not lost and not doubled. A confirmed record is returned as it is (a failed refill is paged once, from
        the step's last output).

        Under the group's lease (resume.spares.RefillLease), so that refills of one group are made one at a time,
        each from the size the one before left: two relaunches that read the same size would grow the group by one
        refill instead of two. The intent is recorded in the lease too, so that when a holder dies its refill is
        completed by whoever takes the lease next, even if its own retry never comes."""
        if not config.refill_spares or self.scaling is None:
            return None
        provider = next(iter(providers.values()), None)
        group = provider.auto_scaling_group if provider is not None else None
        owner = spare_owner(job.key, attempt)
        key = f"REFILL#{owner}"
        recorded = self.records.refill_record(key)
        if recorded is not None and (recorded.refill is None or recorded.confirmed):
            return _recorded(recorded, group)
        if group is None:  # nothing to grow, so nothing to wait for
            intent = refill(None, None, None, len(spare.hosts))
            self.records.record_refill(key, RefillRecord(refill=intent), REFILL_RECORD_TTL, create=True)
            return intent
        try:
            lease = self._take_refill_lease(group, owner)
        except RefillLeaseBusy as busy:
            # Nothing recorded: a retry of the step tries again; else the failure is paged as any refill's.
            return Refill(state=RefillState.FAILED, group=group, detail=f"{group} could not be grown: {busy}")
        lease = self._complete_left_refill(lease, key)
        recorded = self.records.refill_record(key)  # again, under the lease: the one before may have confirmed it
        if recorded is not None and (recorded.refill is None or recorded.confirmed):
            self._free_refill_lease(lease)
            return _recorded(recorded, group)
        if recorded is not None and recorded.refill is not None:
            return self._grow(lease, key, recorded.refill, retried=True)
        intent = self._refill_intent(group, len(spare.hosts))
        if not intent.grows:  # no call to make: recorded as it is, confirmed, and the lease freed
            freed = lease.model_copy(update={"holder": None, "held_until": None})
            if not self.records.write_refill_lease(freed, lease.revision, record=(key, RefillRecord(refill=intent))):
                raise RefillLeaseLost(f"the refill lease of {group} was taken from {owner}")
            return intent
        held = self._hold(lease, pending=(key, intent))
        record = RefillRecord(refill=intent, confirmed=False)
        if not self.records.write_refill_lease(held, lease.revision, record=(key, record), create=True):
            raise RefillLeaseLost(f"the refill lease of {group} was taken from {owner} before it recorded its refill")
        return self._grow(held.model_copy(update={"revision": lease.revision + 1}), key, intent, retried=False)

    def _take_refill_lease(self, group: str, owner: str) -> RefillLease:
        """The group's refill lease, taken for `owner` (what it holds pending stays): waits while another relaunch
        holds it, at most REFILL_LEASE_WAIT (then RefillLeaseBusy); a lease whose hold passed is taken over."""
        waited = 0.0
        while True:
            lease = self.records.refill_lease(group)
            now = self.clock()
            if lease.free_for(owner, now):
                taken = lease.model_copy(update={"holder": owner, "held_until": now + REFILL_LEASE})
                if self.records.write_refill_lease(taken, lease.revision):
                    return taken.model_copy(update={"revision": lease.revision + 1})
                # Another relaunch wrote it between the read and the write: it holds it now.
            if waited >= REFILL_LEASE_WAIT.total_seconds():
                held = f"held by {lease.holder} until {lease.held_until:%H:%M:%S}Z" if lease.held_until else "taken"
                raise RefillLeaseBusy(
                    f"its refill lease was {held}, and another relaunch kept refilling it for "
                    f"{format_duration(REFILL_LEASE_WAIT)}"
                )
            self.sleep(REFILL_LEASE_POLL_SECONDS)
            waited += REFILL_LEASE_POLL_SECONDS

    def _complete_left_refill(self, lease: RefillLease, key: str) -> RefillLease:
        """Complete the refill another attempt left pending in the lease (its step died between recording and
        confirming it): set the capacity it computed, unless the group has it already, and confirm its record with
        the lease freed of it, in one write. Returns the lease as held then."""
        if not lease.left_by_another(key) or lease.pending is None or lease.pending_key is None:
            return lease
        left, left_key = lease.pending, lease.pending_key
        recorded = self.records.refill_record(left_key)
        done = recorded.refill if recorded is not None and recorded.confirmed else None
        if done is None:
            lease, done = self._set_at_least(lease, left)
            if left.state is RefillState.ASKED and done.state is RefillState.ASKED:
                note = "completed by the next refill of the group, after this step stopped before Auto Scaling answered"
                done = done.model_copy(update={"detail": note})
        cleared = self._hold(lease, pending=None)
        confirmed = (left_key, RefillRecord(refill=done, confirmed=True))
        if not self.records.write_refill_lease(cleared, lease.revision, record=confirmed):
            raise RefillLeaseLost(f"the refill lease of {lease.group} was taken from {lease.holder}")
        return cleared.model_copy(update={"revision": lease.revision + 1})

    def _set_at_least(self, lease: RefillLease, intent: Refill) -> tuple[RefillLease, Refill]:
        """Set the group to the intent's desired capacity unless it has it already (refill_to_complete), renewing
        the lease first; the lease as held then, and the intent as done, or FAILED saying why."""
        group = str(intent.group)
        try:
            scaling = self.scaling() if self.scaling is not None else None
            if scaling is None:
                raise ScalingError("this deployment cannot reach Auto Scaling")
            size = scaling.group_size(group)
            if size is None:
                raise ScalingError(f"Auto Scaling group {group} not found")
            target = refill_to_complete(intent, size[0])
            if target is not None:
                lease = self._renew(lease)
                scaling.set_desired_capacity(group, target)
        except ScalingError as error:
            failed = intent.model_copy(
                update={"state": RefillState.FAILED, "detail": f"{group} could not be grown: {error}"}
            )
            return lease, failed
        return lease, intent

    def _refill_intent(self, group: str, taken: int) -> Refill:
        """The refill to make: the group's size read now, grown by the spares taken within its maximum."""
        try:
            size = self.scaling().group_size(group) if self.scaling is not None else None
        except ScalingError as error:
            return Refill(state=RefillState.FAILED, group=group, detail=f"{group} could not be grown: {error}")
        if size is None:
            return Refill(state=RefillState.FAILED, group=group, detail=f"Auto Scaling group {group} not found")
        return refill(group, size[0], size[1], taken)

    def _grow(self, lease: RefillLease, key: str, intent: Refill, *, retried: bool) -> Refill:
        """Set the recorded refill's desired capacity (on a retry, only if the group is below it), then confirm the
        record with the outcome and free the lease, in one write."""
        group = str(intent.group)
        done = intent
        try:
            scaling = self.scaling() if self.scaling is not None else None
            if scaling is None:
                raise ScalingError("this deployment cannot reach Auto Scaling")
            target = intent.desired_after
            if retried:
                size = scaling.group_size(group)
                if size is None:
                    raise ScalingError(f"Auto Scaling group {group} not found")
                target = refill_to_complete(intent, size[0])
                if intent.state is RefillState.ASKED:
                    note = "completed by a retry of the step, which stopped before Auto Scaling answered"
                    done = intent.model_copy(update={"detail": note})
                if target is not None:
                    # The lease was taken again, its hold renewed here with the intent pending (a record of an
                    # earlier version may have none in the lease).
                    lease = self._renew(lease, pending=(key, intent))
            if target is not None:
                scaling.set_desired_capacity(group, target)
        except ScalingError as error:
            done = intent.model_copy(
                update={"state": RefillState.FAILED, "detail": f"{group} could not be grown: {error}"}
            )
        confirmed = RefillRecord(refill=done, confirmed=True)
        freed = lease.model_copy(update={"holder": None, "held_until": None, "pending": None, "pending_key": None})
        if not self.records.write_refill_lease(freed, lease.revision, record=(key, confirmed)):
            # Held past its time and taken over: the next holder completes this refill from the lease (setting the
            # capacity only if the group lacks it) and confirms it; the record is confirmed here as well.
            self.records.record_refill(key, confirmed, REFILL_RECORD_TTL, create=False)
        return done

    def _hold(self, lease: RefillLease, *, pending: tuple[str, Refill] | None) -> RefillLease:
        """The lease held by its holder for another REFILL_LEASE from now, with `pending` the refill made under it."""
        key, intent = pending if pending is not None else (None, None)
        return lease.model_copy(
            update={"held_until": self.clock() + REFILL_LEASE, "pending_key": key, "pending": intent}
        )

    def _renew(self, lease: RefillLease, *, pending: tuple[str, Refill] | None = None) -> RefillLease:
        """Renew the hold just before an Auto Scaling call (keeping what is pending, or with `pending`): a holder
        whose lease was taken makes no call (RefillLeaseLost)."""
        if pending is None and lease.pending is not None and lease.pending_key is not None:
            pending = (lease.pending_key, lease.pending)
        renewed = self._hold(lease, pending=pending)
        if not self.records.write_refill_lease(renewed, lease.revision):
            raise RefillLeaseLost(f"the refill lease of {lease.group} was taken from {lease.holder}")
        return renewed.model_copy(update={"revision": lease.revision + 1})

    def _free_refill_lease(self, lease: RefillLease) -> None:
        """Free the lease (nothing pending of this holder's): a lease taken over meanwhile is left to its holder."""
        freed = lease.model_copy(update={"holder": None, "held_until": None})
        self.records.write_refill_lease(freed, lease.revision)


def _recorded(recorded: RefillRecord, group: str | None) -> Refill:
    """A refill the attempt recorded and confirmed, as it was (a marker of an earlier version: asked before)."""
    if recorded.refill is None:
        return Refill(state=RefillState.ASKED_BEFORE, group=group)
    return recorded.refill


def _used(hosts: Sequence[str], declared: int, free: int, needed: int) -> SpareUse:
    return SpareUse(state=SpareState.USED, hosts=tuple(hosts), declared=declared, free=free, needed=needed)
