"""People's actions on an incident, end to end through the AlertRouter: the action envelopes SlackActionsFunction and
PagerDutyWebhookFunction put on the alert queue, processed by the real handler (moto's SQS on loopback) with the
Slack and PagerDuty stand-ins over real HTTP.

Given an incident that paged, When someone acknowledges or resolves it (from Slack, or in PagerDuty), Then PagerDuty
hears of it with the incident's dedup key (unless it came from PagerDuty), the Slack root says who, and the thread
has the step."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via
from fault_responder.notification.buttons import IncidentButton
from tests.conftest import health_check, load_event, vary
from tests.integration.test_alert_pipeline import XID46, XID46_OK, incident_roots, pagerduty_bodies, run

DEDUP_KEY = "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
RECORD = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster/a1b2c3d4EXAMPLE"
INCIDENT = f"{DEDUP_KEY}@2026-04-11T00:48:53+00:00"
AT = datetime(2026, 4, 11, 0, 55, tzinfo=UTC)


def slack_action(kind: ActionKind, key: str, *, at: datetime = AT, incident: str = INCIDENT) -> dict[str, Any]:
    action = IncidentAction(
        key=f"slack:{key}",
        kind=kind,
        via=Via.SLACK,
        by="Jane Doe (U0JANEDOE1)",
        at=at,
        record=RECORD,
        incident=incident,
    )
    return action.envelope("us-west-2", "123456789012")


def pagerduty_action(
    kind: ActionKind, key: str, *, dedup_key: str = DEDUP_KEY, note: str | None = None, at: datetime = AT
) -> dict[str, Any]:
    action = IncidentAction(
        key=f"pagerduty:{key}", kind=kind, via=Via.PAGERDUTY, by="Tenex Engineer", at=at, dedup_key=dedup_key, note=note
    )
    return action.envelope("us-west-2", "123456789012")


def root_text(report: dict[str, Any]) -> str:
    [root] = incident_roots(report)
    return json.dumps(root["blocks"])


def buttons(report: dict[str, Any]) -> list[str]:
    [root] = incident_roots(report)
    return [
        element["action_id"] for block in root["blocks"] if block["type"] == "actions" for element in block["elements"]
    ]


@pytest.fixture(scope="module")
def xid46() -> dict[str, Any]:
    return load_event(XID46)


def test_an_open_incident_root_carries_the_four_buttons_naming_its_record_and_incident(xid46: dict[str, Any]) -> None:
    report = run([xid46])
    [root] = incident_roots(report)
    [block] = [block for block in root["blocks"] if block["type"] == "actions"]
    ids = [element["action_id"] for element in block["elements"]]
    assert ids == ["incident_acknowledge", "incident_resolve", "incident_silence_1h", "incident_silence_4h"]
    button = IncidentButton.parse(block["elements"][0]["value"])
    assert (button.record, button.incident, button.cluster, button.instance) == (
        RECORD,
        INCIDENT,
        "my-cluster",
        "a1b2c3d4EXAMPLE",
    )
    assert "confirm" in block["elements"][1]  # Resolve asks first: it closes the incident for everyone


def test_acknowledge_from_slack_acknowledges_in_pagerduty_with_the_dedup_key_and_the_root_says_who(
    xid46: dict[str, Any],
) -> None:
    report = run([xid46], [slack_action(ActionKind.ACKNOWLEDGE, "a1")])
    trigger, acknowledge = pagerduty_bodies(report)
    assert acknowledge == {"routing_key": "***", "event_action": "acknowledge", "dedup_key": DEDUP_KEY}
    assert trigger["dedup_key"] == DEDUP_KEY
    text = root_text(report)
    assert "Acknowledged" in text and "Jane Doe (U0JANEDOE1) from Slack" in text
    assert "incident_acknowledge" not in buttons(report)  # done: the button goes
    assert "incident_resolve" in buttons(report)
    replies = [r["body"]["text"] for r in report["requests"] if r["service"] == "slack" and "thread_ts" in r["body"]]
    assert any("Acknowledged by Jane Doe (U0JANEDOE1) from Slack" in reply for reply in replies)


def test_the_same_acknowledge_delivered_twice_acknowledges_once(xid46: dict[str, Any]) -> None:
    action = slack_action(ActionKind.ACKNOWLEDGE, "a1")
    report = run([xid46], [action], [action])
    actions = [body["event_action"] for body in pagerduty_bodies(report)]
    assert actions == ["trigger", "acknowledge"]


def test_resolve_from_slack_resolves_pagerduty_and_the_root_as_a_manual_resolve_by_that_person(
    xid46: dict[str, Any],
) -> None:
    report = run([xid46], [slack_action(ActionKind.RESOLVE, "r1")])
    trigger, resolve = pagerduty_bodies(report)
    assert trigger["event_action"] == "trigger"
    assert resolve == {"routing_key": "***", "event_action": "resolve", "dedup_key": DEDUP_KEY}
    [root] = incident_roots(report)
    assert root["text"].startswith("RESOLVED")
    assert "resolved by Jane Doe (U0JANEDOE1) from Slack" in json.dumps(root["blocks"])
    assert buttons(report) == []  # a closed incident has no buttons


def test_after_a_manual_resolve_the_checks_ok_sends_nothing_more_to_pagerduty(xid46: dict[str, Any]) -> None:
    report = run([xid46], [slack_action(ActionKind.RESOLVE, "r1")], [load_event(XID46_OK)])
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger", "resolve"]


def test_a_resolve_for_an_incident_already_over_tells_nobody_anything(xid46: dict[str, Any]) -> None:
    late = datetime(2026, 4, 12, tzinfo=UTC)
    report = run([xid46], [load_event(XID46_OK)], [slack_action(ActionKind.RESOLVE, "r1", at=late)])
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger", "resolve"]
    [root] = incident_roots(report)
    assert "manual" not in json.dumps(root["blocks"]) and "Jane" not in json.dumps(root["blocks"])
    assert not any("Jane" in json.dumps(r["body"]) for r in report["requests"] if r["service"] == "slack")


def test_a_pagerduty_acknowledge_updates_the_root_without_echoing_back_to_pagerduty(xid46: dict[str, Any]) -> None:
    report = run([xid46], [pagerduty_action(ActionKind.ACKNOWLEDGE, "evt-1")])
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger"]
    text = root_text(report)
    assert "Tenex Engineer in PagerDuty" in text


def test_a_pagerduty_reassign_and_unacknowledge_reach_the_thread_and_the_root(xid46: dict[str, Any]) -> None:
    report = run(
        [xid46],
        [pagerduty_action(ActionKind.ACKNOWLEDGE, "evt-1")],
        [pagerduty_action(ActionKind.REASSIGN, "evt-2", note="to Maeve")],
        [pagerduty_action(ActionKind.UNACKNOWLEDGE, "evt-3")],
    )
    text = root_text(report)
    assert "to Maeve in PagerDuty" in text
    assert "Tenex Engineer in PagerDuty," not in text  # no longer acknowledged
    assert "incident_acknowledge" in buttons(report)
    replies = [r["body"]["text"] for r in report["requests"] if r["service"] == "slack" and "thread_ts" in r["body"]]
    assert any("Reassigned in PagerDuty to Maeve" in reply for reply in replies)
    assert any("No longer acknowledged in PagerDuty" in reply for reply in replies)


def test_a_pagerduty_resolve_by_a_person_closes_the_incident(xid46: dict[str, Any]) -> None:
    report = run([xid46], [pagerduty_action(ActionKind.RESOLVE, "evt-9")])
    [root] = incident_roots(report)
    assert root["text"].startswith("RESOLVED")
    assert "resolved by Tenex Engineer in PagerDuty" in json.dumps(root["blocks"])


def test_a_pagerduty_resolve_of_an_earlier_fault_arriving_after_the_next_one_opened_leaves_it_open(
    xid46: dict[str, Any],
) -> None:
    # Given a fault (00:48:53) that paged, resolved by a person in PagerDuty at 00:55 but the webhook late; the
    # check OK at 00:56:12, the hold-down over; and the next fault of the check at 01:30, paged
    again = vary(health_check(xid46, lastStatusChange="2026-04-11T01:30:00Z"), event_id="xid46-again")
    late = pagerduty_action(ActionKind.RESOLVE, "evt-late")
    # When the webhook reaches the router after all that
    report = run([xid46], [load_event(XID46_OK)], [again], [late])
    # Then the live fault's alert stays triggered and its root open; the first incident says who resolved it
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger", "resolve", "trigger"]
    first, live = sorted(incident_roots(report), key=lambda root: float(root["ts"]))
    assert not live["text"].startswith("RESOLVED") and "Tenex" not in json.dumps(live["blocks"])
    assert first["text"].startswith("RESOLVED")
    assert "resolved by Tenex Engineer in PagerDuty" in json.dumps(first["blocks"])
    assert report["dlq"] == []


def test_an_action_for_an_alert_the_responder_never_sent_is_ignored_not_dead_lettered(xid46: dict[str, Any]) -> None:
    report = run([xid46], [pagerduty_action(ActionKind.ACKNOWLEDGE, "evt-1", dedup_key="someone-else/key")])
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger"]
    assert report["dlq"] == []


@pytest.mark.parametrize(
    "change",
    [
        lambda e: e.update(id="slack:not a key"),
        lambda e: e["detail"].update(kind="delete_everything"),
        lambda e: e["detail"].update(record=None, dedup_key=None),
        lambda e: e["detail"].update(at="yesterday"),
        lambda e: e["detail"].update(via="pagerduty"),
    ],
    ids=["bad-id", "unknown-kind", "names-no-incident", "bad-time", "id-and-via-disagree"],
)
def test_a_malformed_action_is_dead_lettered_at_once_with_its_reason(xid46: dict[str, Any], change: Any) -> None:
    action = slack_action(ActionKind.ACKNOWLEDGE, "a1")
    change(action)
    report = run([xid46], [action])
    [dead] = report["dlq"]
    assert "malformed" in json.dumps(dead)
    assert [body["event_action"] for body in pagerduty_bodies(report)] == ["trigger"]
