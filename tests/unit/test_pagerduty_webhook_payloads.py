"""PagerDuty v3 webhooks read and mapped to incident actions (fault_responder.actions.pagerduty_webhook), the webhook
secrets' reader (fault_responder.wiring.pagerduty_webhook) and the action queue adapter's message. Pure, but for the
queue's SendMessage (moto)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.actions.interactive import pagerduty_signature
from fault_responder.actions.pagerduty_webhook import Ignored, PagerDutyWebhook, action_for, parse_webhook
from fault_responder.adapters.action_queue import ActionQueue
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via, parse_action
from fault_responder.notification.buttons import BadRequest
from fault_responder.wiring.pagerduty_webhook import WebhookSecrets, WebhookSettings

SECRET = "unit-webhook-secret"  # nosec B105  # a made-up secret


def webhook(
    event_type: str = "incident.acknowledged",
    *,
    agent: dict[str, Any] | None = None,
    incident_key: str | None = "gpu/abc/ACCELERATED_COMPUTE",
    assignees: list[str] | None = None,
    event_id: str = "01DEN0W2KMKV4EZ5A7BHKLJ7ZZ",
) -> dict[str, Any]:
    """A v3 webhook as PagerDuty documents it (its fields abridged)."""
    return {
        "event": {
            "id": event_id,
            "event_type": event_type,
            "resource_type": "incident",
            "occurred_at": "2026-03-02T18:45:22.169Z",
            "agent": {"type": "user_reference", "summary": "Jane Doe", "id": "PLH1HKV"} if agent is None else agent,
            "client": None,
            "data": {
                "id": "PGR0VU2",
                "type": "incident",
                "number": 2,
                "status": "acknowledged",
                "title": "XID 79 on gpu-a",
                "incident_key": incident_key,
                "html_url": "https://acme.pagerduty.com/incidents/PGR0VU2",
                "assignees": [{"type": "user_reference", "summary": name, "id": "P1"} for name in assignees or []],
            },
        }
    }


def body(document: dict[str, Any]) -> bytes:
    return json.dumps(document).encode()


# --- Reading ------------------------------------------------------------------------------------------------------


def test_a_v3_webhook_is_read_with_its_agent_incident_and_assignees() -> None:
    event = parse_webhook(body(webhook("incident.reassigned", assignees=["Ana Lopez", "Bo Chen"])))

    assert event.event_id == "01DEN0W2KMKV4EZ5A7BHKLJ7ZZ"
    assert event.event_type == "incident.reassigned"
    assert event.occurred_at == datetime(2026, 3, 2, 18, 45, 22, 169000, tzinfo=UTC)
    assert (event.agent_type, event.agent_summary) == ("user_reference", "Jane Doe")
    assert (event.incident_key, event.incident_id, event.incident_number) == (
        "gpu/abc/ACCELERATED_COMPUTE",
        "PGR0VU2",
        2,
    )
    assert event.assignees == ("Ana Lopez", "Bo Chen")


def test_an_event_type_not_mirrored_is_read_whatever_its_data() -> None:
    document = webhook("service.updated")
    document["event"]["data"] = {"id": "PSVC", "type": "service", "assignees": "not incident data"}

    event = parse_webhook(body(document))

    assert event.incident_key is None and event.assignees == ()


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"[]",
        b'{"event": null}',
        b'{"event": {"id": "", "event_type": "incident.resolved", "occurred_at": "2026-01-01T00:00:00Z"}}',
        b'{"event": {"id": "x", "event_type": "incident.resolved", "occurred_at": "yesterday"}}',
        b'{"event": {"id": "x", "event_type": "incident.resolved", "occurred_at": "2026-01-01T00:00:00"}}',
        b'{"event": {"id": "x", "event_type": "incident.resolved", "occurred_at": "2026-01-01T00:00:00Z",'
        b' "data": {"number": "two"}}}',
    ],
    ids=["empty", "array", "null-event", "empty-id", "bad-time", "naive-time", "bad-number"],
)
def test_what_is_not_a_v3_webhook_is_a_bad_request(raw: bytes) -> None:
    with pytest.raises(BadRequest):
        parse_webhook(raw)


# --- Mapping ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event_type", "kind"),
    [
        ("incident.acknowledged", ActionKind.ACKNOWLEDGE),
        ("incident.unacknowledged", ActionKind.UNACKNOWLEDGE),
        ("incident.resolved", ActionKind.RESOLVE),
        ("incident.reassigned", ActionKind.REASSIGN),
    ],
)
def test_each_mirrored_event_type_is_its_action(event_type: str, kind: ActionKind) -> None:
    action = action_for(parse_webhook(body(webhook(event_type, assignees=["Ana Lopez"]))))

    assert isinstance(action, IncidentAction)
    assert action.kind is kind and action.via is Via.PAGERDUTY
    assert action.key == "pagerduty:01DEN0W2KMKV4EZ5A7BHKLJ7ZZ"
    assert action.by == "Jane Doe"
    assert action.dedup_key == "gpu/abc/ACCELERATED_COMPUTE"
    assert action.at == datetime(2026, 3, 2, 18, 45, 22, 169000, tzinfo=UTC)
    assert action.note == ("to Ana Lopez" if kind is ActionKind.REASSIGN else None)


@pytest.mark.parametrize("event_type", ["incident.acknowledged", "incident.resolved"])
@pytest.mark.parametrize("agent_type", ["service_reference", "integration_reference", None])
def test_acknowledge_and_resolve_by_anything_but_a_person_are_ignored(event_type: str, agent_type: str | None) -> None:
    agent = {"type": agent_type, "summary": "GPU Fault Responder"} if agent_type else {}

    assert action_for(parse_webhook(body(webhook(event_type, agent=agent)))) == Ignored("not by a person")


def test_an_unacknowledge_by_pagerduty_itself_is_mirrored_and_says_pagerduty_did_it() -> None:
    document = webhook("incident.unacknowledged")
    document["event"]["agent"] = None

    action = action_for(parse_webhook(body(document)))

    assert isinstance(action, IncidentAction) and action.by == "PagerDuty"


def test_a_reassignment_to_no_one_says_so() -> None:
    action = action_for(parse_webhook(body(webhook("incident.reassigned", assignees=[]))))

    assert isinstance(action, IncidentAction) and action.note == "to nobody"


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (webhook("incident.annotated"), "event type"),
        (webhook("incident.priority_updated"), "event type"),
        (webhook("pagey.ping"), "event type"),
        (webhook(incident_key=None), "no incident key"),
        (webhook(incident_key=""), "no incident key"),
    ],
    ids=["annotated", "priority", "ping", "no-key", "empty-key"],
)
def test_other_events_and_incidents_without_a_key_are_ignored(document: dict[str, Any], reason: str) -> None:
    assert action_for(parse_webhook(body(document))) == Ignored(reason)


def test_a_long_name_is_cut_to_what_an_action_holds() -> None:
    action = action_for(
        parse_webhook(body(webhook("incident.reassigned", agent={"type": "user_reference", "summary": "J" * 500},
                                   assignees=["A" * 400])))
    )  # fmt: skip

    assert isinstance(action, IncidentAction)
    assert parse_action(action.envelope("us-east-1", "123456789012")).by == "J" * 120
    assert action.note is not None and len(action.note) == 300


# --- The endpoint's answers ---------------------------------------------------------------------------------------


class _Queue:
    def __init__(self) -> None:
        self.sent: list[IncidentAction] = []

    def send(self, action: IncidentAction) -> None:
        self.sent.append(action)


def _endpoint(queue: _Queue, secrets: list[list[str]], counted: list[tuple[str, str, str]]) -> PagerDutyWebhook:
    def read(force: bool) -> list[str]:
        return secrets[-1] if force else secrets[0]

    return PagerDutyWebhook(secrets=read, actions=queue, count=lambda *c: counted.append(c))


def test_a_refusal_is_counted_with_its_reason_and_a_bad_event_id_is_a_bad_request() -> None:
    queue, counted = _Queue(), []  # type: list[tuple[str, str, str]]
    endpoint = _endpoint(queue, [[SECRET]], counted)
    raw = body(webhook(event_id="has/slash"))

    assert endpoint.handle({}, raw).status == 401
    assert endpoint.handle({"X-PagerDuty-Signature": pagerduty_signature("other", raw)}, raw).status == 401
    assert endpoint.handle({"X-PagerDuty-Signature": pagerduty_signature(SECRET, raw)}, raw).status == 400
    assert counted == [
        ("RefusedRequests", "Reason", "unsigned"),
        ("RefusedRequests", "Reason", "wrong signature"),
        ("RefusedRequests", "Reason", "bad request"),
    ]
    assert queue.sent == []


def test_a_wrong_signature_rereads_the_secret_once_and_a_rotated_one_is_accepted() -> None:
    queue, counted = _Queue(), []  # type: list[tuple[str, str, str]]
    endpoint = _endpoint(queue, [["stale-secret"], [SECRET]], counted)
    raw = body(webhook())

    answer = endpoint.handle({"x-pagerduty-signature": pagerduty_signature(SECRET, raw)}, raw)

    assert answer.status == 200
    assert [a.kind for a in queue.sent] == [ActionKind.ACKNOWLEDGE]
    assert counted == [("ActionsQueued", "Action", "pagerduty:acknowledge")]


# --- The secrets and the settings ---------------------------------------------------------------------------------


def test_the_secrets_are_reread_on_demand_at_most_once_a_minute() -> None:
    calls: list[bool] = []
    clock = [1000.0]

    def fetch(name: str, force: bool) -> Any:
        calls.append(force)
        return {"routing_keys": {}, "webhook_secrets": ["a", "b"]}

    secrets = WebhookSecrets("pd", fetch, monotonic=lambda: clock[0])

    assert secrets(False) == ["a", "b"]
    assert secrets(True) == ["a", "b"]
    clock[0] += 30
    secrets(True)
    clock[0] += 31
    secrets(True)
    assert calls == [False, True, False, True]


@pytest.mark.parametrize("stored", [{"routing_keys": {}}, {"webhook_secrets": []}, {"webhook_secrets": "one"}])
def test_a_secret_without_webhook_secrets_says_what_is_missing(stored: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError, match="webhook_secrets"):
        WebhookSecrets("pd", lambda name, force: stored)(False)


def test_the_settings_take_the_region_from_lambdas_variable_or_the_default_one() -> None:
    env = {"ALERT_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/q", "PAGERDUTY_SECRET_NAME": "pd"}

    assert WebhookSettings.from_env({**env, "AWS_REGION": "eu-west-1"}).region == "eu-west-1"
    assert WebhookSettings.from_env({**env, "AWS_DEFAULT_REGION": "us-east-2"}).region == "us-east-2"
    with pytest.raises(RuntimeError, match="ALERT_QUEUE_URL"):
        WebhookSettings.from_env({"PAGERDUTY_SECRET_NAME": "pd", "AWS_REGION": "eu-west-1"})


def test_the_action_queue_sends_the_envelope_the_router_reads() -> None:
    action = IncidentAction(
        key="slack:abc123",
        kind=ActionKind.SILENCE,
        via=Via.SLACK,
        by="Jane Doe (U012AB3CD)",
        at=datetime(2026, 3, 2, 18, 45, tzinfo=UTC),
        record="arn:aws:ecs:us-east-1:123456789012:container-instance/gpu/abc",
        incident="gpu/abc/ACCELERATED_COMPUTE@1",
        note="until 19:45 UTC",
    )
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="alerts")["QueueUrl"]
        ActionQueue(url, "eu-west-1", "210987654321").send(action)
        [message] = sqs.receive_message(QueueUrl=url)["Messages"]

    envelope = json.loads(message["Body"])
    assert envelope == action.envelope("eu-west-1", "210987654321")
    assert parse_action(envelope) == action
