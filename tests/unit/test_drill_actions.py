"""Drills stay drills (docs/drills.md): a press on a drill's Slack root, or a PagerDuty webhook about a drill's alert,
acts on the drill alone, and a silence made from a real fault's root leaves the instance's drills alone.

The endpoints as deployed, in memory: SlackActions answering signed presses (sandbox.standins.signed_click) and
PagerDutyWebhook answering signed webhooks, both putting their actions straight into AlertService (the in-memory
store, the channels that record what would be sent), whose policy reads the silences the presses make."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fault_responder.actions.interactive import Permissions, pagerduty_signature
from fault_responder.actions.pagerduty_webhook import PagerDutyWebhook
from fault_responder.actions.slack_actions import SlackActions
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import DRILL_MARK, Incident
from fault_responder.incidents import lifecycle
from fault_responder.incidents.incident_actions import IncidentAction
from fault_responder.noise.policy import Policy
from fault_responder.noise.silences import Silence, silencing
from fault_responder.notification.buttons import ActionId
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.notification.render.slack import incident_buttons
from fault_responder.routing.matchers import Labels
from fault_responder.routing.router import Router, load_routing
from sandbox.standins import SLACK_SIGNING_SECRET, signed_click
from tests.conftest import health_check, load_event, vary
from tests.unit.test_lifecycle import INSTANCE, KEY

DRILL = INSTANCE + DRILL_MARK
DRILL_KEY = f"drill/{KEY}"
RESOLVER = "U0RESOLVER"
WEBHOOK_SECRET = "unit-webhook-secret"  # nosec B105  # a made-up secret
SAMPLE = "aws-docs/health-change-accelerated-compute-xid46.json"


def fault(at: str, *, drill: bool = False, status: str = "IMPAIRED") -> dict[str, Any]:
    """The instance's XID 46 at `at` (or its OK), as ECS reports it, or as a drill naming the same instance does."""
    reason = None if status == "OK" else "XID_46"
    event = vary(
        health_check(load_event(SAMPLE), lastStatusChange=at, status=status, statusReason=reason),
        event_id=f"{'drill' if drill else 'ecs'}-{status}-{at}",
        overallStatus=status,
    )
    if drill:
        event["source"] = "fault-responder.drill"
    return event


@dataclass
class _Once:
    seen: set[str] = field(default_factory=set)

    def claim_request(self, signature: str) -> bool:
        new = signature not in self.seen
        self.seen.add(signature)
        return new


class _NoApprovals:
    def take_approval(self, ident: str) -> str | None:
        return None

    def restore_approval(self, ident: str, task_token: str) -> None:
        raise AssertionError("no approval is taken here")


class _NoTasks:
    def approve(self, task_token: str, by: str) -> bool:
        raise AssertionError("no workflow waits here")

    def reject(self, task_token: str, by: str) -> bool:
        raise AssertionError("no workflow waits here")


@dataclass
class _Replies:
    texts: list[str] = field(default_factory=list)

    def ephemeral(self, response_url: str, text: str) -> bool:
        self.texts.append(text)
        return True


class Desk:
    """Slack's buttons, PagerDuty's webhooks and the router, wired as deployed."""

    def __init__(self) -> None:
        self.silences: list[Silence] = []
        self.store = MemoryInstanceStore()
        self.channels = RecordingChannels()
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(load_routing("default.yaml")),
            ReceiverCourier(self.channels),
            lifecycle.Settings(),
            policy=Policy(silencer=self._silenced),
        )
        self.replies = _Replies()
        self.slack = SlackActions(
            signing_secret=lambda refresh: SLACK_SIGNING_SECRET,
            replay_guard=_Once(),
            approvals=_NoApprovals(),
            tasks=_NoTasks(),
            replies=self.replies,
            permissions=Permissions(resolvers=frozenset({RESOLVER})),
            actions=self,
            silences=self,
            clock=lambda: datetime.now(UTC),
        )
        self.pagerduty = PagerDutyWebhook(secrets=lambda refresh: [WEBHOOK_SECRET], actions=self)

    # The alert queue and the silence store, as the endpoints see them.
    def send(self, action: IncidentAction) -> None:
        self.service.handle(action.envelope("us-west-2", "123456789012"))

    def add(self, silence: Silence) -> Silence:
        self.silences.append(silence)
        return silence

    def _silenced(self, labels: Labels, now: datetime) -> str | None:
        found = silencing(self.silences, labels, now)
        return f"silenced by {found.id}" if found is not None else None

    def report(self, event: dict[str, Any]) -> list[tuple[str, str, str]]:
        """An ECS (or drill) event through the router: what it sent, as (service, action, target)."""
        self.channels.sent.clear()
        self.service.handle(event)
        return sorted((s.service, s.action, s.target) for s in self.channels.sent)

    def incident(self, arn: str) -> Incident:
        record = self.store.load(arn)
        assert record is not None
        [*_, latest] = self.service.derive(record).incidents
        return latest

    def press(self, action: ActionId, on: Incident) -> list[tuple[str, str, str]]:
        """A signed press of a button of the incident's Slack root, as rendered: what the router then sent."""
        [block] = incident_buttons(on)
        [value] = {element["value"] for element in block["elements"]}
        headers, body = signed_click(
            action_id=action.value,
            value=value,
            user_id=RESOLVER,
            response_url="https://hooks.slack.com/actions/T0/1/x",
            timestamp=int(time.time()),
        )
        self.channels.sent.clear()
        assert self.slack.handle(headers, body).status == 200
        return sorted((s.service, s.action, s.target) for s in self.channels.sent)

    def webhook(self, event_type: str, incident_key: str) -> list[tuple[str, str, str]]:
        """A signed PagerDuty v3 webhook, a person the agent: what the router then sent."""
        document = {
            "event": {
                "id": f"evt-{event_type}-{len(incident_key)}",
                "event_type": event_type,
                "resource_type": "incident",
                "occurred_at": datetime.now(UTC).isoformat(),
                "agent": {"type": "user_reference", "summary": "Tenex Engineer", "id": "PLH1HKV"},
                "data": {"id": "PGR0VU2", "type": "incident", "incident_key": incident_key, "assignees": []},
            }
        }
        raw = json.dumps(document).encode()
        self.channels.sent.clear()
        answer = self.pagerduty.handle({"X-PagerDuty-Signature": pagerduty_signature(WEBHOOK_SECRET, raw)}, raw)
        assert (answer.status, answer.body) == (200, "queued")
        return sorted((s.service, s.action, s.target) for s in self.channels.sent)


def both_open() -> Desk:
    """A drill running against the instance while it has a real fault: both paged, each with its own alert."""
    desk = Desk()
    assert ("pagerduty", "trigger", KEY) in desk.report(fault("2026-04-11T00:48:53Z"))
    assert ("pagerduty", "trigger", DRILL_KEY) in desk.report(fault("2026-04-11T00:50:00Z", drill=True))
    return desk


def test_silence_on_a_drills_root_silences_the_drill_alone() -> None:
    # Given a drill naming an instance, paged
    desk = Desk()
    desk.report(fault("2026-04-11T00:50:00Z", drill=True))
    # When someone presses Silence 4 h on the drill's root
    desk.press(ActionId.SILENCE_4H, desk.incident(DRILL))
    # Then a real fault of the instance still pages
    real = desk.report(fault("2026-04-11T01:00:00Z"))
    assert ("pagerduty", "trigger", KEY) in real and ("slack", "post", "#gpu-alerts") in real
    # And the silence is of the instance's drills, and says so
    [silence] = desk.silences
    assert [str(m) for m in silence.matchers] == ["cluster=my-cluster", "instance=a1b2c3d4EXAMPLE", "drill=true"]
    assert desk.replies.texts[0].startswith("Silenced the drills of `a1b2c3d4EXAMPLE` for 4 h")
    # While, once the drill is over, the next drill on the instance tells nobody
    assert ("pagerduty", "resolve", DRILL_KEY) in desk.report(fault("2026-04-11T02:00:00Z", drill=True, status="OK"))
    assert desk.report(fault("2026-04-11T03:00:00Z", drill=True)) == []
    assert desk.incident(DRILL).opened_at == datetime(2026, 4, 11, 3, tzinfo=UTC)


def test_silence_on_a_real_faults_root_leaves_the_instances_drills_to_prove_the_path() -> None:
    # Given a real fault of an instance, paged; When someone presses Silence 1 h on its root
    desk = Desk()
    desk.report(fault("2026-04-11T00:48:53Z"))
    desk.press(ActionId.SILENCE_1H, desk.incident(INSTANCE))
    # Then the silence is of its real faults
    [silence] = desk.silences
    assert [str(m) for m in silence.matchers] == ["cluster=my-cluster", "instance=a1b2c3d4EXAMPLE", "drill=false"]
    # And a drill run against the instance reaches its receivers, as it must to pass
    drill = desk.report(fault("2026-04-11T01:00:00Z", drill=True))
    assert ("pagerduty", "trigger", DRILL_KEY) in drill and ("slack", "post", "#gpu-alerts") in drill


def test_acknowledge_and_resolve_on_a_drills_root_act_on_the_drill_alone() -> None:
    # Given a drill and a real fault of the same instance, both open
    desk = both_open()
    # When someone acknowledges, then resolves, on the drill's root
    acknowledged = desk.press(ActionId.ACKNOWLEDGE, desk.incident(DRILL))
    resolved = desk.press(ActionId.RESOLVE, desk.incident(DRILL))
    # Then PagerDuty hears of it on the drill's alert only, and only the drill closes
    assert ("pagerduty", "acknowledge", DRILL_KEY) in acknowledged
    assert ("pagerduty", "resolve", DRILL_KEY) in resolved
    assert all(target != KEY for _, _, target in acknowledged + resolved)
    drill, real = desk.incident(DRILL), desk.incident(INSTANCE)
    assert not drill.is_open and drill.resolved_by is not None
    assert real.is_open and real.acknowledged is None and real.resolved_by is None
    record = desk.store.load(INSTANCE)
    assert record is not None and record.actions == []


def test_a_pagerduty_webhook_about_a_drills_alert_acts_on_the_drill_alone() -> None:
    # Given a drill and a real fault of the same instance, both open
    desk = both_open()
    # When a person resolves the drill's alert in PagerDuty
    sent = desk.webhook("incident.resolved", DRILL_KEY)
    # Then the drill closes, resolved by that person, and the real fault is untouched
    assert all(target != KEY for _, _, target in sent)
    drill, real = desk.incident(DRILL), desk.incident(INSTANCE)
    assert not drill.is_open and drill.resolved_by is not None and drill.resolved_by.by == "Tenex Engineer"
    assert real.is_open and real.resolved_by is None
    record = desk.store.load(INSTANCE)
    assert record is not None and record.actions == []
