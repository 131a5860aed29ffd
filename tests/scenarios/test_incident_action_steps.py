"""The `click:` and `pagerduty:` steps run through the real template: a press goes to SlackActionsFunction's function
URL, a webhook to PagerDutyWebhookFunction's, each signed as the step says, and the report says what each answered.
Issue 14's worst day: a press replayed exactly or signed in the past, a webhook about a named alert that happened
earlier, and a fault schedule the stand-ins answer the stack's requests with."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
import yaml

from sandbox.expectations import pagerduty_requests
from sandbox.run import RunResult
from sandbox.standins import DEFAULT_SLACK_TOKEN, StandIns
from tests.scenarios.conftest import REPO_ROOT, failed, run

pytestmark = pytest.mark.sandbox

XID79 = str(REPO_ROOT / "events" / "incident-xid79" / "01-impaired-xid79.json")
WORLD = {
    "clusters": [
        {
            "name": "gpu-inference",
            "capacity_providers": [{"name": "gpu-ondemand", "instances": [{"name": "gpu-a"}, {"name": "gpu-b"}]}],
        }
    ]
}


def scenario(
    tmp_path: Path, events: list[dict[str, Any]], expect: list[dict[str, Any]], faults: dict[str, Any] | None = None
) -> Path:
    path = tmp_path / "steps.yaml"
    document = {"description": "issue 10 steps", "world": WORLD, "events": events, "expect": expect}
    if faults is not None:
        document["faults"] = faults
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


@pytest.fixture
def roots_with_buttons(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Until incident roots carry their buttons (issue 10's rendering): before a press looks for one, a root with
    the four buttons for each seeded instance (in the order ECS lists them) is posted to the Slack stand-in, over
    HTTP, as the router would post it; its text is the instance's container instance id."""
    original = StandIns.buttons

    def buttons(self: StandIns, action_id: str) -> list[tuple[str, str, str]]:
        if not original(self, action_id):
            from fault_responder.notification.buttons import IncidentButton  # noqa: PLC0415 - the layer, as the runner has it

            # The sandbox points every boto3 client in the process at its moto.
            arns = boto3.client("ecs").list_container_instances(cluster="gpu-inference")["containerInstanceArns"]
            for arn in arns:
                instance = arn.rsplit("/", 1)[-1]
                value = IncidentButton(arn, f"gpu-inference/{instance}/X@1", "gpu-inference", instance).value()
                elements = [
                    {"type": "button", "text": {"type": "plain_text", "text": b}, "action_id": b, "value": value}
                    for b in ("incident_acknowledge", "incident_resolve", "incident_silence_1h", "incident_silence_4h")
                ]
                requests.post(
                    f"{self.slack_api_url}/chat.postMessage",
                    json={
                        "channel": "gpu-alerts",
                        "text": instance,
                        "blocks": [{"type": "actions", "elements": elements}],
                    },
                    headers={"Authorization": f"Bearer {DEFAULT_SLACK_TOKEN}"},
                    timeout=5,
                ).raise_for_status()
        return original(self, action_id)

    monkeypatch.setattr(StandIns, "buttons", buttons)
    yield


def test_a_wrongly_signed_or_unsigned_webhook_is_refused_and_changes_nothing_in_slack(tmp_path: Path) -> None:
    # Given an XID 79 incident paged in PagerDuty; When someone acknowledges it there and the webhook arrives
    # signed with another secret, then unsigned
    path = scenario(
        tmp_path,
        [
            {"file": XID79, "instance": "gpu-a"},
            {"pagerduty": {"webhook": "acknowledged", "by": "Jane Doe", "signed": "wrongly"}},
            {"pagerduty": {"webhook": "resolved", "by": "Jane Doe", "signed": "not"}},
        ],
        [
            {"name": "both refused", "select": "webhooks", "count": 2, "each": {"status": 401}},
            {"name": "nothing reached the router", "select": "dlq", "count": 0},
            {"name": "resolved in PagerDuty", "select": "alerts", "count": 1, "each": {"status": "resolved"}},
            {
                "name": "Slack says nothing of it",
                "select": "slack",
                "where": {"text": {"contains": "Jane"}},
                "count": 0,
            },
        ],
    )

    # When it runs
    result = run(path)

    # Then both were refused before anything was read, and the report says what each was
    assert result.passed, "\n".join(failed(result))
    acknowledged, resolved = result.report["webhooks"]
    assert acknowledged["dedup_key"] and acknowledged["dedup_key"] == resolved["dedup_key"]
    assert (acknowledged["webhook"], acknowledged["signed"], acknowledged["agent"]) == (
        "acknowledged",
        "wrongly",
        "user",
    )
    assert "HTTP 401" in acknowledged["outcome"]


def test_a_rightly_signed_webhook_is_accepted(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        [{"file": XID79, "instance": "gpu-a"}, {"pagerduty": {"webhook": "acknowledged", "agent": "service"}}],
        [
            {"select": "webhooks", "count": 1, "each": {"status": 200, "agent": "service"}},
            {"select": "alerts", "count": 1, "each": {"status": "acknowledged"}},
            {"select": "dlq", "count": 0},
        ],
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))


def test_a_webhook_before_any_alert_is_not_sent(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        [{"pagerduty": {"webhook": "acknowledged"}}],
        [{"select": "webhooks", "count": 1, "each": {"status": None, "outcome": {"contains": "no alert"}}}],
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))


def test_a_click_without_a_button_to_press_is_not_sent(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        [{"click": {"button": "acknowledge", "user": "U0ONCALL01"}}],
        [
            {
                "select": "clicks",
                "count": 1,
                "each": {"status": None, "outcome": {"contains": "no incident_acknowledge"}},
            }
        ],
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    assert result.report["ephemeral"] == []


@pytest.mark.usefixtures("roots_with_buttons")
def test_a_wrongly_signed_or_unsigned_click_is_refused_and_nobody_is_told(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        [
            {"click": {"button": "resolve", "user": "U0ONCALL01", "signed": "wrongly"}},
            {"click": {"button": "silence_1h", "user": "U0ONCALL01", "signed": "not", "instance": "gpu-a"}},
        ],
        [
            {"select": "clicks", "count": 2, "each": {"status": 401}},
            {"select": "ephemeral", "count": 0},
            {"select": "dlq", "count": 0},
        ],
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))


@pytest.mark.usefixtures("roots_with_buttons")
def test_a_click_presses_the_newest_root_or_the_named_instances_through_the_function_url(tmp_path: Path) -> None:
    path = scenario(
        tmp_path,
        [
            {"click": {"button": "acknowledge", "user": "U0ONCALL01"}},
            {"click": {"button": "silence_4h", "user": "U0ONCALL02", "instance": "gpu-b"}},
        ],
        [{"select": "clicks", "count": 2, "each": {"status": 200}}],
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    newest, named = result.report["clicks"]
    roots = {m["ts"]: m["text"] for m in result.report["slack"]["gpu-alerts"]}
    seeded = result.report["world"]["instances"].values()
    ids = {i["name"]: i["container_instance_arn"].rsplit("/", 1)[-1] for i in seeded}
    # the newest root with the button (the last posted), and the named instance's
    assert newest["message_ts"] == max(roots, key=float)
    assert roots[named["message_ts"]] == ids["gpu-b"]
    assert (newest["button"], newest["user"], named["button"], named["instance"]) == (
        "acknowledge",
        "U0ONCALL01",
        "silence_4h",
        "gpu-b",
    )
    # SlackActions answered each press (only the presser sees it)
    assert len(result.report["ephemeral"]) == 2


# --- Issue 14: replayed and late presses, named and late webhooks, fault schedules ----------------------------------


@pytest.fixture(scope="module")
def replayed_and_late_presses(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """gpu-a pages; a press signed six minutes ago, one signed four minutes ago, a replay of the latter (the same
    body, signature and timestamp) and a replay of the former."""
    path = scenario(
        tmp_path_factory.mktemp("presses"),
        [
            {"file": XID79, "instance": "gpu-a"},
            {"click": {"button": "acknowledge", "user": "U0ONCALL01", "signed_at": "now-6m"}},
            {"click": {"button": "acknowledge", "user": "U0ONCALL02", "instance": "gpu-a", "signed_at": "now-4m"}},
            {"click": {"replay": True}},
            {"click": {"replay": 2}},
        ],
        [{"select": "clicks", "count": 4}],
    )
    return run(path)


def test_a_press_signed_six_minutes_ago_is_refused_and_one_signed_four_minutes_ago_is_not(
    replayed_and_late_presses: RunResult,
) -> None:
    # Given presses signed six and four minutes before they reach SlackActionsFunction (see the fixture)
    result = replayed_and_late_presses
    assert result.passed, "\n".join(failed(result))
    six, four = result.report["clicks"][:2]

    # Then the six-minute-old one is refused as stale (past Slack's five minutes), the other is taken
    assert (six["status"], six["refused"], six["user"]) == (401, "stale timestamp", "U0ONCALL01")
    assert (four["status"], four["refused"]) == (200, None)
    signed = [datetime.fromisoformat(click["signed_at"]) for click in (six, four)]
    assert timedelta(seconds=115) <= signed[1] - signed[0] <= timedelta(seconds=125)
    assert timedelta(minutes=4) <= datetime.now(UTC) - signed[1] < timedelta(minutes=5)
    # and the stale press changed nothing: the incident was acknowledged by the other user only
    [incident] = result.report["incidents"]
    assert incident["acknowledged"]["by"] == "u0oncall02 (U0ONCALL02)"
    assert not any("U0ONCALL01" in m["text"] for m in result.report["slack"]["gpu-alerts"])


def test_a_replayed_press_is_refused_and_changes_nothing(replayed_and_late_presses: RunResult) -> None:
    # Given the accepted press sent again exactly, a moment later, and the refused one replayed too
    result = replayed_and_late_presses
    assert result.passed, "\n".join(failed(result))
    _, original, replay, stale_replay = result.report["clicks"]

    # Then the replay is the same request (the same press, signed at the same second) and is refused as a replay
    assert (replay["replay_of"], replay["status"], replay["refused"]) == (3, 401, "replayed")
    same = ("button", "user", "signed", "instance", "signed_at", "message_ts")
    assert {k: replay[k] for k in same} == {k: original[k] for k in same}
    assert (stale_replay["replay_of"], stale_replay["status"], stale_replay["refused"]) == (2, 401, "stale timestamp")
    # and nothing happened twice: the router ran for the fault and the one press, PagerDuty heard one acknowledge,
    # the presser was answered once, and the root was edited and replied to once
    assert [i["function"] for i in result.report["invocations"]] == ["AlertRouterFunction"] * 2
    assert [r["action"] for r in pagerduty_requests(result.report["requests"])] == ["trigger", "acknowledge"]
    assert len(result.report["ephemeral"]) == 1
    root, *replies = result.report["slack"]["gpu-alerts"]
    assert len(root["edits"]) == 1
    assert [reply["text"].split(":")[0] for reply in replies] == ["ACKNOWLEDGED"]
    assert result.report["incidents"][0]["acknowledge_key"].startswith("slack:")


def test_a_webhook_reaches_the_router_about_the_alert_it_names_and_when_it_happened(tmp_path: Path) -> None:
    # Given gpu-a then gpu-b paged (PagerDuty's incidents #1 and #2), both faulty since five minutes ago
    impaired = {
        "time": "{{now-5m}}",
        "detail": {
            "healthChecks": [
                {
                    "type": "ACCELERATED_COMPUTE",
                    "status": "IMPAIRED",
                    "statusReason": "XID_79",
                    "lastStatusChange": "{{now-5m}}",
                    "lastUpdated": "{{now-5m}}",
                }
            ]
        },
    }
    path = scenario(
        tmp_path,
        [
            {"file": XID79, "instance": "gpu-a", "overrides": {"id": "gpu-a-impaired", **impaired}},
            {"file": XID79, "instance": "gpu-b", "overrides": {"id": "gpu-b-impaired", **impaired}},
            # When Jane's acknowledgement of gpu-a's alert (by its dedup key: not the newest alert) two minutes ago,
            # and Ana's of incident #2 a minute ago, arrive now
            {
                "pagerduty": {
                    "webhook": "acknowledged",
                    "by": "Jane Doe",
                    "dedup_key": "{{clusters.gpu-inference.name}}/{{instances.gpu-a.id}}/ACCELERATED_COMPUTE",
                    "occurred_at": "now-2m",
                }
            },
            {"pagerduty": {"webhook": "acknowledged", "by": "Ana Lopez", "incident": 2, "occurred_at": "now-1m"}},
        ],
        [{"select": "webhooks", "count": 2, "each": {"status": 200}}],
    )

    result = run(path)

    # Then each webhook was about the alert named, with the time given
    assert result.passed, "\n".join(failed(result))
    jane, ana = result.report["webhooks"]
    ids = {
        i["name"]: i["container_instance_arn"].rsplit("/", 1)[-1] for i in result.report["world"]["instances"].values()
    }
    assert (jane["incident"], jane["dedup_key"]) == (1, f"gpu-inference/{ids['gpu-a']}/ACCELERATED_COMPUTE")
    assert (ana["incident"], ana["dedup_key"]) == (2, f"gpu-inference/{ids['gpu-b']}/ACCELERATED_COMPUTE")
    now = datetime.now(UTC)
    assert timedelta(minutes=2) <= now - datetime.fromisoformat(jane["occurred_at"]) < timedelta(minutes=3)
    assert timedelta(minutes=1) <= now - datetime.fromisoformat(ana["occurred_at"]) < timedelta(minutes=2)
    # and the router recorded each on that instance's incident, by that person, at that time, from that webhook
    by_instance = {i["instance"]["container_instance_arn"].rsplit("/", 1)[-1]: i for i in result.report["incidents"]}
    for name, webhook, who in (("gpu-a", jane, "Jane Doe"), ("gpu-b", ana, "Ana Lopez")):
        acknowledged = by_instance[ids[name]]["acknowledged"]
        assert (acknowledged["by"], acknowledged["via"]) == (who, "pagerduty")
        assert datetime.fromisoformat(acknowledged["at"]) == datetime.fromisoformat(webhook["occurred_at"])
        assert by_instance[ids[name]]["acknowledge_key"] == f"pagerduty:{webhook['event_id']}"
    assert [(a["number"], a["status"]) for a in result.report["pagerduty"]] == [
        (1, "acknowledged"),
        (2, "acknowledged"),
    ]


def test_a_fault_schedule_answers_the_stacks_requests_as_written(tmp_path: Path) -> None:
    # Given PagerDuty that answers the first request, then 500 to the next four (every attempt the router makes
    # at one delivery), then recovers; and gpu-a faulty 20 minutes ago, OK for the last 11 (past the hold-down)
    def health(status: str, ago: str) -> dict[str, Any]:
        check = {"type": "ACCELERATED_COMPUTE", "status": status, "statusReason": "XID_79" if status != "OK" else None}
        at = "{{now-" + ago + "}}"
        return {"time": at, "detail": {"overallStatus": status, "healthChecks": [{**check, "lastStatusChange": at}]}}

    path = scenario(
        tmp_path,
        [
            {"file": XID79, "instance": "gpu-a", "overrides": {"id": "impaired", **health("IMPAIRED", "20m")}},
            {"file": XID79, "instance": "gpu-a", "overrides": {"id": "ok", **health("OK", "11m")}},
        ],
        [{"select": "alerts", "count": 1}],
        faults={"pagerduty": [{"pass": 1}, {"fail": 500, "times": 4}]},
    )

    # When it runs
    result = run(path)

    # Then PagerDuty answered exactly as scheduled: the trigger, four 500s to the resolve, then the resolve
    assert result.passed, "\n".join(failed(result))
    assert [(r["action"], r["status"], r["fault"]) for r in pagerduty_requests(result.report["requests"])] == [
        ("trigger", 202, False),
        *[("resolve", 500, True)] * 4,
        ("resolve", 202, False),
    ]
    # the OK's first delivery failed after every attempt, and its next one (SQS delivering it again) got through
    outcomes = [(i["function"], bool(i["failures"])) for i in result.report["invocations"]]
    assert outcomes == [("AlertRouterFunction", False), ("AlertRouterFunction", True), ("AlertRouterFunction", False)]
    [alert] = result.report["pagerduty"]
    assert alert["status"] == "resolved"
    assert result.report["dlq"] == []
