"""The accounts and Regions whose events have been seen, in the incidents table (single table, see template.yaml
IncidentsTable): pk = PLACE, sk = `<account>#<region>`.

In organization mode the router notes each enrolled event's account and Region: one small item per pair (`account`,
`region`, `last_event_at` in ISO 8601 UTC, `expires_at` for the table's TTL). It writes it at most once a minute per
pair: a container remembers what it wrote, and the write is conditional on the item being a minute old, so that a
storm costs one write a minute per pair, whatever the containers. A write that fails is logged and never fails the
event. An item no event refreshed for RETENTION expires: a pair that sent nothing for that long is not seen any more.

The reconciliation reads them (fault_responder.operations.organization.acting_places): where EnrolledAccounts or
EnrolledRegions is not listed, the pairs seen are where it acts. One partition, read with one paginated Query, at most
`limit` items.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from fault_responder.adapters.dynamo_conditions import conditionally
from fault_responder.core.places import Place

log = logging.getLogger(__name__)

PK = "PLACE"
NOTE_SECONDS = 60.0
"""A pair's item is written at most this often."""
RETENTION = timedelta(days=30)
MAX_REMEMBERED = 10_000
"""Pairs a container remembers having written (then it forgets them all and writes each once more)."""


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DynamoDBPlacesStore:
    def __init__(self, table_name: str, client: Any | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self._client = client
        self._clock = clock
        self._written: dict[Place, float] = {}
        self._lock = threading.Lock()
        self.writes = 0

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = boto3.client("dynamodb")
        return self._client

    def note(self, place: Place) -> bool:
        """The pair's event seen now: True if the item was written (a minute or more after the last write)."""
        now = self._clock()
        with self._lock:
            last = self._written.get(place)
            if last is not None and now - last < NOTE_SECONDS:
                return False
            if len(self._written) >= MAX_REMEMBERED:
                self._written.clear()
            self._written[place] = now
        try:
            written = conditionally(
                lambda: self.client.update_item(
                    TableName=self.table_name,
                    Key={"pk": {"S": PK}, "sk": {"S": f"{place.account}#{place.region}"}},
                    UpdateExpression="SET #account = :account, #region = :region, #seen = :seen, #expires = :expires",
                    ConditionExpression="attribute_not_exists(#seen) OR #seen < :before",
                    ExpressionAttributeNames={
                        "#account": "account",
                        "#region": "region",
                        "#seen": "last_event_at",
                        "#expires": "expires_at",
                    },
                    ExpressionAttributeValues={
                        ":account": {"S": place.account},
                        ":region": {"S": place.region},
                        ":seen": {"S": _iso(now)},
                        ":before": {"S": _iso(now - NOTE_SECONDS)},
                        ":expires": {"N": str(int(now + RETENTION.total_seconds()))},
                    },
                )
            )
        except (ClientError, BotoCoreError) as error:
            log.warning("could not note the events seen of %s: %s", place, error)
            return False
        if not written.held:
            return False  # another container wrote it within the minute
        self.writes += 1
        return True

    def seen(self, limit: int) -> list[tuple[Place, str]]:
        """The pairs seen and when each was last (newest items first is not promised: in key order), at most
        `limit`; an item that cannot be read is left out, logged."""
        found: list[tuple[Place, str]] = []
        now = _iso(self._clock())
        paginator = self.client.get_paginator("query")
        pages = paginator.paginate(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": PK}},
        )
        for page in pages:
            for item in page.get("Items", []):
                try:
                    place = Place.of(item["account"]["S"], item["region"]["S"])
                    last = item["last_event_at"]["S"]
                    expires = int(item.get("expires_at", {}).get("N", "0"))
                except (KeyError, TypeError, ValueError) as error:
                    log.warning("a place item could not be read: %s", error, extra={"sk": str(item.get("sk"))[:100]})
                    continue
                if expires and _iso(expires) < now:
                    continue  # expired, not deleted yet (TTL deletes within days)
                found.append((place, last))
                if len(found) >= limit:
                    return found
        return found
