"""Silences in the incidents table (single table, see template.yaml IncidentsTable): pk = SILENCE, sk = the id.

One item per silence: its matchers (a list of {name, op, value}), starts_at, ends_at and created_at (ISO 8601
UTC), created_by and comment. `expires_at` (epoch seconds, the table's TTL attribute) is the end plus the
retention period: an expired silence stays listable that long, then DynamoDB deletes it. TTL deletes late (within
days), so reads leave out what is past its `expires_at` themselves.

All silences share one partition, read with one paginated Query: a fleet has tens of silences, not thousands.

A silence's item also keeps how far telling its channels that it started, and that it ended, went (`ann_started`,
`ann_ended`: fault_responder.noise.silences.Announcement as a map, with its version `v`); each write of one is
conditional on the version read, so two sweeps never both own it. Reading and expiring a silence leave them alone.
A silence that cannot be read (damaged, or stored in another shape) is left out of every listing with an
`UnreadableRecords` count (Part `silence`) and a log line naming it: the others still apply.
"""

from __future__ import annotations

import builtins
import logging
import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from fault_responder.adapters.dynamo_conditions import conditionally
from fault_responder.noise.silences import (
    Announcement,
    Phase,
    Silence,
    SilenceAlreadyExpiredError,
    SilenceError,
    SilenceExistsError,
    SilenceState,
    UnknownSilenceError,
    check_id,
    iso,
    matcher_from_dict,
    matcher_to_dict,
)

log = logging.getLogger(__name__)

PK = "SILENCE"
UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)
"""What reading a damaged silence raises (a SilenceError or MatcherError is a ValueError)."""
MAX_SHOWN = 200
DEFAULT_RETENTION = timedelta(days=7)
_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _utcnow() -> datetime:
    return datetime.now(UTC)


class DynamoDBSilenceStore:
    def __init__(
        self,
        table_name: str,
        client: Any | None = None,
        *,
        retention: timedelta = DEFAULT_RETENTION,
        clock: Callable[[], datetime] = _utcnow,
        page_size: int | None = None,
    ) -> None:
        """`retention`: how long an expired silence stays listable; `page_size`: items per Query page (default:
        DynamoDB's 1 MB pages)."""
        if retention < timedelta(0):
            raise ValueError("the retention period cannot be negative")
        self.table_name = table_name
        self.retention = retention
        self._clock = clock
        self._page_size = page_size
        self._client = client or boto3.client("dynamodb")

    def add(self, silence: Silence) -> Silence:
        """Stores a new silence; SilenceExistsError if its id is taken."""
        written = conditionally(
            lambda: self._client.put_item(
                TableName=self.table_name,
                Item=self._item(silence),
                ConditionExpression="attribute_not_exists(pk)",
            )
        )
        if not written.held:
            raise SilenceExistsError(silence.id)
        return silence

    def get(self, silence_id: str) -> Silence | None:
        response = self._client.get_item(TableName=self.table_name, Key=_key(check_id(silence_id)), ConsistentRead=True)
        item = response.get("Item")
        try:
            if item is None or self._past_retention(item, self._clock()):
                return None
            return decode(item)
        except UNREADABLE as error:
            unreadable(item or {}, error)
            raise SilenceError(
                f"silence {silence_id} is stored but cannot be read ({type(error).__name__}: {str(error)[:MAX_SHOWN]})"
            ) from None

    def list(self, include_expired: bool = False, *, now: datetime | None = None) -> builtins.list[Silence]:
        """Every silence (pending and active; expired ones too with include_expired), oldest first."""
        moment = now or self._clock()
        silences = []
        for item in self._items():
            try:
                if self._past_retention(item, moment):
                    continue
                silence = decode(item)
            except UNREADABLE as error:
                unreadable(item, error)
                continue
            if include_expired or silence.state(moment) != SilenceState.EXPIRED:
                silences.append(silence)
        return sorted(silences, key=lambda silence: (silence.created_at, silence.id))

    def active(self, now: datetime) -> builtins.list[Silence]:
        return [silence for silence in self.list(now=now) if silence.state(now) == SilenceState.ACTIVE]

    def expire(self, silence_id: str, now: datetime) -> Silence:
        """Ends a pending or active silence at `now` and returns it; UnknownSilenceError or
        SilenceAlreadyExpiredError otherwise. Conditional on the silence being as read, so two people expiring
        the same silence at once get one success and one "already expired"."""
        current = self.get(silence_id)
        if current is None:
            raise UnknownSilenceError(silence_id)
        ended = current.expired_at(now)
        written = conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key=_key(silence_id),
                UpdateExpression="SET starts_at = :starts, ends_at = :ends, expires_at = :expires",
                ConditionExpression="starts_at = :was_starts AND ends_at = :was_ends",
                ExpressionAttributeValues={
                    ":starts": {"S": iso(ended.starts_at)},
                    ":ends": {"S": iso(ended.ends_at)},
                    ":expires": {"N": str(self._expires_at(ended))},
                    ":was_starts": {"S": iso(current.starts_at)},
                    ":was_ends": {"S": iso(current.ends_at)},
                },
                ReturnValues="ALL_NEW",
            )
        )
        if not written.held:
            changed = self.get(silence_id)
            if changed is None:
                raise UnknownSilenceError(silence_id)
            raise SilenceAlreadyExpiredError(changed)
        return decode(written.response["Attributes"])

    def announcements(
        self, now: datetime, within: timedelta
    ) -> builtins.list[tuple[Silence, dict[Phase, Announcement]]]:
        """The silences that started or ended within `within` of `now` (active ones, and those expired that recently),
        each with how far telling its channels went: what the sweep may have to tell."""
        found = []
        for item in self._items():
            try:
                if self._past_retention(item, now):
                    continue
                silence = decode(item)
                announced = {phase: _announcement(item.get(f"ann_{phase.value}")) for phase in Phase}
            except UNREADABLE as error:
                unreadable(item, error)
                continue
            state = silence.state(now)
            if state == SilenceState.PENDING or (state == SilenceState.EXPIRED and now - silence.ends_at > within):
                continue
            found.append((silence, {phase: told for phase, told in announced.items() if told is not None}))
        return sorted(found, key=lambda pair: (pair[0].created_at, pair[0].id))

    def write_announcement(self, silence_id: str, phase: Phase, read: int, announcement: Announcement) -> bool:
        """Write how far telling the silence's `phase` went, if nobody wrote it since it was read at version `read`
        (0: never written); False when somebody did (or the silence is gone). The announcement's version must be
        `read + 1`."""
        if announcement.version != read + 1:
            raise ValueError(
                f"an announcement read at version {read} is written at {read + 1}, not {announcement.version}"
            )
        name = f"ann_{phase.value}"
        condition = "attribute_exists(pk) AND " + (
            f"attribute_not_exists({name})" if read == 0 else f"{name}.v = :read"
        )
        values: dict[str, Any] = {":announcement": _serializer.serialize(_announcement_item(announcement))}
        if read:
            values[":read"] = {"N": str(read)}
        written = conditionally(
            lambda: self._client.update_item(
                TableName=self.table_name,
                Key=_key(check_id(silence_id)),
                UpdateExpression=f"SET {name} = :announcement",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        )
        return written.held

    # --- Items ---------------------------------------------------------------------------------------

    def _items(self) -> builtins.list[dict[str, Any]]:
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": PK}},
            "ConsistentRead": True,
        }
        if self._page_size is not None:
            request["Limit"] = self._page_size
        items: builtins.list[dict[str, Any]] = []
        while True:
            response = self._client.query(**request)
            items.extend(response.get("Items", []))
            if "LastEvaluatedKey" not in response:
                return items
            request["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    def _item(self, silence: Silence) -> dict[str, Any]:
        plain = {
            "pk": PK,
            "sk": silence.id,
            "matchers": [matcher_to_dict(matcher) for matcher in silence.matchers],
            "starts_at": iso(silence.starts_at),
            "ends_at": iso(silence.ends_at),
            "created_by": silence.created_by,
            "comment": silence.comment,
            "created_at": iso(silence.created_at),
            "expires_at": self._expires_at(silence),
        }
        return {name: _serializer.serialize(value) for name, value in plain.items()}

    def _expires_at(self, silence: Silence) -> int:
        return math.ceil((silence.ends_at + self.retention).timestamp())

    @staticmethod
    def _past_retention(item: dict[str, Any], now: datetime) -> bool:
        expires = item.get("expires_at")
        return expires is not None and int(expires["N"]) <= now.timestamp()


def decode(item: dict[str, Any]) -> Silence:
    plain = {name: _deserializer.deserialize(value) for name, value in item.items()}
    return Silence(
        id=str(plain["sk"]),
        matchers=tuple(matcher_from_dict(matcher) for matcher in plain["matchers"]),
        starts_at=datetime.fromisoformat(str(plain["starts_at"])),
        ends_at=datetime.fromisoformat(str(plain["ends_at"])),
        created_by=str(plain["created_by"]),
        comment=str(plain["comment"]),
        created_at=datetime.fromisoformat(str(plain["created_at"])),
    )


def _announcement(value: Any) -> Announcement | None:
    """An announcement as stored (a DynamoDB map), None when there is none yet."""
    if value is None:
        return None
    plain = _deserializer.deserialize(value)
    pending = plain.get("pending") or {}
    return Announcement(
        version=int(plain["v"]),
        owner=str(plain["owner"]) if plain.get("owner") else None,
        until=float(plain.get("until", 0)),
        receivers=tuple(str(name) for name in plain.get("receivers") or []),
        told=tuple(str(name) for name in plain.get("told") or []),
        pending=tuple(sorted((str(name), float(at)) for name, at in pending.items())),
        done=bool(plain.get("done", False)),
    )


def _announcement_item(announcement: Announcement) -> dict[str, Any]:
    item: dict[str, Any] = {
        "v": announcement.version,
        "until": Decimal(str(round(announcement.until, 3))),
        "receivers": list(announcement.receivers),
        "told": list(announcement.told),
        "pending": {name: Decimal(str(round(at, 3))) for name, at in announcement.pending},
        "done": announcement.done,
    }
    if announcement.owner is not None:
        item["owner"] = announcement.owner
    return item


def unreadable(item: dict[str, Any], error: Exception) -> None:
    """Count and log a silence that cannot be read: its id (as stored) is named, the error is clipped."""
    # Imported here: only an unreadable silence pays for Powertools' metrics.
    from fault_responder.core.observability import count  # noqa: PLC0415

    stored_id = item.get("sk", {}).get("S") if isinstance(item.get("sk"), dict) else None
    count("UnreadableRecords", "Part", "silence")
    log.warning(
        "a stored silence cannot be read; it is skipped, the others apply",
        extra={
            "silence": str(stored_id)[:MAX_SHOWN],
            "error": f"{type(error).__name__}: {str(error)[:MAX_SHOWN]}",
        },
    )


def _key(silence_id: str) -> dict[str, Any]:
    return {"pk": {"S": PK}, "sk": {"S": silence_id}}
