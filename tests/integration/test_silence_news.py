"""Telling the channels a silence mutes that it started and ended (fault_responder.alerting.announce), with the
silences in the incidents table on moto: who is told, once, and what a sweep that takes over from one that died does.
(Sweeps running at once in real parallel processes: tests/integration/test_silence_news_parallel.py.)"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.alerting.announce import ANNOUNCE_WITHIN, Announcer
from fault_responder.core.accounts import Accounts
from fault_responder.core.domain import Incident, Where
from fault_responder.noise.silences import Muted, Phase, Silence, new_silence
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.silences import render_silence_news
from fault_responder.routing.matchers import parse_matchers
from fault_responder.routing.router import RoutingConfig
from sandbox.standins import block_errors
from tests.builders import INSTANCE, an_incident
from tests.fakes import FakeWorld
from tests.integration.tables import create_incidents_table

TABLE = "incidents"
HOME = ("123456789012", "us-east-1")
ACCOUNTS = Accounts(home=HOME, names={"123456789012": "prod-ml"})
ROUTING = RoutingConfig.model_validate(
    {
        "receivers": {
            "gpu-alerts": {"slack": {"channel": "#gpu-alerts"}},
            "training": {"slack": {"webhook": "training"}},
            "gpu-oncall": {"pagerduty": {"service": "gpu-oncall"}},
            "elsewhere": {"slack": {"channel": "#elsewhere"}},
        },
        "routes": [{"name": "all", "receivers": ["gpu-alerts", "training", "gpu-oncall"]}],
    }
)


class Died(BaseException):
    """The sweep's Lambda ends in the middle of a step (a timeout, a crash): nothing after it runs."""


class Channels(FakeWorld):
    """Slack (with the messages' metadata, as find_message reads it), webhooks, and a way to die right after a post."""

    def __init__(self) -> None:
        super().__init__()
        self.hooked: list[tuple[str, str]] = []
        self.die_after_post = False
        self.refuse = False

    def post_message(
        self, channel: str, message: SlackMessage, thread_ts: str | None = None, metadata: Any = None
    ) -> Any:
        if self.refuse:
            raise DeliveryError("slack", 200, "channel_not_found", retryable=False)
        posted = super().post_message(channel, message, thread_ts, metadata)
        if self.die_after_post:
            raise Died
        return posted

    def slack_webhook(self, name: str) -> Any:
        channels = self

        class Hook:
            def post(self, message: SlackMessage) -> None:
                channels.hooked.append((name, message.text))
                if channels.die_after_post:
                    raise Died

        return Hook()

    def news(self) -> list[str]:
        return [m.marker or "" for m in self.messages if m.kind == "gpu_fault_silence_news"]


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now

    def epoch(self) -> float:
        return self.now.timestamp()


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[DynamoDBSilenceStore]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, TABLE)
        yield DynamoDBSilenceStore(TABLE, client)


def incident(
    cluster: str = "gpu-training", receivers: tuple[str, ...] = ("gpu-alerts", "training", "gpu-oncall")
) -> Incident:
    found = an_incident()
    found.instance = dataclasses.replace(INSTANCE, cluster_arn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{cluster}")
    found.receivers = list(receivers)
    found.where = Where("123456789012", "us-west-2", "prod-ml")
    return found


def silence(clock: Clock, *matchers: str, started: timedelta = timedelta(0)) -> Silence:
    return new_silence(
        parse_matchers(matchers or ("cluster=gpu-training",)),
        ends_at=clock.now + timedelta(hours=2),
        created_by="alice",
        comment="rack work",
        now=clock.now - started,
    )


def announcer(store: DynamoDBSilenceStore, channels: Channels, clock: Clock, incidents: list[Incident]) -> Announcer:
    return Announcer(
        store, channels, dict(ROUTING.receivers), lambda: incidents, ACCOUNTS, clock=clock, epoch=clock.epoch
    )


def test_a_silence_is_told_once_where_it_mutes_slack_only_and_its_end_where_its_start_was(
    store: DynamoDBSilenceStore,
) -> None:
    clock, channels = Clock(), Channels()
    made = store.add(silence(clock))
    open_now = [incident(), incident("other-cluster", ("elsewhere",))]

    first = announcer(store, channels, clock, open_now).run(seconds_left=60)
    again = announcer(store, channels, clock, open_now).run(seconds_left=60)

    # The start: once, in the Slack channel and the webhook of the incident it matches; PagerDuty is not told, nor
    # the channel of an incident it does not match
    assert (first, again) == ({"silences_told": 1, "silences_left": 0}, {"silences_told": 0, "silences_left": 0})
    assert channels.news() == [f"silence:{made.id}:started"]
    assert [name for name, _ in channels.hooked] == ["training"]
    assert channels.alerts == []
    [posted] = channels.messages
    assert "prod-ml (123456789012), us-west-2: 1" in str(posted.blocks)

    # The end: to those told of its start, though nothing it matches is open any more
    clock.now += timedelta(minutes=30)
    store.expire(made.id, clock.now)
    clock.now += timedelta(minutes=1)
    announcer(store, channels, clock, []).run(seconds_left=60)
    announcer(store, channels, clock, []).run(seconds_left=60)
    assert channels.news() == [f"silence:{made.id}:started", f"silence:{made.id}:ended"]
    assert [name for name, _ in channels.hooked] == ["training", "training"]


def test_a_sweep_that_died_after_posting_is_taken_over_and_nothing_is_posted_twice(
    store: DynamoDBSilenceStore,
) -> None:
    clock, channels = Clock(), Channels()
    made = store.add(silence(clock))

    # Given a sweep that posted to the Slack channel and died before recording it
    channels.die_after_post = True
    with pytest.raises(Died):
        announcer(store, channels, clock, [incident()]).run(seconds_left=60)
    channels.die_after_post = False

    # When the next sweep runs while its claim holds, nothing is done; once it has lapsed, the next takes over
    assert announcer(store, channels, clock, [incident()]).run(seconds_left=60)["silences_told"] == 0
    clock.now += timedelta(seconds=61)
    announcer(store, channels, clock, [incident()]).run(seconds_left=60)

    # Then the channel has the one message (found by its marker, not posted again); the webhook is told once
    assert channels.news() == [f"silence:{made.id}:started"]
    assert [name for name, _ in channels.hooked] == ["training"]


def test_a_webhook_whose_posts_outcome_is_unknown_is_not_posted_to_again(store: DynamoDBSilenceStore) -> None:
    clock, channels = Clock(), Channels()
    store.add(silence(clock))
    only_webhook = [incident(receivers=("training",))]

    channels.die_after_post = True
    with pytest.raises(Died):
        announcer(store, channels, clock, only_webhook).run(seconds_left=60)
    channels.die_after_post = False
    clock.now += timedelta(seconds=61)
    announcer(store, channels, clock, only_webhook).run(seconds_left=60)

    assert [name for name, _ in channels.hooked] == ["training"]


def test_a_post_refused_is_tried_again_at_the_next_run(store: DynamoDBSilenceStore) -> None:
    clock, channels = Clock(), Channels()
    made = store.add(silence(clock))
    channels.refuse = True

    assert announcer(store, channels, clock, [incident()]).run(seconds_left=60)["silences_left"] == 1
    channels.refuse = False
    announcer(store, channels, clock, [incident()]).run(seconds_left=60)

    assert channels.news() == [f"silence:{made.id}:started"]


def test_old_news_and_a_silence_that_mutes_nothing_are_told_nowhere(store: DynamoDBSilenceStore) -> None:
    clock, channels = Clock(), Channels()
    store.add(silence(clock, started=ANNOUNCE_WITHIN + timedelta(minutes=1)))  # started before anyone could tell it
    quiet = store.add(silence(clock, "cluster=nothing-open"))

    told = announcer(store, channels, clock, [incident()]).run(seconds_left=60)

    assert told == {"silences_told": 1, "silences_left": 0}
    assert channels.messages == [] and channels.hooked == []
    [(_, announced)] = [(s, a) for s, a in store.announcements(clock.now, ANNOUNCE_WITHIN) if s.id == quiet.id]
    assert announced[Phase.STARTED].done and announced[Phase.STARTED].receivers == ()


def test_the_news_of_the_largest_silence_and_of_many_places_keeps_slacks_limits() -> None:
    clock = Clock()
    matchers = [f'instance=~"{"&<>*|" * 51}"'] + [f'cluster=~"{chr(65 + n)}{"`~_" * 85}"' for n in range(19)]
    largest = new_silence(
        parse_matchers(matchers),
        ends_at=clock.now + timedelta(days=7),
        created_by="@channel <!here> " + "x" * 80,
        comment="&amp; *bold* " + "y" * 480,
        now=clock.now,
    )
    muted = [
        Muted(
            f"{'z' * 200}/{n}@2026-11-06T16:02:11+00:00", f"name-{n % 30} ({n % 30:012d}), us-west-2", ("gpu-alerts",)
        )
        for n in range(300)
    ]

    for phase in Phase:
        message = render_silence_news(largest, phase, muted, dashboard_url="https://example.com/dashboard")
        assert block_errors(message.blocks) == []
        assert len(message.text) <= 40_000
        texts = json.dumps(message.blocks)
        assert "@channel" not in texts.replace("&lt;!here&gt;", "")  # escaped: never a mention
        # the places it does not list are counted
        assert "more accounts and Regions (or clusters) not listed here" in texts
