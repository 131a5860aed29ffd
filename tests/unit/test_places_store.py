"""The accounts and Regions whose events were seen (fault_responder.adapters.places_store), in moto's incidents table:
one item per pair, written at most once a minute per pair whatever the containers, read back by the reconciliation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.places_store import NOTE_SECONDS, RETENTION, DynamoDBPlacesStore
from fault_responder.core.places import Place
from tests.integration.tables import create_incidents_table

TABLE = "incidents"
MEMBER = Place("222222222222", "us-west-2")


class Clock:
    def __init__(self) -> None:
        self.now = 1_790_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, TABLE)
        yield client


def test_a_pair_is_written_at_most_once_a_minute_across_containers(dynamodb: Any) -> None:
    clock = Clock()
    one, other = DynamoDBPlacesStore(TABLE, dynamodb, clock=clock), DynamoDBPlacesStore(TABLE, dynamodb, clock=clock)

    assert one.note(MEMBER)
    assert not one.note(MEMBER)  # this container wrote it within the minute: no call at all
    assert not other.note(MEMBER)  # another container: its conditional write finds it a minute fresh
    clock.now += NOTE_SECONDS + 1
    assert other.note(MEMBER)
    assert one.writes + other.writes == 2

    [item] = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="pk = :pk", ExpressionAttributeValues={":pk": {"S": "PLACE"}}
    )["Items"]
    assert item["sk"] == {"S": "222222222222#us-west-2"}
    assert item["expires_at"] == {"N": str(int(clock.now + RETENTION.total_seconds()))}


def test_the_pairs_seen_are_read_back_and_an_expired_one_is_not(dynamodb: Any) -> None:
    clock = Clock()
    store = DynamoDBPlacesStore(TABLE, dynamodb, clock=clock)
    store.note(MEMBER)
    clock.now += 2 * 86_400
    store.note(Place("333333333333", "eu-west-1"))
    dynamodb.put_item(TableName=TABLE, Item={"pk": {"S": "PLACE"}, "sk": {"S": "damaged"}})

    assert [place for place, _ in store.seen(100)] == [MEMBER, Place("333333333333", "eu-west-1")]
    assert len(store.seen(1)) == 1
    clock.now += RETENTION.total_seconds() - 86_400
    assert [place for place, _ in store.seen(100)] == [Place("333333333333", "eu-west-1")]
