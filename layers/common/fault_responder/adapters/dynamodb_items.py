"""The incidents table's items as the instance store (fault_responder.adapters.dynamodb_store) writes them: their keys
and attribute names, an UpdateExpression with its placeholders, DynamoDB's typed values to plain ones and back, and the
table every part of the store writes (its client, and a conditional update)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from fault_responder.adapters.dynamo_conditions import Written, conditionally
from fault_responder.adapters.serialization import record_from_parts
from fault_responder.incidents.record import InstanceRecord, digest
from fault_responder.noise.fleet import is_group

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
OPEN_RECORD_TTL = timedelta(days=90)
SK = "RECORD"
MAX_KEY_BYTES = 1_900
OPEN_INDEX = "Open"
MEMBERS_INDEX = "Members"
SWEEP_SHARDS = 8
"""The Open index's partition key values: a storm's writes spread over these many index partitions."""
GROUP_SHARD = "open#groups"
"""Groups have a shard of their own, read first: a few records that stand for many instances."""


def instance_pk(container_instance_arn: str) -> str:
    encoded = container_instance_arn.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_KEY_BYTES:
        return f"INSTANCE#{container_instance_arn}"
    return f"INSTANCE#sha256:{digest(container_instance_arn, 64)}"


def group_pk(arn: str) -> str:
    encoded = arn.encode("utf-8", "surrogatepass")
    if len(encoded) <= MAX_KEY_BYTES:
        return f"GROUP#{arn}"
    return f"GROUP#sha256:{digest(arn, 64)}"


def member_key(instance_arn: str) -> str:
    return f"M#{digest(instance_arn, 32)}"


def journal_sk(seq: int) -> str:
    return f"J#{seq:012d}"


def recent_attribute(instance_arn: str) -> str:
    return f"r_{digest(instance_arn, 24)}"


def backoff_attribute(receiver: str) -> str:
    return f"b_{digest(receiver)}"


def sortable(moment: datetime) -> str:
    """A time as text that sorts as the time does (fixed width, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def check_attribute(check: str) -> str:
    return f"c_{digest(check)}"


def lease_attribute(receiver: str) -> str:
    return f"l_{digest(receiver)}"


def delivery_attribute(receiver: str, subject: str) -> str:
    return f"d_{digest(receiver + chr(0) + subject, 24)}"


class Table:
    """The incidents table, written by the store's parts (records, leases, fleets)."""

    def __init__(self, table_name: str, retention: timedelta, client: Any | None = None) -> None:
        self.table_name = table_name
        self.retention = retention
        self._client = client or boto3.client("dynamodb")

    def _conditional(self, key: dict[str, Any], update: Update, condition: str, **options: Any) -> Written:
        """`update` of the item at `key` if `condition` holds (`options`: what DynamoDB returns)."""
        return conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name, Key=key, ConditionExpression=condition, **options, **update.arguments()
            )
        )

    def _kept_open(self) -> int:
        """When an item of an open incident expires (TTL): after the retention, and no sooner than OPEN_RECORD_TTL."""
        return int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds())


class Update:
    """An UpdateExpression with its placeholders."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._values: dict[str, Any] = {}
        self._sets: list[str] = []
        self._removes: list[str] = []

    def name(self, attribute: str) -> str:
        for placeholder, known in self._names.items():
            if known == attribute:
                return placeholder
        placeholder = f"#n{len(self._names)}"
        self._names[placeholder] = attribute
        return placeholder

    def value(self, value: Any) -> str:
        placeholder = f":v{len(self._values)}"
        self._values[placeholder] = _serializer.serialize(_dynamo(value))
        return placeholder

    def set(self, attribute: str, value: Any) -> None:
        self._sets.append(f"{self.name(attribute)} = {self.value(value)}")

    def set_expression(self, expression: str) -> None:
        self._sets.append(expression)

    def remove(self, attribute: str) -> None:
        self._removes.append(self.name(attribute))

    def arguments(self) -> dict[str, Any]:
        clauses = []
        if self._sets:
            clauses.append("SET " + ", ".join(self._sets))
        if self._removes:
            clauses.append("REMOVE " + ", ".join(self._removes))
        arguments: dict[str, Any] = {
            "UpdateExpression": " ".join(clauses),
            "ExpressionAttributeNames": dict(self._names),
        }
        if self._values:
            arguments["ExpressionAttributeValues"] = dict(self._values)
        return arguments


def decode(arn: str, item: dict[str, Any]) -> InstanceRecord:
    """A stored item back into a record; a part that cannot be read is skipped with a count and a log line, never
    raised on every read (serialization.record_from_parts)."""
    return record_from_parts(arn, item, plain)


def table_key(arn: str) -> dict[str, Any]:
    pk = group_pk(arn) if is_group(arn) else instance_pk(arn)
    return {"pk": {"S": pk}, "sk": {"S": SK}}


def sweep_shard(number: int) -> str:
    return f"open#{number}"


def mark_open(update: Update, arn: str, *, is_open: bool) -> None:
    """List the record in the Open index while it has something open, and take it off when it has not."""
    if is_open:
        update.set("sweep", GROUP_SHARD if is_group(arn) else sweep_shard(int(digest(arn), 16) % SWEEP_SHARDS))
        update.set("rid", arn)
    else:
        update.remove("sweep")
        update.remove("rid")


def _dynamo(value: Any) -> Any:
    """DynamoDB numbers are Decimals (TypeSerializer refuses floats)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _dynamo(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dynamo(item) for item in value]
    return value


def typed(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _serializer.serialize(_dynamo(value)) for key, value in item.items()}


def plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _undecimal(_deserializer.deserialize(value)) for key, value in item.items()}


def _undecimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_undecimal(item) for item in value]
    if isinstance(value, dict):
        return {key: _undecimal(item) for key, item in value.items()}
    return value
