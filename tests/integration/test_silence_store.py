"""DynamoDBSilenceStore against moto's DynamoDB (in process), in the incidents table as the template defines it:
conditional add and expire, listing to the last page, retention and TTL, and living beside incident records."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.noise.silences import (
    Silence,
    SilenceAlreadyExpiredError,
    SilenceExistsError,
    SilenceState,
    UnknownSilenceError,
    new_silence,
)
from fault_responder.routing.matchers import parse_matchers
from tests.integration.tables import create_incidents_table

TABLE = "incidents"
NOW = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, TABLE)
        yield client


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(NOW)


@pytest.fixture
def store(dynamodb: Any, clock: Clock) -> DynamoDBSilenceStore:
    return DynamoDBSilenceStore(TABLE, dynamodb, clock=clock)


def a_silence(
    *matchers: str, starts: datetime | None = None, ends: datetime = NOW + HOUR, comment: str = "x"
) -> Silence:
    return new_silence(
        parse_matchers(matchers or ("cluster=gpu-training",)),
        starts_at=starts,
        ends_at=ends,
        created_by="alice",
        comment=comment,
        now=NOW,
    )


def test_a_silence_added_reads_back_the_same(store: DynamoDBSilenceStore) -> None:
    silence = a_silence("cluster=gpu-training", 'severity=~"critical|error"', "instance!=abc")

    store.add(silence)

    assert store.get(silence.id) == silence
    assert store.list() == [silence]


def test_the_item_is_keyed_and_expires_as_the_table_expects(store: DynamoDBSilenceStore, dynamodb: Any) -> None:
    silence = store.add(a_silence(ends=NOW + HOUR))

    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "SILENCE"}, "sk": {"S": silence.id}})["Item"]

    assert item["expires_at"] == {"N": str(int((NOW + HOUR + 7 * DAY).timestamp()))}
    assert item["matchers"]["L"][0]["M"] == {"name": {"S": "cluster"}, "op": {"S": "="}, "value": {"S": "gpu-training"}}
    assert item["ends_at"] == {"S": "2026-11-01T09:00:00Z"}


def test_adding_a_silence_whose_id_is_taken_is_refused(store: DynamoDBSilenceStore) -> None:
    silence = store.add(a_silence(comment="first"))

    with pytest.raises(SilenceExistsError, match=silence.id):
        store.add(Silence(silence.id, silence.matchers, NOW, NOW + HOUR, "bob", "second", NOW))

    stored = store.get(silence.id)
    assert stored is not None and stored.comment == "first"


def test_an_unknown_id_reads_as_none(store: DynamoDBSilenceStore) -> None:
    assert store.get("0123456789abcdef") is None


def test_list_leaves_out_expired_silences_unless_asked(store: DynamoDBSilenceStore, clock: Clock) -> None:
    # Given a silence ending in an hour, one in three, and one starting in two hours
    short = store.add(a_silence(ends=NOW + HOUR, comment="short"))
    long = store.add(a_silence(ends=NOW + 3 * HOUR, comment="long"))
    later = store.add(a_silence(starts=NOW + 2 * HOUR, ends=NOW + 4 * HOUR, comment="later"))

    # When two hours have passed
    clock.now = NOW + 2 * HOUR

    # Then the short one is listed only with include_expired, and active() has the long and the later one
    assert {silence.comment for silence in store.list()} == {"long", "later"}
    assert {silence.comment for silence in store.list(include_expired=True)} == {"short", "long", "later"}
    assert {silence.id for silence in store.active(NOW + 2 * HOUR)} == {long.id, later.id}
    assert {silence.id for silence in store.active(NOW)} == {short.id, long.id}
    assert store.list(now=NOW + 5 * HOUR) == []


def test_list_reads_every_page(dynamodb: Any, clock: Clock) -> None:
    # Given seven silences, and a store reading two items a page
    paged = DynamoDBSilenceStore(TABLE, dynamodb, clock=clock, page_size=2)
    added = {paged.add(a_silence(comment=f"silence {n}")).id for n in range(7)}

    # Then all seven are listed
    assert {silence.id for silence in paged.list()} == added


def test_silences_live_beside_incident_records(store: DynamoDBSilenceStore, dynamodb: Any) -> None:
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "INSTANCE#arn:x"}, "sk": {"S": "RECORD"}})
    silence = store.add(a_silence())

    assert store.list() == [silence]


def test_expiring_an_active_silence_ends_it_now_and_keeps_it_for_the_retention_period(
    store: DynamoDBSilenceStore, dynamodb: Any, clock: Clock
) -> None:
    silence = store.add(a_silence(ends=NOW + 3 * HOUR))
    clock.now = NOW + HOUR

    expired = store.expire(silence.id, NOW + HOUR)

    assert (expired.starts_at, expired.ends_at) == (NOW, NOW + HOUR)
    assert expired.state(NOW + HOUR) == SilenceState.EXPIRED
    assert store.get(silence.id) == expired
    assert store.list() == []
    assert store.list(include_expired=True) == [expired]
    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "SILENCE"}, "sk": {"S": silence.id}})["Item"]
    assert item["expires_at"] == {"N": str(int((NOW + HOUR + 7 * DAY).timestamp()))}


def test_expiring_a_pending_silence_ends_it_before_it_starts(store: DynamoDBSilenceStore) -> None:
    silence = store.add(a_silence(starts=NOW + HOUR, ends=NOW + 2 * HOUR))

    expired = store.expire(silence.id, NOW)

    assert (expired.starts_at, expired.ends_at) == (NOW, NOW)


def test_expiring_twice_says_it_already_expired(store: DynamoDBSilenceStore) -> None:
    silence = store.add(a_silence())
    store.expire(silence.id, NOW + 10 * timedelta(minutes=1))

    with pytest.raises(SilenceAlreadyExpiredError, match="already expired at 2026-11-01T08:10:00Z"):
        store.expire(silence.id, NOW + HOUR)


def test_expiring_an_unknown_silence_says_so(store: DynamoDBSilenceStore) -> None:
    with pytest.raises(UnknownSilenceError, match="no silence with id 0123456789abcdef"):
        store.expire("0123456789abcdef", NOW)


def test_of_two_expiring_the_same_silence_at_once_one_succeeds(
    store: DynamoDBSilenceStore, dynamodb: Any, clock: Clock
) -> None:
    # Given a silence that another expires between this store's read and its write
    silence = store.add(a_silence(ends=NOW + 3 * HOUR))
    other = DynamoDBSilenceStore(TABLE, dynamodb, clock=clock)
    original_get = store.get

    def read_then_lose_the_race(silence_id: str) -> Silence | None:
        read = original_get(silence_id)
        store.get = original_get  # type: ignore[method-assign]
        other.expire(silence_id, NOW + HOUR)
        return read

    store.get = read_then_lose_the_race  # type: ignore[method-assign]

    # When this store writes, Then it is told the silence already expired (when the other one expired it)
    with pytest.raises(SilenceAlreadyExpiredError, match="already expired at 2026-11-01T09:00:00Z"):
        store.expire(silence.id, NOW + 2 * HOUR)
    stored = store.get(silence.id)
    assert stored is not None and stored.ends_at == NOW + HOUR


def test_a_silence_past_its_retention_is_gone_before_ttl_deletes_it(dynamodb: Any, clock: Clock) -> None:
    # Given a store keeping expired silences one day
    store = DynamoDBSilenceStore(TABLE, dynamodb, clock=clock, retention=DAY)
    silence = store.add(a_silence(ends=NOW + HOUR))

    # Then it is listable for a day after it ends, and not after, while the item is still there
    clock.now = NOW + HOUR + DAY - timedelta(seconds=1)
    assert store.list(include_expired=True) == [silence]
    clock.now = NOW + HOUR + DAY
    assert store.list(include_expired=True) == []
    assert store.get(silence.id) is None
    assert "Item" in dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": "SILENCE"}, "sk": {"S": silence.id}})


def test_a_negative_retention_is_refused(dynamodb: Any) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        DynamoDBSilenceStore(TABLE, dynamodb, retention=-DAY)
