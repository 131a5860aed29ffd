"""Telling people what the training auto-resume workflow did, through the alerting pipeline's own pieces.

The same routing file (kind `training_resume`, with the incident's labels), the same secrets and clients
(SecretChannels), the same incident and delivery ledger. In Slack, each notice is a step of the incident: a
RESUME entry in its timeline, a reply in each of its threads, and the root message updated. In PagerDuty,
pages are Events v2 triggers (deduplicated per job) and everything informational is a Change Event, which
never pages.

A notice follows the incident it belongs to. An incident that belongs to a fleet incident (it joined it, or counts in
its group's open one: fault_responder.alerting.places) has its story told by the fleet incident: the notice is a reply
in the fleet incident's thread, its change event names the fleet incident, and a page joins the fleet's alert. A
receiver that a silence, a maintenance window or an inhibition holds back (the incident's, or the fleet incident's
where the notice goes there) is not told now: who was held back, and what to tell them, is recorded with the notice
in the incident's facts, and the router tells them at the next event or the sweep once nothing holds them back
(fault_responder.notification.delivery, `held_notes`), as it tells the incident's own news. Nothing is dropped.

The alert pipeline handles the same ECS event concurrently, so the incident or its Slack thread may not
exist yet: `IncidentNotReady` makes the workflow retry the notification, and after its retries the notice
goes out as a standalone message, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Protocol

from fault_responder.alerting.places import fleet_place
from fault_responder.alerting.store import ConcurrentUpdateError, Fleets, Records
from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.domain import MAX_NOTE_TEXT, FleetPlace, Incident, ResumeNote, Where
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import NoticeFact
from fault_responder.noise.fleet import fingerprint as fleet_fingerprint
from fault_responder.noise.fleet import group_from_labels
from fault_responder.noise.policy import Policy
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.delivery import Channels
from fault_responder.notification.receivers.kind import Capability, NoticeAt, Outlet, ResumeNotice, shortened
from fault_responder.notification.receivers.registry import can, hears, kind_of
from fault_responder.resume.fault import Fault
from fault_responder.resume.notices import Delivered, Notice, pagerduty_dedup_key
from fault_responder.routing.matchers import where_labels
from fault_responder.routing.router import Grouping, Receiver, RouteContext, Router, name_of

KIND = "training_resume"
PHASE = "RESUME"
MAX_SAVE_CONFLICTS = 5


class IncidentNotReady(Exception):
    """The alert pipeline has not opened the incident (or posted its Slack root) yet: retry shortly.

    The class name is the error name the state machine's Retry matches: do not rename it alone.
    """


class ChangeEvents(Protocol):
    def send(self, event: dict[str, Any]) -> None: ...


@dataclass(frozen=True, slots=True)
class DeliveryFailure:
    receiver: str
    channel: str
    error: DeliveryError


class NotificationFailedError(Exception):
    """Some receivers could not be reached after retries; the step fails and the workflow retries it."""

    def __init__(self, failures: list[DeliveryFailure]) -> None:
        self.failures = failures
        summary = "; ".join(f"{f.receiver} ({f.channel}): {f.error}" for f in failures)
        super().__init__(f"{len(failures)} delivery failure(s): {summary}")


class _Where(StrEnum):
    """Where a notice goes for one receiver."""

    OWN = "own"
    """The incident's thread (or a message of its own), the incident's PagerDuty service."""
    FLEET = "fleet"
    """The thread of the fleet incident the incident belongs to; on PagerDuty, next to the fleet's alert."""
    HELD = "held"
    """Nowhere now: held back (a silence, a maintenance window, an inhibition); the router tells it later."""


class ResumeNotifier:
    def __init__(
        self,
        router: Router,
        channels: Channels,
        change_events: ChangeEvents,
        records: Records,
        fleets: Fleets,
        *,
        settings: lifecycle.Settings | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        on_delivery: Callable[[str, bool], None] = lambda channel, ok: None,
        policy: Policy | None = None,
        dashboard_url: str | None = None,
    ) -> None:
        self.router = router
        self.receivers: dict[str, Receiver] = dict(router.config.receivers)
        self.channels = channels
        self.change_events = change_events
        self.records = records
        """The incidents' records, where a notice is recorded, and the ledger of the notices sent."""
        self.fleets = fleets
        """The groups, where the fleet incident an incident belongs to is read."""
        self.settings = settings or lifecycle.Settings()
        self.clock = clock
        self.on_delivery = on_delivery
        self.policy = policy
        self.grouping = router.config.grouping
        self.dashboard_url = dashboard_url or None
        """Linked from the roots it posts (standalone notices) and updates (the incident's), as the router does."""

    def deliver(self, notice: Notice, fault: Fault, *, allow_standalone: bool) -> Delivered:
        """Tell every receiver the routing file names where the notice belongs (the incident's thread, or the fleet
        incident's it belongs to), but those held back (recorded with the notice, for the router to tell later); raise
        IncidentNotReady while a thread to reply in is missing (unless `allow_standalone`), NotificationFailedError
        when a receiver failed."""
        incident = self._incident(fault)
        place = self._place(incident)
        routing = self._routing(notice, fault, incident, place)
        not_ready = self._not_ready(fault, incident, place, routing)
        if not_ready is not None and not allow_standalone:
            raise IncidentNotReady(not_ready)
        if incident is not None:
            held = sorted(name for name, where in routing.items() if where is _Where.HELD)
            recorded = self._record(fault, notice, self._note(notice, fault, held) if held else None)
            if recorded is not None:
                incident, fact = recorded[0] or incident, recorded[1]
                routing = _as_recorded(routing, fact.note.held if fact.note is not None else (), place)
            else:
                routing = _as_recorded(routing, (), place)  # no record to keep it for the router: told now
        failures: list[DeliveryFailure] = []
        for name, where in routing.items():
            receiver = self.receivers[name]
            if where is _Where.HELD:
                continue
            channel = receiver.kind
            fleet = place if where is _Where.FLEET and incident is not None else None
            try:
                self._tell(name, receiver, notice, fault, NoticeAt(incident, fleet))
            except DeliveryError as error:
                self.on_delivery(channel, False)
                failures.append(DeliveryFailure(name, channel, error))
        if failures:
            raise NotificationFailedError(failures)
        told = tuple(name for name, where in routing.items() if where is not _Where.HELD)
        return Delivered(
            told,
            threaded=not_ready is None,
            held=tuple(name for name, where in routing.items() if where is _Where.HELD),
            fleet=place.incident if place is not None and _Where.FLEET in routing.values() else None,
        )

    def _place(self, incident: Incident | None) -> FleetPlace | None:
        if incident is None:
            return None
        return fleet_place(
            self.fleets,
            incident,
            self.grouping,
            route=self.router.route,
            now=self.clock(),
            policy=self.policy,
            accounts=self.settings.accounts,
        )

    def _routing(
        self, notice: Notice, fault: Fault, incident: Incident | None, place: FleetPlace | None
    ) -> dict[str, _Where]:
        """Per receiver the routing file names, where the notice goes. Held back by the incident's silences, windows
        and inhibitions (`Incident.held`: a fleet incident it belongs to tells its notices, and quiet-when-handled
        never holds back the workflow's own), and, where the fleet incident tells it, by the fleet's."""
        routing: dict[str, _Where] = {}
        # Only a notice in the incident's timeline (the fault's time within it) can be told later: any other is told
        # now, whatever holds the incident back.
        may_hold = incident is not None and _within(fault, incident)
        for name in self.router.route(route_context(fault, incident, self.settings.accounts)).receivers:
            receiver = self.receivers.get(name)
            if receiver is None:
                continue
            if incident is None or not hears(receiver, _paging(notice)):
                routing[name] = _Where.OWN  # (no incident yet: standalone; a receiver with nothing to hear: nothing)
            elif name in incident.held and may_hold:
                routing[name] = _Where.HELD
            elif place is not None and name in place.receivers:
                routing[name] = _Where.HELD if name in place.muted and may_hold else _Where.FLEET
            else:
                routing[name] = _Where.OWN
        return routing

    def _note(self, notice: Notice, fault: Fault, held: list[str]) -> ResumeNote:
        """What the router tells the receivers held back, once nothing holds them back (bounded)."""
        return ResumeNote(
            title=notice.title,
            text=shortened(notice.text, MAX_NOTE_TEXT),
            summary=resume_notice(notice, fault, where=self._where(fault)).summary,
            severity=notice.severity,
            pagerduty=notice.pagerduty.value if notice.pagerduty is not None else None,
            dedup_key=trigger_dedup_key(notice, fault, self.grouping, self.settings.accounts) if notice.pages else None,
            job_id=notice.job_id,
            approval_id=notice.approval_id,
            held=tuple(held),
        )

    def _incident(self, fault: Fault) -> Incident | None:
        record = self.records.load(fault.container_instance_arn)
        if record is None:
            return None
        return _fault_incident(
            lifecycle.derive(record, self.settings, self.router.route, self.clock(), self.policy).incidents, fault
        )

    def _not_ready(
        self, fault: Fault, incident: Incident | None, place: FleetPlace | None, routing: dict[str, _Where]
    ) -> str | None:
        """Why the notice cannot go where it belongs yet: no incident, or a receiver that threads (a bot-token Slack
        receiver) whose thread there (the incident's root, or the fleet incident's) the alert pipeline has not posted
        yet."""
        if incident is None:
            return f"incident {fault.fingerprint} does not exist yet"
        threaded = {thread.receiver for thread in incident.slack_threads}
        pending: list[str] = []
        for name, where in routing.items():
            if not can(self.receivers[name], Capability.THREAD):
                continue
            if where is _Where.FLEET and place is not None and name not in place.threads:
                pending.append(f"{name} (fleet incident {place.incident})")
            elif where is _Where.OWN and name in incident.receivers and name not in {*incident.muted, *threaded}:
                pending.append(name)
        return f"incident {fault.fingerprint} has no Slack thread yet in {', '.join(pending)}" if pending else None

    def _record(
        self, fault: Fault, notice: Notice, note: ResumeNote | None
    ) -> tuple[Incident | None, NoticeFact] | None:
        """Add the notice to the incident's facts (once), re-reading when the alert pipeline wrote meanwhile: the
        incident, and the notice as recorded (by this delivery, or by an earlier one of the same notice, whose
        decision of who is held back stands). A notice that holds some receivers back keeps the record on the sweep's
        list: the sweep tells them once nothing holds them back."""
        fact = NoticeFact(
            key=notice.key,
            check_type=fault.check_type,
            fault_at=fault.impaired_at,
            at=self.clock(),
            title=notice.title,
            pages=notice.pages,
            kind=notice.kind.value,
            note=note,
        )
        for _ in range(MAX_SAVE_CONFLICTS):
            record = self.records.load(fault.container_instance_arn)
            if record is None:
                return None
            added = record.add_notice(fact)
            stored = next((known for known in record.notices if known.key == fact.key), fact)
            view = lifecycle.derive(record, self.settings, self.router.route, self.clock(), self.policy)
            incident = _fault_incident(view.incidents, fault)
            if not added:
                return incident, stored
            record.incidents = view.known
            try:
                self.records.commit(record, listed=note is not None)
            except ConcurrentUpdateError:
                continue
            return incident, stored
        raise ConcurrentUpdateError(f"incident {fault.fingerprint} kept changing")

    def _tell(self, name: str, receiver: Receiver, notice: Notice, fault: Fault, at: NoticeAt) -> None:
        """The notice, as the receiver's kind tells it where it goes (`at`), each send once."""
        dedup_key = trigger_dedup_key(notice, fault, self.grouping, self.settings.accounts)
        told = resume_notice(notice, fault, where=self._where(fault), dedup_key=dedup_key)
        outlet = Outlet(_NoticeChannels(self.channels, self.change_events), self.clock, self.dashboard_url)
        kind_of(receiver).notify(
            name,
            receiver.target,
            told,
            at,
            out=outlet,
            once=lambda step, send: self._step(notice, name, step, receiver.kind, send),
        )

    def _where(self, fault: Fault) -> Where | None:
        """In organization mode, the fault's account (its name) and Region, which notices name beside its cluster."""
        return self.settings.accounts.where(fault.instance_ref())

    def _step(self, notice: Notice, receiver: str, step: str, channel: str, send: Callable[[], object]) -> None:
        key = f"resume:{notice.key}#{receiver}#{step}"
        if self.records.delivered(key):
            return
        send()
        self.records.mark_delivered(key)
        self.on_delivery(channel, True)


def trigger_dedup_key(notice: Notice, fault: Fault, grouping: Grouping, accounts: Accounts = SINGLE_ACCOUNT) -> str:
    """The dedup key of the workflow's page. A mass fault is a fleet event: its page is the fleet incident's
    PagerDuty alert (the fleet's dedup key for the fault's group), so on-call gets one alert for the event,
    whether the workflow or the alert pipeline triggers first, and the fleet's resolve closes it. With grouping
    off, one alert per capacity provider; every other page, one per fault and job."""
    if notice.subject == "mass-fault" and grouping.enabled:
        return fleet_fingerprint(group_from_labels(fault_labels(fault, accounts), grouping, accounts))
    scope = "" if accounts.is_home(fault.account, fault.region) else f"{fault.account}/{fault.region}/"
    return pagerduty_dedup_key(fault, notice.subject, scope=scope)


def fault_labels(fault: Fault, accounts: Accounts = SINGLE_ACCOUNT) -> dict[str, str]:
    """The labels of the fault's incident (matchers.incident_labels), from the fault alone."""
    return {
        "kind": "health_impaired",
        "cluster": fault.cluster_name,
        "capacity_provider": fault.capacity_provider,
        "instance": fault.container_instance_arn.rsplit("/", 1)[-1],
        "ec2_instance": fault.ec2_instance_id or "",
        "check_type": fault.check_type,
        "xid": "" if fault.xid is None else str(fault.xid),
        "severity": fault.severity.value,
        "fault_class": fault.fault_class,
        "drain_attribution": "",
        "fleet": "false",
        "drill": "false",  # the workflow never runs for a drill
        **where_labels(fault.instance_ref(), accounts.where(fault.instance_ref())),
    }


def _as_recorded(routing: dict[str, _Where], held: tuple[str, ...], place: FleetPlace | None) -> dict[str, _Where]:
    """The routing as the notice was first recorded: whom it held back is the router's to tell (whatever holds them
    back now), and everyone else the workflow tells (a mute that began since does not drop a notice on its way)."""
    recorded: dict[str, _Where] = {}
    for name, where in routing.items():
        if name in held:
            recorded[name] = _Where.HELD
        elif where is not _Where.HELD:
            recorded[name] = where
        else:
            recorded[name] = _Where.FLEET if place is not None and name in place.receivers else _Where.OWN
    return recorded


def _fault_incident(incidents: list[Incident], fault: Fault) -> Incident | None:
    """The incident of the fault's check that contains the fault's time (else the latest of that check)."""
    mine = [incident for incident in incidents if incident.check_type == fault.check_type]
    for incident in mine:
        if _within(fault, incident):
            return incident
    return mine[-1] if mine else None


def _within(fault: Fault, incident: Incident) -> bool:
    """Whether the fault's time is within the incident (its notices are in the incident's timeline then)."""
    ends = incident.closed_at
    return incident.opened_at <= fault.impaired_at and (ends is None or fault.impaired_at <= ends)


def route_context(fault: Fault, incident: Incident | None, accounts: Accounts = SINGLE_ACCOUNT) -> RouteContext:
    """A notice is routed like its incident (same labels), with kind `training_resume`."""
    where = incident.where if incident is not None else accounts.where(fault.instance_ref())
    return RouteContext(
        kind=KIND,
        cluster=fault.cluster_name,
        capacity_provider=fault.capacity_provider,
        check_type=fault.check_type,
        fault_class=fault.fault_class,
        severity=fault.severity,
        drain_attribution=incident.drain.cause.value if incident is not None and incident.drain else None,
        account=fault.account,
        region=fault.region,
        account_name=name_of(where),
    )


class _NoticeChannels:
    """The delivery channels, but for Change Events: the workflow's own client."""

    def __init__(self, channels: Channels, change_events: ChangeEvents) -> None:
        self._channels = channels
        self._change_events = change_events

    def pagerduty_changes(self) -> ChangeEvents:
        return self._change_events

    def __getattr__(self, name: str) -> Any:
        return getattr(self._channels, name)


def _paging(notice: Notice) -> str | None:
    return notice.pagerduty.value if notice.pagerduty is not None else None


def resume_notice(
    notice: Notice, fault: Fault, *, where: Where | None = None, dedup_key: str | None = None
) -> ResumeNotice:
    """The notice as every receiver kind renders it (fault_responder.notification.receivers): what it says, about
    which fault, where; a page's dedup key, one per fault and job unless `dedup_key` says otherwise."""
    return ResumeNotice(
        title=notice.title,
        text=notice.text,
        severity=notice.severity,
        kind=notice.kind.value,
        instance=fault.instance_ref(),
        host=fault.host,
        cluster=fault.cluster_name,
        capacity_provider=fault.capacity_provider,
        fault_title=fault.title,
        fault_label=fault.label,
        incident_id=fault.fingerprint,
        dedup_key=dedup_key or pagerduty_dedup_key(fault, notice.subject),
        paging=_paging(notice),
        job_id=notice.job_id,
        approval_id=notice.approval_id,
        details=dict(notice.details),
        where=where,
        key=notice.key,
    )
