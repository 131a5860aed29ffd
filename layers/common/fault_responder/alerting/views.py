"""What a record means now, read and derived with no write: an instance's incidents, a group's fleet incidents (with
what deriving them reads beside the head), whether a held-back notice is still to be told, and whether a fleet
incident's receiver may have something due.
"""

from __future__ import annotations

from fault_responder.alerting.context import Context
from fault_responder.alerting.places import fleet_place
from fault_responder.alerting.store import Fleets, with_open_members
from fault_responder.core.domain import Incident
from fault_responder.incidents.lifecycle import InstanceView, derive
from fault_responder.incidents.record import InstanceRecord
from fault_responder.noise.fleet import JOURNAL_PAGE, FleetView, GroupRecord, derive_fleet, readable_journal
from fault_responder.notification.delivery import FLEET_BATCH, FLEET_BATCH_WAIT, View
from fault_responder.notification.receivers.kind import Capability
from fault_responder.notification.receivers.registry import can, hears
from fault_responder.notification.receivers.registry import subject as delivery_subject


class Views:
    def __init__(self, fleets: Fleets, context: Context) -> None:
        self.fleets = fleets
        self.context = context

    def derive(self, record: InstanceRecord) -> InstanceView:
        now = self.context.clock()
        view = derive(record, self.context.settings, self.context.router.route, now, self.context.policy)
        for incident in view.incidents:
            if self._untold_notes(record, incident):
                # Where the notices the workflow held back go once nothing holds them back: the fleet incident the
                # incident belongs to, if any (one read of the group's head, only while such a notice waits).
                incident.fleet_place = fleet_place(
                    self.fleets,
                    incident,
                    self.context.grouping,
                    route=self.context.router.route,
                    now=now,
                    policy=self.context.policy,
                    accounts=self.context.settings.accounts,
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
                receiver = self.context.receivers.get(name)
                if receiver is None or name not in incident.receivers:
                    continue  # (no longer routed to it: nothing is told to it any more)
                if not hears(receiver, note.pagerduty):
                    continue
                subject = delivery_subject(receiver, incident)
                if entry.key not in record.delivery(name, subject).steps:
                    return True
        return False

    def holds_notes(self, record: InstanceRecord, view: InstanceView) -> bool:
        """Whether the record keeps a held-back notice not told yet: it stays on the sweep's list until it is, open
        incident or not (the sweep tells it once nothing holds it back)."""
        return any(self._untold_notes(record, incident) for incident in view.incidents)

    def derive_fleet(self, group: GroupRecord) -> FleetView:
        if self.context.grouping is None:
            return FleetView()
        return derive_fleet(
            group,
            self.context.grouping,
            self.context.router.route,
            self.context.clock(),
            self.context.policy,
            accounts=self.context.settings.accounts,
        )

    def load_fleets(self, arn: str, *, counts: bool = True) -> GroupRecord | None:
        """The group's head, and what deriving its fleet incidents reads beside it (all bounded): the open fleet
        incident's open members (`counts`), and the journal entries some receiver has not been told yet."""
        head = self.fleets.load_group(arn)
        if head is None:
            return None
        if counts:
            with_open_members(self.fleets, head)
        # The receivers that keep a thread (or post webhook messages) of each fleet incident: PagerDuty keeps none.
        receivers = {
            incident.id: [name for name in incident.receivers if can(self.context.receivers[name], Capability.TIMELINE)]
            for incident in self.derive_fleet(head).incidents
        }
        after = _untold_from(head, receivers)
        if after is not None:
            entries = self.fleets.journal(arn, after, limit=JOURNAL_PAGE)
            head.journal = readable_journal(entries, after, self.context.epoch())
        return head

    def derive_any(self, record: InstanceRecord | GroupRecord) -> View:
        return self.derive_fleet(record) if isinstance(record, GroupRecord) else self.derive(record)

    def fleet_due(self, head: GroupRecord) -> bool:
        """Whether a receiver of the group's open fleet incident may have something due now, from the head alone: a
        root or page not sent yet, a batch of member updates full, or the last one a minute old. False only when
        nothing can be due: the member updates wait for their batch, and nothing else is read for them."""
        fleet = head.fleet()
        if fleet is None:
            return True
        now = self.context.clock()
        incident = self.derive_fleet(head).incident(fleet.id)
        if incident is None:
            return True
        for name in incident.receivers:
            if name in incident.muted:
                continue
            receiver = self.context.receivers[name]
            subject = delivery_subject(receiver, incident)
            sent = head.delivery(name, subject)
            if sent.ts is None and sent.alert is None:
                return True  # nothing sent yet
            if sent.last_at is None or now - sent.last_at >= FLEET_BATCH_WAIT:
                return True
            told = sent.cursor if sent.cursor is not None else fleet.first_seq
            if can(receiver, Capability.TIMELINE) and head.journal_seq - told >= FLEET_BATCH:
                return True
        return False


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
