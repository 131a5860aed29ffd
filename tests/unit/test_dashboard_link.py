"""The dashboard link (DASHBOARD_URL) in every Slack message that stands at the top of a channel: incident and fleet
roots, notices, webhook messages, the resume workflow's standalone notices. Thread replies carry none, and
without a URL (the sandbox, tests) nothing links."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import FleetMember, FleetSummary, Incident
from fault_responder.incidents import lifecycle
from fault_responder.notification.delivery import plan
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.notification.render.blocks import MAX_CONTEXT_ELEMENTS, SlackMessage
from fault_responder.notification.render.fleet import render_fleet_root, render_fleet_steps
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
from fault_responder.resume.notify import ResumeNotifier
from fault_responder.routing.router import Router, load_routing
from fault_responder.wiring.alert_router import RouterSettings
from sandbox.standins import block_errors
from tests.builders import OPENED, an_alert, an_incident, draining
from tests.conftest import vary
from tests.notice_renders import render_resume_reply, render_resume_standalone
from tests.unit.test_resume_domain import a_fault
from tests.unit.test_resume_notices import approval_notice

URL = "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/gfr-us-east-1"
LINK = f"<{URL}|Dashboard>"
INSTANCE = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/a1b2c3d4EXAMPLE"


def contexts(message: SlackMessage) -> list[str]:
    return [element["text"] for block in message.blocks if block["type"] == "context" for element in block["elements"]]


def a_fleet() -> Incident:
    incident = an_incident()
    member = FleetMember(
        instance=incident.instance,
        incident=incident.id,
        opened_at=OPENED,
        closed_at=None,
        severity=incident.classification.severity,
        fault_class=incident.classification.fault_class,
        title=incident.classification.title,
        xid=79,
        phase="IMPAIRED",
        version=1,
    )
    fleet = FleetSummary(
        group=(("capacity_provider", "p5"),), threshold=3, window_minutes=5, total=1, open=1, listed=(member,)
    )
    return dataclasses.replace(incident, id="fleet/p5@1", fingerprint="fleet/p5", fleet=fleet)


ROOTS = {
    "incident root": lambda url: render_incident_root(an_incident(), dashboard_url=url),
    "webhook message": lambda url: render_webhook_step(an_incident(), an_incident().timeline[0], dashboard_url=url),
    "notice": lambda url: render_alert(an_alert(), dashboard_url=url),
    "notice corrected in place": lambda url: render_superseded_alert(an_alert(), an_incident(), dashboard_url=url),
    "fleet root": lambda url: render_fleet_root(a_fleet(), dashboard_url=url),
    "fleet webhook message": lambda url: render_fleet_steps(a_fleet(), tuple(a_fleet().timeline), dashboard_url=url),
    "resume standalone notice": lambda url: render_resume_standalone(approval_notice(), a_fault(), dashboard_url=url),
}


@pytest.mark.parametrize("kind", sorted(ROOTS))
def test_a_message_at_the_top_of_the_channel_links_to_the_dashboard(kind: str) -> None:
    # When the message is rendered with the stack's dashboard URL
    message = ROOTS[kind](URL)

    # Then its context ends with the link, and it is still valid Block Kit
    assert contexts(message)[-1] == LINK
    assert block_errors(message.blocks) == []


@pytest.mark.parametrize("kind", sorted(ROOTS))
def test_without_a_dashboard_url_nothing_links_to_one(kind: str) -> None:
    message = ROOTS[kind](None)

    assert "dashboards" not in str(message.blocks)
    assert "Dashboard>" not in str(message.blocks)


def test_thread_replies_do_not_repeat_the_link() -> None:
    incident = draining(an_incident())

    reply = render_timeline_reply(incident, incident.timeline[-1])
    resume_reply = render_resume_reply(approval_notice(), a_fault())

    assert "dashboards" not in str(reply.blocks) + str(resume_reply.blocks)


def test_the_link_survives_a_context_full_of_quiet_reasons() -> None:
    # Given an incident whose context line is already at Slack's element limit
    muted = {f"receiver-{n}": f"silence {n}" for n in range(MAX_CONTEXT_ELEMENTS + 3)}
    incident = dataclasses.replace(an_incident(), muted=muted)

    # When its root is rendered with the dashboard URL
    elements = contexts(render_incident_root(incident, dashboard_url=URL))

    # Then the context keeps within the limit and the link is kept
    assert len(elements) == MAX_CONTEXT_ELEMENTS
    assert elements[-1] == LINK


def test_a_url_with_slacks_control_characters_cannot_break_out_of_its_link() -> None:
    message = render_incident_root(an_incident(), dashboard_url="https://example.com/a|b>c")

    assert contexts(message)[-1] == "<https://example.com/a%7Cb&gt;c|Dashboard>"


# --- Through the router: posted with the link, and not updated again and again ------------------------------


def a_router(url: str | None) -> tuple[AlertService, RecordingChannels]:
    channels = RecordingChannels()
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(load_routing("default.yaml")),
        ReceiverCourier(channels, dashboard_url=url),
        lifecycle.Settings(),
    )
    return service, channels


def test_the_router_posts_the_root_with_the_link_and_then_has_nothing_left_to_update(xid46: dict[str, Any]) -> None:
    # Given the router with the stack's dashboard URL
    service, channels = a_router(URL)

    # When a fault is handled
    service.handle(xid46)

    # Then the Slack root it posted links to the dashboard
    [root] = [sent for sent in channels.sent if sent.service == "slack" and sent.action == "post"]
    assert LINK in root.body
    # And what it recorded as sent is what it would render now: no update of the root is planned
    record = service.store.load(INSTANCE)
    assert record is not None
    view = service.derive(record)
    for name, receiver in service.receivers.items():
        assert plan(name, receiver, view, record, dashboard_url=URL) == [], name
    # And a copy of the event updates nothing
    channels.sent.clear()
    service.handle(vary(xid46, event_id="a-copy"))
    assert channels.sent == []


def test_the_router_without_a_url_posts_no_link(xid46: dict[str, Any]) -> None:
    service, channels = a_router(None)

    service.handle(xid46)

    assert all("dashboards" not in sent.body for sent in channels.sent)


@pytest.mark.parametrize(("value", "valid"), [("", True), (URL, True), ("http://example.com", False), ("x y", False)])
def test_the_router_takes_an_https_dashboard_url_or_none(value: str, valid: bool) -> None:
    env = {
        "INCIDENTS_TABLE": "t",
        "ALERT_DLQ_URL": "q",
        "SLACK_SECRET_NAME": "s",
        "PAGERDUTY_SECRET_NAME": "p",
        "DASHBOARD_URL": value,
    }
    if valid:
        assert RouterSettings.from_env(env).dashboard_url == value
    else:
        with pytest.raises(RuntimeError, match="DASHBOARD_URL"):
            RouterSettings.from_env(env)


def test_the_resume_workflow_posts_its_standalone_notice_with_the_link() -> None:
    # Given the resume notifier with the stack's dashboard URL, and no incident to thread into
    channels = RecordingChannels()
    store = MemoryInstanceStore()
    notifier = ResumeNotifier(
        Router(load_routing("default.yaml")), channels, _NoChangeEvents(), store, store, dashboard_url=URL
    )

    # When a notice goes out on its own
    notifier.deliver(approval_notice(), a_fault(), allow_standalone=True)

    # Then the Slack message it posted links to the dashboard
    posts = [sent for sent in channels.sent if sent.service == "slack" and sent.action == "post"]
    assert posts
    assert all(LINK in sent.body for sent in posts)


class _NoChangeEvents:
    def send(self, event: dict[str, Any]) -> None:
        pass
