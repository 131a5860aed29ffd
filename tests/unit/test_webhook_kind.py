"""The signed webhook as a receiver kind: what it plans (one payload per incident change), what it sends through the
channels' secret and JSON POST (each payload Alertmanager's format, signed), a rotated secret read again, and the
workflow's notices. The channels here are a fake of the generic port; tests/integration/test_webhook_delivery.py
posts over HTTP."""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Severity
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import Delivery
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.delivery import Courier
from fault_responder.notification.receivers.kind import Capability, NoticeAt, Outlet, ResumeNotice
from fault_responder.notification.receivers.registry import capabilities, describe, kind_of
from fault_responder.notification.receivers.steps import Step, StepKind, View
from fault_responder.notification.receivers.webhook.plan import webhook_plan
from fault_responder.notification.receivers.webhook.signing import verify
from fault_responder.routing.router import Receiver, Router, RoutingConfig
from sandbox.standin_webhook import payload_errors
from tests.builders import an_incident, draining, resolved
from tests.conftest import EVENTS, load_event

SIGNING = "s" * 32 + "-signing-secret"
URL = "https://tools.example.com/hooks/gpu?token=abc"


@dataclass
class Posted:
    kind: str
    url: str
    payload: dict[str, Any]
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeChannels:
    """The channels' generic port: the webhook secret by kind, and each POST recorded (signed as sent)."""

    secret_value: dict[str, Any] = field(
        default_factory=lambda: {"endpoints": {"ops": {"url": URL, "signing_secrets": [SIGNING]}}}
    )
    posted: list[Posted] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    refuse: list[int] = field(default_factory=list)
    """Statuses the next posts are answered with, as DeliveryErrors."""

    def secret(self, kind: str) -> Mapping[str, Any]:
        return self.secret_value

    def refresh(self, kind: str) -> None:
        self.refreshed.append(kind)

    def post_json(
        self,
        kind: str,
        url: str,
        payload: dict[str, Any],
        *,
        headers: dict[str, str] | None = None,
        sign: Callable[[bytes], dict[str, str]] | None = None,
        idempotent: bool = True,
        retryable_statuses: frozenset[int] = frozenset(),
        is_failure: Callable[[int, bytes], str | None] | None = None,
    ) -> object:
        body = json.dumps(payload).encode()
        signed = {**(headers or {}), **(sign(body) if sign else {})}
        if self.refuse:
            raise DeliveryError(kind, self.refuse.pop(0), "Unauthorized", retryable=False)
        self.posted.append(Posted(kind, url, payload, signed, body))
        return None


def routing_to_the_webhook(**target: Any) -> RoutingConfig:
    return RoutingConfig.model_validate(
        {
            "receivers": {"ops": {"webhook": {"endpoint": "ops", **target}}},
            "routes": [{"name": "all", "receivers": ["ops"]}],
            "grouping": {"threshold": 3},
        }
    )


class _CheckingCourier(Courier):
    """Performs every step, having checked that the webhook's kind can do what the step does."""

    def perform(self, name: str, receiver: Receiver, step: Step, view: View, sent: Delivery) -> Delivery:
        assert step.verb in capabilities(receiver), f"{name} cannot {step.verb}: {step.describe()}"
        return super().perform(name, receiver, step, view, sent)


def run(events: list[dict[str, Any]], channels: FakeChannels, *, sweep_after: timedelta | None = None) -> None:
    now = [datetime(1970, 1, 1, tzinfo=UTC)]
    courier = _CheckingCourier(channels, clock=lambda: now[0])  # type: ignore[arg-type]  # the webhook's part
    routing = routing_to_the_webhook()
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(routing),
        courier,
        lifecycle.Settings(),
        clock=lambda: now[0],
        grouping=routing.grouping,
    )
    for raw in events:
        now[0] = max(now[0], datetime.fromisoformat(raw["time"].replace("Z", "+00:00")))
        service.handle(raw)
    if sweep_after is not None:
        now[0] += sweep_after
        service.sweep(seconds_left=60.0)


def assert_signed_and_valid(posted: list[Posted]) -> None:
    for post in posted:
        assert post.kind == "webhook" and post.url == URL
        assert payload_errors(post.payload) == []
        stamp = int(post.headers["X-Signature-Timestamp"])
        verify(post.headers, post.body, [SIGNING], now=stamp)


def changes(posted: list[Posted]) -> list[str]:
    return [post.payload["alerts"][0]["annotations"]["change"] for post in posted]


def test_it_posts_resolves_and_is_told_a_timeline_but_edits_threads_and_pages_nothing() -> None:
    receiver = Receiver.model_validate({"webhook": {"endpoint": "ops-tool"}})
    assert capabilities(receiver) == {Capability.OPEN, Capability.RESOLVE, Capability.TIMELINE}
    assert describe("ops", receiver) == "ops (webhook ops-tool)"
    assert kind_of(receiver).hears(None) and kind_of(receiver).hears("trigger")


def test_a_faults_lifecycle_is_one_payload_per_change_each_signed_and_in_alertmanagers_format() -> None:
    channels = FakeChannels()
    events = [load_event(f"incident-xid79/{path.name}") for path in sorted(EVENTS.glob("incident-xid79/*"))]

    run(events, channels, sweep_after=timedelta(hours=1))

    assert_signed_and_valid(channels.posted)
    told = changes(channels.posted)
    assert told[0] == "opened" and told[-1] == "resolved" and "drain_attributed" in told
    assert told.count("resolved") == 1  # one payload per change: the resolution is told once
    assert len(channels.posted) <= len(events) + 1
    group_keys = {post.payload["groupKey"] for post in channels.posted}
    assert len(group_keys) == 1  # one incident, one group for its whole life
    assert channels.posted[-1].payload["status"] == "resolved"


def test_a_storm_is_a_fleet_incident_in_few_bounded_payloads() -> None:
    channels = FakeChannels()
    storm = load_event("noise/storm-xid79.json")

    run(storm, channels, sweep_after=timedelta(minutes=2))

    assert_signed_and_valid(channels.posted)
    fleet = [post for post in channels.posted if post.payload["groupLabels"]["alertname"] == "ECSFleetHealthImpaired"]
    assert fleet, "the storm's fleet incident is posted"
    assert all(len(post.body) <= 256 * 1024 for post in channels.posted)
    assert len(fleet) < len(storm)  # member updates are batched, never a payload per host
    newest = fleet[-1].payload
    assert len(newest["alerts"]) <= 100
    assert newest["truncatedAlerts"] == 0 or "hosts_not_listed" in newest["alerts"][0]["annotations"]


def test_steps_learned_together_are_one_payload_and_a_closed_incident_is_a_resolve() -> None:
    opened = dataclasses.replace(draining(an_incident()), receivers=["ops"])
    closed = resolved(opened)
    record = _Told({})

    [open_step] = webhook_plan("ops", [opened], [], record)
    [close_step] = webhook_plan("ops", [closed], [], record)

    assert open_step.kind is StepKind.POST_STEP and open_step.entry == opened.timeline[-1]
    assert len(open_step.batch) == len(opened.timeline)
    assert close_step.kind is StepKind.RESOLVE and close_step.verb == "resolve"
    told = _Told({("ops", closed.id): Delivery("ops", closed.id, steps=[entry.key for entry in closed.timeline])})
    assert webhook_plan("ops", [closed], [], told) == []


def test_a_refusal_as_unauthorized_reads_the_secret_again_and_tries_once_more() -> None:
    channels = FakeChannels(refuse=[401])
    events = [load_event("incident-xid79/01-impaired-xid79.json")]

    run(events, channels)

    assert channels.refreshed == ["webhook"]
    assert changes(channels.posted) == ["opened"]


def test_an_unknown_endpoint_or_a_url_in_clear_text_fails_at_once_without_quoting_the_url() -> None:
    target = Receiver.model_validate({"webhook": {"endpoint": "missing"}})
    kind = kind_of(target)
    notice = _notice()
    out = Outlet(FakeChannels(), clock=lambda: datetime(2026, 4, 11, tzinfo=UTC))
    with pytest.raises(DeliveryError, match="no endpoints entry named 'missing'") as missing:
        kind.notify("ops", target.target, notice, NoticeAt(None), out=out, once=lambda _, send: send())
    assert missing.value.retryable is False
    clear = FakeChannels(
        {"endpoints": {"missing": {"url": "http://tools.example.com/?token=abc", "signing_secrets": [SIGNING]}}}
    )
    with pytest.raises(DeliveryError) as refused:
        kind.notify(
            "ops", target.target, notice, NoticeAt(None), out=Outlet(clear, clock=out.clock), once=lambda _, s: s()
        )
    assert "https://" in str(refused.value) and "token=abc" not in str(refused.value)
    assert clear.posted == []


def test_a_workflow_notice_is_a_payload_of_its_own_naming_its_incident() -> None:
    channels = FakeChannels()
    receiver = Receiver.model_validate({"webhook": {"endpoint": "ops"}})
    incident = an_incident()
    sent: list[str] = []

    def once(what: str, send: Callable[[], object]) -> None:
        sent.append(what)
        send()

    out = Outlet(channels, clock=lambda: datetime(2026, 4, 11, tzinfo=UTC))
    kind_of(receiver).notify("ops", receiver.target, _notice(), NoticeAt(incident), out=out, once=once)

    assert sent == ["post"]
    assert_signed_and_valid(channels.posted)
    [alert] = channels.posted[0].payload["alerts"]
    assert alert["labels"]["alertname"] == "TrainingAutoResume"
    assert alert["labels"]["incident"] == incident.id and alert["labels"]["notice"] == "resume-1"
    assert alert["annotations"]["change"] == "notice" and "approval" in alert["annotations"]


@dataclass
class _Told:
    deliveries: dict[tuple[str, str], Delivery]

    def delivery(self, receiver: str, subject: str) -> Delivery:
        return self.deliveries.get((receiver, subject)) or Delivery(receiver, subject)


def _notice() -> ResumeNotice:
    incident = an_incident()
    return ResumeNotice(
        title="Approve resuming job train-7 on spare capacity",
        text="The job's checkpoint is 4 min old.",
        severity=Severity.WARNING,
        kind="approval",
        instance=incident.instance,
        host="i-0abcdef1234567890",
        cluster=incident.instance.cluster_name,
        capacity_provider="p5",
        fault_title="XID 79",
        fault_label="XID 79",
        incident_id=incident.fingerprint,
        dedup_key="d" * 32,
        job_id="train-7",
        approval_id="a-1",
        key="resume-1",
    )


def test_only_its_package_the_routing_schema_and_the_registry_know_the_webhook() -> None:
    package = Path(__file__).resolve().parents[2] / "layers" / "common" / "fault_responder"
    allowed = {"routing/router.py", "notification/receivers/registry.py"}
    knowing = set()
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("notification/receivers/webhook/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            imported = node.module if isinstance(node, ast.ImportFrom) else None
            named = node.id if isinstance(node, ast.Name) else None
            if (imported or "").startswith("fault_responder.notification.receivers.webhook") or named in (
                "WebhookTarget",
                "WEBHOOK",
            ):
                knowing.add(relative)
    assert knowing <= allowed and "notification/receivers/registry.py" in knowing
