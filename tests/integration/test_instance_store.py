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
from fault_responder.alerting.store import ConcurrentUpdateError, LeaseLostError, MemoryInstanceStore
from fault_responder.core.domain import FaultClass, FleetMember, InstanceRef, ResumeNote, Severity
from fault_responder.incidents.record import (
    Backoff,
    Delivery,
    EventFacts,
    HealthFact,
    InstanceRecord,
    KnownIncident,
    Lease,
    NoticeFact,
    ReportedAction,
    StatusFact,
    TaskStopFact,
)
from fault_responder.noise.fleet import (
    GroupRecord,
    JournalEntry,
    MemberWrite,
    Recent,
    Told,
    closed_identity,
    group_arn,
    opened_identity,
)
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


def test_a_held_back_notice_reads_back_with_what_it_says_and_whom_it_held_back(store: DynamoDBInstanceStore) -> None:
    # Given a notice of the resume workflow held back from both receivers (a silence), and one told to everyone
    note = ResumeNote(
        title="Resumed llm from step 300, attempt 1 of 3",
        text="Resumed llm from step 300 on i-new, attempt 1 of 3 (1 task(s), RESUME_ATTEMPT=1).",
        summary="Resumed llm from step 300, attempt 1 of 3 (XID 79 on i-1, cluster gpu)",
        severity=Severity.INFO,
        pagerduty="change",
        job_id="llm",
        held=("gpu-alerts", "gpu-oncall"),
    )
    record = record_with(impaired())
    record.add_notice(
        NoticeFact("run/Notify/llm/1", "ACCELERATED_COMPUTE", AT, AT, note.title, kind="resumed", note=note)
    )
    record.add_notice(NoticeFact("run/NotifyJobsFound/-/0", "ACCELERATED_COMPUTE", AT, AT, "1 job found"))

    # When it is written with the record kept on the sweep's list for it, and read back
    store.commit(record, listed=True)
    loaded = store.load(ARN)

    # Then both notices read back as they were, and the record is on the sweep's list
    assert loaded is not None and loaded.notices == record.notices
    assert ARN in list(store.open_records())


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


@pytest.mark.parametrize("kind", ["dynamodb", "memory"])
def test_the_last_delivery_and_the_release_are_one_write_only_if_no_facts_arrived(
    store: DynamoDBInstanceStore, kind: str
) -> None:
    chosen = {"dynamodb": store, "memory": MemoryInstanceStore()}[kind]
    mine = lease()
    committed = chosen.commit(record_with(impaired()), leases=[mine])
    chosen.back_off(ARN, mine, Backoff("gpu-alerts", 1, time.time(), time.time()))
    newer = chosen.load(ARN)
    assert newer is not None
    newer.add(impaired(minutes=3))
    chosen.commit(newer)  # another worker adds a fact after the holder last looked
    delivery = Delivery("gpu-alerts", "incident-1", channel="C1", ts="1.0")

    # Facts arrived since the holder looked: nothing is written, the lease and its backoff stay
    assert chosen.record_and_release(ARN, mine, delivery, committed.record.version) is False
    kept = chosen.load(ARN)
    assert kept is not None and ("gpu-alerts", "incident-1") not in kept.deliveries
    assert kept.leases == {"gpu-alerts": mine} and "gpu-alerts" in kept.backoff
    # None by another holder: refused as the lease's holder's writes are
    with pytest.raises(LeaseLostError):
        chosen.record_and_release(ARN, lease(owner="someone-else"), delivery, kept.version)
    # At the version the holder saw: the delivery recorded, the lease and the backoff gone, in one write
    assert chosen.record_and_release(ARN, mine, delivery, kept.version) is True
    done = chosen.load(ARN)
    assert done is not None and done.deliveries[("gpu-alerts", "incident-1")] == delivery
    assert (done.leases, done.backoff, done.version) == ({}, {}, kept.version)


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


GROUP = (("cluster", "gpu"), ("capacity_provider", "p5"), ("check_type", "ACCELERATED_COMPUTE"))


def a_member(number: int, *, minutes: int = 0, version: int = 1, closed: bool = False) -> FleetMember:
    arn = f"{ARN}{number:04d}"
    instance = dataclasses.replace(INSTANCE, container_instance_arn=arn, ec2_instance_id=f"i-{number:04d}")
    opened = AT + timedelta(minutes=minutes)
    return FleetMember(
        instance,
        f"gpu/{number}/ACCELERATED_COMPUTE@{opened.isoformat()}",
        opened,
        opened + timedelta(minutes=30) if closed else None,
        Severity.CRITICAL,
        FaultClass.XID_CRITICAL,
        "XID 79",
        79,
        "RESOLVED" if closed else "IMPAIRED",
        version,
    )


def put(store: DynamoDBInstanceStore, member: FleetMember) -> MemberWrite:
    return store.put_member(group_arn(GROUP), GROUP, INSTANCE, member.instance.container_instance_arn, member)


def a_fleet(store: DynamoDBInstanceStore, members: int = 3) -> GroupRecord:
    head = GroupRecord(group_arn(GROUP), GROUP, INSTANCE)
    for number in range(members):
        member = a_member(number, minutes=number)
        put(store, member)
        head = store.register(head.arn, GROUP, INSTANCE, member.instance.container_instance_arn, Recent.of(member))
    moment = AT + timedelta(minutes=2)
    identity = opened_identity(head, moment, timedelta(minutes=10), head.recent, now=AT)
    head.incidents, head.open_fleet, head.joined = [identity], identity.id, len(head.recent)
    return store.commit_fleets(head, forget=sorted(head.recent))


def test_members_register_among_the_recent_ones_each_seeing_those_before_until_a_fleet_opens(
    store: DynamoDBInstanceStore,
) -> None:
    arn = group_arn(GROUP)
    first = store.register(arn, GROUP, INSTANCE, f"{ARN}0001", Recent.of(a_member(1)))
    second = store.register(arn, GROUP, INSTANCE, f"{ARN}0002", Recent.of(a_member(2, minutes=1)))
    assert list(first.recent) == [f"{ARN}0001"] and sorted(second.recent) == [f"{ARN}0001", f"{ARN}0002"]
    store.forget_recent(arn, [f"{ARN}0001"])
    head = a_fleet(store)
    # Once a fleet incident is open, registering writes nothing and answers with the head as it is
    after = store.register(arn, GROUP, INSTANCE, f"{ARN}0009", Recent.of(a_member(9, minutes=3)))
    assert after.open_fleet == head.open_fleet and after.recent == {}


def test_a_member_is_written_over_an_older_version_only_and_listed_while_it_is_open(
    store: DynamoDBInstanceStore, dynamodb: Any
) -> None:
    # Given a member written at version 2
    assert put(store, a_member(1, version=2)).written
    # When an older version of it arrives, Then it is not written, and what is stored comes back
    older = put(store, a_member(1, version=1, closed=True))
    assert not older.written and older.stored.is_open and older.stored.version == 2
    # When a newer version closes it, Then it is written, and it is no longer listed as open
    newer = put(store, a_member(1, version=3, closed=True))
    assert newer.written and newer.previous is not None and newer.previous.is_open
    assert store.open_members(group_arn(GROUP), AT - timedelta(days=1), limit=10) == []
    assert store.count_open(group_arn(GROUP), AT - timedelta(days=1)) == 0
    # And the group's partition holds the member and nothing else (no head until one registers), out of the index
    items = dynamodb.scan(TableName=TABLE)["Items"]
    assert [item["sk"]["S"][:2] for item in items] == ["M#"] and "og" not in items[0]


def test_open_members_are_read_by_the_moment_they_opened_bounded_and_counted(store: DynamoDBInstanceStore) -> None:
    for number in range(30):
        put(store, a_member(number, minutes=number))
    arn = group_arn(GROUP)
    window = store.open_members(arn, AT + timedelta(minutes=10), AT + timedelta(minutes=14), limit=100)
    assert [m.instance.ec2_instance_id for m in window] == [f"i-{n:04d}" for n in range(10, 15)]
    assert len(store.open_members(arn, AT, limit=7)) == 7
    assert store.count_open(arn, AT + timedelta(minutes=20)) == 10


def test_a_member_that_reopens_is_listed_once_by_its_new_opening(store: DynamoDBInstanceStore, dynamodb: Any) -> None:
    put(store, a_member(1, minutes=0, version=1))
    put(store, a_member(1, minutes=40, version=5))  # the instance's next incident of the check
    arn = group_arn(GROUP)
    [listed] = store.open_members(arn, AT - timedelta(days=1), limit=10)
    assert listed.opened_at == AT + timedelta(minutes=40) and listed.version == 5
    [item] = dynamodb.scan(TableName=TABLE)["Items"]
    assert item["oat"]["S"].startswith((AT + timedelta(minutes=40)).strftime("%Y-%m-%dT%H:%M:%S"))


def test_what_the_thread_was_told_of_a_member_carries_over_while_it_is_the_same_incident(
    store: DynamoDBInstanceStore,
) -> None:
    head = a_fleet(store)
    first = a_member(0)
    assert store.mark_member(head.arn, first, fleet=head.incidents[0].id, told=Told.FOUNDING)
    # A newer report of the same fault keeps it; its next fault is a new member
    kept = put(store, dataclasses.replace(first, version=2, phase="DRAINING")).stored
    assert (kept.fleet, kept.told) == (head.incidents[0].id, "FOUNDING")
    later = put(store, a_member(0, minutes=90, version=3)).stored
    assert (later.fleet, later.told) == (None, None)
    # and a mark for an incident the member no longer shows is refused
    assert not store.mark_member(head.arn, first, fleet=head.incidents[0].id, told=Told.LEFT)


@pytest.mark.parametrize("kind", ["dynamodb", "memory"])
def test_a_join_or_a_leave_is_claimed_by_one_mark_only(store: DynamoDBInstanceStore, kind: str) -> None:
    stores: dict[str, DynamoDBInstanceStore | MemoryInstanceStore] = {
        "dynamodb": store,
        "memory": MemoryInstanceStore(),
    }
    chosen = stores[kind]
    fleet, other = "fleet/a", "fleet/b"
    first = a_member(0)
    chosen.put_member(group_arn(GROUP), GROUP, INSTANCE, first.instance.container_instance_arn, first)
    arn = group_arn(GROUP)
    # Of two deliveries marking the same join, the first changes the member and the second is refused
    assert chosen.mark_member(arn, first, fleet=fleet, told=Told.JOINED)
    assert not chosen.mark_member(arn, first, fleet=fleet, told=Told.JOINED)
    assert not chosen.mark_member(arn, first, fleet=fleet, told=Told.FOUNDING)
    # and so with its leave, after which it cannot join that fleet again
    assert chosen.mark_member(arn, first, fleet=fleet, told=Told.LEFT)
    assert not chosen.mark_member(arn, first, fleet=fleet, told=Told.LEFT)
    assert not chosen.mark_member(arn, first, fleet=fleet, told=Told.JOINED)
    # while another fleet incident is a step of its own
    assert chosen.mark_member(arn, first, fleet=other, told=Told.JOINED)
    founder = a_member(1)
    chosen.put_member(group_arn(GROUP), GROUP, INSTANCE, founder.instance.container_instance_arn, founder)
    assert chosen.mark_member(arn, founder, fleet=fleet, told=Told.FOUNDING)
    assert not chosen.mark_member(arn, founder, fleet=fleet, told=Told.JOINED)
    assert chosen.mark_member(arn, founder, fleet=fleet, told=Told.LEFT)


def test_the_journal_is_numbered_by_the_head_for_the_open_fleet_only(store: DynamoDBInstanceStore) -> None:
    head = a_fleet(store)
    fleet = head.incidents[0].id
    after = store.advance(head.arn, fleet, joined=True)
    assert after is not None and (after.journal_seq, after.joined, after.version) == (1, 4, head.version + 1)
    store.append_journal(head.arn, JournalEntry(1, fleet, Told.JOINED, a_member(9), AT, time.time()))
    assert store.advance(head.arn, "fleet:another@x", joined=True) is None
    assert [e.seq for e in store.journal(head.arn, 0, limit=10)] == [1]
    assert store.journal(head.arn, 1, limit=10) == []


def test_a_fleet_incident_closes_only_if_nobody_joined_since_the_closer_looked(store: DynamoDBInstanceStore) -> None:
    head = a_fleet(store)
    fleet = head.incidents[0]
    looked = store.load_group(head.arn)
    assert looked is not None and looked.open_fleet == fleet.id
    # Given a member that joins after the closer looked
    assert store.advance(head.arn, fleet.id, joined=True) is not None
    # When the closer writes the close, Then it is refused
    looked.incidents = [closed_identity(looked, fleet, AT + timedelta(hours=1))]
    looked.open_fleet = None
    with pytest.raises(ConcurrentUpdateError):
        store.commit_fleets(looked, expected_version=looked.version)
    # and from what it reads again it closes, and the fleet takes no more members
    again = store.load_group(head.arn)
    assert again is not None
    again.incidents = [closed_identity(again, fleet, AT + timedelta(hours=1))]
    again.open_fleet = None
    closed = store.commit_fleets(again, expected_version=again.version, listed=True)
    assert closed.open_fleet is None and closed.incidents[0].members == 4
    assert store.advance(head.arn, fleet.id, joined=True) is None


def test_actions_on_a_fleet_incident_are_written_with_its_identities_and_move_the_group_version(
    store: DynamoDBInstanceStore,
) -> None:
    stored = a_fleet(store)
    pressed = ReportedAction("slack:f1", "acknowledge", "slack", "Jane", AT, incident=stored.incidents[0].id)
    assert stored.add_action(pressed)

    committed = store.commit_fleets(stored, acted=True)

    loaded = store.load_group(group_arn(GROUP))
    assert loaded is not None and loaded.actions == committed.actions == stored.actions
    assert loaded.version == stored.version + 1  # a lease holder reads the group again before it lets go
    assert loaded.joined == 3  # the live member count is not written over by an action
    with pytest.raises(ConcurrentUpdateError):
        store.commit_fleets(stored)  # written from what was read before the action: refused
