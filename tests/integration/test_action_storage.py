"""People's actions in the incidents table (DynamoDBInstanceStore against moto's DynamoDB, in process): an action is
stored as it named its incident, and an item written before the dedup key was kept reads back as it was."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from boto3.dynamodb.types import TypeDeserializer
from moto import mock_aws

from fault_responder.adapters.dynamodb_store import SK, DynamoDBInstanceStore, instance_pk
from fault_responder.incidents.record import ActionFact, EventFacts, ReportedAction
from tests.conftest import incidents_table
from tests.integration.test_instance_store import ARN, AT, INSTANCE, TABLE, impaired, record_with


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, **incidents_table())
        yield client


@pytest.fixture
def store(dynamodb: Any) -> DynamoDBInstanceStore:
    return DynamoDBInstanceStore(TABLE, timedelta(days=30), dynamodb)


INCIDENT = "gpu/abc123/ACCELERATED_COMPUTE@2026-11-01T08:00:00+00:00"


def stored_actions(dynamodb: Any) -> list[dict[str, Any]]:
    item = dynamodb.get_item(TableName=TABLE, Key={"pk": {"S": instance_pk(ARN)}, "sk": {"S": SK}})["Item"]
    facts: dict[str, Any] = TypeDeserializer().deserialize(item["inst"])
    return list(facts["actions"])


def test_an_action_by_dedup_key_and_one_by_id_are_stored_as_they_named_their_incident(
    store: DynamoDBInstanceStore, dynamodb: Any
) -> None:
    # Given a record with a PagerDuty action (by dedup key) and a Slack press (by id)
    record = record_with(impaired())
    by_key = ReportedAction(
        "pagerduty:e1", "resolve", "pagerduty", "Tenex", AT, dedup_key="gpu/abc123/ACCELERATED_COMPUTE"
    )
    by_id = ReportedAction("slack:s1", "acknowledge", "slack", "Jane", AT, incident=INCIDENT)
    for action in (by_key, by_id):
        assert record.add(EventFacts(action.key, INSTANCE, action=action))
    # When it is written and read back
    store.commit(record)
    loaded = store.load(ARN)
    # Then the actions are the same, and the item holds what each named, the Slack one exactly as before
    assert loaded is not None and loaded.actions == record.actions
    key, press = sorted(stored_actions(dynamodb), key=lambda a: str(a["key"]))
    assert (key["incident"], key["dedup_key"]) == (None, "gpu/abc123/ACCELERATED_COMPUTE")
    assert set(press) == {"key", "incident", "kind", "via", "by", "at", "note"}


def test_an_action_written_before_reads_back_with_the_incident_it_was_matched_to(
    store: DynamoDBInstanceStore, dynamodb: Any
) -> None:
    # Given an item as written before: a PagerDuty action stored with the incident it was matched to on arrival
    record = record_with(impaired())
    record.actions = [ActionFact("pagerduty:e0", INCIDENT, "acknowledge", "pagerduty", "Tenex", AT)]
    store.commit(record)
    assert set(stored_actions(dynamodb)[0]) == {"key", "incident", "kind", "via", "by", "at", "note"}
    # When it is read
    loaded = store.load(ARN)
    # Then the action is as it was stored
    assert loaded is not None and loaded.actions == record.actions
    assert (loaded.actions[0].incident, loaded.actions[0].dedup_key) == (INCIDENT, None)
