"""The signed webhook as a receiver kind: it can only post, and each post is the whole state of what it is about, in
the shape of Alertmanager's webhook payload (version 4). One payload per incident change (plan.py); the payload that
tells an incident's resolution closes, at the consumer, the alert the earlier ones opened."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fault_responder.core.domain import Incident, InstanceRef, ResumeNote, Severity, Where
from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import DeliveryError, ReceiverChannels
from fault_responder.notification.receivers.kind import (
    Capability,
    NoticeAt,
    Once,
    Outbox,
    ReceiverKind,
    ResumeNotice,
    Work,
)
from fault_responder.notification.receivers.steps import (
    WEBHOOK_POSTED,
    Step,
    StepKind,
    View,
    alert_in,
    digest,
    incident_in,
    noted,
    required,
)
from fault_responder.notification.receivers.timeline import batch_told
from fault_responder.notification.receivers.webhook.client import WebhookClient, is_auth_failure
from fault_responder.notification.receivers.webhook.payload import (
    Change,
    change_for_step,
    render_alert,
    render_incident,
    render_resume_notice,
)
from fault_responder.notification.receivers.webhook.plan import webhook_plan
from fault_responder.routing.router import WebhookTarget

_CAPABILITIES = frozenset({Capability.OPEN, Capability.RESOLVE, Capability.TIMELINE})
"""It posts (a payload per change: OPEN), its last payload of an incident resolves the alert it opened (RESOLVE), and
it is told a fleet incident's member updates in batches, kept by the journal's cursor (TIMELINE). It edits nothing
and threads nothing (each payload is whole), pages no one itself, and is told no silence's news."""
NOTICE_PREFIX = "notice:"
"""A held-back notice's timeline key is its notice's key after this (incidents/timeline.py)."""


class WebhookKind(ReceiverKind[WebhookTarget]):
    key = "webhook"
    target = WebhookTarget

    def capabilities(self, target: WebhookTarget) -> frozenset[Capability]:
        return _CAPABILITIES

    def describe(self, target: WebhookTarget) -> str:
        return f"webhook {target.endpoint}"

    def subject(self, incident: Incident) -> str:
        return incident.id

    def hears(self, paging: str | None) -> bool:
        return True

    def plan(self, name: str, target: WebhookTarget, work: Work) -> list[Step]:
        return webhook_plan(name, work.incidents, work.alerts, work.record)

    def perform(self, target: WebhookTarget, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
        channels: ReceiverChannels = out.channels
        client = WebhookClient(channels)
        external_url = out.dashboard_url or ""
        if step.kind == StepKind.NOTE:
            incident, entry, note = noted(view, step)
            key = entry.key.removeprefix(NOTICE_PREFIX)
            held = _Held.of(incident, note)
            payload = render_resume_notice(
                held, receiver=sent.receiver, key=key, at=entry.at, incident=incident.id, external_url=external_url
            )
            client.post(target.endpoint, payload)
            return replace(sent, steps=[*sent.steps, entry.key])
        if step.kind in (StepKind.POST_STEP, StepKind.RESOLVE):
            incident = incident_in(view, step.subject)
            entry = required(step.entry, "a webhook payload without its step")
            payload = render_incident(
                incident,
                receiver=sent.receiver,
                change=_change(incident, step, sent),
                step=entry,
                max_alerts=target.max_alerts,
                external_url=external_url,
            )
            client.post(target.endpoint, payload)
            return replace(batch_told(sent, step.batch or (entry,)), last_at=out.clock())
        alert = alert_in(view, step.subject)
        client.post(target.endpoint, render_alert(alert, receiver=sent.receiver, external_url=external_url))
        return replace(sent, steps=[*sent.steps, WEBHOOK_POSTED])

    def notify(
        self, name: str, target: WebhookTarget, notice: ResumeNotice, at: NoticeAt, *, out: Outbox, once: Once
    ) -> None:
        """A payload of its own, naming the incident it is about (a webhook has no thread)."""
        key = notice.key or digest([notice.incident_id, notice.kind, notice.title, notice.text])
        payload = render_resume_notice(
            notice,
            receiver=name,
            key=key,
            at=out.clock(),
            incident=at.incident.id if at.incident is not None else None,
            external_url=out.dashboard_url or "",
        )
        client = WebhookClient(out.channels)
        once("post", lambda: client.send(target.endpoint, payload))

    def is_auth_failure(self, error: DeliveryError) -> bool:
        return is_auth_failure(error)


def _change(incident: Incident, step: Step, sent: Delivery) -> Change:
    """What the payload tells: its newest step's change; the first payload of an incident still open opens it,
    whatever it already says."""
    change = change_for_step(incident, required(step.entry, "a webhook payload without its step"))
    if change is not Change.RESOLVED and not sent.steps and sent.cursor is None:
        return Change.OPENED
    return change


@dataclass(frozen=True, slots=True)
class _Held:
    """A notice the workflow held back, as its payload reads it: what the incident's facts kept of it."""

    title: str
    text: str
    severity: Severity
    instance: InstanceRef
    host: str
    fault_title: str
    job_id: str | None
    approval_id: str | None
    where: Where | None
    kind: str = ""
    """What the workflow did is not kept with a held-back notice: the payload leaves the label out."""
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, incident: Incident, note: ResumeNote) -> _Held:
        instance = incident.instance
        return cls(
            title=note.title,
            text=note.text,
            severity=note.severity,
            instance=instance,
            host=instance.ec2_instance_id or instance.container_instance_id,
            fault_title=incident.classification.title,
            job_id=note.job_id,
            approval_id=note.approval_id,
            where=incident.where,
        )


WEBHOOK = WebhookKind()
