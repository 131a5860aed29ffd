"""The signed webhook end to end: payloads rendered, signed and posted over HTTP by the real client
(notification/receivers/webhook/client.py, through the channels' generic port: adapters/notifiers.py and
adapters/http.py) to the sandbox's consumer, which checks the signature and the Alertmanager v4 format."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest

from fault_responder.adapters.http import RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.webhook.client import WebhookClient
from fault_responder.notification.receivers.webhook.payload import Change, change_for_step, render_incident
from sandbox.standin_webhook import SANDBOX_WEBHOOK_SECRET
from sandbox.standins import StandIns
from tests.builders import an_incident, draining, resolved

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)
NEW_SECRET = "n" * 32 + "-new-signing-secret"
SECRET_NAME = "gpu-fault-responder/webhook"


class Secrets:
    """What Secrets Manager answers for the webhook secret, and each read (forced or cached)."""

    def __init__(self, value: dict[str, Any]) -> None:
        self.value = value
        self.reads: list[bool] = []

    def __call__(self, name: str, force: bool) -> Any:
        assert name == SECRET_NAME
        self.reads.append(force)
        return self.value


@pytest.fixture
def stand_ins() -> Iterator[StandIns]:
    with StandIns() as running:
        yield running


def client(secrets: Secrets) -> WebhookClient:
    """The webhook's client on the channels the functions use, which name only the webhook's secret."""
    channels = SecretChannels(
        fetch_secret=secrets,
        slack_secret_name="",
        pagerduty_secret_name="",
        receiver_secrets={"webhook": SECRET_NAME},
        policy=FAST,
    )
    return WebhookClient(channels)


def endpoints(stand_ins: StandIns, *signing: str) -> tuple[WebhookClient, Secrets]:
    secrets = Secrets({"endpoints": {"ops-tool": {"url": stand_ins.webhook_url(), "signing_secrets": list(signing)}}})
    return client(secrets), secrets


def test_an_incidents_lifecycle_arrives_signed_and_valid(stand_ins: StandIns) -> None:
    sender, _ = endpoints(stand_ins, SANDBOX_WEBHOOK_SECRET)
    opened = an_incident()
    drained = draining(opened)
    closed = resolved(drained)
    sent = [
        render_incident(opened, receiver="ops", change=Change.OPENED),
        render_incident(drained, receiver="ops", change=change_for_step(drained, drained.timeline[-1])),
        render_incident(closed, receiver="ops", change=Change.RESOLVED),
    ]

    for payload in sent:
        sender.send("ops-tool", payload)

    received = stand_ins.webhook.received
    assert [item["payload"] for item in received] == sent
    assert [item["payload"]["alerts"][0]["annotations"]["change"] for item in received] == [
        "opened",
        "drain_attributed",
        "resolved",
    ]
    assert [request["status"] for request in stand_ins.requests] == [200, 200, 200]
    assert {request["service"] for request in stand_ins.requests} == {"webhook"}


def test_408_and_5xx_are_retried_and_each_attempt_is_signed_afresh(
    stand_ins: StandIns, caplog: pytest.LogCaptureFixture
) -> None:
    sender, _ = endpoints(stand_ins, SANDBOX_WEBHOOK_SECRET)
    stand_ins.webhook.fail_next(408)
    stand_ins.webhook.fail_next(503)

    with caplog.at_level(logging.DEBUG):
        sender.send("ops-tool", render_incident(an_incident(), receiver="ops", change=Change.OPENED))

    assert [request["status"] for request in stand_ins.requests] == [408, 503, 200]
    assert len(stand_ins.webhook.received) == 1
    assert "webhook delivery attempt 1/3 failed" in caplog.text
    assert "/webhook/sandbox" not in caplog.text and SANDBOX_WEBHOOK_SECRET not in caplog.text


def test_a_wrong_secret_is_refused_401_read_again_once_then_a_permanent_failure(stand_ins: StandIns) -> None:
    sender, secrets = endpoints(stand_ins, NEW_SECRET)

    with pytest.raises(DeliveryError) as raised:
        sender.send("ops-tool", render_incident(an_incident(), receiver="ops", change=Change.OPENED))

    assert (raised.value.status, raised.value.retryable) == (401, False)
    assert secrets.reads == [False, True]  # the secret may have been rotated: read again, then one more try
    assert [request["status"] for request in stand_ins.requests] == [401, 401]
    assert NEW_SECRET not in str(raised.value) and stand_ins.webhook_url() not in str(raised.value)


def test_during_a_rotation_a_consumer_holding_either_secret_accepts(stand_ins: StandIns) -> None:
    sender, _ = endpoints(stand_ins, NEW_SECRET, SANDBOX_WEBHOOK_SECRET)
    payload = render_incident(an_incident(), receiver="ops", change=Change.OPENED)

    sender.send("ops-tool", payload)  # the consumer still holds the previous secret
    stand_ins.webhook.rotate([NEW_SECRET])
    sender.send("ops-tool", payload)  # and once it has moved on

    assert len(stand_ins.webhook.received) == 2


def test_an_endpoint_in_clear_text_to_another_host_is_refused_without_quoting_it(stand_ins: StandIns) -> None:
    secrets = Secrets(
        {"endpoints": {"ops-tool": {"url": "http://tools.example.com/hook?token=abc", "signing_secrets": [NEW_SECRET]}}}
    )
    sender = client(secrets)

    with pytest.raises(DeliveryError) as raised:
        sender.send("ops-tool", render_incident(an_incident(), receiver="ops", change=Change.OPENED))

    assert raised.value.retryable is False
    assert "https://" in str(raised.value) and "token=abc" not in str(raised.value)
    assert stand_ins.requests == []
