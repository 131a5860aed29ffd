"""The alert service's store ports (Records, Leases, Fleets: alerting/store.py) on DynamoDB (single table, see
template.yaml IncidentsTable).

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

The store is one class in three modules: the records, leases, the sweep's list and the ledgers here; the groups in
fault_responder.adapters.dynamodb_fleets; the keys, attribute names and typed values in
fault_responder.adapters.dynamodb_items.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from fault_responder.adapters.dynamodb_fleets import FleetItems, decode_group
from fault_responder.adapters.dynamodb_items import (
    GROUP_SHARD,
    OPEN_INDEX,
    OPEN_RECORD_TTL,
    SK,
    SWEEP_SHARDS,
    Update,
    backoff_attribute,
    check_attribute,
    decode,
    delivery_attribute,
    instance_pk,
    lease_attribute,
    mark_open,
    plain,
    sweep_shard,
    table_key,
    typed,
)
from fault_responder.adapters.serialization import (
    backoff_to_dict,
    check_to_dict,
    delivery_to_dict,
    has_instance_facts,
    instance_facts_to_dict,
    instance_to_dict,
    lease_to_dict,
)
from fault_responder.alerting.store import Committed, ConcurrentUpdateError, LeaseLostError, RecordTooLargeError
from fault_responder.incidents.record import Backoff, Delivery, InstanceRecord, Lease, compact

__all__ = ["SK", "DynamoDBInstanceStore", "check_attribute", "decode", "decode_group", "instance_pk"]

DELIVERY_TTL = timedelta(days=14)
PAGE_TTL = timedelta(days=90)
"""How long a PagerDuty alert's dedup key leads back to its record: as long as an open record is kept."""
MAX_ITEM_BYTES = 380_000
"""Below DynamoDB's 400 KB with room for attribute names and the few parts written separately."""


class DynamoDBInstanceStore(FleetItems):
    """The InstanceStore (fault_responder.alerting.store) on the incidents table: its records and leases here, its
    groups in FleetItems (fault_responder.adapters.dynamodb_fleets)."""

    # --- Reading -----------------------------------------------------------------------------------------

    def load(self, arn: str) -> InstanceRecord | None:
        response = self._client.get_item(TableName=self.table_name, Key=table_key(arn), ConsistentRead=True)
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
        update = Update()
        parts = self._fitting_parts(record)
        update.set("ver", record.version + 1)
        update.set("expires_at", self._expiry(record, listed=listed))
        update.set("ref", instance_to_dict(record.instance))
        mark_open(update, record.arn, is_open=_has_open(record) or listed)
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
        update = Update()
        version, ref = update.name("ver"), update.name("ref")
        update.set_expression(f"{version} = if_not_exists({version}, {update.value(0)}) + {update.value(1)}")
        update.set_expression(f"{ref} = if_not_exists({ref}, {update.value(instance_to_dict(record.instance))})")
        update.set("expires_at", self._expiry(record))
        mark_open(update, record.arn, is_open=_has_open(record))
        conditions = [f"attribute_not_exists({update.name('inst')})"]
        for check in checks:
            attribute = check_attribute(check)
            update.set(attribute, check_to_dict(record, check))
            conditions.append(f"attribute_not_exists({update.name(attribute)})")
        self._claims(update, leases, deliveries)
        return self._write(record.arn, update, " AND ".join(conditions), leases)

    def _claims(self, update: Update, leases: Sequence[Lease], deliveries: Sequence[Delivery]) -> None:
        for lease in leases:
            name = update.name(lease_attribute(lease.receiver))
            update.set_expression(f"{name} = if_not_exists({name}, {update.value(lease_to_dict(lease))})")
        for delivery in deliveries:
            update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))

    def _write(self, arn: str, update: Update, condition: str, leases: Sequence[Lease]) -> Committed:
        written = self._conditional(
            table_key(arn), update, condition, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.held:
            stored = decode(arn, written.old) if written.old else None
            raise ConcurrentUpdateError(f"{arn} changed since it was read", stored) from written.refusal
        record = decode(arn, written.response["Attributes"])
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

    def _expiry(self, record: InstanceRecord, *, listed: bool = False) -> int:
        open_incident = _has_open(record) or listed
        keep = max(self.retention, OPEN_RECORD_TTL) if open_incident else self.retention
        return int(time.time() + keep.total_seconds())

    def unlist(self, arn: str, version: int) -> bool:
        update = Update()
        update.remove("sweep")
        update.remove("rid")
        condition = f"attribute_exists(pk) AND {update.name('ver')} = {update.value(version)}"
        return self._conditional(table_key(arn), update, condition).held

    # --- Leases and deliveries -------------------------------------------------------------------------

    def take_lease(self, arn: str, lease: Lease, now: float) -> bool:
        update = Update()
        name = update.name(lease_attribute(lease.receiver))
        update.set(lease_attribute(lease.receiver), lease_to_dict(lease))
        until = update.name("until")
        condition = f"attribute_exists(pk) AND (attribute_not_exists({name}) OR {name}.{until} < {update.value(now)})"
        return self._conditional(table_key(arn), update, condition).held

    def record_delivery(self, arn: str, lease: Lease, delivery: Delivery) -> None:
        update = Update()
        update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))
        self._as_holder(arn, lease, update, extra=None)

    def release(self, arn: str, lease: Lease, version: int) -> bool:
        return self._release(arn, lease, version, Update())

    def record_and_release(self, arn: str, lease: Lease, delivery: Delivery, version: int) -> bool:
        update = Update()
        update.set(delivery_attribute(delivery.receiver, delivery.subject), delivery_to_dict(delivery))
        return self._release(arn, lease, version, update)

    def _release(self, arn: str, lease: Lease, version: int, update: Update) -> bool:
        """`update`, with the lease and its backoff removed, if the record is still at `version`."""
        update.remove(lease_attribute(lease.receiver))
        update.remove(backoff_attribute(lease.receiver))
        try:
            self._as_holder(arn, lease, update, extra=f"{update.name('ver')} = {update.value(version)}")
        except _VersionMoved:
            return False
        return True

    def back_off(self, arn: str, lease: Lease, backoff: Backoff) -> None:
        update = Update()
        update.set(backoff_attribute(backoff.receiver), backoff_to_dict(backoff))
        self._as_holder(arn, lease, update, extra=None)

    def drop_lease(self, arn: str, lease: Lease) -> None:
        update = Update()
        update.remove(lease_attribute(lease.receiver))
        try:
            self._as_holder(arn, lease, update, extra=None)
        except LeaseLostError:
            return

    def _as_holder(self, arn: str, lease: Lease, update: Update, extra: str | None) -> None:
        name = update.name(lease_attribute(lease.receiver))
        owner = update.name("owner")
        condition = f"{name}.{owner} = {update.value(lease.owner)}"
        if extra:
            condition = f"{condition} AND {extra}"
        written = self._conditional(table_key(arn), update, condition, ReturnValuesOnConditionCheckFailure="ALL_OLD")
        if written.held:
            return
        current = plain(written.old).get(lease_attribute(lease.receiver)) if written.old else None
        if not current or current.get("owner") != lease.owner:
            raise LeaseLostError(f"lease of {lease.receiver} on {arn} is not held by {lease.owner}")
        raise _VersionMoved

    # --- The sweep ---------------------------------------------------------------------------------------------

    def open_records(self) -> Iterator[str]:
        """The ARNs of the records on the sweep's list (instances and groups), from the Open index: the groups'
        shard first."""
        for shard in [GROUP_SHARD, *(sweep_shard(number) for number in range(SWEEP_SHARDS))]:
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
        self._client.put_item(TableName=self.table_name, Item=typed(item))

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


def _has_open(record: InstanceRecord) -> bool:
    return any(k.status == "OPEN" for known in record.incidents.values() for k in known)
