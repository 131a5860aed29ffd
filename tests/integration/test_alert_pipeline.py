"""The AlertRouter end to end: rules from template.yaml, the SQS queue and DLQ in moto (loopback
server), the real handler in batches, and the Slack / PagerDuty stand-ins over real HTTP.

Each test starts its own sandbox (about a second) and reads what crossed the wire from the report.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.standins import SANDBOX_ROUTING_KEY
from sandbox.template import load_template
from tests.conftest import ROOT, health_check, load_event, vary

TEMPLATE = load_template(ROOT / "template.yaml")
XID46 = "aws-docs/health-change-accelerated-compute-xid46.json"
XID46_OK = "health/accelerated-compute-xid46-ok.json"
XID46_DRAIN = "state/draining-after-xid46.json"


def run(
    *batches: list[dict[str, Any]],
    faults: Mapping[str, list[Any]] | None = None,
    overrides: Mapping[str, str] | None = None,
    before: Any = None,
) -> dict[str, Any]:
    """Replay batches of events (each batch is queued whole before the handler polls) in a fresh sandbox."""
    with Sandbox(TEMPLATE, faults=faults, parameter_overrides=overrides) as sandbox:
        if before is not None:
            before(sandbox)
        files = [EventFile(Path(f"batch-{number}.json"), events) for number, events in enumerate(batches, 1)]
        return replay(sandbox, files, Timeline(None))


def calls(report: dict[str, Any], service: str | None = None) -> list[tuple[str, str, int]]:
    return [
        (request["service"], request["path"].rsplit("/", 1)[-1], request["status"])
        for request in report["requests"]
        if service is None or request["service"] == service
    ]


def pagerduty_bodies(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [r["body"] for r in report["requests"] if r["service"] == "pagerduty" and r["status"] == 202]


def slack_roots(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Root messages (not thread replies) in their final, edited state, in every channel."""
    return [m for channel in report["slack"].values() for m in channel if m["thread_ts"] is None]


def slack_texts(report: dict[str, Any]) -> list[str]:
    return [json.dumps(r["body"]) for r in report["requests"] if r["service"] == "slack" and r["status"] == 200]


@pytest.fixture(scope="module")
def xid46() -> dict[str, Any]:
    return load_event(XID46)


# --- The documented behaviour (issue "Done when") ------------------------------------------------


def test_the_aws_xid46_sample_pages_once_critical_and_posts_one_slack_root(xid46: dict[str, Any]) -> None:
    report = run([xid46])
    assert calls(report) == [("slack", "chat.postMessage", 200), ("pagerduty", "enqueue", 202)]
    [trigger] = pagerduty_bodies(report)
    assert trigger["event_action"] == "trigger"
    assert trigger["payload"]["severity"] == "critical"
    assert trigger["dedup_key"] == "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
    assert "XID 46" in trigger["payload"]["summary"]
    [root] = report["requests"][:1]
    assert "thread_ts" not in root["body"]


def test_a_later_ok_resolves_with_the_same_dedup_key_and_updates_slack(xid46: dict[str, Any]) -> None:
    report = run([xid46], [load_event(XID46_OK)])
    trigger, resolve = pagerduty_bodies(report)
    assert resolve["event_action"] == "resolve"
    assert resolve["dedup_key"] == trigger["dedup_key"]
    assert resolve["routing_key"] == trigger["routing_key"] == "***"  # redacted in the report, same receiver
    methods = [path for service, path, _ in calls(report, "slack")]
    assert methods == ["chat.postMessage", "chat.postMessage", "chat.update"]
    [root] = slack_roots(report)
    assert root["text"].startswith("RESOLVED")


def test_replaying_the_same_event_id_sends_nothing_more(xid46: dict[str, Any]) -> None:
    report = run([xid46], [load_event("duplicates/xid46-duplicate.json")], [xid46])
    assert len(report["requests"]) == 2


def test_a_drain_after_the_fault_is_attributed_to_ecs_auto_repair_in_slack_and_pagerduty(
    xid46: dict[str, Any],
) -> None:
    report = run([xid46], [load_event(XID46_DRAIN)])
    _, update = pagerduty_bodies(report)
    assert update["dedup_key"] == "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
    assert "ECS auto-repair (XID 46)" in update["payload"]["summary"]
    assert update["payload"]["custom_details"]["drain_cause"] == "ecs_auto_repair"
    reply, root_update = slack_texts(report)[1:]
    assert "ECS auto-repair (XID 46)" in reply
    assert "ECS auto-repair (XID 46)" in root_update


def test_a_drain_with_no_fault_before_is_a_manual_drain_and_pages_nobody() -> None:
    report = run([load_event("state/draining-manual.json")])
    assert calls(report) == [("slack", "chat.postMessage", 200)]
    assert "manual or scheduled drain (no health fault)" in slack_texts(report)[0]


# --- Delivery without loss -----------------------------------------------------------------------


def test_slack_429_and_500_are_retried_within_the_invocation(xid46: dict[str, Any]) -> None:
    report = run([xid46], faults={"slack": [429, 500]})
    assert calls(report, "slack") == [
        ("slack", "chat.postMessage", 429),
        ("slack", "chat.postMessage", 500),
        ("slack", "chat.postMessage", 200),
    ]
    assert report["dlq"] == []
    assert report["errors"] == []


def test_slack_ok_false_is_a_failure_that_is_retried(xid46: dict[str, Any]) -> None:
    report = run([xid46], faults={"slack": ["ok_false"]})
    answers = [r["response"] for r in report["requests"] if r["service"] == "slack"]
    assert [(a["ok"], a.get("error")) for a in answers] == [(False, "internal_error"), (True, None)]
    assert len(slack_roots(report)) == 1


def _break_slack_token(sandbox: Sandbox) -> None:
    name = sandbox.parameters["SlackSecretName"]
    secrets = sandbox.aws.secretsmanager
    secret = json.loads(secrets.get_secret_value(SecretId=name)["SecretString"])
    secrets.put_secret_value(SecretId=name, SecretString=json.dumps({**secret, "bot_token": "xoxb-revoked"}))


def test_a_permanent_slack_error_fails_the_record_until_the_dlq_without_repaging(xid46: dict[str, Any]) -> None:
    # Given a revoked Slack token (200 ok:false invalid_auth) and a receive limit of 2
    report = run([xid46], overrides={"AlertMaxReceiveCount": "2"}, before=_break_slack_token)
    # Then each receive tries Slack once (permanent errors are not retried in the call) ...
    assert calls(report, "slack") == [("slack", "chat.postMessage", 200)] * 2
    # ... PagerDuty, which succeeded the first time, is not paged again on the redelivery ...
    assert len(pagerduty_bodies(report)) == 1
    # ... and the event ends in the DLQ, with the reason logged against its id.
    [dead] = report["dlq"]
    assert (dead["queue"], dead["body"]["id"]) == ("AlertDLQ", xid46["id"])
    assert {e["event_id"] for e in report["errors"]} == {xid46["id"]}
    assert any("invalid_auth" in e["reason"] for e in report["errors"])


def test_pagerduty_down_for_longer_than_the_retries_redelivers_without_reposting_slack(
    xid46: dict[str, Any],
) -> None:
    # Given PagerDuty answers 500 to the first 4 requests (one invocation's worth of attempts)
    report = run([xid46], faults={"pagerduty": [500, 500, 500, 500]})
    # Then the second receive pages, and Slack got its root message exactly once.
    assert [status for *_, status in calls(report, "pagerduty")] == [500, 500, 500, 500, 202]
    assert calls(report, "slack") == [("slack", "chat.postMessage", 200)]
    assert report["dlq"] == []
    [batch_1, batch_2] = report["invocations"]
    assert batch_1["failures"] and not batch_2["failures"]


# --- Duplicates, order, bad input ----------------------------------------------------------------


def test_an_ok_that_arrives_before_its_impaired_means_the_late_impaired_never_pages(xid46: dict[str, Any]) -> None:
    report = run([load_event(XID46_OK)], [xid46])
    assert report["requests"] == []
    [incident] = [i for i in report["incidents"] if i["sk"].startswith("INCIDENT#")]
    assert incident["status"] == "CLOSED"
    assert incident["timeline"][-1]["stale"] is True


def test_an_older_instance_state_version_changes_nothing(xid46: dict[str, Any]) -> None:
    drain = load_event(XID46_DRAIN)
    older = vary(drain, event_id="older-version", version=drain["detail"]["version"] - 5)
    report = run([xid46], [drain], [older])
    assert len(pagerduty_bodies(report)) == 2


def test_malformed_events_go_to_the_dlq_without_blocking_their_batch(xid46: dict[str, Any]) -> None:
    malformed = load_event("malformed/health-missing-instance.json")
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")
    not_json_shape = copy.deepcopy(xid46)
    not_json_shape["id"] = "broken-detail"
    not_json_shape["detail"]["healthChecks"] = "not-a-list"
    report = run([xid46, malformed, not_json_shape, daemon])
    [batch] = report["invocations"]
    assert batch["batch_size"] == 4
    assert batch["failures"] == []
    assert sorted(d["body"]["id"] for d in report["dlq"]) == sorted([malformed["id"], "broken-detail"])
    assert all(d["message_attributes"]["error"].startswith("invalid event") for d in report["dlq"])
    assert len(pagerduty_bodies(report)) == 2  # the XID 46 and the daemon fault, both paged


def test_a_flapping_check_reopens_in_a_new_thread_under_the_same_dedup_key(xid46: dict[str, Any]) -> None:
    again = health_check(vary(xid46, event_id="second-fault"), lastStatusChange="2026-04-11T01:30:00Z")
    report = run([xid46], [load_event(XID46_OK)], [again])
    actions = [(b["event_action"], b["dedup_key"]) for b in pagerduty_bodies(report)]
    key = "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
    assert actions == [("trigger", key), ("resolve", key), ("trigger", key)]
    assert len(slack_roots(report)) == 2


@pytest.fixture(autouse=True)
def _no_leaked_environment() -> Iterator[None]:
    yield
    assert "AWS_ENDPOINT_URL" not in __import__("os").environ


# --- Observability and secrets -------------------------------------------------------------------


def test_logs_carry_the_event_id_as_correlation_id_and_metrics_name_the_drain(xid46: dict[str, Any]) -> None:
    drain = load_event(XID46_DRAIN)
    report = run([xid46], [drain], overrides={"LogLevel": "DEBUG"})
    lines = [json.loads(line) for line in report["invocations"][1]["logs"] if line.startswith("{")]
    processed = [line for line in lines if line.get("message") == "event processed"]
    assert [line["correlation_id"] for line in processed] == [drain["id"]]
    metrics = {(line.get("Attribution"), line.get("Channel")) for line in lines if "_aws" in line}
    assert ("ecs_auto_repair", None) in metrics
    assert (None, "pagerduty") in metrics


def test_secrets_never_reach_the_logs_or_the_report(xid46: dict[str, Any]) -> None:
    report = run([xid46], [load_event(XID46_DRAIN)], faults={"slack": [500]}, overrides={"LogLevel": "DEBUG"})
    text = json.dumps(report)
    for secret in ("xoxb-sandbox-token", "sandboxwebhooksecret", SANDBOX_ROUTING_KEY):
        assert secret not in text
