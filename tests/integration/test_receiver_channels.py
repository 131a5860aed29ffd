"""The port every receiver kind's own client sends through (notification/contract.py ReceiverChannels): the kind's
secret from Secrets Manager (moto), by the name the stack gives that kind, cached until refreshed; a JSON POST over
real HTTP to the stand-ins under the stack's retry policy; and the dry run's channels, which read no secret and send
nothing."""

from __future__ import annotations

import inspect
import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.http import RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.notification.contract import DeliveryError, PostAnswer, ReceiverChannels
from fault_responder.notification.delivery import Channels
from fault_responder.notification.dryrun import DRY_RUN_HOST, RecordingChannels
from fault_responder.notification.receivers.teams import render_incident
from fault_responder.notification.receivers.webhook.payload import Change
from fault_responder.notification.receivers.webhook.payload import render_incident as webhook_payload
from fault_responder.notification.receivers.webhook.signing import signature_headers
from fault_responder.wiring.alert_router import RouterSettings
from sandbox.standin_teams import TEAMS_SIG
from sandbox.standin_webhook import SANDBOX_WEBHOOK_SECRET
from sandbox.standins import StandIns
from tests.builders import an_incident

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)
TEAMS_SECRET = "gpu-fault-responder/teams"


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        yield boto3.client("secretsmanager", region_name="us-east-1")


def channels_over(client: Any, reads: list[tuple[str, bool]], **receiver_secrets: str) -> SecretChannels:
    def fetch(name: str, force: bool) -> Any:
        reads.append((name, force))
        return json.loads(client.get_secret_value(SecretId=name)["SecretString"])

    return SecretChannels(
        fetch_secret=fetch,
        slack_secret_name="slack",
        pagerduty_secret_name="pagerduty",
        receiver_secrets=receiver_secrets,
        policy=FAST,
    )


def test_a_kinds_secret_is_read_by_the_name_the_stack_gives_it_cached_until_refreshed(secrets: Any) -> None:
    # Given a Teams secret in Secrets Manager, named for the teams kind
    secrets.create_secret(Name=TEAMS_SECRET, SecretString=json.dumps({"webhook_urls": {"ops": "https://a"}}))
    reads: list[tuple[str, bool]] = []
    channels = channels_over(secrets, reads, teams=TEAMS_SECRET)

    # When it is read twice, rotated, read again, then refreshed
    first = channels.secret("teams")
    again = channels.secret("teams")
    secrets.put_secret_value(SecretId=TEAMS_SECRET, SecretString=json.dumps({"webhook_urls": {"ops": "https://b"}}))
    cached = channels.secret("teams")
    channels.refresh("teams")
    rotated = channels.secret("teams")

    # Then it was fetched once until the refresh forced a fresh read, and then shows the rotated value
    assert first == again == cached == {"webhook_urls": {"ops": "https://a"}}
    assert rotated == {"webhook_urls": {"ops": "https://b"}}
    assert reads == [(TEAMS_SECRET, False), (TEAMS_SECRET, True)]
    with pytest.raises(TypeError):
        first["webhook_urls"] = {}  # type: ignore[index]  # a read-only view: no caller changes the cache


def test_a_kind_the_stack_names_no_secret_for_fails_permanently_and_an_unreadable_one_retryably(secrets: Any) -> None:
    secrets.create_secret(Name="not-an-object", SecretString=json.dumps(["https://hooks.example/abc"]))
    channels = channels_over(secrets, [], teams="", webhook="missing-secret", other="not-an-object")

    with pytest.raises(DeliveryError) as unnamed:
        channels.secret("teams")  # its parameter left empty: the kind is unused
    with pytest.raises(DeliveryError) as unreadable:
        channels.secret("webhook")
    with pytest.raises(DeliveryError) as wrong:
        channels.secret("other")

    assert (unnamed.value.service, unnamed.value.retryable) == ("teams", False)
    assert "names no teams secret" in str(unnamed.value)
    assert (unreadable.value.service, unreadable.value.retryable) == ("webhook", True)
    assert "cannot read secret 'missing-secret' (ResourceNotFoundException)" in str(unreadable.value)
    assert (wrong.value.service, wrong.value.retryable) == ("other", False)
    assert "not a JSON object" in str(wrong.value) and "hooks.example" not in str(wrong.value)


def test_a_post_goes_out_as_json_and_a_refusal_is_a_delivery_error_of_the_kind_naming_no_url(secrets: Any) -> None:
    channels = channels_over(secrets, [])
    card = render_incident(an_incident()).payload
    with StandIns() as standins:
        answer = channels.post_json("teams", standins.teams_webhook_url, card, idempotent=False)
        wrong_sig = standins.teams_webhook_url.replace(TEAMS_SIG, "wrong")
        with pytest.raises(DeliveryError) as refused:
            channels.post_json("teams", wrong_sig, card, idempotent=False)
        shown = standins.teams_messages()

    assert (answer.status, answer.body) == (202, b"")
    assert [message["cards"] for message in shown] == [[card["attachments"][0]["content"]]]
    assert (refused.value.service, refused.value.status, refused.value.retryable) == ("teams", 401, False)
    assert TEAMS_SIG not in str(refused.value) and "wrong" not in str(refused.value)


def test_an_answer_check_reads_a_2xx_body_and_retryable_statuses_are_retried(secrets: Any) -> None:
    channels = channels_over(secrets, [])
    card = render_incident(an_incident()).payload
    seen: list[PostAnswer] = []

    def throttled_in_the_body(answer: PostAnswer) -> tuple[bool, str] | None:
        seen.append(answer)
        return (True, "throttled, said the body") if len(seen) == 1 else None

    with StandIns(faults={"teams": [408, 408]}) as standins:
        with pytest.raises(DeliveryError) as not_retried:
            channels.post_json("teams", standins.teams_webhook_url, card)
        answer = channels.post_json(
            "teams",
            standins.teams_webhook_url,
            card,
            retryable_statuses=frozenset({408}),
            is_failure=throttled_in_the_body,
        )
        accepted = len(standins.teams_messages())

    # Then a 408 fails at once unless the kind says it is retryable; a 2xx the check calls a failure is retried too
    assert (not_retried.value.status, not_retried.value.retryable) == (408, False)
    assert answer.status == 202 and [a.status for a in seen] == [202, 202]
    assert accepted == 2  # the stand-in accepted both posts the check was shown


def test_a_signed_post_carries_headers_made_from_the_exact_body_it_sends(secrets: Any) -> None:
    channels = channels_over(secrets, [])
    payload = webhook_payload(an_incident(), receiver="ops-tool", change=Change.OPENED)
    bodies: list[bytes] = []

    def sign(body: bytes) -> dict[str, str]:
        bodies.append(body)
        return signature_headers([SANDBOX_WEBHOOK_SECRET], int(time.time()), body)

    with StandIns() as standins:
        answer = channels.post_json("webhook", standins.webhook_url(), payload, sign=sign)
        received = standins.webhook.received

    # Then the consumer verified the signature over the body it got, which is the body signed
    assert answer.status == 200 and json.loads(bodies[0]) == payload
    assert [r["payload"] for r in received] == [payload]


def test_the_dry_run_reads_a_placeholder_secret_and_records_each_post_with_its_payload() -> None:
    channels = RecordingChannels()
    secret = channels.secret("teams")
    url = secret["webhook_urls"]["ops"]
    card = render_incident(an_incident()).payload

    answer = channels.post_json("teams", url, card, idempotent=False)

    assert url == f"https://teams.{DRY_RUN_HOST}/webhook_urls/ops" and isinstance(url, str)
    assert "any-key" in secret and secret.get("webhook_urls") == f"https://teams.{DRY_RUN_HOST}/webhook_urls"
    assert answer.status == 202
    [sent] = channels.sent
    assert (sent.service, sent.action, sent.target) == ("teams", "post", url)
    assert sent.payload == card and json.loads(sent.body) == card
    assert sent.text and sent.text in json.dumps(card, ensure_ascii=False)


def test_both_channels_offer_the_port_as_it_is_declared_and_the_stack_gives_each_kind_its_secret_name() -> None:
    for method in ("secret", "post_json", "refresh"):
        declared = list(inspect.signature(getattr(ReceiverChannels, method)).parameters)
        for channels in (SecretChannels, RecordingChannels):
            offered = list(inspect.signature(getattr(channels, method)).parameters)
            assert offered[1:] == declared[1:] or offered[1] == "service", (channels, method)
        assert method in dir(Channels)
    base = {"INCIDENTS_TABLE": "t", "SLACK_SECRET_NAME": "s", "PAGERDUTY_SECRET_NAME": "p", "ALERT_DLQ_URL": "q"}
    named = RouterSettings.model_validate({**base, "RECEIVER_SECRETS": '{"teams": "ms/teams", "webhook": ""}'})
    assert named.receiver_secrets == {"teams": "ms/teams"}
    assert RouterSettings.model_validate(base).receiver_secrets == {}
    with pytest.raises(ValueError, match="RECEIVER_SECRETS is not JSON"):
        RouterSettings.model_validate({**base, "RECEIVER_SECRETS": "teams=ms/teams"})
