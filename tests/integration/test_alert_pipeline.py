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
INSTANCE_PREFIX = "arn:aws:ecs:us-west-2:123456789012:container-instance/my-cluster"


def run(
    *batches: list[dict[str, Any]],
    faults: Mapping[str, Any] | None = None,
    overrides: Mapping[str, str] | None = None,
    before: Any = None,
    between: Any = None,
) -> dict[str, Any]:
    """Replay batches of events (each batch is queued whole before the handler polls) in a fresh sandbox;
    `before` runs once the sandbox is up, `between` after the first batch."""
    with Sandbox(TEMPLATE, faults=faults, parameter_overrides=overrides) as sandbox:
        if before is not None:
            before(sandbox)
        files = [EventFile(Path(f"batch-{number}.json"), events) for number, events in enumerate(batches, 1)]
        if between is None:
            return replay(sandbox, files, Timeline(None))
        return replay(sandbox, files, Timeline(None), after_file={1: lambda: between(sandbox)})


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


def incident_roots(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Root messages of incidents (their metadata names the incident)."""
    return [
        root for root in slack_roots(report) if (root.get("metadata") or {}).get("event_type") == "gpu_fault_incident"
    ]


def slack_texts(report: dict[str, Any]) -> list[str]:
    return [json.dumps(r["body"]) for r in report["requests"] if r["service"] == "slack" and r["status"] == 200]


@pytest.fixture(scope="module")
def xid46() -> dict[str, Any]:
    return load_event(XID46)


# --- The documented behaviour (issue "Done when") ------------------------------------------------


def test_the_aws_xid46_sample_pages_once_critical_and_posts_one_slack_root(xid46: dict[str, Any]) -> None:
    report = run([xid46])
    # Slack and PagerDuty are delivered to from their own threads: in either order
    assert sorted(calls(report)) == [("pagerduty", "enqueue", 202), ("slack", "chat.postMessage", 200)]
    [trigger] = pagerduty_bodies(report)
    assert trigger["event_action"] == "trigger"
    assert trigger["payload"]["severity"] == "critical"
    assert trigger["dedup_key"] == "my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE"
    assert "XID 46" in trigger["payload"]["summary"]
    [root] = [request for request in report["requests"] if request["service"] == "slack"]
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


def test_two_faults_in_the_aws_samples_each_page_and_resolve_with_the_drain_and_the_instance_leaving(
    xid46: dict[str, Any],
) -> None:
    # Given AWS's XID 46 and DAEMON samples (one instance), then its DRAINING and INACTIVE
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")
    gone = vary(
        load_event("state/inactive.json"),
        event_id="xid46-instance-gone",
        containerInstanceArn=xid46["detail"]["containerInstanceArn"],
        updatedAt="2026-04-11T01:10:00Z",
    )
    report = run([xid46], [daemon], [load_event(XID46_DRAIN)], [gone])
    # Then each fault is its own PagerDuty alert, triggered and resolved through the same key
    alerts = {alert["dedup_key"]: alert for alert in report["pagerduty"]}
    assert sorted(alerts) == ["my-cluster/a1b2c3d4EXAMPLE/ACCELERATED_COMPUTE", "my-cluster/a1b2c3d4EXAMPLE/DAEMON"]
    assert all(alert["status"] == "resolved" for alert in alerts.values())
    assert sorted(b["event_action"] for b in pagerduty_bodies(report)).count("resolve") == 2
    # And each has one Slack root, RESOLVED at the end
    roots = [
        root for root in slack_roots(report) if (root.get("metadata") or {}).get("event_type") == "gpu_fault_incident"
    ]
    assert len(roots) == 2
    assert all(root["text"].startswith("RESOLVED") for root in roots)


def test_a_slack_answering_after_11_s_never_holds_back_pagerduty_and_catches_up_without_a_second_root() -> None:
    # Given ten critical faults in one batch, each on its own capacity provider (so each is an incident of its
    # own, not a fleet), and Slack answering its first request after 11 s (past the client's 10 s read timeout:
    # the message is posted, the answer never read)
    faults = [
        health_check(
            vary(
                load_event(XID46),
                event_id=f"fault-{n}",
                containerInstanceArn=f"{INSTANCE_PREFIX}/ci{n:02d}",
                capacityProviderName=f"gpu-p5-{n}",
            ),
            statusReason="XID_79",
        )
        for n in range(10)
    ]
    report = run(faults, faults={"slack": [{"delay": 11}]})
    # Then every fault reached PagerDuty within the first invocation
    first = report["invocations"][0]
    triggers = [r for r in report["requests"] if r["service"] == "pagerduty" and r["status"] == 202]
    assert len({r["body"]["dedup_key"] for r in triggers}) == 10
    assert all(request["at"] < first["ended_at"] for request in triggers)
    assert first["duration_ms"] < 60_000 and first["error"] is None
    # And Slack caught up on the redelivery: one root per fault, the one that timed out found, not re-posted
    roots = [
        root for root in slack_roots(report) if (root.get("metadata") or {}).get("event_type") == "gpu_fault_incident"
    ]
    assert len(roots) == 10
    assert len({root["metadata"]["event_payload"]["id"] for root in roots}) == 10
    assert report["dlq"] == []


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
    # Then each receive tries Slack, reads the secret again in case it was rotated, and tries once more ...
    assert calls(report, "slack") == [("slack", "chat.postMessage", 200)] * 4
    # ... PagerDuty, which succeeded the first time, is not paged again on the redelivery ...
    assert len(pagerduty_bodies(report)) == 1
    # ... and on its last receive the router dead-letters it itself, with its id and the reason.
    [dead] = report["dlq"]
    assert (dead["queue"], dead["body"]["id"]) == ("AlertDLQ", xid46["id"])
    assert dead["message_attributes"]["event_id"] == xid46["id"]
    assert "invalid_auth" in dead["message_attributes"]["reason"]
    assert dead["message_attributes"]["receive_count"] == "2"
    assert {e["event_id"] for e in report["errors"]} == {xid46["id"]}


def test_a_rotated_slack_token_is_used_without_a_cold_start(xid46: dict[str, Any]) -> None:
    # Given a warm router that has cached the bot token, When the token is rotated (Slack accepts only the
    # new one, the secret holds it) and another fault arrives
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")

    def rotate_between(sandbox: Sandbox) -> None:
        name = sandbox.parameters["SlackSecretName"]
        secret = json.loads(sandbox.aws.secretsmanager.get_secret_value(SecretId=name)["SecretString"])
        sandbox.aws.secretsmanager.put_secret_value(
            SecretId=name, SecretString=json.dumps({**secret, "bot_token": "xoxb-rotated"})
        )
        sandbox.standins.rotate_slack_token("xoxb-rotated")

    report = run([xid46], [daemon], between=rotate_between)
    # Then the old token is refused once, the secret is read again, and the post goes through: no redelivery
    answers = [r["response"] for r in report["requests"] if r["service"] == "slack"]
    assert [a.get("error") for a in answers] == [None, "invalid_auth", None]
    assert report["dlq"] == [] and report["errors"] == []
    assert all(not batch["failures"] for batch in report["invocations"])


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


def test_a_rotated_pagerduty_routing_key_is_used_without_a_cold_start(xid46: dict[str, Any]) -> None:
    # Given a warm router that cached the routing key, When the key is rotated (PagerDuty accepts only the new
    # one, the secret holds it) and another fault arrives
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")
    rotated = "rotatedpagerdutyroutingkey000000"

    def rotate_between(sandbox: Sandbox) -> None:
        name, secrets = sandbox.parameters["PagerDutySecretName"], sandbox.aws.secretsmanager
        secrets.put_secret_value(SecretId=name, SecretString=json.dumps({"routing_keys": {"gpu-oncall": rotated}}))
        sandbox.standins.rotate_routing_keys({rotated})

    report = run([xid46], [daemon], between=rotate_between)
    # Then the old key is refused once (400), the secret is read again, and the page goes through
    statuses = [r["status"] for r in report["requests"] if r["service"] == "pagerduty"]
    assert statuses == [202, 400, 202]
    assert report["dlq"] == [] and report["errors"] == []


def test_an_impaired_that_arrives_after_its_ok_is_told_as_resolved_and_never_pages(xid46: dict[str, Any]) -> None:
    report = run([load_event(XID46_OK)], [xid46])
    assert calls(report) == [("slack", "chat.postMessage", 200), ("slack", "chat.postMessage", 200)]
    [root] = slack_roots(report)
    assert root["text"].startswith("RESOLVED after 7m 19s · XID 46")
    [incident] = report["incidents"]
    assert incident["status"] == "CLOSED"


def test_an_older_instance_state_version_changes_nothing(xid46: dict[str, Any]) -> None:
    drain = load_event(XID46_DRAIN)
    older = vary(drain, event_id="older-version", version=drain["detail"]["version"] - 5)
    report = run([xid46], [drain], [older])
    assert len(pagerduty_bodies(report)) == 2


def test_malformed_events_go_to_the_dlq_without_blocking_their_batch(xid46: dict[str, Any]) -> None:
    # Given a batch with an event that names no instance, and one whose checks are not a list (the rest of its
    # detail is fine: read as an IMPAIRED with no check listed), between two faults
    malformed = load_event("malformed/health-missing-instance.json")
    daemon = load_event("aws-docs/health-change-daemon-impaired.json")
    not_json_shape = copy.deepcopy(xid46)
    not_json_shape["id"] = "broken-detail"
    not_json_shape["detail"]["healthChecks"] = "not-a-list"
    report = run([xid46, malformed, not_json_shape, daemon])
    [batch] = report["invocations"]
    assert batch["batch_size"] == 4
    assert batch["failures"] == []
    # Then the one that names no instance is dead-lettered with its reason, and nothing else is
    assert [d["body"]["id"] for d in report["dlq"]] == [malformed["id"]]
    assert all(d["message_attributes"]["reason"].startswith("malformed: invalid event") for d in report["dlq"])
    # and the XID 46, the fault whose checks could not be read (labelled unknown) and the daemon fault all page
    assert len(pagerduty_bodies(report)) == 3


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
