"""Telling people what the training auto-resume workflow did, through the alerting pipeline's own pieces.

The same routing file (kind `training_resume`, with the incident's labels), the same secrets and clients
(SecretChannels), the same incident and delivery ledger. In Slack, each notice is a step of the incident: a
RESUME entry in its timeline, a reply in each of its threads, and the root message updated. In PagerDuty,
pages are Events v2 triggers (deduplicated per job) and everything informational is a Change Event, which
never pages.

The alert pipeline handles the same ECS event concurrently, so the incident or its Slack thread may not
exist yet: `IncidentNotReady` makes the workflow retry the notification, and after its retries the notice
goes out as a standalone message, so nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from fault_responder.alerting.store import ConcurrentUpdateError, InstanceStore
from fault_responder.core.domain import Incident
from fault_responder.core.timefmt import iso_utc
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import NoticeFact
from fault_responder.noise.fleet import fingerprint as fleet_fingerprint
from fault_responder.noise.policy import QUIET_REASON_PREFIX, Policy
from fault_responder.notification.buttons import ActionId
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.delivery import Channels
from fault_responder.notification.render.slack import (
    SEVERITY_EMOJI,
    SlackMessage,
    escape_mrkdwn,
    render_incident_root,
    root_context,
)
from fault_responder.resume.fault import Fault
from fault_responder.resume.notices import Delivered, Notice, PagerDutyAction, pagerduty_dedup_key
from fault_responder.routing.router import Grouping, Receiver, RouteContext, Router

KIND = "training_resume"
PHASE = "RESUME"
CLIENT_NAME = "GPU Fault Responder"
MAX_SUMMARY = 1024
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
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


class ResumeNotifier:
    def __init__(
        self,
        router: Router,
        channels: Channels,
        change_events: ChangeEvents,
        store: InstanceStore,
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
        self.store = store
        self.settings = settings or lifecycle.Settings()
        self.clock = clock
        self.on_delivery = on_delivery
        self.policy = policy
        self.grouping = router.config.grouping
        self.dashboard_url = dashboard_url or None
        """Linked from the roots it posts (standalone notices) and updates (the incident's), as the router does."""

    def deliver(self, notice: Notice, fault: Fault, *, allow_standalone: bool) -> Delivered:
        """Deliver to every receiver the routing file names; raise IncidentNotReady while the incident's
        threads are missing (unless `allow_standalone`), NotificationFailedError when a receiver failed."""
        incident = self._incident(fault)
        # A receiver held back from the incident (a silence, a maintenance window, a fleet incident that tells its
        # story) is held back from its notices too: the notice is recorded in the incident's timeline all the same.
        names = [
            name
            for name in self.router.route(route_context(fault, incident)).receivers
            if incident is None or not _held_back(incident.muted.get(name))
        ]
        not_ready = self._not_ready(fault, incident, names)
        if not_ready is not None and not allow_standalone:
            raise IncidentNotReady(not_ready)
        if incident is not None:
            incident = self._record(fault, notice) or incident
        failures: list[DeliveryFailure] = []
        for name in names:
            receiver = self.receivers.get(name)
            if receiver is None:
                continue
            channel = "slack" if receiver.slack is not None else "pagerduty"
            try:
                self._deliver_to(name, receiver, notice, fault, incident)
            except DeliveryError as error:
                self.on_delivery(channel, False)
                failures.append(DeliveryFailure(name, channel, error))
        if failures:
            raise NotificationFailedError(failures)
        return Delivered(tuple(names), threaded=not_ready is None)

    def _incident(self, fault: Fault) -> Incident | None:
        record = self.store.load(fault.container_instance_arn)
        if record is None:
            return None
        return _fault_incident(
            lifecycle.derive(record, self.settings, self.router.route, self.clock(), self.policy).incidents, fault
        )

    def _not_ready(self, fault: Fault, incident: Incident | None, names: list[str]) -> str | None:
        """Why the notice cannot go into the incident yet: no incident, or a bot-token Slack receiver of the
        incident whose root message the alert pipeline has not posted yet."""
        if incident is None:
            return f"incident {fault.fingerprint} does not exist yet"
        threaded = {thread.receiver for thread in incident.slack_threads}
        pending = [
            name
            for name in names
            if (receiver := self.receivers.get(name)) is not None
            and receiver.slack is not None
            and receiver.slack.channel is not None
            and name in incident.receivers
            and name not in threaded
        ]
        return f"incident {fault.fingerprint} has no Slack thread yet in {', '.join(pending)}" if pending else None

    def _record(self, fault: Fault, notice: Notice) -> Incident | None:
        """Add the notice to the incident's facts (once), re-reading when the alert pipeline wrote meanwhile."""
        fact = NoticeFact(
            key=notice.key,
            check_type=fault.check_type,
            fault_at=fault.impaired_at,
            at=self.clock(),
            title=notice.title,
            pages=notice.pages,
            kind=notice.kind.value,
        )
        for _ in range(MAX_SAVE_CONFLICTS):
            record = self.store.load(fault.container_instance_arn)
            if record is None:
                return None
            added = record.add_notice(fact)
            view = lifecycle.derive(record, self.settings, self.router.route, self.clock(), self.policy)
            if not added:
                return _fault_incident(view.incidents, fault)
            record.incidents = view.known
            try:
                self.store.commit(record)
            except ConcurrentUpdateError:
                continue
            return _fault_incident(view.incidents, fault)
        raise ConcurrentUpdateError(f"incident {fault.fingerprint} kept changing")

    def _deliver_to(
        self, name: str, receiver: Receiver, notice: Notice, fault: Fault, incident: Incident | None
    ) -> None:
        if receiver.slack is not None and receiver.slack.channel is not None:
            self._slack_bot(name, receiver.slack.channel, notice, fault, incident)
        elif receiver.slack is not None and receiver.slack.webhook is not None:
            hook = self.channels.slack_webhook(receiver.slack.webhook)
            message = render_resume_standalone(notice, fault, dashboard_url=self.dashboard_url)
            self._step(notice, name, "post", "slack", lambda: hook.post(message))
        elif receiver.pagerduty is not None:
            self._pagerduty(name, receiver.pagerduty.service, notice, fault)

    def _slack_bot(self, name: str, channel: str, notice: Notice, fault: Fault, incident: Incident | None) -> None:
        api = self.channels.slack_api()
        thread = next((t for t in incident.slack_threads if t.receiver == name), None) if incident else None
        if thread is None or incident is None:
            message = render_resume_standalone(notice, fault, dashboard_url=self.dashboard_url)
            self._step(notice, name, "post", "slack", lambda: _discard(api.post_message(channel, message)))
            return
        reply = render_resume_reply(notice, fault)
        self._step(notice, name, "reply", "slack", lambda: _discard(api.post_message(thread.channel, reply, thread.ts)))
        root = render_incident_root(incident, dashboard_url=self.dashboard_url)
        self._step(notice, name, "update", "slack", lambda: api.update_message(thread.channel, thread.ts, root))

    def _pagerduty(self, name: str, service: str, notice: Notice, fault: Fault) -> None:
        if notice.pagerduty is None:
            return
        key = self.channels.routing_key(service)
        now = self.clock()
        if notice.pagerduty == PagerDutyAction.TRIGGER:
            event = render_resume_trigger(notice, fault, key, now, trigger_dedup_key(notice, fault, self.grouping))
            events = self.channels.pagerduty()
            self._step(notice, name, "trigger", "pagerduty", lambda: _discard(events.send(event)))
        else:
            change = render_change_event(notice, fault, key, now)
            self._step(notice, name, "change", "pagerduty", lambda: self.change_events.send(change))

    def _step(self, notice: Notice, receiver: str, step: str, channel: str, send: Callable[[], None]) -> None:
        key = f"resume:{notice.key}#{receiver}#{step}"
        if self.store.delivered(key):
            return
        send()
        self.store.mark_delivered(key)
        self.on_delivery(channel, True)


def trigger_dedup_key(notice: Notice, fault: Fault, grouping: Grouping) -> str:
    """The dedup key of the workflow's page. A mass fault is a fleet event: its page is the fleet incident's
    PagerDuty alert (the fleet's dedup key for the fault's group), so on-call gets one alert for the event,
    whether the workflow or the alert pipeline triggers first, and the fleet's resolve closes it. With grouping
    off, one alert per capacity provider; every other page, one per fault and job."""
    if notice.subject == "mass-fault" and grouping.enabled:
        labels = fault_labels(fault)
        return fleet_fingerprint(tuple((name, labels.get(name, "")) for name in grouping.by))
    return pagerduty_dedup_key(fault, notice.subject)


def fault_labels(fault: Fault) -> dict[str, str]:
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
    }


def _held_back(reason: str | None) -> bool:
    """Whether a mute holds back the workflow's notices: all do, but quiet-when-handled, whose point is that the
    workflow's own notices are what the receiver hears."""
    return reason is not None and not reason.startswith(QUIET_REASON_PREFIX)


def _fault_incident(incidents: list[Incident], fault: Fault) -> Incident | None:
    """The incident of the fault's check that contains the fault's time (else the latest of that check)."""
    mine = [incident for incident in incidents if incident.check_type == fault.check_type]
    for incident in mine:
        ends = incident.closed_at
        if incident.opened_at <= fault.impaired_at and (ends is None or fault.impaired_at <= ends):
            return incident
    return mine[-1] if mine else None


def route_context(fault: Fault, incident: Incident | None) -> RouteContext:
    """A notice is routed like its incident (same labels), with kind `training_resume`."""
    return RouteContext(
        kind=KIND,
        cluster=fault.cluster_name,
        capacity_provider=fault.capacity_provider,
        check_type=fault.check_type,
        fault_class=fault.fault_class,
        severity=fault.severity,
        drain_attribution=incident.drain.cause.value if incident is not None and incident.drain else None,
    )


# --- Rendering (pure) ----------------------------------------------------------------------------


def render_resume_reply(notice: Notice, fault: Fault) -> SlackMessage:
    """A reply in the incident's thread: the notice, its buttons (an approval request's), and what it is about."""
    blocks = [_section(_headline(notice)), *_approval_buttons(notice), _context(notice, fault)]
    return SlackMessage(text=_clip(escape_mrkdwn(notice.title), MAX_SECTION_TEXT), blocks=blocks)


def render_resume_standalone(notice: Notice, fault: Fault, *, dashboard_url: str | None = None) -> SlackMessage:
    """The same notice as a message of its own (no incident thread to reply in, or a webhook): a root, which links
    to the dashboard."""
    emoji = SEVERITY_EMOJI[notice.severity]
    header = _clip(f"{emoji} Training auto-resume · {notice.title}", MAX_HEADER_TEXT)
    where = (
        f"*Cluster:* {escape_mrkdwn(fault.cluster_name)}  *Instance:* {escape_mrkdwn(fault.host)}  "
        f"*Capacity provider:* {escape_mrkdwn(fault.capacity_provider)}  *Fault:* {escape_mrkdwn(fault.title)}"
    )
    blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": True}},
        _section(_body(notice)),
        _section(where),
        *_approval_buttons(notice),
        root_context([_context_text(notice, fault)], dashboard_url),
    ]
    fallback = f"Training auto-resume · {notice.title} · {fault.host} ({fault.cluster_name})"
    return SlackMessage(text=_clip(escape_mrkdwn(fallback), MAX_SECTION_TEXT), blocks=blocks)


def render_resume_trigger(
    notice: Notice, fault: Fault, routing_key: str, now: datetime, dedup_key: str | None = None
) -> dict[str, Any]:
    """An Events v2 trigger: a page, one PagerDuty alert per fault and job (unless `dedup_key` says otherwise),
    the evidence in custom_details."""
    payload = {
        "summary": _summary(notice, fault),
        "source": fault.host,
        "severity": notice.severity.value,
        "timestamp": iso_utc(now),
        "component": "training-auto-resume",
        "group": fault.capacity_provider,
        "class": notice.kind.value,
        "custom_details": {"text": notice.text, **notice.details},
    }
    return {
        "routing_key": routing_key,
        "event_action": "trigger",
        "dedup_key": dedup_key or pagerduty_dedup_key(fault, notice.subject),
        "payload": payload,
        "links": _links(fault),
        "client": CLIENT_NAME,
        "client_url": fault.instance_ref().console_url,
    }


def render_change_event(notice: Notice, fault: Fault, routing_key: str, now: datetime) -> dict[str, Any]:
    """A Change Event: PagerDuty shows it next to the service's incidents, and it never pages."""
    return {
        "routing_key": routing_key,
        "payload": {
            "summary": _summary(notice, fault),
            "source": fault.host,
            "timestamp": iso_utc(now),
            "custom_details": {"text": notice.text, **notice.details},
        },
        "links": _links(fault),
    }


def _headline(notice: Notice) -> str:
    return f"{SEVERITY_EMOJI[notice.severity]} *{escape_mrkdwn(notice.title)}*\n{_body(notice)}"


def _body(notice: Notice) -> str:
    return escape_mrkdwn(notice.text)


def _approval_buttons(notice: Notice) -> list[dict[str, Any]]:
    # The buttons carry the approval's opaque id; SlackActionsFunction finds the task token by it (never in Slack).
    if not notice.approval_id:
        return []
    return [
        {
            "type": "actions",
            "block_id": "resume_approval",
            "elements": [
                _button("Approve", ActionId.APPROVE, notice.approval_id, "primary"),
                _button("Reject", ActionId.REJECT, notice.approval_id, "danger"),
            ],
        }
    ]


def _button(label: str, action: ActionId, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "action_id": action.value,
        "text": {"type": "plain_text", "text": label},
        "value": value,
        "style": style,
    }


def _context(notice: Notice, fault: Fault) -> dict[str, Any]:
    return {"type": "context", "elements": [_mrkdwn(_context_text(notice, fault))]}


def _context_text(notice: Notice, fault: Fault) -> str:
    parts = ["Training auto-resume"]
    if notice.job_id:
        parts.append(f"job `{escape_mrkdwn(notice.job_id)}`")
    parts.append(f"incident `{escape_mrkdwn(fault.fingerprint)}`")
    return " · ".join(parts)


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text)}


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text, MAX_SECTION_TEXT), "verbatim": True}


def _summary(notice: Notice, fault: Fault) -> str:
    return _clip(f"{notice.title} ({fault.label} on {fault.host}, cluster {fault.cluster_name})", MAX_SUMMARY)


def _links(fault: Fault) -> list[dict[str, str]]:
    instance = fault.instance_ref()
    return [{"href": instance.console_url, "text": f"ECS container instance {instance.container_instance_id}"}]


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    # Escaped text: never leave half an entity (`&am`) at the cut.
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    return cut + "…"


def _discard(_: object) -> None:
    return None
