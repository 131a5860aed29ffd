"""The fleet incidents' items of the instance store (fault_responder.adapters.dynamodb_store, whose docstring lays them
out): a group's head, its members and its journal."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from fault_responder.adapters.dynamo_conditions import conditionally
from fault_responder.adapters.dynamodb_items import (
    MEMBERS_INDEX,
    Table,
    Update,
    group_pk,
    journal_sk,
    mark_open,
    member_key,
    plain,
    recent_attribute,
    sortable,
    table_key,
)
from fault_responder.adapters.serialization import (
    action_from_dict,
    action_to_dict,
    backoff_from_dict,
    delivery_from_dict,
    fleet_identities_from_dict,
    fleet_identities_to_dict,
    instance_from_dict,
    instance_to_dict,
    journal_from_dict,
    journal_to_dict,
    lease_from_dict,
    member_from_dict,
    member_to_dict,
    recent_from_dict,
    recent_to_dict,
)
from fault_responder.alerting.store import ConcurrentUpdateError, carried
from fault_responder.core.domain import FleetMember, InstanceRef
from fault_responder.core.observability import count
from fault_responder.events.envelope import EARLIEST
from fault_responder.incidents.record import digest
from fault_responder.noise.fleet import (
    Group,
    GroupRecord,
    JournalEntry,
    MemberWrite,
    Recent,
    Told,
    already_told,
)

log = logging.getLogger("fault_responder.adapters.dynamodb_store")  # the store's, whichever of its modules logs
MAX_MEMBER_WRITES = 10


class FleetItems(Table):
    """The instance store's groups (fleet incidents)."""

    def load_group(self, arn: str) -> GroupRecord | None:
        response = self._client.get_item(TableName=self.table_name, Key=table_key(arn), ConsistentRead=True)
        item = response.get("Item")
        return decode_group(arn, item) if item else None

    def register(self, arn: str, group: Group, where: InstanceRef, instance_arn: str, member: Recent) -> GroupRecord:
        update = Update()
        update.set(recent_attribute(instance_arn), recent_to_dict(instance_arn, member))
        self._head_exists(update, group, where)
        condition = f"attribute_not_exists({update.name('of')})"
        written = self._conditional(
            table_key(arn), update, condition, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
        )
        if not written.held:
            return decode_group(arn, written.old or {})  # a fleet incident is open: the head as it is
        return decode_group(arn, written.response["Attributes"])

    def _head_exists(self, update: Update, group: Group, where: InstanceRef) -> None:
        """A write that may be the head's first: the group and its counters where they are missing."""
        labels = [list(pair) for pair in group]
        for field_name, value in (("grp", labels), ("where", instance_to_dict(where)), ("fv", 0), ("ver", 0)):
            placeholder = update.name(field_name)
            update.set_expression(f"{placeholder} = if_not_exists({placeholder}, {update.value(value)})")
        update.set("expires_at", self._kept_open())

    def forget_recent(self, arn: str, instance_arns: Sequence[str]) -> None:
        if not instance_arns:
            return
        update = Update()
        for instance_arn in instance_arns:
            update.remove(recent_attribute(instance_arn))
        self._conditional(table_key(arn), update, "attribute_exists(pk)")  # (a head that is gone has nothing to forget)

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
        update = Update()
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
            update.set("oat", f"{sortable(member.opened_at)}#{digest(instance_arn, 32)}")
        else:
            update.remove("og")
            update.remove("oat")
        update.set("expires_at", self._kept_open())
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
                Key=table_key(arn),
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
        update = Update()
        for name, value in journal_to_dict(entry).items():
            update.set(name, value)
        update.set("expires_at", self._kept_open())
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
        update = Update()
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
        update.set("expires_at", self._kept_open())
        mark_open(update, record.arn, is_open=record.open_fleet is not None or listed)
        fv = update.name("fv")
        if record.incidents_version == 0:
            # A head no member registered with (created here), or one with no fleet identities written yet.
            condition = f"(attribute_not_exists(pk) OR {fv} = {update.value(0)})"
        else:
            condition = f"{fv} = {update.value(record.incidents_version)}"
        if expected_version is not None:
            condition += f" AND {version} = {update.value(expected_version)}"
        written = self._conditional(table_key(record.arn), update, condition, ReturnValues="ALL_NEW")
        if not written.held:
            message = f"{record.arn}: its fleet incidents changed since they were read"
            raise ConcurrentUpdateError(message) from written.refusal
        return decode_group(record.arn, written.response["Attributes"])


def decode_group(arn: str, item: dict[str, Any]) -> GroupRecord:
    """A stored group head back into a record. A part that cannot be read (a lease, a delivery, an action, the
    identities) is skipped with a metric and a log line: one bad value must not make every event of the group
    fail."""
    data = plain(item)
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
    member = member_from_dict(plain(item))
    if member.opened_at < EARLIEST:
        raise ValueError("a member opened before any time an event may carry")
    return member


def _members_query(table: str, arn: str, since: datetime, until: datetime | None) -> dict[str, Any]:
    """The Members index's open members of a group that opened in [since, until]."""
    upper = f"{sortable(until)}#~" if until is not None else "~"
    return {
        "TableName": table,
        "IndexName": MEMBERS_INDEX,
        "KeyConditionExpression": "og = :og AND oat BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {
            ":og": {"S": group_pk(arn)},
            ":lo": {"S": sortable(since)},
            ":hi": {"S": upper},
        },
    }


def _journal_entry(item: dict[str, Any]) -> JournalEntry:
    return journal_from_dict(plain(item))


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
