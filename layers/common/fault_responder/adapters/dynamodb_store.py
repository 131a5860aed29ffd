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

A group of instances (fleet incidents) is a partition of its own, pk = GROUP#<group labels>, whatever its size:
- sk = RECORD, the head: `grp` and `where` (the group), `f` and `fv` (the fleet identities and their version),
  `acts` (people's actions), `of`, `ofm` and `ofl` (the open fleet incident, its members joined and left),
  `r_<digest>` (the recent open members, while no fleet incident is open), `ver` (moved by every
  journal entry and action), `js` (the last journal number taken), and the same lease, delivery and backoff
  attributes as an instance;
- sk = M#<digest of the instance>: one instance's member (written only over an older version of it), with `og` (the
  group) and `oat` (when it opened) while it is open: the table's `Members` index lists the open members of a group
  by when they opened, so the members that opened in a window, or whether any is still open, are bounded queries;
- sk = J#<number>: the journal, what a fleet incident's thread names (a member joining or leaving).

Keys are hashed when too long for DynamoDB (partition key 2,048 bytes), and a record is compacted (oldest
facts first) before it could pass the 400 KB item limit. Every item expires through TTL (`expires_at`): a
record with an open incident after OPEN_RECORD_TTL without news, any other after the retention period.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import Any, TypeVar

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from fault_responder.adapters.dynamo_conditions import Written, conditionally
from fault_responder.adapters.serialization import (
    action_from_dict,
    action_to_dict,
    backoff_from_dict,
    backoff_to_dict,
    check_to_dict,
    delivery_from_dict,
    delivery_to_dict,
    fleet_identities_from_dict,
    fleet_identities_to_dict,
    has_instance_facts,
    instance_facts_to_dict,
    instance_from_dict,
    instance_to_dict,
    journal_from_dict,
    journal_to_dict,
    lease_from_dict,
    lease_to_dict,
    member_from_dict,
    member_to_dict,
    recent_from_dict,
    recent_to_dict,
    record_from_parts,
)
from fault_responder.alerting.store import (
    Committed,
    ConcurrentUpdateError,
    LeaseLostError,
    RecordTooLargeError,
    carried,
)
from fault_responder.core.domain import FleetMember, InstanceRef
from fault_responder.core.observability import count
from fault_responder.events.envelope import EARLIEST
from fault_responder.incidents.record import Backoff, Delivery, InstanceRecord, Lease, compact, digest
from fault_responder.noise.fleet import (
    Group,
    GroupRecord,
    JournalEntry,
    MemberWrite,
    Recent,
    Told,
    already_told,
    is_group,
)

log = logging.getLogger(__name__)
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
MAX_MEMBER_WRITES = 10
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


def _sortable(moment: datetime) -> str:
    """A time as text that sorts as the time does (fixed width, UTC)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
        listed: bool = False,
    ) -> Committed:
        update = _Update()
        parts = self._fitting_parts(record)
        update.set("ver", record.version + 1)
        update.set("expires_at", self._expiry(record, listed=listed))
        update.set("ref", instance_to_dict(record.instance))
        _mark_open(update, record.arn, is_open=_has_open(record) or listed)
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
        written = self._conditional(
            _key(arn), update, condition, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.held:
            stored = decode(arn, written.old) if written.old else None
            raise ConcurrentUpdateError(f"{arn} changed since it was read", stored) from written.refusal
        record = decode(arn, written.response["Attributes"])
        held = {lease.receiver: lease for lease in leases if record.leases.get(lease.receiver) == lease}
        return Committed(record, held)

    def _conditional(self, key: dict[str, Any], update: _Update, condition: str, **options: Any) -> Written:
        """`update` of the item at `key` if `condition` holds (`options`: what DynamoDB returns)."""
        return conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name, Key=key, ConditionExpression=condition, **options, **update.arguments()
            )
        )

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

    def _expiry(self, record: InstanceRecord, *, listed: bool = False) -> int:
        open_incident = _has_open(record) or listed
        keep = max(self.retention, OPEN_RECORD_TTL) if open_incident else self.retention
        return int(time.time() + keep.total_seconds())

    def unlist(self, arn: str, version: int) -> bool:
        update = _Update()
        update.remove("sweep")
        update.remove("rid")
        condition = f"attribute_exists(pk) AND {update.name('ver')} = {update.value(version)}"
        return self._conditional(_key(arn), update, condition).held

    # --- Leases and deliveries -------------------------------------------------------------------------

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        update = _Update()
        name = update.name(lease_attribute(lease.receiver))
        update.set(lease_attribute(lease.receiver), lease_to_dict(lease))
        until = update.name("until")
        condition = f"attribute_exists(pk) AND (attribute_not_exists({name}) OR {name}.{until} < {update.value(now)})"
        return self._conditional(_key(arn), update, condition).held

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        update = _Update()
        update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))
        self._as_holder(arn, lease, update, extra=None)

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        return self._release(arn, lease, version, _Update())

    def record_and_release(self, arn: str, lease: Lease, delivery: Delivery, version: int) -> bool:
        update = _Update()
        update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))
        return self._release(arn, lease, version, update)

    def _release(self, arn: str, lease: Lease, version: int, update: _Update) -> bool:
        """`update`, with the lease and its backoff removed, if the record is still at `version`."""
        update.remove(lease_attribute(lease.receiver))
        update.remove(backoff_attribute(lease.receiver))
        try:
            self._as_holder(arn, lease, update, extra=f"{update.name('ver')} = {update.value(version)}")
        except _VersionMoved:
            return False
        return True

    def back_off(self, arn: str, lease: Lease, backoff: Backoff) -> None:
        update = _Update()
        update.set(backoff_attribute(backoff.receiver), backoff_to_dict(backoff))
        self._as_holder(arn, lease, update, extra=None)

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
        written = self._conditional(_key(arn), update, condition, ReturnValuesOnConditionCheckFailure="ALL_OLD")
        if written.held:
            return
        current = _plain(written.old).get(lease_attribute(lease.receiver)) if written.old else None
        if not current or current.get("owner") != lease.owner:
            raise LeaseLostError(f"lease of {lease.receiver} on {arn} is not held by {lease.owner}")
        raise _VersionMoved

    # --- Groups (fleet incidents) ----------------------------------------------------------------------------

    def load_group(self, arn: str) -> GroupRecord | None:
        response = self._client.get_item(TableName=self.table_name, Key=_key(arn), ConsistentRead=True)
        item = response.get("Item")
        return decode_group(arn, item) if item else None

    def register(self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: Recent) -> GroupRecord:
        update = _Update()
        update.set(recent_attribute(instance_arn), recent_to_dict(instance_arn, member))
        self._head_exists(update, group, where)
        condition = f"attribute_not_exists({update.name('of')})"
        written = self._conditional(
            _key(arn), update, condition, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.held:
            return decode_group(arn, written.old or {})  # a fleet incident is open: the head as it is
        return decode_group(arn, written.response["Attributes"])

    def _head_exists(self, update: _Update, group: Group, where: InstanceRef) -> None:
        """A write that may be the head's first: the group and its counters where they are missing."""
        labels = [list(pair) for pair in group]
        for field_name, value in (("grp", labels), ("where", instance_to_dict(where)), ("fv", 0), ("ver", 0)):
            placeholder = update.name(field_name)
            update.set_expression(f"{placeholder} = if_not_exists({placeholder}, {update.value(value)})")
        update.set("expires_at", int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds()))

    def forget_recent(self, arn: str, instance_arns: Sequence[str]) -> None:
        if not instance_arns:
            return
        update = _Update()
        for instance_arn in instance_arns:
            update.remove(recent_attribute(instance_arn))
        self._conditional(_key(arn), update, "attribute_exists(pk)")  # (a head that is gone has nothing to forget)

    def put_member(
        self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: FleetMember
    ) -> MemberWrite:
        # One UpdateItem: the member's item also carries its place in the Members index while it is open, so the two
        # never disagree. The same incident keeps what the fleet's thread was told of it; a new one starts afresh.
        for _ in range(MAX_MEMBER_WRITES):
            try:
                old = self._write_member(arn, instance_arn, member, same_incident=True)
            except _NotWritten as refused:
                current = refused.stored
                if current is not None and current.version >= member.version:
                    return MemberWrite(current, current, written=False)
                try:
                    old = self._write_member(arn, instance_arn, member, same_incident=False)
                except _NotWritten:
                    continue  # another writer changed this member meanwhile: try again
            return MemberWrite(carried(old, member), old, written=True)
        raise ConcurrentUpdateError(f"the member {instance_arn} of {arn} kept changing")

    def _write_member(
        self, arn: str, instance_arn: str, member: FleetMember, *, same_incident: bool
    ) -> FleetMember | None:
        """Write the member over an older version of the same incident (`same_incident`), or over an older version
        of another incident or nothing; the member as it was, or _NotWritten with what is stored."""
        update = _Update()
        for name, value in member_to_dict(member).items():
            if name in ("fleet", "told"):
                if not same_incident:
                    update.remove(name)
                continue
            if value is None:
                update.remove(name)
            else:
                update.set(name, value)
        if member.is_open:
            update.set("og", group_pk(arn))
            update.set("oat", f"{_sortable(member.opened_at)}#{digest(instance_arn, 32)}")
        else:
            update.remove("og")
            update.remove("oat")
        update.set("expires_at", int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds()))
        version, incident = update.name("v"), update.name("incident")
        newer = f"{version} < {update.value(member.version)}"
        if same_incident:
            condition = f"{newer} AND {incident} = {update.value(member.incident)}"
        else:
            condition = f"attribute_not_exists(pk) OR ({newer} AND {incident} <> {update.value(member.incident)})"
        key = {"pk": {"S": group_pk(arn)}, "sk": {"S": member_key(instance_arn)}}
        written = self._conditional(
            key, update, condition, ReturnValues="ALL_OLD", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.held:
            raise _NotWritten(_member(arn, written.old))
        return _member(arn, written.response.get("Attributes"))

    def mark_member(self, arn: str, member: FleetMember, *, fleet: str, told: Told) -> bool:
        key = {"pk": {"S": group_pk(arn)}, "sk": {"S": member_key(member.instance.container_instance_arn)}}
        already = already_told(told)
        done = [f":d{number}" for number in range(len(already))]
        written = conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key=key,
                UpdateExpression="SET #f = :f, #t = :t",
                # (the same incident, and not told this or a later step in this fleet: a claim one delivery wins)
                ConditionExpression=f"#i = :i AND NOT (#f = :f AND #t IN ({', '.join(done)}))",
                ExpressionAttributeNames={"#f": "fleet", "#t": "told", "#i": "incident"},
                ExpressionAttributeValues={
                    ":f": {"S": fleet},
                    ":t": {"S": told.value},
                    ":i": {"S": member.incident},
                    **{name: {"S": value} for name, value in zip(done, already, strict=True)},
                },
            )
        )
        return written.held

    def open_members(
        self, arn: str, since: datetime, until: datetime | None = None, *, limit: int
    ) -> list[FleetMember]:
        arguments = _members_query(self.table_name, arn, since, until)
        found: list[FleetMember] = []
        while len(found) < limit:
            page = self._client.query(**arguments, Limit=limit - len(found))
            for item in page.get("Items", []):
                member = _member(arn, item)
                if member is not None:
                    found.append(member)
            if "LastEvaluatedKey" not in page:
                break
            arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        return found

    def count_open(self, arn: str, since: datetime) -> int:
        arguments = {**_members_query(self.table_name, arn, since, None), "Select": "COUNT"}
        total = 0
        while True:
            page = self._client.query(**arguments)
            total += int(page.get("Count", 0))
            if "LastEvaluatedKey" not in page:
                return total
            arguments["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def advance(self, arn: str, fleet: str, *, joined: bool) -> GroupRecord | None:
        counter = "ofm" if joined else "ofl"
        additions = "#ver :one, #js :one, #n :one"
        written = conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key=_key(arn),
                UpdateExpression=f"ADD {additions}",
                ConditionExpression="#of = :fleet",
                ExpressionAttributeNames={"#ver": "ver", "#js": "js", "#of": "of", "#n": counter},
                ExpressionAttributeValues={":one": {"N": "1"}, ":fleet": {"S": fleet}},
                ReturnValues="ALL_NEW",
            )
        )
        return decode_group(arn, written.response["Attributes"]) if written.held else None

    def append_journal(self, arn: str, entry: JournalEntry) -> None:
        # UpdateItem, not PutItem: the router's role writes the table with UpdateItem only.
        update = _Update()
        for name, value in journal_to_dict(entry).items():
            update.set(name, value)
        update.set("expires_at", int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds()))
        key = {"pk": {"S": group_pk(arn)}, "sk": {"S": journal_sk(entry.seq)}}
        self._client.update_item(TableName=self.table_name, Key=key, **update.arguments())

    def journal(self, arn: str, after: int, *, limit: int) -> list[JournalEntry]:
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND sk BETWEEN :lo AND :hi",
            ExpressionAttributeValues={
                ":pk": {"S": group_pk(arn)},
                ":lo": {"S": journal_sk(after + 1)},
                ":hi": {"S": "J#~"},
            },
            ConsistentRead=True,
            Limit=limit,
        )
        entries: list[JournalEntry] = []
        for item in response.get("Items", []):
            entry = _readable(arn, "journal", partial(_journal_entry, item))
            if entry is not None:
                entries.append(entry)
        return entries

    def commit_fleets(
        self,
        record: GroupRecord,
        *,
        acted: bool = False,
        expected_version: int | None = None,
        listed: bool = False,
        forget: Sequence[str] = (),
    ) -> GroupRecord:
        update = _Update()
        update.set("f", fleet_identities_to_dict(record.incidents))
        update.set("fv", record.incidents_version + 1)
        update.set("acts", [action_to_dict(action) for action in record.actions])
        for field_name, value in (
            ("grp", [list(pair) for pair in record.group]),
            ("where", instance_to_dict(record.where)),
        ):
            placeholder = update.name(field_name)
            update.set_expression(f"{placeholder} = if_not_exists({placeholder}, {update.value(value)})")
        for instance_arn in forget:
            update.remove(recent_attribute(instance_arn))
        version = update.name("ver")
        increment = 1 if acted else 0
        update.set_expression(f"{version} = if_not_exists({version}, {update.value(0)}) + {update.value(increment)}")
        if record.open_fleet is not None:
            # The live member count is the head's (joins ADD to it): set only when this write opens the fleet.
            update.set("of", record.open_fleet)
            members = update.name("ofm")
            update.set_expression(f"{members} = if_not_exists({members}, {update.value(record.joined)})")
        else:
            update.remove("of")
            update.remove("ofm")
            update.remove("ofl")
        update.set("expires_at", int(time.time() + max(self.retention, OPEN_RECORD_TTL).total_seconds()))
        _mark_open(update, record.arn, is_open=record.open_fleet is not None or listed)
        fv = update.name("fv")
        if record.incidents_version == 0:
            # A head no member registered with (created here), or one with no fleet identities written yet.
            condition = f"(attribute_not_exists(pk) OR {fv} = {update.value(0)})"
        else:
            condition = f"{fv} = {update.value(record.incidents_version)}"
        if expected_version is not None:
            condition += f" AND {version} = {update.value(expected_version)}"
        written = self._conditional(_key(record.arn), update, condition, ReturnValues="ALL_NEW")
        if not written.held:
            message = f"{record.arn}: its fleet incidents changed since they were read"
            raise ConcurrentUpdateError(message) from written.refusal
        return decode_group(record.arn, written.response["Attributes"])

    # --- The sweep ---------------------------------------------------------------------------------------------

    def open_records(self) -> Iterator[str]:
        """The ARNs of the records on the sweep's list (instances and groups), from the Open index: the groups'
        shard first."""
        for shard in [GROUP_SHARD, *(_shard(number) for number in range(SWEEP_SHARDS))]:
            arguments: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": OPEN_INDEX,
                "KeyConditionExpression": "#s = :s",
                "ExpressionAttributeNames": {"#s": "sweep"},
                "ExpressionAttributeValues": {":s": {"S": shard}},
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
    """A stored group head back into a record. A part that cannot be read (a lease, a delivery, an action, the
    identities) is skipped with a metric and a log line: one bad value must not make every event of the group
    fail."""
    data = _plain(item)
    group: Group = tuple((str(name), str(value)) for name, value in data.get("grp") or [])
    where = _readable(arn, "where", lambda: instance_from_dict(data["where"]))
    record = GroupRecord(
        arn,
        group,
        where or InstanceRef("", "", "", "", None, None),
        version=int(data.get("ver", 0)),
        incidents_version=int(data.get("fv", 0)),
        open_fleet=data.get("of") if isinstance(data.get("of"), str) else None,
        joined=int(data.get("ofm") or 0),
        left=int(data.get("ofl") or 0),
        journal_seq=int(data.get("js") or 0),
    )
    record.incidents = _readable(arn, "fleets", lambda: fleet_identities_from_dict(data.get("f"))) or []
    actions = [_readable(arn, "action", partial(action_from_dict, action)) for action in data.get("acts") or []]
    record.actions = [action for action in actions if action is not None]
    for name, value in data.items():
        if name.startswith("d_"):
            delivery = _readable(arn, "delivery", partial(delivery_from_dict, value))
            if delivery is not None:
                record.deliveries[(delivery.receiver, delivery.subject)] = delivery
        elif name.startswith("l_"):
            lease = _readable(arn, "lease", partial(lease_from_dict, value))
            if lease is not None:
                record.leases[lease.receiver] = lease
        elif name.startswith("b_"):
            backoff = _readable(arn, "backoff", partial(backoff_from_dict, value))
            if backoff is not None:
                record.backoff[backoff.receiver] = backoff
        elif name.startswith("r_"):
            recent = _readable(arn, "recent", partial(_recent_member, value))
            if recent is not None:
                record.recent[recent[0]] = recent[1]
    return record


def _recent_member(value: dict[str, Any]) -> tuple[str, Recent]:
    arn, recent = recent_from_dict(value)
    if recent.opened_at < EARLIEST:
        raise ValueError("a recent member opened before any time an event may carry")
    return arn, recent


_T = TypeVar("_T")


class _NotWritten(Exception):
    """A member's conditional write refused: `stored` is what is there (None: nothing)."""

    def __init__(self, stored: FleetMember | None) -> None:
        super().__init__("not written")
        self.stored = stored


def _member(arn: str, item: dict[str, Any] | None) -> FleetMember | None:
    """A stored member, or None when there is none or it cannot be read (counted and logged)."""
    if not item:
        return None
    return _readable(arn, "member", partial(_member_from_item, item))


def _member_from_item(item: dict[str, Any]) -> FleetMember:
    member = member_from_dict(_plain(item))
    if member.opened_at < EARLIEST:
        raise ValueError("a member opened before any time an event may carry")
    return member


def _members_query(table: str, arn: str, since: datetime, until: datetime | None) -> dict[str, Any]:
    """The Members index's open members of a group that opened in [since, until]."""
    upper = f"{_sortable(until)}#~" if until is not None else "~"
    return {
        "TableName": table,
        "IndexName": MEMBERS_INDEX,
        "KeyConditionExpression": "og = :og AND oat BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {
            ":og": {"S": group_pk(arn)},
            ":lo": {"S": _sortable(since)},
            ":hi": {"S": upper},
        },
    }


def _journal_entry(item: dict[str, Any]) -> JournalEntry:
    return journal_from_dict(_plain(item))


def _readable(arn: str, part: str, read: Callable[[], _T]) -> _T | None:
    """A stored part read back, or None (counted, logged) when it cannot be."""
    try:
        return read()
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        count("UnreadableRecords", "Part", part)
        log.warning(
            "a part of a stored record cannot be read and is skipped",
            extra={"record": arn[:300], "part": part, "error": type(error).__name__},
        )
        return None


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
        update.set("sweep", GROUP_SHARD if is_group(arn) else _shard(int(digest(arn), 16) % SWEEP_SHARDS))
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
