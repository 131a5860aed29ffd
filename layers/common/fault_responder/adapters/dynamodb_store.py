"""InstanceStore on DynamoDB (single table, see template.yaml IncidentsTable).

One item per container instance: pk = INSTANCE#<container instance ARN>, sk = RECORD. Its parts are
attributes, so each writer sets only its own with UpdateItem:
- `ver`: bumped by every write of facts or incidents (the optimistic lock);
- `ref`: the instance; `inst`: the instance-level facts (statuses, tasks, quarantine, notices);
- `c_<digest>`: one health check's facts and incidents;
- `l_<digest>`: one receiver's lease; `d_<digest>`: what one receiver was told about one subject;
- `sweep` and `rid`, only while an incident is open: the table's `Open` index lists these records (`sweep`
  is one of SWEEP_SHARDS values, `rid` the record's ARN) for the sweep.
The training auto-resume notifier's delivery ledger uses pk = DELIVERY#<key>, sk = DELIVERY.

One item per group of instances (fleet incidents): pk = GROUP#<group labels>, sk = RECORD, with `ver` (bumped
by every member written), `grp` and `where` (the group), `m_<digest>` (one instance's member, written only over
an older version of it), `f` and `fv` (the fleet identities and their own version), and the same lease and
delivery attributes as an instance.

Keys are hashed when too long for DynamoDB (partition key 2,048 bytes), and a record is compacted (oldest
facts first) before it could pass the 400 KB item limit. Every item expires through TTL (`expires_at`): a
record with an open incident after OPEN_RECORD_TTL without news, any other after the retention period.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from fault_responder.domain import FleetMember, InstanceRef
from fault_responder.fleet import Group, GroupRecord, is_group
from fault_responder.record import Delivery, InstanceRecord, Lease, compact, digest
from fault_responder.serialization import (
    action_from_dict,
    action_to_dict,
    check_to_dict,
    delivery_from_dict,
    delivery_to_dict,
    has_instance_facts,
    instance_facts_to_dict,
    instance_from_dict,
    instance_to_dict,
    known_list_from_dict,
    known_list_to_dict,
    lease_from_dict,
    lease_to_dict,
    member_from_dict,
    member_to_dict,
    record_from_parts,
)
from fault_responder.store import Committed, ConcurrentUpdateError, LeaseLostError, RecordTooLargeError

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()
DELIVERY_TTL = timedelta(days=14)
OPEN_RECORD_TTL = timedelta(days=90)
PAGE_TTL = timedelta(days=90)
"""How long a PagerDuty alert's dedup key leads back to its record: as long as an open record is kept."""
SK = "RECORD"
MAX_ITEM_BYTES = 380_000
"""Below DynamoDB's 400 KB with room for attribute names and the few parts written separately."""
MAX_KEY_BYTES = 1_900
_CONDITION_FAILED = "ConditionalCheckFailedException"
OPEN_INDEX = "Open"
SWEEP_SHARDS = 8
"""The Open index's partition key values: a storm's writes spread over these many index partitions."""


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


def member_attribute(instance_arn: str) -> str:
    return f"m_{digest(instance_arn, 24)}"


def check_attribute(check: str) -> str:
    return f"c_{digest(check)}"


def lease_attribute(receiver: str) -> str:
    return f"l_{digest(receiver)}"


def delivery_attribute(receiver: str, subject: str) -> str:
    return f"d_{digest(receiver + chr(0) + subject, 24)}"


class DynamoDBInstanceStore:
    def __init__(self, table_name: str, retention: timedelta, client: Any | None = None) -> None:
        self.table_name = table_name
        self.retention = retention
        self._client = client or boto3.client("dynamodb")

    # --- Reading -----------------------------------------------------------------------------------------

    def load(self, arn: str) -> InstanceRecord | None:
        response = self._client.get_item(TableName=self.table_name, Key=_key(arn), ConsistentRead=True)
        item = response.get("Item")
        return decode(arn, item) if item else None

    # --- Writing facts and incidents ---------------------------------------------------------------------

    def commit(
        self,
        record: InstanceRecord,
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
        forget: Sequence[tuple[str, str]] = (),
    ) -> Committed:
        update = _Update()
        parts = self._fitting_parts(record)
        update.set("ver", record.version + 1)
        update.set("expires_at", self._expiry(record))
        update.set("ref", instance_to_dict(record.instance))
        _mark_open(update, record.arn, is_open=_has_open(record))
        if "inst" in parts:
            update.set("inst", parts["inst"])
        for name, value in parts.items():
            if name.startswith("c_"):
                update.set(name, value)
        for receiver, subject in forget:
            update.remove(delivery_attribute(receiver, subject))
        self._claims(update, leases, deliveries)
        if record.version == 0:
            condition = "attribute_not_exists(pk)"
        else:
            condition = f"{update.name('ver')} = {update.value(record.version)}"
        return self._write(record.arn, update, condition, leases)

    def commit_checks(
        self,
        record: InstanceRecord,
        checks: Sequence[str],
        *,
        leases: Sequence[Lease] = (),
        deliveries: Sequence[Delivery] = (),
    ) -> Committed:
        update = _Update()
        version, ref = update.name("ver"), update.name("ref")
        update.set_expression(f"{version} = if_not_exists({version}, {update.value(0)}) + {update.value(1)}")
        update.set_expression(f"{ref} = if_not_exists({ref}, {update.value(instance_to_dict(record.instance))})")
        update.set("expires_at", self._expiry(record))
        _mark_open(update, record.arn, is_open=_has_open(record))
        conditions = [f"attribute_not_exists({update.name('inst')})"]
        for check in checks:
            attribute = check_attribute(check)
            update.set(attribute, check_to_dict(record, check))
            conditions.append(f"attribute_not_exists({update.name(attribute)})")
        self._claims(update, leases, deliveries)
        return self._write(record.arn, update, " AND ".join(conditions), leases)

    def _claims(self, update: _Update, leases: Sequence[Lease], deliveries: Sequence[Delivery]) -> None:
        for lease in leases:
            name = update.name(lease_attribute(lease.receiver))
            update.set_expression(f"{name} = if_not_exists({name}, {update.value(lease_to_dict(lease))})")
        for delivery in deliveries:
            update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))

    def _write(self, arn: str, update: _Update, condition: str, leases: Sequence[Lease]) -> Committed:
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=_key(arn),
                ConditionExpression=condition,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.arguments(),
            )
        except ClientError as error:
            if _condition_failed(error):
                old: dict[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
                stored = decode(arn, old) if old else None
                raise ConcurrentUpdateError(f"{arn} changed since it was read", stored) from error
            raise
        record = decode(arn, response["Attributes"])
        held = {lease.receiver: lease for lease in leases if record.leases.get(lease.receiver) == lease}
        return Committed(record, held)

    def _fitting_parts(self, record: InstanceRecord) -> dict[str, Any]:
        """The record's parts, compacted (oldest facts first) until the item fits."""
        for _ in range(8):
            parts: dict[str, Any] = {
                check_attribute(check): check_to_dict(record, check)
                for check in sorted(set(record.health) | set(record.incidents))
            }
            if has_instance_facts(record):
                parts["inst"] = instance_facts_to_dict(record)
            deliveries = [delivery_to_dict(d) for d in record.deliveries.values()]
            size = len(json.dumps([parts, deliveries], default=str))
            if size <= MAX_ITEM_BYTES:
                return parts
            compact(record)
        raise RecordTooLargeError(f"the record of {record.arn} does not fit in a DynamoDB item even compacted")

    def _expiry(self, record: InstanceRecord) -> int:
        open_incident = _has_open(record)
        keep = max(self.retention, OPEN_RECORD_TTL) if open_incident else self.retention
        return int(time.time() + keep.total_seconds())

    # --- Leases and deliveries -------------------------------------------------------------------------

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        update = _Update()
        name = update.name(lease_attribute(lease.receiver))
        update.set(lease_attribute(lease.receiver), lease_to_dict(lease))
        until = update.name("until")
        condition = f"attribute_exists(pk) AND (attribute_not_exists({name}) OR {name}.{until} < {update.value(now)})"
        try:
            self._client.update_item(
                TableName=self.table_name, Key=_key(arn), ConditionExpression=condition, **update.arguments()
            )
        except ClientError as error:
            if _condition_failed(error):
                return False
            raise
        return True

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        update = _Update()
        update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))
        self._as_holder(arn, lease, update, extra=None)

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        update = _Update()
        update.remove(lease_attribute(lease.receiver))
        try:
            self._as_holder(arn, lease, update, extra=f"{update.name('ver')} = {update.value(version)}")
        except _VersionMoved:
            return False
        return True

    def drop_lease(self, arn: str, lease: Lease) -> None:
        update = _Update()
        update.remove(lease_attribute(lease.receiver))
        try:
            self._as_holder(arn, lease, update, extra=None)
        except LeaseLostError:
            return

    def _as_holder(self, arn: str, lease: Lease, update: _Update, extra: str | None) -> None:
        name = update.name(lease_attribute(lease.receiver))
        owner = update.name("owner")
        condition = f"{name}.{owner} = {update.value(lease.owner)}"
        if extra:
            condition = f"{condition} AND {extra}"
        try:
            self._client.update_item(
                TableName=self.table_name,
                Key=_key(arn),
                ConditionExpression=condition,
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.arguments(),
            )
        except ClientError as error:
            if not _condition_failed(error):
                raise
            old: dict[str, Any] = error.response.get("Item") or {}  # type: ignore[assignment]
            current = _plain(old).get(lease_attribute(lease.receiver)) if old else None
            if not current or current.get("owner") != lease.owner:
                raise LeaseLostError(f"lease of {lease.receiver} on {arn} is not held by {lease.owner}") from None
            raise _VersionMoved from None

    # --- Groups (fleet incidents) ----------------------------------------------------------------------------

    def load_group(self, arn: str) -> GroupRecord | None:
        response = self._client.get_item(TableName=self.table_name, Key=_key(arn), ConsistentRead=True)
        item = response.get("Item")
        return decode_group(arn, item) if item else None

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> GroupRecord:
        update = _Update()
        attribute = member_attribute(instance_arn)
        name, version = update.name(attribute), update.name("ver")
        update.set(attribute, member_to_dict(member))
        update.set_expression(f"{version} = if_not_exists({version}, {update.value(0)}) + {update.value(1)}")
        for field_name, value in (("grp", [list(pair) for pair in group]), ("where", instance_to_dict(where))):
            placeholder = update.name(field_name)
            update.set_expression(f"{placeholder} = if_not_exists({placeholder}, {update.value(value)})")
        update.set("expires_at", int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds()))
        newer = f"attribute_not_exists({name}) OR {name}.{update.name('v')} < {update.value(member.version)}"
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=_key(arn),
                ConditionExpression=newer,
                ReturnValues="ALL_NEW",
                ReturnValuesOnConditionCheckFailure="ALL_OLD",
                **update.arguments(),
            )
        except ClientError as error:
            if _too_large(error):
                # A group past DynamoDB's item size (about a thousand members): this one is not grouped and
                # pages on its own (MAX_MEMBERS bounds the in-memory store the same way).
                return self.load_group(arn) or GroupRecord(arn, group, where)
            if not _condition_failed(error):
                raise
            old: dict[str, Any] | None = error.response.get("Item")  # type: ignore[assignment]
            return decode_group(arn, old) if old else GroupRecord(arn, group, where)
        return decode_group(arn, response["Attributes"])

    def commit_fleets(self, record: GroupRecord, *, acted: bool = False) -> GroupRecord:
        update = _Update()
        update.set("f", known_list_to_dict(record.incidents))
        update.set("fv", record.incidents_version + 1)
        update.set("acts", [action_to_dict(action) for action in record.actions])
        if acted:
            version = update.name("ver")
            update.set_expression(f"{version} = if_not_exists({version}, {update.value(0)}) + {update.value(1)}")
        _mark_open(update, record.arn, is_open=any(k.status == "OPEN" for k in record.incidents))
        fv = update.name("fv")
        if record.incidents_version == 0:
            condition = f"attribute_exists(pk) AND attribute_not_exists({fv})"
        else:
            condition = f"{fv} = {update.value(record.incidents_version)}"
        try:
            response = self._client.update_item(
                TableName=self.table_name,
                Key=_key(record.arn),
                ConditionExpression=condition,
                ReturnValues="ALL_NEW",
                **update.arguments(),
            )
        except ClientError as error:
            if _condition_failed(error):
                raise ConcurrentUpdateError(
                    f"{record.arn}: its fleet incidents changed since they were read"
                ) from error
            raise
        return decode_group(record.arn, response["Attributes"])

    # --- The sweep ---------------------------------------------------------------------------------------------

    def open_records(self) -> Iterator[str]:
        """The ARNs of the records with something open (instances and groups), from the Open index."""
        for shard in range(SWEEP_SHARDS):
            arguments: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": OPEN_INDEX,
                "KeyConditionExpression": "#s = :s",
                "ExpressionAttributeNames": {"#s": "sweep"},
                "ExpressionAttributeValues": {":s": {"S": _shard(shard)}},
            }
            while True:
                page = self._client.query(**arguments)
                for item in page.get("Items", []):
                    rid = item.get("rid", {}).get("S")
                    if rid:
                        yield rid
                if "LastEvaluatedKey" not in page:
                    break
                arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # --- The resume notifier's ledger ---------------------------------------------------------------------

    def delivered(self, key: str) -> bool:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"DELIVERY#{key}"}, "sk": {"S": "DELIVERY"}},
            ConsistentRead=True,
        )
        return "Item" in response

    def mark_delivered(self, key: str) -> None:
        item = {
            "pk": f"DELIVERY#{key}",
            "sk": "DELIVERY",
            "expires_at": int(time.time() + DELIVERY_TTL.total_seconds()),
        }
        self._client.put_item(TableName=self.table_name, Item=_typed(item))

    def remember_page(self, dedup_key: str, arn: str) -> None:
        # UpdateItem, not PutItem: the router's role writes the table with UpdateItem only.
        self._client.update_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"PAGE#{dedup_key}"}, "sk": {"S": "PAGE"}},
            UpdateExpression="SET #arn = :arn, expires_at = :ttl",
            ExpressionAttributeNames={"#arn": "arn"},
            ExpressionAttributeValues={
                ":arn": {"S": arn},
                ":ttl": {"N": str(int(time.time() + PAGE_TTL.total_seconds()))},
            },
        )

    def page_record(self, dedup_key: str) -> str | None:
        response = self._client.get_item(
            TableName=self.table_name,
            Key={"pk": {"S": f"PAGE#{dedup_key}"}, "sk": {"S": "PAGE"}},
            ConsistentRead=True,
        )
        item = response.get("Item") or {}
        value = item.get("arn", {}).get("S")
        return value if isinstance(value, str) else None


class _VersionMoved(Exception):
    """The lease is still held, but facts arrived since the holder looked."""


class _Update:
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
    return record_from_parts(arn, item, _plain)


def decode_group(arn: str, item: dict[str, Any]) -> GroupRecord:
    """A stored group item back into a record."""
    data = _plain(item)
    group: Group = tuple((str(name), str(value)) for name, value in data.get("grp") or [])
    record = GroupRecord(
        arn,
        group,
        instance_from_dict(data["where"]),
        version=int(data.get("ver", 0)),
        incidents_version=int(data.get("fv", 0)),
    )
    record.incidents = known_list_from_dict(data.get("f"))
    record.actions = [action_from_dict(action) for action in data.get("acts") or []]
    for name, value in data.items():
        if name.startswith("m_"):
            member = member_from_dict(value)
            record.members[member.instance.container_instance_arn] = member
        elif name.startswith("d_"):
            delivery = delivery_from_dict(value)
            record.deliveries[(delivery.receiver, delivery.subject)] = delivery
        elif name.startswith("l_"):
            lease = lease_from_dict(value)
            record.leases[lease.receiver] = lease
    return record


def _key(arn: str) -> dict[str, Any]:
    pk = group_pk(arn) if is_group(arn) else instance_pk(arn)
    return {"pk": {"S": pk}, "sk": {"S": SK}}


def _has_open(record: InstanceRecord) -> bool:
    return any(k.status == "OPEN" for known in record.incidents.values() for k in known)


def _shard(number: int) -> str:
    return f"open#{number}"


def _mark_open(update: _Update, arn: str, *, is_open: bool) -> None:
    """List the record in the Open index while it has something open, and take it off when it has not."""
    if is_open:
        update.set("sweep", _shard(int(digest(arn), 16) % SWEEP_SHARDS))
        update.set("rid", arn)
    else:
        update.remove("sweep")
        update.remove("rid")


def _too_large(error: ClientError) -> bool:
    details = error.response.get("Error", {})
    return details.get("Code") == "ValidationException" and "size" in str(details.get("Message", "")).lower()


def _condition_failed(error: ClientError) -> bool:
    return bool(error.response.get("Error", {}).get("Code") == _CONDITION_FAILED)


def _dynamo(value: Any) -> Any:
    """DynamoDB numbers are Decimals (TypeSerializer refuses floats)."""
    if isinstance(value, float):
        return Decimal(repr(value))
    if isinstance(value, dict):
        return {key: _dynamo(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_dynamo(item) for item in value]
    return value


def _typed(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _serializer.serialize(_dynamo(value)) for key, value in item.items()}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {key: _undecimal(_deserializer.deserialize(value)) for key, value in item.items()}


def _undecimal(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_undecimal(item) for item in value]
    if isinstance(value, dict):
        return {key: _undecimal(item) for key, item in value.items()}
    return value
