"""Bringing receivers up to date: each receiver with something to send is flushed by whoever holds its lease, one
thread per receiver, so a slow Slack never holds back PagerDuty.

The lease holder sends until nothing is left, then releases the lease only if no new facts arrived meanwhile (with
the write that records its last delivery, where it can); a worker that finds the lease held leaves its work to the
holder. Every call to a receiver is fenced by the lease. A failed receiver fails the event, which SQS redelivers
(the retry only delivers what is still missing), and is remembered with a backoff the sweep honours.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from fault_responder.alerting.context import Context
from fault_responder.alerting.store import LeaseLostError, Leases, Records
from fault_responder.alerting.views import Views
from fault_responder.incidents.lifecycle import InstanceView
from fault_responder.incidents.record import Backoff, Delivery, InstanceRecord, Lease
from fault_responder.noise.fleet import GroupRecord
from fault_responder.notification.contract import DeliveryError, LeaseEndingError, fenced
from fault_responder.notification.delivery import (
    Step,
    StepKind,
    View,
    as_seen_by,
    pending_since,
    plan,
    with_pending,
    without_pending,
)
from fault_responder.routing.router import Receiver

MAX_STEPS_PER_FLUSH = 200
BACKOFF_FIRST_SECONDS = 60.0
BACKOFF_MAX_SECONDS = 900.0
"""The sweep tries a receiver that failed again at its next run, then after 1, 2, 4, 8 and every 15 minutes."""
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


class Dispatch:
    def __init__(self, records: Records, leases: Leases, views: Views, context: Context, *, workers: int) -> None:
        self.records = records
        self.leases = leases
        self.views = views
        self.context = context
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="deliver")

    def deliver_all(
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
            jobs.update(self.submit_group(arn, owner, until, sweeping=sweeping))
        return self.collect(jobs)

    def submit_group(
        self, arn: str, owner: str, until: float, *, sweeping: bool = False
    ) -> dict[str, Future[_Flushed]]:
        """Flush the group's receivers that have work. Whether they have is decided from the head and the journal
        alone (the member counts and lists are read by the flush, when a message is rendered)."""
        head = self.views.load_fleets(arn, counts=False)
        if head is None:
            return {}
        target = self._group_target(arn)
        jobs = self._submit(
            head, self.views.derive_fleet(head), held={}, owner=owner, until=until, target=target, sweeping=sweeping
        )
        return {f"{name} (fleet)": job for name, job in jobs.items()}

    def collect(self, jobs: dict[str, Future[_Flushed]]) -> dict[str, list[str]]:
        outcomes = {name: job.result() for name, job in jobs.items()}
        failures = {name: outcome.failure for name, outcome in outcomes.items() if outcome.failure}
        if failures:
            raise DeliveryPendingError(failures)
        return {name: outcome.sent for name, outcome in outcomes.items()}

    def submit_instance(
        self,
        record: InstanceRecord,
        view: InstanceView,
        *,
        held: dict[str, Lease],
        owner: str,
        until: float,
    ) -> dict[str, Future[_Flushed]]:
        """Flush the instance's receivers that have work (`held`: the leases taken with the write of `record`)."""
        return self._submit(record, view, held=held, owner=owner, until=until, target=self._instance_target(record.arn))

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
        now = self.context.epoch()
        jobs: dict[str, Future[_Flushed]] = {}
        for name, receiver in self.context.receivers.items():
            lease = held.get(name)
            fresh = lease is not None
            if lease is None:
                if not plan(name, receiver, view, record, dashboard_url=self.context.courier.dashboard_url):
                    continue
                backoff = record.backoff.get(name)
                if sweeping and backoff is not None and backoff.retry_at > now:
                    continue  # failed recently: the sweep tries it again when its backoff ends
                candidate = Lease(name, owner, until)
                if not self.leases.take_lease(arn, candidate, now):
                    continue  # its holder delivers this event's facts before it lets go
                lease = candidate
            # A lease taken with this worker's write comes with the record as that write left it; a lease taken
            # afterwards may follow another holder's deliveries, which `record` (read earlier) does not show.
            jobs[name] = self._pool.submit(self._flush, name, receiver, lease, record, target, fresh=fresh)
        return jobs

    def _instance_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.records.load(arn), derive=self.views.derive_any)

    def _group_target(self, arn: str) -> _Target:
        return _Target(load=lambda: self.views.load_fleets(arn), derive=self.views.derive_any)

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
        channel = receiver.kind
        try:
            if not fresh:
                local = self._reload(target, record)
            planned: tuple[View, list[Step]] | None = None
            while True:
                view, steps = planned or self._plan(name, receiver, local, target)
                planned = None
                if not steps:
                    if self.leases.release(local.arn, lease, local.version):
                        return flushed
                    local = self._reload(target, local)
                    continue
                if len(flushed.sent) >= MAX_STEPS_PER_FLUSH:
                    raise RuntimeError(f"more than {MAX_STEPS_PER_FLUSH} steps for one receiver")
                step = steps[0]
                with fenced(lease.until - LEASE_SKEW_SECONDS, clock=self.context.epoch):
                    told = self._perform(name, receiver, lease, local=local, view=view, step=step)
                flushed.sent.append(step.describe())
                self.context.count("NotificationsSent", "Channel", channel)
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
            self.context.count("NotificationsFailed", "Channel", channel)
            flushed.failure = str(error)
            self._back_off(local, name, lease)
        except Exception as error:  # a bug must fail the event (and reach the DLQ with its reason), not vanish
            self.context.count("NotificationsFailed", "Channel", channel)
            flushed.failure = f"{type(error).__name__}: {error}"
            self._back_off(local, name, lease)
        self.leases.drop_lease(local.arn, lease)
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
            self.leases.record_delivery(local.arn, lease, after)
            if pages:
                # PagerDuty's webhooks name only the dedup key: remember whose alert it is (once per incident).
                self.records.remember_page(step.subject.removeprefix("pd:"), local.arn)
            # A fleet's journal is read a page at a time: the next page, with the cursor just recorded.
            return False, None, self._reload(target, local) if batch else local
        try:
            planned = self._plan(name, receiver, local, target)
        except Exception:
            self.leases.record_delivery(local.arn, lease, after)  # what was sent is recorded whatever fails next
            raise
        if not planned[1] and self.leases.record_and_release(local.arn, lease, after, local.version):
            return True, None, local
        self.leases.record_delivery(local.arn, lease, after)
        if planned[1]:
            return False, planned, local
        return False, None, self._reload(target, local)  # facts arrived: what they change is sent before letting go

    def _back_off(self, record: InstanceRecord | GroupRecord, name: str, lease: Lease) -> None:
        """Remember the receiver's failure: the sweep tries again at its next run, then waits 1, 2, 4, ... up to 15
        minutes between tries (an event tries at once: news is worth a try). A flush that completes clears it."""
        now = self.context.epoch()
        before = record.backoff.get(name)
        failures = (before.failures if before is not None else 0) + 1
        wait = 0.0 if failures == 1 else min(BACKOFF_FIRST_SECONDS * 2 ** (failures - 2), BACKOFF_MAX_SECONDS)
        since = before.since if before is not None else now
        try:
            self.leases.back_off(record.arn, lease, Backoff(name, failures, since, now + wait))
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
            intent = with_pending(before, marker, self.context.clock(), lease.owner)
            self.leases.record_delivery(arn, lease, intent)
            local.deliveries[(name, step.subject)] = intent
        try:
            after = self.context.courier.perform(name, receiver, step, view, before)
        except DeliveryError as error:
            if marker is not None and not error.unknown_outcome:
                # Known not to have landed: no need to look for it next time.
                cleared = without_pending(local.delivery(name, step.subject), marker)
                self.leases.record_delivery(arn, lease, cleared)
            raise
        return before, after

    def _plan(
        self, name: str, receiver: Receiver, local: InstanceRecord | GroupRecord, target: _Target
    ) -> tuple[View, list[Step]]:
        view = target.derive(local)
        return view, plan(name, receiver, view, local, dashboard_url=self.context.courier.dashboard_url)

    @staticmethod
    def _reload(target: _Target, local: InstanceRecord | GroupRecord) -> InstanceRecord | GroupRecord:
        reloaded = target.load()
        if reloaded is None:
            raise LeaseLostError(f"{local.arn} is gone")
        return reloaded


@dataclass(frozen=True, slots=True)
class _Target:
    """How a flush re-reads and re-derives what it delivers (an instance, or a group)."""

    load: Callable[[], InstanceRecord | GroupRecord | None]
    derive: Callable[[InstanceRecord | GroupRecord], View]
