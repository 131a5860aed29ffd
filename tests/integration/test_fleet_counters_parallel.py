"""A fleet's head counts each member once, however many deliveries of its reports run at once: real parallel processes.

100 instances of one capacity provider fail within two minutes, then leave the cluster; ECS delivers every event
twice. Four worker processes (each its own AlertRouter, as four Lambda execution environments) handle the events
against one moto server (DynamoDB) and the Slack and PagerDuty stand-ins over HTTP, the two copies of each event
by two different workers at about the same moment (at the same place in their lists, started together). The harness
is tests/integration/parallel.py; what is judged is the group's head and journal as stored in the table.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.noise.fleet import GroupRecord, JournalEntry, Told, group_arn
from tests.conftest import load_event
from tests.integration.parallel import Workers, moto_client
from tests.integration.test_concurrency import world  # noqa: F401 - the module's moto server and stand-ins

MEMBERS = 100
WORKERS = 4
CLUSTER = "arn:aws:ecs:us-west-2:123456789012:cluster/counted"
PROVIDER = "p5-counted"
START = datetime(2026, 11, 3, 8, 0, tzinfo=UTC)
GROUP = (("cluster", "counted"), ("capacity_provider", PROVIDER), ("check_type", "ACCELERATED_COMPUTE"))


def instance(number: int) -> str:
    return f"arn:aws:ecs:us-west-2:123456789012:container-instance/counted/{number:032x}"


def stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def impaired(number: int) -> dict[str, Any]:
    """The instance's GPU fails (XID 79), the 100 within two minutes."""
    at = stamp(START + timedelta(seconds=120 * number // MEMBERS))
    event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    event["detail"].update(
        clusterArn=CLUSTER,
        containerInstanceArn=instance(number),
        capacityProviderName=PROVIDER,
        ec2InstanceId=f"i-0{number:016x}",
    )
    event["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=at, lastUpdated=at)
    event.update(id=f"counted-{number}-impaired", time=at, resources=[instance(number)])
    return event


def inactive(number: int) -> dict[str, Any]:
    """The instance leaves the cluster (replaced), half an hour later: its incident resolves at once."""
    at = START + timedelta(minutes=30, seconds=number)
    event = copy.deepcopy(load_event("state/inactive.json"))
    event["detail"].update(
        clusterArn=CLUSTER,
        containerInstanceArn=instance(number),
        capacityProviderName=PROVIDER,
        ec2InstanceId=f"i-0{number:016x}",
        updatedAt=at.strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        version=100 + number,
    )
    event.update(id=f"counted-{number}-inactive", time=stamp(at), resources=[instance(number)])
    return event


def delivered_twice(events: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Each event to two different workers, at the same place in both lists: event i to workers i % 4 and
    (i + 1) % 4, each list in the events' order, so the two copies are handled at about the same moment."""
    orders: list[list[dict[str, Any]]] = [[] for _ in range(WORKERS)]
    for number, event in enumerate(events):
        orders[number % WORKERS].append(event)
        orders[(number + 1) % WORKERS].append(copy.deepcopy(event))
    return orders


def stored(world: dict[str, Any]) -> tuple[GroupRecord, list[JournalEntry]]:  # noqa: F811
    """The group's head and its whole journal, as the table holds them."""
    client = moto_client("dynamodb", world["environment"]["AWS_ENDPOINT_URL"])
    store = DynamoDBInstanceStore("incidents", timedelta(days=30), client)
    arn = group_arn(GROUP)
    head = store.load_group(arn)
    assert head is not None, "no member was ever written to the group"
    return head, store.journal(arn, 0, limit=4 * MEMBERS)


def test_a_hundred_members_joining_and_leaving_twice_over_are_counted_once_each(
    world: dict[str, Any],  # noqa: F811
) -> None:
    pool = Workers(WORKERS, world["environment"])
    try:
        # Given 100 instances failing within two minutes, every event handled twice, by two workers at once
        joins = delivered_twice([impaired(number) for number in range(MEMBERS)])
        assert sorted(len(order) for order in joins) == [2 * MEMBERS // WORKERS] * WORKERS
        retried_joins = pool.run(joins)
        head, journal = stored(world)
        fleet = head.fleet()
        # Then one fleet incident is open, and its head counts 100 members joined: its founders and one journal
        # entry for each member that joined after them, every instance once
        assert fleet is not None
        joined = [entry for entry in journal if entry.told is Told.JOINED and entry.fleet == fleet.id]
        names = [entry.member.instance.container_instance_arn for entry in joined]
        assert len(names) == len(set(names)), "a member joined the fleet's journal twice"
        assert (head.joined, head.left) == (MEMBERS, 0)
        assert fleet.members + len(joined) == MEMBERS
        assert head.journal_seq == len(joined)

        # When the 100 leave the cluster, every event again handled twice, by two workers at once
        retried_leaves = pool.run(delivered_twice([inactive(number) for number in range(MEMBERS)]))
    finally:
        pool.close()
    head, journal = stored(world)
    # Then 100 left, each once, and the last one out closed the fleet incident (no sweep ran): it had counted as
    # many leaving as joining, 100, with one journal entry per join and per leave
    left = [entry for entry in journal if entry.told is Told.LEFT and entry.fleet == fleet.id]
    names = [entry.member.instance.container_instance_arn for entry in left]
    assert sorted(names) == sorted(instance(number) for number in range(MEMBERS))
    closed = next(identity for identity in head.incidents if identity.id == fleet.id)
    assert (head.open_fleet, closed.status, closed.members) == (None, "CLOSED", MEMBERS)
    assert head.journal_seq == closed.last_seq == len(joined) + len(left)
    print(
        f"{MEMBERS} members x 2 deliveries, {WORKERS} workers: {fleet.members} founders, {len(joined)} joined, "
        f"{len(left)} left; {retried_joins} + {retried_leaves} records retried after losing a race"
    )
