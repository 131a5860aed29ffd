"""Microsoft Teams as a receiver kind: a Workflows webhook, which can only post. Every change of an incident is a new
card naming the incident and the step (Teams cannot edit a card or reply in a thread), a fleet incident's member
updates go in batches of what one card holds, and the workflow's notices and a silence's news are cards of their own.

The cards are this package's (render.py, fleet.py, notices.py, silences.py); they are posted through the channels'
generic port (client.py over notification/contract.py ReceiverChannels), with the URL read from the Teams secret by
name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from fault_responder.core.domain import Incident, InstanceRef, ResumeNote, Severity
from fault_responder.incidents.record import Delivery
from fault_responder.noise.fleet import journal_seq
from fault_responder.notification.contract import DeliveryError, ReceiverChannels
from fault_responder.notification.receivers.kind import (
    Capability,
    News,
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
    incident_in,
    noted,
    required,
)
from fault_responder.notification.receivers.teams.card import TeamsMessage
from fault_responder.notification.receivers.teams.client import AUTH_STATUSES, SERVICE, TeamsWebhook
from fault_responder.notification.receivers.teams.fleet import fleet_steps_that_fit, render_fleet, render_fleet_steps
from fault_responder.notification.receivers.teams.notices import render_notice
from fault_responder.notification.receivers.teams.render import render_alert, render_incident, step_name
from fault_responder.notification.receivers.teams.silences import render_silence_news
from fault_responder.notification.receivers.timeline import batch_told, post_only_plan
from fault_responder.routing.router import TeamsTarget

log = logging.getLogger(__name__)

_CAN = frozenset({Capability.OPEN, Capability.TIMELINE, Capability.NEWS})
"""Post only: a new card for each step, never an edit or a reply (so no UPDATE, THREAD or RESOLVE); a channel, so it
hears a silence's start and end as Slack's channels do."""


class TeamsKind(ReceiverKind[TeamsTarget]):
    key = SERVICE
    target = TeamsTarget

    def capabilities(self, target: TeamsTarget) -> frozenset[Capability]:
        return _CAN

    def describe(self, target: TeamsTarget) -> str:
        return f"teams {target.webhook}"

    def subject(self, incident: Incident) -> str:
        return incident.id

    def hears(self, paging: str | None) -> bool:
        return True

    def plan(self, name: str, target: TeamsTarget, work: Work) -> list[Step]:
        """One card per step (post_only_plan); a fleet incident's member updates in batches of as many as one card
        names in full."""
        steps: list[Step] = []
        for incident in work.incidents:

            def fits(batch: tuple[Any, ...], incident: Incident = incident) -> int:
                return fleet_steps_that_fit(incident, batch)

            steps.extend(post_only_plan(name, [incident], [], work.record, fits=fits))
        steps.extend(post_only_plan(name, [], work.alerts, work.record, fits=len))
        return steps

    def perform(self, target: TeamsTarget, step: Step, view: View, sent: Delivery, out: Outbox) -> Delivery:
        hook = TeamsWebhook(_channels(out), target.webhook)
        link = out.dashboard_url
        if step.kind == StepKind.NOTE:
            incident, entry, note = noted(view, step)
            hook.post(render_notice(_Held.of(note), _Fault.of(incident), where=incident.where, dashboard_url=link))
            return replace(sent, steps=[*sent.steps, entry.key])
        if step.kind == StepKind.POST_STEP:
            incident = incident_in(view, step.subject)
            entry = required(step.entry, "a teams step without its step")
            if step.batch:
                hook.post(_fleet_card(incident, step.batch, link))
                return replace(batch_told(sent, step.batch), last_at=out.clock())
            hook.post(render_incident(incident, entry, dashboard_url=link))
            return replace(sent, steps=[*sent.steps, entry.key])
        hook.post(render_alert(alert_in(view, step.subject), dashboard_url=link))
        return replace(sent, steps=[*sent.steps, WEBHOOK_POSTED])

    def notify(
        self, name: str, target: TeamsTarget, notice: ResumeNotice, at: NoticeAt, *, out: Outbox, once: Once
    ) -> None:
        """A card of its own naming the job, the host and the incident (Teams has no thread to reply in)."""
        hook = TeamsWebhook(_channels(out), target.webhook)
        card = render_notice(notice, _Fault.told(notice), where=notice.where, dashboard_url=out.dashboard_url)
        once("post", lambda: hook.post(card))

    def announce(
        self, target: TeamsTarget, news: News, out: Outbox, *, since: datetime | None, intend: Callable[[], None]
    ) -> bool:
        """A card of its own. A post whose outcome is unknown is not sent again: a webhook cannot be searched."""
        if since is not None:
            log.warning(
                "silence %s %s: a teams post's outcome is unknown; not posted again", news.silence.id, news.phase.value
            )
            return False
        card = render_silence_news(news.silence, news.phase, news.muted, dashboard_url=out.dashboard_url)
        intend()
        TeamsWebhook(_channels(out), target.webhook).post(card)
        return True

    def is_auth_failure(self, error: DeliveryError) -> bool:
        """401, 403 or 404: the URL may have been replaced in the secret (a new flow or signature) since it was read."""
        return error.service == SERVICE and error.status in AUTH_STATUSES


def _channels(out: Outbox) -> ReceiverChannels:
    channels: ReceiverChannels = out.channels
    return channels


def _fleet_card(incident: Incident, batch: tuple[Any, ...], dashboard_url: str | None) -> TeamsMessage:
    """A batch of a fleet incident's steps: when it holds a step of the fleet incident itself (opened, resolved), the
    fleet's card as it is now (its summary, counts and members), naming that step; else a card of member updates."""
    own = [entry for entry in batch if journal_seq(entry.key) is None]
    if own:
        return render_fleet(incident, step=step_name(incident, own[-1]), dashboard_url=dashboard_url)
    return render_fleet_steps(incident, batch, dashboard_url=dashboard_url)


@dataclass(frozen=True, slots=True)
class _Held:
    """A held-back notice (kept with the incident's facts) as a notice card reads it."""

    title: str
    text: str
    severity: Severity
    job_id: str | None
    approval_id: str | None
    details: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, note: ResumeNote) -> _Held:
        return cls(note.title, note.text, note.severity, note.job_id, note.approval_id)


@dataclass(frozen=True, slots=True)
class _Fault:
    """The fault a notice is about, as a notice card reads it."""

    host: str
    cluster_name: str
    capacity_provider: str
    title: str
    fingerprint: str
    instance: InstanceRef

    def instance_ref(self) -> InstanceRef:
        return self.instance

    @classmethod
    def of(cls, incident: Incident) -> _Fault:
        instance = incident.instance
        return cls(
            host=instance.ec2_instance_id or instance.container_instance_id,
            cluster_name=instance.cluster_name,
            capacity_provider=instance.capacity_provider or "none",
            title=incident.classification.title,
            fingerprint=incident.fingerprint,
            instance=instance,
        )

    @classmethod
    def told(cls, notice: ResumeNotice) -> _Fault:
        return cls(
            host=notice.host,
            cluster_name=notice.cluster,
            capacity_provider=notice.capacity_provider,
            title=notice.fault_title,
            fingerprint=notice.incident_id,
            instance=notice.instance,
        )


TEAMS = TeamsKind()
