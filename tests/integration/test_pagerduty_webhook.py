"""PagerDutyWebhookFunction (functions/pagerduty_webhook/app.py) as Lambda runs it behind its function URL: real
v3 webhooks from the PagerDuty stand-in (an alert opened over HTTP, then changed "by a person" and signed as
PagerDuty signs), the webhook secrets read from Secrets Manager, the action sent to the alert queue (moto).

Given / When / Then: a refused webhook answers 401 or 400 and queues nothing; an accepted one answers 200 and queues
at most one envelope, which the router's own parser (incident_actions.parse_action) reads back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from types import ModuleType
from typing import Any

import boto3
import pytest
import requests
from moto import mock_aws

from fault_responder.actions.interactive import pagerduty_signature
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via, parse_action
from fault_responder.wiring import pagerduty_webhook as webhook_bootstrap
from sandbox.standins import PAGERDUTY_WEBHOOK_SECRET, SANDBOX_ROUTING_KEY, StandIns
from tests.integration.function_urls import FunctionContext, function_url_event, load_app

SECRET_NAME = "gpu-fault-responder/pagerduty"
ACCOUNT = "123456789012"
REGION = "us-east-1"
DEDUP_KEY = "gpu-training/0f1e2d3c4b5a69788796a5b4c3d2e1f0/ACCELERATED_COMPUTE"
CANARY_SECRET = "c4naryPagerDutyWebh00kS3cret7f3a9e1d"  # nosec B105  # a made-up secret, looked for in the logs


@cache
def _app() -> ModuleType:
    return load_app("pagerduty_webhook")


class Deployed:
    def __init__(self, sqs: Any, queue_url: str, standins: StandIns) -> None:
        self.sqs = sqs
        self.queue_url = queue_url
        self.standins = standins

    def an_alert(self) -> None:
        """The responder paged: an alert opened in PagerDuty (the stand-in, over HTTP) under DEDUP_KEY."""
        trigger = {
            "routing_key": SANDBOX_ROUTING_KEY,
            "event_action": "trigger",
            "dedup_key": DEDUP_KEY,
            "payload": {"summary": "XID 79 on gpu-a", "source": "gpu-a", "severity": "critical"},
        }
        assert requests.post(self.standins.pagerduty_url, json=trigger, timeout=5).status_code == 202

    def webhook(
        self,
        kind: str,
        *,
        by: str = "Jane Doe",
        agent: str = "user",
        assignee: str | None = None,
        secret: str | None = PAGERDUTY_WEBHOOK_SECRET,
    ) -> tuple[dict[str, str], bytes]:
        sent = self.standins.pagerduty_webhook(kind, by=by, agent=agent, assignee=assignee, secret=secret)
        assert sent is not None
        headers, body, _ = sent
        return headers, body

    def send(self, headers: dict[str, str], body: bytes, method: str = "POST") -> dict[str, Any]:
        answer: dict[str, Any] = _app().lambda_handler(
            function_url_event(headers, body, method=method),
            FunctionContext("PagerDutyWebhookFunction", REGION, ACCOUNT),
        )
        return answer

    def queued(self) -> list[dict[str, Any]]:
        messages = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10).get("Messages", [])
        return [json.loads(message["Body"]) for message in messages]


@pytest.fixture
def deployed(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployed]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("PAGERDUTY_SECRET_NAME", SECRET_NAME)
    with mock_aws(), StandIns() as standins:
        sqs = boto3.client("sqs", region_name=REGION)
        queue_url = sqs.create_queue(QueueName="alert-queue")["QueueUrl"]
        monkeypatch.setenv("ALERT_QUEUE_URL", queue_url)
        boto3.client("secretsmanager", region_name=REGION).create_secret(
            Name=SECRET_NAME,
            SecretString=json.dumps(
                {"routing_keys": {"gpu-oncall": SANDBOX_ROUTING_KEY}, "webhook_secrets": [PAGERDUTY_WEBHOOK_SECRET]}
            ),
        )
        webhook_bootstrap.reset()
        deployed = Deployed(sqs, queue_url, standins)
        deployed.an_alert()
        yield deployed
        webhook_bootstrap.reset()


def _sign(body: bytes, *secrets: str) -> dict[str, str]:
    return {
        "content-type": "application/json",
        "x-pagerduty-signature": ",".join(pagerduty_signature(s, body) for s in secrets),
    }


# --- Refused: 401 / 400, nothing queued ---------------------------------------------------------------------------


def test_an_unsigned_webhook_is_refused_and_queues_nothing(deployed: Deployed) -> None:
    # Given a person's acknowledgement in PagerDuty, sent without PagerDuty's signature
    headers, body = deployed.webhook("acknowledged", secret=None)
    # When it reaches the function
    answer = deployed.send(headers, body)
    # Then it is refused and nothing goes to the router
    assert answer["statusCode"] == 401
    assert deployed.queued() == []


def test_a_wrongly_signed_webhook_is_refused_and_queues_nothing(deployed: Deployed) -> None:
    headers, body = deployed.webhook("acknowledged", secret="not-the-webhook-secret")
    assert deployed.send(headers, body)["statusCode"] == 401
    assert deployed.queued() == []


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe",
        b'{"messages": []}',
        b'{"event": {"id": "01ABC", "event_type": "incident.acknowledged"}}',
        b'{"event": {"id": "01ABC", "event_type": "incident.acknowledged", "occurred_at": "2026-01-01T00:00:00"}}',
        b'{"event": {"id": "01ABC", "event_type": "incident.resolved", "occurred_at": "2026-01-01T00:00:00Z",'
        b' "data": {"assignees": "everyone"}}}',
        b'{"event": {"id": "01 has spaces/and slashes", "event_type": "incident.resolved",'
        b' "occurred_at": "2026-01-01T00:00:00Z", "agent": {"type": "user_reference", "summary": "Jane"},'
        b' "data": {"incident_key": "k"}}}',
    ],
    ids=["not-json", "not-utf8", "v2-shape", "no-occurred-at", "no-time-zone", "bad-assignees", "bad-event-id"],
)
def test_a_rightly_signed_but_malformed_webhook_is_a_bad_request(deployed: Deployed, body: bytes) -> None:
    answer = deployed.send(_sign(body, PAGERDUTY_WEBHOOK_SECRET), body)
    assert answer["statusCode"] == 400
    assert deployed.queued() == []


def test_only_post_is_answered(deployed: Deployed) -> None:
    headers, body = deployed.webhook("acknowledged")
    assert deployed.send(headers, body, method="GET")["statusCode"] == 405
    assert deployed.queued() == []


# --- Mirrored: 200, one envelope ----------------------------------------------------------------------------------


def _one_action(deployed: Deployed) -> IncidentAction:
    [envelope] = deployed.queued()
    assert envelope["account"] == ACCOUNT and envelope["region"] == REGION
    return parse_action(envelope)


def test_an_acknowledgement_by_a_person_is_queued_once_for_the_router(deployed: Deployed) -> None:
    # Given Jane Doe acknowledging the responder's alert in PagerDuty
    headers, body = deployed.webhook("acknowledged", by="Jane Doe")
    event_id = json.loads(body)["event"]["id"]
    # When PagerDuty's webhook reaches the function
    answer = deployed.send(headers, body)
    # Then it answers 200 and the router gets exactly one action: acknowledged by her, for the alert's dedup key
    assert answer["statusCode"] == 200
    action = _one_action(deployed)
    assert action.kind is ActionKind.ACKNOWLEDGE and action.via is Via.PAGERDUTY
    assert action.key == f"pagerduty:{event_id}"
    assert action.dedup_key == DEDUP_KEY
    assert action.by == "Jane Doe"
    assert action.record is None and action.note is None


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("resolved", ActionKind.RESOLVE), ("unacknowledged", ActionKind.UNACKNOWLEDGE)],
)
def test_a_resolve_and_an_unacknowledge_are_queued(deployed: Deployed, kind: str, expected: ActionKind) -> None:
    headers, body = deployed.webhook(kind)
    assert deployed.send(headers, body)["statusCode"] == 200
    assert _one_action(deployed).kind is expected


def test_a_reassignment_names_the_new_assignee(deployed: Deployed) -> None:
    headers, body = deployed.webhook("reassigned", by="Jane Doe", assignee="Ana Lopez")
    assert deployed.send(headers, body)["statusCode"] == 200
    action = _one_action(deployed)
    assert action.kind is ActionKind.REASSIGN
    assert action.note == "to Ana Lopez"


@pytest.mark.parametrize("kind", ["acknowledged", "resolved"])
def test_the_responders_own_acknowledge_and_resolve_coming_back_are_not_mirrored(deployed: Deployed, kind: str) -> None:
    # Given the alert acknowledged (or resolved) by a service: the responder's own Events API call, echoed back
    headers, body = deployed.webhook(kind, by="GPU Fault Responder", agent="service")
    # When its webhook arrives, Then it is answered 200 and nothing is queued
    assert deployed.send(headers, body)["statusCode"] == 200
    assert deployed.queued() == []


def test_other_events_and_incidents_the_responder_did_not_raise_are_answered_and_ignored(deployed: Deployed) -> None:
    ping = json.dumps(
        {"event": {"id": "01PING", "event_type": "pagey.ping", "resource_type": "pagey",
                   "occurred_at": "2026-01-01T00:00:00.000Z", "agent": None, "data": {"type": "ping"}}}
    ).encode()  # fmt: skip
    _, annotated = deployed.webhook("acknowledged")
    document = json.loads(annotated)
    document["event"]["event_type"] = "incident.annotated"
    other = json.dumps(document).encode()
    document["event"]["event_type"] = "incident.acknowledged"
    document["event"]["data"]["incident_key"] = None
    keyless = json.dumps(document).encode()
    for body in (ping, other, keyless):
        assert deployed.send(_sign(body, PAGERDUTY_WEBHOOK_SECRET), body)["statusCode"] == 200
    assert deployed.queued() == []


def test_a_copy_of_a_webhook_carries_the_same_action_key(deployed: Deployed) -> None:
    # PagerDuty retries a webhook it got no 2xx for: the copy's action has the same key, which the record takes once
    headers, body = deployed.webhook("acknowledged")
    assert deployed.send(headers, body)["statusCode"] == 200
    assert deployed.send(headers, body)["statusCode"] == 200
    first, second = deployed.queued()
    assert first["id"] == second["id"]


# --- Secrets: rotation, never logged ------------------------------------------------------------------------------


def test_during_a_rotation_one_right_signature_of_several_is_enough(deployed: Deployed) -> None:
    # Given the secret rotated in PagerDuty: two subscriptions' secrets in the secret, two signatures in the header
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=SECRET_NAME, SecretString=json.dumps({"webhook_secrets": ["old-webhook-secret", "new-webhook-secret"]})
    )
    webhook_bootstrap.reset()
    _, body = deployed.webhook("acknowledged")
    # When PagerDuty signs with the new one and a secret we do not have
    answer = deployed.send(_sign(body, "unknown-secret", "new-webhook-secret"), body)
    # Then it is accepted
    assert answer["statusCode"] == 200
    assert _one_action(deployed).kind is ActionKind.ACKNOWLEDGE


def test_a_secret_rotated_in_secrets_manager_is_used_without_a_cold_start(deployed: Deployed) -> None:
    # Given the function has read the secret once
    headers, body = deployed.webhook("acknowledged")
    assert deployed.send(headers, body)["statusCode"] == 200
    deployed.queued()
    # When the secret is replaced and PagerDuty signs with the new one
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=SECRET_NAME, SecretString=json.dumps({"webhook_secrets": ["rotated-webhook-secret"]})
    )
    headers, body = deployed.webhook("resolved", secret="rotated-webhook-secret")
    # Then the mismatch made it read the secret again, and the webhook is accepted
    assert deployed.send(headers, body)["statusCode"] == 200


def test_the_webhook_secret_and_signature_never_reach_the_logs(
    deployed: Deployed, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given a canary secret in the PagerDuty secret
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=SECRET_NAME, SecretString=json.dumps({"webhook_secrets": [CANARY_SECRET]})
    )
    webhook_bootstrap.reset()
    caplog.set_level("DEBUG")
    # When webhooks signed rightly, wrongly and not at all arrive
    signatures = []
    for secret in (CANARY_SECRET, "not-the-webhook-secret", None):
        headers, body = deployed.webhook("acknowledged", secret=secret)
        signatures.append(headers.get("x-pagerduty-signature"))
        deployed.send(headers, body)
    # Then the logs say what happened, and neither the secret nor a signature is in them
    captured = capsys.readouterr()
    output = captured.out + captured.err + caplog.text
    assert "webhook queued" in output and "webhook refused" in output
    assert CANARY_SECRET not in output
    assert all(signature[3:] not in output for signature in signatures if signature)
