"""The Teams sender (notification/receivers/teams/client.py, through SecretChannels' generic port) over real HTTP to
the Teams stand-in: a card is accepted (202) and shown, throttling is retried, and what Teams refuses (a wrong
signature, a card off the schema, a message too large) fails permanently, saying why, with the URL's signature in no
record; a URL replaced in the secret is read again."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from fault_responder.adapters.http import HttpResponse, RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.delivery import Courier
from fault_responder.notification.receivers.teams import TeamsMessage, render_incident
from fault_responder.notification.receivers.teams.client import TeamsWebhook, _connector_failure, post_card, webhook_url
from fault_responder.routing.router import Router, RoutingConfig
from sandbox.standin_teams import TEAMS_SIG
from sandbox.standins import StandIns
from tests.builders import an_incident, draining
from tests.conftest import load_event

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)


def channels(sleep: Callable[[float], None], secret: Any = None) -> SecretChannels:
    """The channels the router builds, with the Teams secret `secret` and `sleep` for the waits between attempts."""
    return SecretChannels(
        fetch_secret=lambda name, force: secret,
        slack_secret_name="slack",
        pagerduty_secret_name="pagerduty",
        receiver_secrets={"teams": "teams"},
        policy=FAST,
        sleep=sleep,
    )


def test_each_step_posts_a_card_that_teams_shows_and_no_record_holds_the_signature() -> None:
    incident = draining(an_incident())
    secret = {"webhook_urls": {"oncall": None}}
    with StandIns() as standins:
        secret["webhook_urls"]["oncall"] = standins.teams_webhook_url
        url = webhook_url(secret, "oncall")
        assert url == standins.teams_webhook_url
        webhook = TeamsWebhook(channels(lambda _: None, secret), "oncall")
        for entry in incident.timeline:
            webhook.post(render_incident(incident, entry))

        shown = standins.teams_messages()
        requests = standins.requests

    assert [message["cards"] for message in shown] == [
        [render_incident(incident, entry).card] for entry in incident.timeline
    ]
    assert [(request["service"], request["status"]) for request in requests] == [("teams", 202), ("teams", 202)]
    assert TEAMS_SIG not in repr(requests)


def test_throttling_is_retried_and_a_server_that_stays_down_fails_retryably() -> None:
    message = render_incident(an_incident())
    waits: list[float] = []
    with StandIns(faults={"teams": [429, {"pass": 1}, {"fail": 500, "times": 3}]}) as standins:
        post_card(channels(waits.append), standins.teams_webhook_url, message)
        with pytest.raises(DeliveryError) as failed:
            post_card(channels(waits.append), standins.teams_webhook_url, message)
        accepted = len(standins.teams_messages())

    assert accepted == 1 and waits[0] == 1.0  # the stand-in's Retry-After
    assert (failed.value.service, failed.value.status, failed.value.retryable) == ("teams", 500, True)


def test_what_teams_refuses_fails_permanently_saying_why() -> None:
    good = render_incident(an_incident())
    off_schema = copy.deepcopy(good.payload)
    off_schema["attachments"][0]["content"]["msteams"] = {"width": "Full"}
    too_large = copy.deepcopy(good.payload)
    too_large["attachments"][0]["content"]["body"].append({"type": "TextBlock", "text": "x" * 40_000})
    with StandIns() as standins:
        unsigned = standins.teams_webhook_url.replace(f"sig={TEAMS_SIG}", "sig=wrong")
        failures = {}
        for name, url, payload in (
            ("signature", unsigned, good.payload),
            ("schema", standins.teams_webhook_url, off_schema),
            ("size", standins.teams_webhook_url, too_large),
        ):
            with pytest.raises(DeliveryError) as failed:
                post_card(channels(lambda _: None), url, TeamsMessage(payload))
            failures[name] = failed.value
        attempts = len(standins.requests)

    assert {name: (error.status, error.retryable) for name, error in failures.items()} == {
        "signature": (401, False),
        "schema": (400, False),
        "size": (413, False),
    }
    assert "msteams" in str(failures["schema"]) and attempts == 3  # none retried
    assert TEAMS_SIG not in str(failures["signature"])


def test_a_retired_connectors_200_error_is_not_taken_for_delivered() -> None:
    def answer(text: str) -> HttpResponse:
        return HttpResponse(200, "OK", {}, text.encode())

    throttled = answer("Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 429")
    refused = answer("Webhook message delivery failed with error: Microsoft Teams endpoint returned HTTP error 400")

    assert _connector_failure(throttled) == (True, True, "Teams answered HTTP error 429")
    assert _connector_failure(refused) == (True, False, "Teams answered HTTP error 400")
    assert _connector_failure(answer("")) == (False, False, "") == _connector_failure(answer("1"))


def test_the_secret_names_each_url_and_a_missing_one_says_which_without_any_value() -> None:
    secret = {"webhook_urls": {"oncall": "https://example.invalid/workflows/1?sig=secret-value"}}

    assert webhook_url(secret, "oncall").endswith("sig=secret-value")
    for broken, name in (({"webhook_urls": {"oncall": "secret-value"}}, "oncall"), (secret, "training")):
        with pytest.raises(DeliveryError) as failed:
            webhook_url(broken, name)
        assert not failed.value.retryable and "secret-value" not in str(failed.value)


def test_a_url_replaced_in_the_secret_is_read_again_after_a_401_and_the_card_goes_through() -> None:
    # Given a router whose cached Teams secret holds a URL whose signature was replaced (a new flow)
    routing = RoutingConfig.model_validate(
        {"receivers": {"ops": {"teams": {"webhook": "oncall"}}}, "routes": [{"name": "all", "receivers": ["ops"]}]}
    )
    reads: list[bool] = []
    with StandIns() as standins:
        stale = standins.teams_webhook_url.replace(f"sig={TEAMS_SIG}", "sig=revoked")

        def fetch(name: str, force: bool) -> Any:
            reads.append(force)
            return {"webhook_urls": {"oncall": standins.teams_webhook_url if force else stale}}

        secret_channels = SecretChannels(
            fetch_secret=fetch,
            slack_secret_name="slack",
            pagerduty_secret_name="pagerduty",
            receiver_secrets={"teams": "gpu-fault-responder/teams"},
            policy=FAST,
        )
        store = MemoryInstanceStore()
        service = AlertService(
            StorePorts(store, store, store),
            Router(routing),
            Courier(secret_channels, clock=lambda: datetime.now(UTC)),
            lifecycle.Settings(),
        )
        # When a fault arrives
        service.handle(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
        statuses = [request["status"] for request in standins.requests]
        shown = standins.teams_messages()

    # Then Teams refused the old URL once, the secret was read again, and the card was posted with the new one
    assert statuses == [401, 202] and reads == [False, True]
    assert len(shown) == 1
