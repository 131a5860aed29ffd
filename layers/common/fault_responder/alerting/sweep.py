"""The sweep: every record on its list reconciled, as time alone may change what its facts mean (a hold-down or a
quiet deadline ended, fleet updates waited for their batch, a run died mid-delivery, a receiver is back), and taken
off the list once nothing is open and every receiver was told. Bounded by a number of records and the time left:
what is not reached now is reached by the next run.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any

from fault_responder.alerting.context import Context
from fault_responder.alerting.dispatch import Dispatch
from fault_responder.alerting.intake import Intake
from fault_responder.alerting.membership import FleetMembership
from fault_responder.alerting.store import Fleets, Records
from fault_responder.alerting.views import Views
from fault_responder.core.domain import Incident
from fault_responder.incidents.lifecycle import InstanceView
from fault_responder.incidents.record import InstanceRecord
from fault_responder.noise.fleet import GroupRecord, is_group
from fault_responder.notification.delivery import View, plan

log = logging.getLogger(__name__)

SWEEP_LIMIT = 2000
"""Records one sweep run reconciles at most; the rest wait for the next run."""
SWEEP_MARGIN_SECONDS = 10.0
"""A bound on one worker's loop; far above what one instance ever needs."""


class Sweep:
    def __init__(
        self,
        records: Records,
        fleets: Fleets,
        *,
        views: Views,
        intake: Intake,
        membership: FleetMembership,
        dispatch: Dispatch,
        context: Context,
    ) -> None:
        self.records = records
        self.fleets = fleets
        self.views = views
        self.intake = intake
        self.membership = membership
        self.dispatch = dispatch
        self.context = context

    def reconcile(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring an instance's receivers up to date with what its facts mean now, with no new event: a hold-down
        that ended, a silence that expired, a delivery left unfinished. Raises DeliveryPendingError as handle
        does. `sweeping`: a receiver that failed recently is left alone until its backoff ends, and a record with
        nothing open whose every receiver was told is taken off the sweep's list."""
        record = self.records.load(arn)
        if record is None:
            return {"instance": arn, "receivers": {}}
        owner = uuid.uuid4().hex
        until = self.context.epoch() + seconds_left
        record, held, changed = self.intake.settle(record, None, owner, until)
        groups: list[str] = []
        if changed:
            record, groups = self.membership.group(record, set(record.incidents))
        view = self.views.derive(record)
        outcomes = self.dispatch.deliver_all(
            record, view, held=held, groups=groups, owner=owner, until=until, sweeping=sweeping
        )
        result: dict[str, Any] = {"instance": arn, "receivers": outcomes}
        if sweeping:
            result.update(self._told(arn, self.records.load(arn), self.views.derive))
        return result

    def reconcile_group(self, arn: str, *, seconds_left: float = 60.0, sweeping: bool = False) -> dict[str, Any]:
        """Bring a group's fleet incidents and their receivers up to date (the sweep: an open fleet incident whose
        closer died, member updates that waited for the next batch, a delivery left unfinished)."""
        head = self.fleets.load_group(arn)
        if head is None or self.context.grouping is None:
            return {"group": arn, "receivers": {}}
        fleet = head.fleet()
        if fleet is not None:
            self.membership.close_if_empty(arn, fleet.id, looking=True)
        owner = uuid.uuid4().hex
        until = self.context.epoch() + seconds_left
        outcomes = self.dispatch.collect(self.dispatch.submit_group(arn, owner, until, sweeping=sweeping))
        result: dict[str, Any] = {"group": arn, "receivers": outcomes}
        if sweeping:
            result.update(self._told(arn, self.views.load_fleets(arn), self.views.derive_any))
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
            for name, receiver in self.context.receivers.items()
            if plan(name, receiver, view, record, dashboard_url=self.context.courier.dashboard_url)
        ]
        notes = (
            isinstance(record, InstanceRecord)
            and isinstance(view, InstanceView)
            and self.views.holds_notes(record, view)
        )
        if not is_open and not pending and not notes:
            self.records.unlist(arn, record.version)
        since = [b.since for name, b in record.backoff.items() if name in pending]
        return {"open": is_open, "pending_since": None if is_open or not since else min(since)}

    def run(self, *, seconds_left: float, limit: int = SWEEP_LIMIT) -> dict[str, int]:
        """Reconcile every record on the sweep's list (something open, or a closure not told to every receiver
        yet), as time alone may have changed what it means (a hold-down or a quiet deadline ended, fleet updates
        waited, a run died mid-delivery, a receiver is back). Bounded by `limit` records and the time left; what
        is not reached now is reached by the next run. Reports how long the oldest closure has waited."""
        ends = self.context.epoch() + seconds_left
        tally = {"records": 0, "failed": 0, "deferred": 0, "closures_pending": 0}
        oldest: float | None = None
        for arn in self.records.open_records():
            left = ends - self.context.epoch()
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
                self.context.count("SweepFailures", "Kind", type(error).__name__)
                log.warning("the sweep could not bring %s up to date (the next run tries again): %s", arn, error)
                result = self._pending_after_failure(arn)
            since = result.get("pending_since")
            if since is not None:
                tally["closures_pending"] += 1
                oldest = since if oldest is None else min(oldest, since)
        age = 0.0 if oldest is None else max(0.0, (self.context.epoch() - oldest) / 60)
        self.context.measure("PendingClosureAgeMinutes", "Sweep", "closures", age)
        return tally

    def open_incidents(self, *, limit: int = SWEEP_LIMIT) -> list[Incident]:
        """The open incidents and fleet incidents as derived now, of at most `limit` records on the sweep's list (what a
        silence mutes, to tell its channels: fault_responder.alerting.announce)."""
        found: list[Incident] = []
        for number, arn in enumerate(self.records.open_records()):
            if number >= limit:
                log.warning("open incidents: only the first %d records on the sweep's list were read", limit)
                break
            if is_group(arn):
                head = self.views.load_fleets(arn)
                incidents = self.views.derive_fleet(head).incidents if head is not None else []
            else:
                record = self.records.load(arn)
                incidents = self.views.derive(record).incidents if record is not None else []
            found.extend(incident for incident in incidents if incident.is_open)
        return found

    def _pending_after_failure(self, arn: str) -> dict[str, Any]:
        """What a failed reconciliation left: a closure whose delivery failed is still pending."""
        try:
            record = self.views.load_fleets(arn) if is_group(arn) else self.records.load(arn)
        except Exception:  # the record itself cannot be read: counted by the failure already
            return {}
        if record is None:
            return {}
        return self._told(arn, record, self.views.derive_any) if record.backoff else {}
