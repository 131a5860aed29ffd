"""PagerDuty as a receiver kind: Events API v2 (trigger, acknowledge, resolve; idempotent per dedup key, and per
receiver in order, because one worker at a time holds the receiver's lease) and Change Events, which never page."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Protocol

from fault_responder.core.domain import Incident
from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.kind import (
    Capability,
    NoticeAt,
    Once,
    Outbox,
    ReceiverKind,
    ResumeNotice,
    Work,
)
from fault_responder.notification.receivers.pagerduty.notices import render_notice_change, render_notice_trigger
from fault_responder.notification.receivers.pagerduty.plan import (
    alert_dedup_key,
    page_digest,
    pagerduty_plan,
    pagerduty_subject,
    trigger_event,
)
from fault_responder.notification.receivers.steps import Step, StepKind, View, alert_in, incident_in, noted
from fault_responder.notification.render.notes import render_note_change, render_note_trigger
from fault_responder.notification.render.pagerduty import render_acknowledge, render_alert_trigger, render_resolve
from fault_responder.routing.router import PagerDutyTarget

_CAPABILITIES = frozenset(
    {Capability.OPEN, Capability.UPDATE, Capability.RESOLVE, Capability.ACKNOWLEDGE, Capability.PAGE}
)


class PagerDuty(Protocol):
    def send(self, event: dict[str, object]) -> str: ...


class ChangeEvents(Protocol):
    """PagerDuty's Change Events: informational, they never page."""

    def send(self, event: dict[str, Any]) -> None: ...


class PagerDutyChannels(Protocol):
    """What a PagerDuty receiver asks of the wiring's channels (secrets resolved lazily)."""

    def pagerduty(self) -> PagerDuty: ...

    def pagerduty_changes(self) -> ChangeEvents: ...

    def routing_key(self, service: str) -> str: ...


class PagerDutyKind(ReceiverKind[PagerDutyTarget]):
    key = "pagerduty"
    target = PagerDutyTarget

    def capabilities(self, target: PagerDutyTarget) -> frozenset[Capability]:
        return _CAPABILITIES

    def describe(self, target: PagerDutyTarget) -> str:
        return f"pagerduty {target.service}"

    def subject(self, incident: Incident) -> str:
        return pagerduty_subject(incident.fingerprint)

    def hears(self, paging: str | None) -> bool:
        return bool(paging)

    def plan(self, name: str, target: PagerDutyTarget, work: Work) -> list[Step]:
        return pagerduty_plan(name, work.incidents, work.alerts, work.record)

    def perform(self, target: PagerDutyTarget, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
        channels: PagerDutyChannels = out.channels
        key = channels.routing_key(target.service)
        if step.kind == StepKind.NOTE:
            return _note(channels, key, step, view, sent)
        events = channels.pagerduty()
        if step.kind == StepKind.RESOLVE:
            events.send(render_resolve(step.subject.removeprefix("pd:"), key))
            return replace(sent, alert="resolve", incident=None, acked=None)
        if step.kind == StepKind.TRIGGER:
            incident = incident_in(view, step.incident or "")
            events.send(trigger_event(incident, key))
            return replace(
                sent,
                alert="trigger",
                digest=page_digest(incident),
                incident=incident.id,
                last_at=out.clock(),
                severity=incident.classification.severity.value,
                acked=sent.acked if sent.incident == incident.id else None,
            )
        if step.kind == StepKind.ACKNOWLEDGE:
            incident = incident_in(view, step.incident or "")
            events.send(render_acknowledge(step.subject.removeprefix("pd:"), key))
            return replace(sent, acked=incident.acknowledge_key)
        alert = alert_in(view, step.subject)
        if step.kind == StepKind.RESOLVE_NOTICE:
            events.send(render_resolve(alert_dedup_key(alert), key))
            return replace(sent, alert="resolve")
        events.send(render_alert_trigger(alert, key, alert_dedup_key(alert)))
        return replace(sent, alert="trigger")

    def notify(
        self, name: str, target: PagerDutyTarget, notice: ResumeNotice, at: NoticeAt, *, out: Outbox, once: Once
    ) -> None:
        """A page or a change event; about a member of a fleet incident (`at.fleet`), it names the fleet incident, and
        a page goes to the fleet's alert while that is open."""
        if not notice.paging:
            return
        channels: PagerDutyChannels = out.channels
        key = channels.routing_key(target.service)
        now = out.clock()
        place = at.fleet
        fleet = {"fleet_incident": place.incident, "fleet_dedup_key": place.dedup_key} if place is not None else {}
        if notice.paging == "trigger":
            dedup_key = place.dedup_key if place is not None and place.is_open else notice.dedup_key
            event = render_notice_trigger(notice, key, now, dedup_key)
            event["payload"]["custom_details"].update(fleet)
            events = channels.pagerduty()
            once("trigger", lambda: events.send(event))
        else:
            change = render_notice_change(notice, key, now)
            change["payload"]["custom_details"].update(fleet)
            changes = channels.pagerduty_changes()
            once("change", lambda: changes.send(change))

    def is_auth_failure(self, error: DeliveryError) -> bool:
        return error.status == 400 and "routing key" in error.reason.lower()


def _note(channels: PagerDutyChannels, key: str, step: Step, view: View, sent: Delivery) -> Delivery:
    """A held-back notice: a change event, or a page (on the alert of the fleet incident it belongs to while that is
    open, as the workflow's pages about a fleet's members are; else on the one the workflow named)."""
    incident, entry, note = noted(view, step)
    place = step.place
    fleet = (place.incident, place.dedup_key) if place is not None else None
    if note.pagerduty == "trigger":
        dedup_key = place.dedup_key if place is not None and place.is_open else note.dedup_key
        event = render_note_trigger(incident, entry, note, key, dedup_key or incident.dedup_key, fleet=fleet)
        channels.pagerduty().send(event)
    else:
        channels.pagerduty_changes().send(render_note_change(incident, entry, note, key, fleet=fleet))
    return replace(sent, steps=[*sent.steps, entry.key])


PAGERDUTY = PagerDutyKind()
