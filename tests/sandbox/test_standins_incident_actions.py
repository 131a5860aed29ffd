"""What the stand-ins send to the stack for issue 10's steps: the incident buttons a person could press in Slack
(`StandIns.buttons`, found on root messages posted over HTTP) and PagerDuty's v3 webhook about the newest alert
(`StandIns.pagerduty_webhook`: real-shaped, signed as PagerDuty signs, the alert changed first). The scenario steps
that use them (`click:`, `pagerduty:`) load as docs/scenarios.md says, and refuse what they cannot do."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from fault_responder.actions.interactive import Unauthorized, verify_pagerduty_request
from fault_responder.actions.pagerduty_webhook import action_for, parse_webhook
from fault_responder.incidents.incident_actions import IncidentAction
from fault_responder.notification.buttons import IncidentButton
from sandbox.errors import SandboxError
from sandbox.expectations import check, pagerduty_alerts, pagerduty_requests
from sandbox.scenario import Expectation, load_scenario
from sandbox.standins import DEFAULT_SLACK_TOKEN, PAGERDUTY_WEBHOOK_SECRET, SANDBOX_ROUTING_KEY, StandIns

KEY = "gpu-training/0f1e2d3c4b5a6978/ACCELERATED_COMPUTE"


@pytest.fixture
def standins() -> Iterator[StandIns]:
    with StandIns() as running:
        yield running


def _post_root(standins: StandIns, text: str, buttons: dict[str, str], thread_ts: str | None = None) -> str:
    elements = [
        {"type": "button", "text": {"type": "plain_text", "text": name}, "action_id": name, "value": value}
        for name, value in buttons.items()
    ]
    message: dict[str, Any] = {
        "channel": "gpu-alerts",
        "text": text,
        "blocks": [{"type": "actions", "elements": elements}],
    }
    if thread_ts:
        message["thread_ts"] = thread_ts
    answer = requests.post(
        f"{standins.slack_api_url}/chat.postMessage",
        json=message,
        headers={"Authorization": f"Bearer {DEFAULT_SLACK_TOKEN}"},
        timeout=5,
    ).json()
    assert answer["ok"], answer
    return str(answer["ts"])


def _channels(standins: StandIns) -> list[dict[str, Any]]:
    answer = requests.get(
        f"{standins.slack_api_url}/conversations.list",
        headers={"Authorization": f"Bearer {DEFAULT_SLACK_TOKEN}"},
        timeout=5,
    ).json()
    return [c for c in answer["channels"] if c["name"] == "gpu-alerts"]


def _value(instance: str) -> str:
    return IncidentButton(
        "arn:aws:ecs:r:1:container-instance/c/" + instance, f"c/{instance}/X@1", "c", instance
    ).value()


def _trigger(standins: StandIns, action: str = "trigger") -> None:
    event = {"routing_key": SANDBOX_ROUTING_KEY, "event_action": action, "dedup_key": KEY}
    if action == "trigger":
        event["payload"] = {"summary": "XID 79 on gpu-a", "source": "gpu-a", "severity": "critical"}
    assert requests.post(standins.pagerduty_url, json=event, timeout=5).status_code == 202


# --- Slack: the buttons a person could press ---------------------------------------------------------------------


def test_the_incident_buttons_are_found_on_roots_newest_first_and_never_on_replies(standins: StandIns) -> None:
    older = _post_root(standins, "gpu-a", {"incident_acknowledge": _value("aaa"), "incident_resolve": _value("aaa")})
    newer = _post_root(standins, "gpu-b", {"incident_acknowledge": _value("bbb")})
    _post_root(standins, "a reply", {"incident_acknowledge": _value("ccc")}, thread_ts=older)

    found = standins.buttons("incident_acknowledge")

    assert [(ts, IncidentButton.parse(value).instance) for _, ts, value in found] == [(newer, "bbb"), (older, "aaa")]
    assert [ts for _, ts, _ in standins.buttons("incident_resolve")] == [older]
    assert standins.buttons("incident_silence_1h") == []
    [channel] = {channel for channel, _, _ in found}
    assert channel in {c["id"] for c in _channels(standins)}


# --- PagerDuty: the webhook ---------------------------------------------------------------------------------------


def test_without_an_alert_there_is_no_webhook(standins: StandIns) -> None:
    assert standins.pagerduty_webhook("acknowledged", by="Jane Doe") is None


def test_a_webhook_is_a_signed_v3_webhook_for_the_newest_alert_which_it_changes_first(standins: StandIns) -> None:
    _trigger(standins)

    sent = standins.pagerduty_webhook("acknowledged", by="Jane Doe")

    assert sent is not None
    headers, body, event = sent
    # signed as PagerDuty signs (what the function checks)
    verify_pagerduty_request([PAGERDUTY_WEBHOOK_SECRET], headers, body)
    assert json.loads(body) == {"event": event}
    assert event["event_type"] == "incident.acknowledged" and event["resource_type"] == "incident"
    assert event["agent"]["type"] == "user_reference" and event["agent"]["summary"] == "Jane Doe"
    assert event["data"]["incident_key"] == KEY and event["data"]["number"] == 1
    assert event["data"]["status"] == "acknowledged"
    # the function reads it as the acknowledgement it is
    action = action_for(parse_webhook(body))
    assert isinstance(action, IncidentAction) and action.dedup_key == KEY
    # and the alert was acknowledged in PagerDuty before the webhook went
    [alert] = pagerduty_alerts(standins.pagerduty_alerts())
    assert alert["status"] == "acknowledged"
    assert alert["actions"] == ["trigger", "acknowledged"]


def test_each_webhook_has_its_own_event_id_and_a_service_agent_when_asked(standins: StandIns) -> None:
    _trigger(standins)

    first = standins.pagerduty_webhook("resolved", by="GPU Fault Responder", agent="service")
    second = standins.pagerduty_webhook("reassigned", by="Jane Doe", assignee="Ana Lopez")

    assert first is not None and second is not None
    assert first[2]["id"] != second[2]["id"]
    assert first[2]["agent"]["type"] == "service_reference"
    assert [a["summary"] for a in second[2]["data"]["assignees"]] == ["Ana Lopez"]
    [alert] = pagerduty_alerts(standins.pagerduty_alerts())
    assert alert["status"] == "resolved" and alert["assignees"] == ["Ana Lopez"]


def test_a_webhook_names_an_earlier_episode_by_incident_number_and_says_when_it_happened(standins: StandIns) -> None:
    # Given two episodes of the same fault in PagerDuty (incident #1 resolved by the responder, #2 open with the same
    # dedup key) and another fault's alert (#3)
    _trigger(standins)
    _trigger(standins, "resolve")
    _trigger(standins)
    other = "gpu-training/aaaabbbbccccdddd/ACCELERATED_COMPUTE"
    assert requests.post(
        standins.pagerduty_url,
        json={
            "routing_key": SANDBOX_ROUTING_KEY,
            "event_action": "trigger",
            "dedup_key": other,
            "payload": {"summary": "XID 79 on gpu-b", "source": "gpu-b", "severity": "critical"},
        },
        timeout=5,
    ).ok
    occurred_at = datetime.now(UTC).replace(microsecond=123000) - timedelta(minutes=12)

    # When Jane's resolve of incident #1, twelve minutes ago, comes as a late webhook
    sent = standins.pagerduty_webhook("resolved", by="Jane Doe", incident=1, occurred_at=occurred_at)

    # Then the webhook is about incident #1 (its number, id and dedup key) and says when it happened
    assert sent is not None
    headers, body, event = sent
    verify_pagerduty_request([PAGERDUTY_WEBHOOK_SECRET], headers, body)
    assert (event["data"]["number"], event["data"]["id"], event["data"]["incident_key"]) == (1, "Q0SANDBOX00001", KEY)
    assert event["data"]["status"] == "resolved"
    parsed = parse_webhook(body)
    assert (parsed.occurred_at, parsed.incident_number, parsed.incident_key) == (occurred_at, 1, KEY)
    action = action_for(parsed)
    assert isinstance(action, IncidentAction) and (action.at, action.dedup_key) == (occurred_at, KEY)
    # and PagerDuty's incidents: #1 stays resolved (the webhook is logged on it), #2 and #3 are untouched
    first, second, third = pagerduty_alerts(standins.pagerduty_alerts())
    assert (first["number"], first["status"], first["actions"]) == (1, "resolved", ["trigger", "resolve", "resolved"])
    assert (second["number"], second["dedup_key"], second["status"], second["actions"]) == (
        2,
        KEY,
        "triggered",
        ["trigger"],
    )
    assert (third["number"], third["status"]) == (3, "triggered")

    # When someone acknowledges the newest alert with that dedup key
    acknowledged = standins.pagerduty_webhook("acknowledged", by="Ana Lopez", dedup_key=KEY)

    # Then it is incident #2 (not the newest alert of all, #3), acknowledged now
    assert acknowledged is not None
    assert (acknowledged[2]["data"]["number"], acknowledged[2]["data"]["incident_key"]) == (2, KEY)
    assert abs(datetime.fromisoformat(acknowledged[2]["occurred_at"]) - datetime.now(UTC)) < timedelta(seconds=5)
    assert [a["status"] for a in pagerduty_alerts(standins.pagerduty_alerts())] == [
        "resolved",
        "acknowledged",
        "triggered",
    ]


def test_a_webhook_about_an_alert_that_does_not_exist_is_not_made(standins: StandIns) -> None:
    _trigger(standins)

    assert standins.pagerduty_webhook("resolved", by="Jane Doe", incident=2) is None
    assert standins.pagerduty_webhook("resolved", by="Jane Doe", dedup_key="gpu-training/other/X") is None
    with pytest.raises(ValueError, match="by incident number or by dedup key, not both"):
        standins.pagerduty_webhook("resolved", by="Jane Doe", incident=1, dedup_key=KEY)
    [alert] = pagerduty_alerts(standins.pagerduty_alerts())
    assert (alert["status"], alert["actions"]) == ("triggered", ["trigger"])


def test_a_webhook_signed_wrongly_or_not_at_all_does_not_verify(standins: StandIns) -> None:
    _trigger(standins)
    wrongly = standins.pagerduty_webhook("acknowledged", by="Jane Doe", secret="another-secret")
    unsigned = standins.pagerduty_webhook("acknowledged", by="Jane Doe", secret=None)
    assert wrongly is not None and unsigned is not None

    assert "x-pagerduty-signature" not in unsigned[0]
    for headers, body, _ in (wrongly, unsigned):
        with pytest.raises(Unauthorized):
            verify_pagerduty_request([PAGERDUTY_WEBHOOK_SECRET], headers, body)


def test_a_scenario_can_count_the_responders_acknowledge_of_an_alert(standins: StandIns) -> None:
    # Given an alert triggered and acknowledged through the Events API (what the router will send)
    _trigger(standins)
    _trigger(standins, "acknowledge")
    report = {"requests": standins.requests, "pagerduty": standins.pagerduty_alerts()}

    # Then "one acknowledge with this dedup key" and "the alert is acknowledged" hold
    assert [r["action"] for r in pagerduty_requests(report["requests"])] == ["trigger", "acknowledge"]
    results = check(
        [
            Expectation(select="pagerduty", where={"action": "acknowledge", "dedup_key": KEY}, count=1),
            Expectation(select="alerts", where={"dedup_key": KEY}, count=1, each={"status": "acknowledged"}),
        ],
        report,
    )
    assert all(result["passed"] for result in results), results


# --- The steps ----------------------------------------------------------------------------------------------------


def _steps(tmp_path: Path, steps: str) -> Any:
    path = tmp_path / "scenario.yaml"
    path.write_text(f"events: {steps}\n")
    return load_scenario(path).scenario.events


def test_click_and_pagerduty_steps_load_with_their_defaults(tmp_path: Path) -> None:
    click, webhook, reassigned = _steps(
        tmp_path,
        "[{click: {button: acknowledge, user: U0ONCALL01}}, {pagerduty: {webhook: resolved}},"
        " {pagerduty: {webhook: reassigned, by: Ana, agent: service, signed: not, assignee: Bo}}]",
    )

    assert click.click is not None and (click.click.button, click.click.signed, click.click.instance) == (
        "acknowledge",
        "rightly",
        None,
    )
    assert webhook.pagerduty is not None
    assert (webhook.pagerduty.by, webhook.pagerduty.agent, webhook.pagerduty.signed) == ("Jane Doe", "user", "rightly")
    assert reassigned.pagerduty is not None and reassigned.pagerduty.assignee == "Bo"


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("{click: {button: approve, user: U0ONCALL01}}", "click.button"),
        ("{click: {button: acknowledge}}", "click: Value error, a click names its user"),
        ("{click: {button: acknowledge, user: jane}}", "click.user: String should match pattern"),
        ("{click: {button: acknowledge, user: U0ONCALL01, signed: badly}}", "click.signed"),
        ("{click: {button: resolve, user: U0ONCALL01, instanse: gpu-a}}", "click.instanse: Extra inputs"),
        ("{click: {button: resolve, user: U0ONCALL01}, instance: gpu-a}", "a click step takes no instance"),
        ("{click: {button: resolve, user: U0ONCALL01}, file: x.json}", "give exactly one of"),
        ("{pagerduty: {webhook: snoozed}}", "pagerduty.webhook"),
        ("{pagerduty: {webhook: reassigned}}", "a reassigned webhook names its assignee"),
        ("{pagerduty: {webhook: resolved, assignee: Bo}}", "assignee is for reassigned webhooks"),
        ("{pagerduty: {webhook: resolved, agent: integration}}", "pagerduty.agent"),
        ("{pagerduty: {webhook: resolved}, concurrently: 2}", "a pagerduty step takes no instance"),
        ("{pagerduty: {webhook: resolved}, expect_exit: 0}", "a pagerduty step takes no instance"),
    ],
)
def test_a_step_that_cannot_be_sent_as_written_is_refused(tmp_path: Path, step: str, says: str) -> None:
    with pytest.raises(SandboxError, match=says):
        _steps(tmp_path, f"[{step}]")
