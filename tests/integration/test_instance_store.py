"""DynamoDBInstanceStore against moto's DynamoDB (in process): conditional writes, the fast path, leases,
keys and item sizes at DynamoDB's limits."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore, instance_pk
from fault_responder.domain import FaultClass, FleetMember, InstanceRef, Severity
from fault_responder.fleet import group_arn
from fault_responder.record import (
    Delivery,
    EventFacts,
    HealthFact,
    InstanceRecord,
    KnownIncident,
    Lease,
    ReportedAction,
    StatusFact,
    TaskStopFact,
)
from fault_responder.store import ConcurrentUpdateError, LeaseLostError
from tests.conftest import incidents_table

TABLE = "incidents"
ARN = "arn:aws:ecs:us-west-2:123456789012:container-instance/gpu/abc123"
AT = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)
INSTANCE = InstanceRef("us-west-2", "123456789012", "arn:aws:ecs:us-west-2:123456789012:cluster/gpu", ARN, "i-1", "p5")


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(TableName=TABLE, **incidents_table())
        yield client


@pytest.fixture
def store(dynamodb: Any) -> DynamoDBInstanceStore:
    return DynamoDBInstanceStore(TABLE, timedelta(days=30), dynamodb)


def impaired(check: str = "ACCELERATED_COMPUTE", minutes: int = 0, reason: str | None = "XID_79") -> EventFacts:
    fact = HealthFact(check, "IMPAIRED", AT + timedelta(minutes=minutes), f"evt-{check}-{minutes}", reason)
    return EventFacts(fact.event_id, INSTANCE, health=(fact,))


def record_with(*facts: EventFacts, arn: str = ARN) -> InstanceRecord:
    record = InstanceRecord(arn, dataclasses.replace(INSTANCE, container_instance_arn=arn))
    for item in facts:
        record.add(item)
    return record


def lease(receiver: str = "gpu-alerts", owner: str = "me", seconds: float = 60) -> Lease:
    return Lease(receiver, owner, time.time() + seconds)


# --- Facts and incidents ------------------------------------------------------------------------------


def test_a_record_written_reads_back_the_same(store: DynamoDBInstanceStore) -> None:
    record = record_with(impaired(), impaired("DAEMON", 1, "Daemon task unhealthy"))
    record.add(EventFacts("evt-s", INSTANCE, status=StatusFact("DRAINING", AT, "evt-s", version=3, reason="x")))
    record.add(
        EventFacts("evt-t", INSTANCE, task=TaskStopFact("arn:task/1", AT, "evt-t", "train", "drained", drained=True))
    )
    record.incidents["ACCELERATED_COMPUTE"] = [
        KnownIncident("gpu/abc123/ACCELERATED_COMPUTE@x", "ACCELERATED_COMPUTE", AT)
    ]

    committed = store.commit(record)

    loaded = store.load(ARN)
    assert loaded is not None
    assert (loaded.version, committed.record.version) == (1, 1)
    assert (loaded.health, loaded.statuses, loaded.tasks, loaded.incidents) == (
        record.health,
        record.statuses,
        record.tasks,
        record.incidents,
    )


def test_a_write_from_a_stale_read_is_refused_with_what_is_stored(store: DynamoDBInstanceStore) -> None:
    store.commit(record_with(impaired()))
    first, second = store.load(ARN), store.load(ARN)
    assert first is not None and second is not None
    store.commit(first)

    with pytest.raises(ConcurrentUpdateError) as conflict:
        store.commit(second)

    assert conflict.value.stored is not None and conflict.value.stored.version == 2


def test_the_fast_path_writes_a_new_check_without_reading(store: DynamoDBInstanceStore, dynamodb: Any) -> None:
    # Given nothing stored, When a new fault is written blind, Then it is there; and a second check adds to it
    store.commit_checks(record_with(impaired()), ["ACCELERATED_COMPUTE"])
    committed = store.commit_checks(record_with(impaired("DAEMON", 1)), ["DAEMON"])

    assert sorted(committed.record.health) == ["ACCELERATED_COMPUTE", "DAEMON"]
    assert committed.record.version == 2


def test_the_fast_path_is_refused_when_the_check_already_has_facts(store: DynamoDBInstanceStore) -> None:
    store.commit_checks(record_with(impaired()), ["ACCELERATED_COMPUTE"])

    with pytest.raises(ConcurrentUpdateError) as conflict:
        store.commit_checks(record_with(impaired(minutes=5)), ["ACCELERATED_COMPUTE"])

    assert conflict.value.stored is not None and len(conflict.value.stored.health["ACCELERATED_COMPUTE"]) == 1


def test_the_fast_path_is_refused_when_the_instance_has_instance_level_facts(store: DynamoDBInstanceStore) -> None:
    drained = record_with()
    drained.add(EventFacts("evt-s", INSTANCE, status=StatusFact("INACTIVE", AT, "evt-s", version=9)))
    store.commit(drained)

    with pytest.raises(ConcurrentUpdateError):
        store.commit_checks(record_with(impaired()), ["ACCELERATED_COMPUTE"])


def test_every_record_expires_and_one_with_an_open_incident_later(store: DynamoDBInstanceStore, dynamodb: Any) -> None:
    closed = record_with(impaired())
    store.commit(closed)
    open_one = record_with(impaired(), arn=ARN + "-2")
    open_one.incidents["ACCELERATED_COMPUTE"] = [KnownIncident("x", "ACCELERATED_COMPUTE", AT, status="OPEN")]
    store.commit(open_one)

    expiry = {item["pk"]["S"]: int(item["expires_at"]["N"]) for item in dynamodb.scan(TableName=TABLE)["Items"]}
    now = time.time()
    assert 29 * 86400 < expiry[instance_pk(ARN)] - now <= 30 * 86400
    assert expiry[instance_pk(ARN + "-2")] - now > 89 * 86400


# --- Limits --------------------------------------------------------------------------------------------


def test_an_arn_longer_than_a_partition_key_is_hashed_and_reads_back(store: DynamoDBInstanceStore) -> None:
    arn = ARN + "x" * 5_000
    store.commit(record_with(impaired(), arn=arn))

    loaded = store.load(arn)

    assert loaded is not None and loaded.arn == arn
    assert len(instance_pk(arn).encode()) < 2_048


def test_a_record_too_large_for_one_item_is_compacted_oldest_facts_first(store: DynamoDBInstanceStore) -> None:
    # Given an instance whose events filled every check's facts with long reasons: more than 400 KB
    record = record_with()
    for check in range(8):
        for minute in range(50):
            record.add(impaired(f"CHECK_{check}", minute, "r" * 900))
    assert len(json.dumps([list(map(repr, facts)) for facts in record.health.values()])) > 400_000

    # When it is written, Then it fits (moto enforces DynamoDB's 400 KB item limit) ...
    store.commit(record)

    # ... keeping every check, the newest facts of the largest ones halved away oldest first
    loaded = store.load(ARN)
    assert loaded is not None
    assert sorted(loaded.health) == sorted(record.health)
    shortened = [check for check, facts in loaded.health.items() if len(facts) < 50]
    assert shortened
    for check in shortened:
        assert loaded.health[check][-1] == record.health[check][-1]


# --- Leases and deliveries ------------------------------------------------------------------------------


def test_a_lease_is_taken_with_the_write_only_when_free(store: DynamoDBInstanceStore) -> None:
    mine = lease(owner="worker-1")
    first = store.commit(record_with(impaired()), leases=[mine])
    again = store.load(ARN)
    assert again is not None

    second = store.commit(again, leases=[lease(owner="worker-2")])

    assert first.leases == {"gpu-alerts": mine}
    assert second.leases == {}
    assert second.record.leases["gpu-alerts"] == mine


def test_an_expired_lease_can_be_taken_a_live_one_cannot(store: DynamoDBInstanceStore) -> None:
    store.commit(record_with(impaired()), leases=[lease(owner="gone", seconds=-1)])

    assert store.take_lease(ARN, lease(owner="next"), time.time()) is True
    assert store.take_lease(ARN, lease(owner="third"), time.time()) is False


def test_only_the_lease_holder_records_deliveries(store: DynamoDBInstanceStore) -> None:
    mine = lease()
    store.commit(record_with(impaired()), leases=[mine])
    delivery = Delivery("gpu-alerts", "incident-1", channel="C1", ts="1.0")

    store.record_delivery(ARN, mine, delivery)
    with pytest.raises(LeaseLostError):
        store.record_delivery(ARN, lease(owner="someone-else"), delivery)

    loaded = store.load(ARN)
    assert loaded is not None and loaded.deliveries[("gpu-alerts", "incident-1")] == delivery


def test_a_lease_is_released_only_if_no_facts_arrived_meanwhile(store: DynamoDBInstanceStore) -> None:
    mine = lease()
    committed = store.commit(record_with(impaired()), leases=[mine])
    newer = store.load(ARN)
    assert newer is not None
    newer.add(impaired(minutes=3))
    store.commit(newer)  # another worker adds a fact after the holder last looked

    assert store.release(ARN, mine, committed.record.version) is False
    assert store.release(ARN, mine, committed.record.version + 1) is True
    loaded = store.load(ARN)
    assert loaded is not None and "gpu-alerts" not in loaded.leases


def test_forgotten_deliveries_are_removed_with_the_write(store: DynamoDBInstanceStore) -> None:
    mine = lease()
    store.commit(record_with(impaired()), leases=[mine])
    store.record_delivery(ARN, mine, Delivery("gpu-alerts", "old-incident", ts="1.0"))
    loaded = store.load(ARN)
    assert loaded is not None

    store.commit(loaded, forget=[("gpu-alerts", "old-incident")])

    after = store.load(ARN)
    assert after is not None and after.deliveries == {}


# --- People's actions and PagerDuty's dedup keys ------------------------------------------------------------


def test_actions_on_an_incident_read_back_the_same_and_close_the_fast_path(store: DynamoDBInstanceStore) -> None:
    incident = "gpu/abc123/ACCELERATED_COMPUTE@x"
    record = record_with(impaired())
    record.incidents["ACCELERATED_COMPUTE"] = [KnownIncident(incident, "ACCELERATED_COMPUTE", AT)]
    pressed = ReportedAction("slack:abc", "acknowledge", "slack", "Jane (U0JANEDOE1)", AT, incident=incident)
    assert record.add(EventFacts("slack:abc", INSTANCE, action=pressed))
    store.commit(record)

    loaded = store.load(ARN)

    assert loaded is not None and loaded.actions == record.actions
    with pytest.raises(ConcurrentUpdateError):
        store.commit_checks(record_with(impaired("DAEMON", 1)), ["DAEMON"])


def test_a_pagerduty_dedup_key_leads_back_to_its_record(store: DynamoDBInstanceStore, dynamodb: Any) -> None:
    assert store.page_record("gpu/abc123/ACCELERATED_COMPUTE") is None
    store.remember_page("gpu/abc123/ACCELERATED_COMPUTE", ARN)
    store.remember_page("gpu/abc123/ACCELERATED_COMPUTE", ARN)  # once per incident; twice is harmless

    assert store.page_record("gpu/abc123/ACCELERATED_COMPUTE") == ARN
    item = dynamodb.get_item(
        TableName=TABLE, Key={"pk": {"S": "PAGE#gpu/abc123/ACCELERATED_COMPUTE"}, "sk": {"S": "PAGE"}}
    )
    assert int(item["Item"]["expires_at"]["N"]) > time.time() + 80 * 86400  # kept as long as an open record


def test_actions_on_a_fleet_incident_are_written_with_its_identities_and_move_the_group_version(
    store: DynamoDBInstanceStore,
) -> None:
    group = (("cluster", "gpu"), ("capacity_provider", "p5"), ("check_type", "ACCELERATED_COMPUTE"))
    member = FleetMember(
        INSTANCE,
        "gpu/abc123/ACCELERATED_COMPUTE@x",
        AT,
        None,
        Severity.CRITICAL,
        FaultClass.XID_CRITICAL,
        "XID 79",
        79,
        "IMPAIRED",
        1,
    )
    stored = store.put_member(group_arn(group), group, INSTANCE, ARN, member)
    stored.incidents = [KnownIncident("fleet:fleet/gpu/p5/ACCELERATED_COMPUTE@t", "FLEET", AT)]
    stored = store.commit_fleets(stored)
    pressed = ReportedAction("slack:f1", "acknowledge", "slack", "Jane", AT, incident=stored.incidents[0].id)
    assert stored.add_action(pressed)

    committed = store.commit_fleets(stored, acted=True)

    loaded = store.load_group(group_arn(group))
    assert loaded is not None and loaded.actions == committed.actions == stored.actions
    assert loaded.version == stored.version + 1  # a lease holder reads the group again before it lets go
    with pytest.raises(ConcurrentUpdateError):
        store.commit_fleets(stored)  # written from what was read before the action: refused
