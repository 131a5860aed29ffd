"""Nothing one event holds makes another fail, in DynamoDB (moto, in process): a number no DynamoDB item can hold
never reaches the store, and a stored instance record part or silence that cannot be read is skipped with an
`UnreadableRecords` count and a log line, never raised on every receive."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore, check_attribute, instance_pk
from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import StorePorts
from fault_responder.incidents import lifecycle
from fault_responder.noise.policy import Policy, SilenceCache
from fault_responder.noise.silences import SilenceError, new_silence
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.matchers import parse_matchers
from fault_responder.routing.router import Router, load_routing
from tests.conftest import health_check, load_event, vary
from tests.integration.tables import create_incidents_table

TABLE = "incidents"
NOW = datetime(2026, 12, 1, tzinfo=UTC)
XID79 = "incident-xid79/01-impaired-xid79.json"
ARN = "arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-inference/f957585523c3d58c95844b6b2d8ce234"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        create_incidents_table(client, TABLE)
        yield client


class World:
    """The router's AlertService on DynamoDB (moto), the default routing file and recording channels."""

    def __init__(self, dynamodb: Any) -> None:
        routing = load_routing("default.yaml")
        self.store = DynamoDBInstanceStore(TABLE, timedelta(days=30), dynamodb)
        self.channels = RecordingChannels()
        receivers = frozenset(name for name, receiver in routing.receivers.items() if receiver.pagerduty is not None)
        self.service = AlertService(
            StorePorts(self.store, self.store, self.store),
            Router(routing),
            ReceiverCourier(self.channels, clock=lambda: NOW),
            lifecycle.Settings(),
            clock=lambda: NOW,
            grouping=routing.grouping,
            policy=Policy(pagerduty_receivers=receivers),
        )

    def triggered(self) -> list[str]:
        return [s.target for s in self.channels.sent if s.service == "pagerduty" and s.action == "trigger"]


def counted(out: str, metric: str) -> list[str]:
    """The dimension value of every `metric` count in the EMF lines Powertools printed."""
    values = []
    for line in out.splitlines():
        if line.startswith('{"_aws"'):
            emf = json.loads(line)
            [directive] = emf["_aws"]["CloudWatchMetrics"]
            if directive["Metrics"][0]["Name"] == metric:
                [[dimension]] = directive["Dimensions"]
                values.append(emf[dimension])
    return values


def logged(caplog: pytest.LogCaptureFixture, logger: str) -> list[dict[str, Any]]:
    return [record.__dict__ for record in caplog.records if record.name == logger]


# --- A version no DynamoDB number holds ---------------------------------------------------------------------


def test_a_state_change_with_version_ten_to_the_forty_is_stored_without_it(
    dynamodb: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a manual drain whose detail.version is 10**40 (41 digits: DynamoDB numbers hold 38)
    event = vary(load_event("state/draining-manual.json"), version=10**40)
    world = World(dynamodb)

    # When the router receives it, twice (SQS redelivers at least once)
    for _ in range(2):
        world.service.handle(event)

    # Then it was handled on the first receive: the drain is stored without a version, and the drift counted
    record = world.store.load(event["detail"]["containerInstanceArn"])
    assert record is not None and [(s.status, s.version) for s in record.statuses] == [("DRAINING", None)]
    assert counted(capsys.readouterr().out, "SchemaDrift") == ["detail.version", "detail.version"]


# --- Stored instance record parts that cannot be read ---------------------------------------------------------


def _damage(dynamodb: Any, attribute: str, value: dict[str, Any]) -> None:
    dynamodb.update_item(
        TableName=TABLE,
        Key={"pk": {"S": instance_pk(ARN)}, "sk": {"S": "RECORD"}},
        UpdateExpression="SET #a = :v",
        ExpressionAttributeNames={"#a": attribute},
        ExpressionAttributeValues={":v": value},
    )


CHECK = check_attribute("ACCELERATED_COMPUTE")
DAMAGED = {
    "a fact's time does not parse": (
        CHECK,
        "check",
        {"M": {"type": {"S": "ACCELERATED_COMPUTE"}, "facts": {"L": [{"M": {"at": {"S": "yesterday"}}}]}}},
    ),
    "a fact at Go's zero time": (
        CHECK,
        "check",
        {
            "M": {
                "type": {"S": "ACCELERATED_COMPUTE"},
                "facts": {
                    "L": [
                        {
                            "M": {
                                "status": {"S": "IMPAIRED"},
                                "at": {"S": "0001-01-01T00:00:00+00:00"},
                                "event_id": {"S": "poison"},
                            }
                        }
                    ]
                },
            }
        },
    ),
    "instance facts of another shape": ("inst", "inst", {"M": {"statuses": {"L": [{"M": {"status": {"S": "X"}}}]}}}),
    "the instance is not an object": ("ref", "ref", {"S": "gpu-inference"}),
    "a delivery without its receiver": ("d_0123456789abcdef01234567", "delivery", {"M": {"subject": {"S": "x"}}}),
    "a lease of another type": ("l_0123456789abcdef", "lease", {"L": [{"N": "1"}]}),
}


@pytest.mark.parametrize(("attribute", "part", "value"), list(DAMAGED.values()), ids=list(DAMAGED))
def test_a_record_part_that_cannot_be_read_is_skipped_and_the_next_fault_pages(
    dynamodb: Any,
    attribute: str,
    part: str,
    value: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given an instance whose XID 79 fault paged, and then one part of its stored record damaged
    world = World(dynamodb)
    world.service.handle(load_event(XID79))
    _damage(dynamodb, attribute, value)
    capsys.readouterr()

    # When a DAEMON fault of the same instance arrives
    daemon = health_check(
        vary(load_event(XID79), event_id="daemon-1"),
        type="DAEMON",
        statusReason="Daemon task unhealthy",
        lastStatusChange="2026-08-27T14:10:00Z",
    )
    with caplog.at_level(logging.WARNING):
        world.service.handle(daemon)

    # Then it is handled and pages (the damaged part is skipped, not raised on every receive) ...
    assert "gpu-inference/f957585523c3d58c95844b6b2d8ce234/DAEMON" in world.triggered()
    # ... with a count of the kind of part and a log line naming the record and the part
    assert part in counted(capsys.readouterr().out, "UnreadableRecords")
    lines = logged(caplog, "fault_responder.adapters.serialization")
    assert lines and all(line["record"] == ARN for line in lines)
    assert attribute in {line["part"] for line in lines}


def test_a_damaged_check_part_is_replaced_by_the_next_fact_of_that_check(
    dynamodb: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance whose check part holds a fact at Go's zero time (as stored before times were bounded)
    world = World(dynamodb)
    world.service.handle(load_event(XID79))
    _damage(dynamodb, *DAMAGED["a fact at Go's zero time"][::2])

    # When the check's next transition arrives (it recovers)
    ok = health_check(
        vary(load_event(XID79), event_id="ok-1", overallStatus="OK"),
        status="OK",
        statusReason=None,
        lastStatusChange="2026-08-27T14:30:00Z",
    )
    world.service.handle(ok)
    capsys.readouterr()

    # Then the part was written anew from what the record knows, and reads without a complaint from then on
    record = world.store.load(ARN)
    assert record is not None
    assert [fact.status for fact in record.health["ACCELERATED_COMPUTE"]] == ["OK"]
    assert counted(capsys.readouterr().out, "UnreadableRecords") == []


def test_a_record_whose_instance_cannot_be_read_is_named_from_its_arn(dynamodb: Any) -> None:
    # Given a record whose instance part is damaged
    world = World(dynamodb)
    world.service.handle(load_event(XID79))
    _damage(dynamodb, *DAMAGED["the instance is not an object"][::2])

    # When it is read, Then its instance is what the ARN says: Region, account, cluster
    record = world.store.load(ARN)
    assert record is not None
    assert (record.instance.region, record.instance.account, record.instance.cluster_arn) == (
        "us-west-2",
        "123456789012",
        "arn:aws:ecs:us-west-2:123456789012:cluster/gpu-inference",
    )
    assert record.incidents["ACCELERATED_COMPUTE"]


# --- Silences that cannot be read ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        {"matchers": {"L": []}, "ends_at": {"S": "tomorrow"}},
        {"matchers": None},
        {"matchers": {"S": "cluster=gpu-inference"}, "ends_at": {"S": "2026-12-01T02:00:00Z"}},
        {"matchers": {"L": [{"M": {"name": {"S": "cluster"}, "op": {"S": "≈"}, "value": {"S": "x"}}}]}},
        {"expires_at": {"S": "never"}},
    ],
    ids=["end not a time", "no matchers", "matchers as text", "an unknown operator", "expiry not a number"],
)
def test_a_silence_that_cannot_be_read_is_skipped_and_the_others_apply(
    dynamodb: Any, item: dict[str, Any], capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # Given an active silence of the gpu-inference cluster, and beside it a stored silence that cannot be read
    # (a part replaced by `item`, or left out where it is None)
    store = DynamoDBSilenceStore(TABLE, dynamodb, clock=lambda: NOW)
    good = store.add(
        new_silence(
            parse_matchers(["cluster=gpu-inference"]),
            ends_at=NOW + timedelta(hours=4),
            created_by="alice",
            comment="rack maintenance",
            now=NOW,
        )
    )
    damaged = {
        "pk": {"S": "SILENCE"},
        "sk": {"S": "00000000000000ff"},
        "matchers": {"L": [{"M": {"name": {"S": "cluster"}, "op": {"S": "="}, "value": {"S": "x"}}}]},
        "starts_at": {"S": "2026-12-01T00:00:00Z"},
        "ends_at": {"S": "2026-12-01T02:00:00Z"},
        "created_by": {"S": "bob"},
        "comment": {"S": "damaged"},
        "created_at": {"S": "2026-12-01T00:00:00Z"},
        **item,
    }
    dynamodb.put_item(TableName=TABLE, Item={name: value for name, value in damaged.items() if value is not None})

    # When the router reads the silences (as its SilenceCache does, before an event)
    cache = SilenceCache(lambda: store.active(NOW), refresh_seconds=0)
    with caplog.at_level(logging.WARNING):
        silenced = cache.silencer({"cluster": "gpu-inference"}, NOW)

    # Then the readable silence applies, and the other is skipped with a count and a log line naming it
    assert silenced is not None and good.id in silenced
    assert counted(capsys.readouterr().out, "UnreadableRecords") == ["silence"]
    [line] = logged(caplog, "fault_responder.adapters.silence_store")
    assert line["silence"] == "00000000000000ff"
    assert [silence.id for silence in store.list(include_expired=True)] == [good.id]


def test_asking_for_a_silence_that_cannot_be_read_says_so(dynamodb: Any) -> None:
    # Given a stored silence whose end is not a time
    store = DynamoDBSilenceStore(TABLE, dynamodb, clock=lambda: NOW)
    item = {"pk": {"S": "SILENCE"}, "sk": {"S": "00000000000000ff"}, "ends_at": {"S": "tomorrow"}}
    dynamodb.put_item(TableName=TABLE, Item=item)

    # When it is asked for by its id (to expire it, say), Then the error names it and says it cannot be read
    with pytest.raises(SilenceError, match="00000000000000ff is stored but cannot be read"):
        store.get("00000000000000ff")
