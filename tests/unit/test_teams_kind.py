"""Microsoft Teams as a receiver kind (notification/receivers/teams/kind.py), through the real AlertService and the
dry run's channels: a Teams receiver is told every change of an incident as a card of its own (it can only post),
a storm's fleet incident in cards that each fit, and the workflow's notices as cards; every card is one Teams takes
(the stand-in's envelope, schema and size checks)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.events.parse import parse_ecs_event
from fault_responder.incidents import lifecycle
from fault_responder.noise.silences import Muted, Phase
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.dryrun import DRY_RUN_HOST, ReceiverCourier, RecordingChannels, Sent
from fault_responder.notification.receivers.kind import Capability, News, NoticeAt, Outlet
from fault_responder.notification.receivers.registry import RECEIVER_KINDS, capabilities, describe, kind_of
from fault_responder.resume.fault import fault_from_event
from fault_responder.resume.notify import ResumeNotifier, resume_notice
from fault_responder.routing.router import Receiver, Router, RoutingConfig, load_routing
from sandbox.standin_teams import MAX_REQUEST_BYTES, message_errors
from tests.conftest import EVENTS, health_check, load_event
from tests.unit.test_resume_domain import a_fault
from tests.unit.test_resume_notice_routing import resumed
from tests.unit.test_silences import a_silence

TEAMS = {"teams": {"webhook": "gpu-alerts"}}


def teams_posts(channels: RecordingChannels) -> list[Sent]:
    return [sent for sent in channels.sent if sent.service == "teams"]


def taken_by_teams(sent: Sent) -> dict[str, Any]:
    """The post's payload, checked as Teams checks it: the envelope and card schema, and the size limit."""
    assert sent.payload is not None
    assert message_errors(sent.payload) == [], sent.text
    assert len(json.dumps(sent.payload, allow_nan=False).encode()) <= MAX_REQUEST_BYTES
    assert sent.target == f"https://teams.{DRY_RUN_HOST}/webhook_urls/gpu-alerts"  # the URL named, from the secret
    card: dict[str, Any] = sent.payload["attachments"][0]["content"]
    return card


def run(routing: RoutingConfig, *events: dict[str, Any]) -> RecordingChannels:
    now = [datetime(1970, 1, 1, tzinfo=UTC)]
    channels = RecordingChannels()
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(routing),
        ReceiverCourier(channels),
        lifecycle.Settings(),
        clock=lambda: now[0],
        grouping=routing.grouping,
    )
    for raw in events:
        now[0] = max(now[0], datetime.fromisoformat(raw["time"].replace("Z", "+00:00")))
        service.handle(raw)
    now[0] += timedelta(hours=1)
    service.sweep(seconds_left=60.0)
    return channels


def test_a_teams_receiver_is_registered_posts_only_and_is_named_by_its_webhook() -> None:
    receiver = Receiver.model_validate(TEAMS)
    assert receiver.kind == "teams" and kind_of(receiver) is RECEIVER_KINDS["teams"]
    assert capabilities(receiver) == {Capability.OPEN, Capability.TIMELINE, Capability.NEWS}
    assert describe("ops", receiver) == "ops (teams gpu-alerts)"
    kind = kind_of(receiver)
    assert [kind.is_auth_failure(DeliveryError("teams", s, "x", False)) for s in (401, 403, 404, 400, 413, 500)] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_a_faults_lifecycle_is_a_card_per_change_naming_the_incident_and_told_once() -> None:
    # Given the packaged teams.yaml (Teams and PagerDuty), When a fault opens, is drained, and leaves the cluster
    lifecycle_events = [load_event(f"incident-xid79/{path.name}") for path in sorted(EVENTS.glob("incident-xid79/*"))]
    channels = run(load_routing("teams.yaml"), *lifecycle_events)

    # Then each change is a card of its own that Teams takes, naming the incident and the step
    posts = teams_posts(channels)
    cards = [taken_by_teams(sent) for sent in posts]
    steps = [card["fallbackText"].rsplit(" · ", 1)[-1] for card in cards]
    assert steps[0] == "Opened" and "Drain attributed" in steps
    assert cards[-1]["fallbackText"].startswith("RESOLVED · ")
    incident = {json.dumps(card).split("incident ", 1)[1].split(" ", 1)[0] for card in cards}
    assert len(incident) == 1  # one incident, named on every card
    assert len(steps) == len(set(steps)) == len(posts)  # no step told twice, the sweep's included
    assert all(sent.receiver == "gpu-alerts" and sent.action == "post" for sent in posts)
    # and PagerDuty, beside it, paged and resolved as it does with Slack
    assert [s.action for s in channels.sent if s.service == "pagerduty"][-1] == "resolve"


def test_a_storm_is_a_fleet_incident_whose_card_and_batched_member_updates_each_fit() -> None:
    routing = RoutingConfig.model_validate(
        {"receivers": {"ops": TEAMS}, "routes": [{"name": "all", "receivers": ["ops"]}], "grouping": {"threshold": 3}}
    )
    storm = load_event("noise/storm-100-xid79.json")
    channels = run(routing, *storm)

    fleet_posts = [sent for sent in teams_posts(channels) if "FLEET" in sent.text or "updates" in sent.body]
    cards = [json.dumps(taken_by_teams(sent), ensure_ascii=False) for sent in fleet_posts]
    # Then the fleet incident has its own card, with its summary (when it opened: the first three), and its member
    # updates go out in batches, each card naming as many as fit and nothing more
    [fleet] = [card for card in cards if " FLEET · " in card]
    assert "3 impaired of 3" in fleet
    batches = [card for card in cards if "member updates" in card]
    assert batches and all("updates** · fleet incident fleet:" in card for card in batches)
    for card in batches:  # each names every update it counts
        counted = int(card.split("**", 2)[1].removesuffix(" updates"))
        assert counted == card.count("**JOINED**") + card.count("**LEFT**") > 1


def test_a_workflow_notice_is_a_card_of_its_own_naming_the_job_host_and_incident() -> None:
    fault = a_fault()
    notice = resume_notice(resumed(0, job="llm-7b", onto="i-0spare0000000001"), fault)
    channels = RecordingChannels()
    sent_once: list[str] = []

    def once(step: str, send: Any) -> None:
        sent_once.append(step)
        send()

    receiver = Receiver.model_validate(TEAMS)
    kind_of(receiver).notify(
        "ops", receiver.target, notice, NoticeAt(None), out=Outlet(channels, lambda: fault.impaired_at), once=once
    )

    [sent] = teams_posts(channels)
    text = json.dumps(taken_by_teams(sent), ensure_ascii=False)
    assert sent_once == ["post"]
    assert "Resumed llm-7b from step 300" in text and fault.host in text and fault.fingerprint in text


def test_a_silences_start_is_a_card_and_a_post_of_unknown_outcome_is_not_sent_again() -> None:
    silence = a_silence("cluster=gpu-*", comment="driver [rollout](https://evil.example)")
    muted = [Muted(f"gpu-training/ci{n:03d}/ACCELERATED_COMPUTE@x", f"cluster-{n % 30}", ("ops",)) for n in range(400)]
    news = News(silence, Phase.STARTED, muted, marker=f"silence:{silence.id}:started", event_type="news")
    receiver = Receiver.model_validate(TEAMS)
    channels = RecordingChannels()
    intended: list[bool] = []
    out = Outlet(channels, lambda: silence.starts_at)

    posted = kind_of(receiver).announce(receiver.target, news, out, since=None, intend=lambda: intended.append(True))
    again = kind_of(receiver).announce(
        receiver.target, news, out, since=silence.starts_at, intend=lambda: intended.append(True)
    )

    [sent] = teams_posts(channels)
    body = taken_by_teams(sent)["body"]
    facts = {fact["title"]: fact["value"] for block in body if block["type"] == "FactSet" for fact in block["facts"]}
    listing = next(block["text"] for block in body if "Held back now" in block.get("text", ""))
    assert (posted, again, intended) == (True, False, [True])  # told once; never posted twice blind
    assert f"Silence {silence.id} started" in json.dumps(body, ensure_ascii=False)
    assert facts["Matches"] == 'cluster="gpu-\\*"' and facts["Why"] == "driver \\[rollout\\](https://evil.example)"
    assert listing.startswith("**Held back now: 400 open incidents**")
    listed = listing.count("\n- cluster-")
    left = re.search(r"…and (\d+) more accounts and Regions", listing)
    assert listed + (int(left[1]) if left else 0) == 30  # every place listed or counted


def test_the_workflows_notice_reaches_a_teams_receiver_through_the_resume_notifier_once() -> None:
    # Given teams.yaml, a fault's incident told to Teams by the alert pipeline, and the workflow's notifier beside it
    routing = load_routing("teams.yaml")
    store, channels = MemoryInstanceStore(), RecordingChannels()
    event = health_check(load_event("aws-docs/health-change-accelerated-compute-xid46.json"), statusReason="XID_79")
    at = datetime.fromisoformat(event["time"].replace("Z", "+00:00"))
    ports = StorePorts(store, store, store)
    service = AlertService(ports, Router(routing), ReceiverCourier(channels), lifecycle.Settings(), clock=lambda: at)
    service.handle(event)
    notifier = ResumeNotifier(Router(routing), channels, channels.pagerduty_changes(), store, store, clock=lambda: at)
    fault = fault_from_event(parse_ecs_event(event), ["ACCELERATED_COMPUTE"])
    before = len(teams_posts(channels))

    # When it tells that the job was resumed (and a retried step tells it again)
    notice = resumed(0, job="llm-7b", onto="i-0spare0000000001")
    delivered = notifier.deliver(notice, fault, allow_standalone=False)
    notifier.deliver(notice, fault, allow_standalone=False)

    # Then Teams has one card of its own for it, naming the job, the host and the incident
    [card] = [json.dumps(taken_by_teams(sent), ensure_ascii=False) for sent in teams_posts(channels)[before:]]
    assert "Resumed llm-7b from step 300" in card and fault.host in card and fault.fingerprint in card
    assert "gpu-alerts" in delivered.receivers
