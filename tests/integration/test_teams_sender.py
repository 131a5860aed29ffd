"""The Teams sender (adapters/teams.py) over real HTTP to the Teams stand-in: a card is accepted (202) and shown,
throttling is retried, and what Teams refuses (a wrong signature, a card off the schema, a message too large)
fails permanently, saying why, with the URL's signature in no record."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest

from fault_responder.adapters.http import HttpResponse, HttpSession, RetryPolicy
from fault_responder.adapters.teams import TeamsWebhook, _connector_failure, post_card, webhook_url
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.teams import TeamsMessage, render_incident
from sandbox.standin_teams import TEAMS_SIG
from sandbox.standins import StandIns
from tests.builders import an_incident, draining

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)


@pytest.fixture
def session() -> Iterator[HttpSession]:
    session = HttpSession()
    yield session
    session.close()


def test_each_step_posts_a_card_that_teams_shows_and_no_record_holds_the_signature(session: HttpSession) -> None:
    incident = draining(an_incident())
    secret = {"webhook_urls": {"oncall": None}}
    with StandIns() as standins:
        secret["webhook_urls"]["oncall"] = standins.teams_webhook_url
        url = webhook_url(secret, "oncall")
        webhook = TeamsWebhook(url, session, FAST, sleep=lambda _: None)
        for entry in incident.timeline:
            webhook.post(render_incident(incident, entry))

        shown = standins.teams_messages()
        requests = standins.requests

    assert [message["cards"] for message in shown] == [
        [render_incident(incident, entry).card] for entry in incident.timeline
    ]
    assert [(request["service"], request["status"]) for request in requests] == [("teams", 202), ("teams", 202)]
    assert TEAMS_SIG not in repr(requests)


def test_throttling_is_retried_and_a_server_that_stays_down_fails_retryably(session: HttpSession) -> None:
    message = render_incident(an_incident())
    waits: list[float] = []
    with StandIns(faults={"teams": [429, {"pass": 1}, {"fail": 500, "times": 3}]}) as standins:
        post_card(standins.teams_webhook_url, message, session=session, policy=FAST, sleep=waits.append)
        with pytest.raises(DeliveryError) as failed:
            post_card(standins.teams_webhook_url, message, session=session, policy=FAST, sleep=waits.append)
        accepted = len(standins.teams_messages())

    assert accepted == 1 and waits[0] == 1.0  # the stand-in's Retry-After
    assert (failed.value.service, failed.value.status, failed.value.retryable) == ("teams", 500, True)


def test_what_teams_refuses_fails_permanently_saying_why(session: HttpSession) -> None:
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
                post_card(url, TeamsMessage(payload), session=session, policy=FAST, sleep=lambda _: None)
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
