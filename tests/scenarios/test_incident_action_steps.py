"""The `click:` and `pagerduty:` steps run through the real template: a press goes to SlackActionsFunction's function
URL, a webhook to PagerDutyWebhookFunction's, each signed as the step says, and the report says what each answered.
Only what needs no router support for actions: refusals, and what the endpoints answer."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
import yaml

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


def scenario(tmp_path: Path, events: list[dict[str, Any]], expect: list[dict[str, Any]]) -> Path:
    path = tmp_path / "steps.yaml"
    document = {"description": "issue 10 steps", "world": WORLD, "events": events, "expect": expect}
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
            from fault_responder.buttons import IncidentButton  # noqa: PLC0415 - the layer, as the runner has it

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
