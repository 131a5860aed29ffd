"""moto's DynamoDB, answered faster: the same answers, written as JSON directly.

moto writes each answer by walking the operation's output shape in botocore's model, value by value. For the item
operations (an UpdateItem returning a record, a Query returning a page) that walk is more than half of the time
moto spends on a request, and the sandbox spends most of a storm's wall time waiting for DynamoDB. The result moto
builds is already DynamoDB's wire form (attribute values as `{"S": ...}`, numbers as strings) except binary
values, held as bytes, and times, held as datetimes; so for those operations the answer is `json.dumps` of it,
with bytes in base64 and times as epoch seconds, as DynamoDB's JSON protocol writes them. Anything else (errors,
the control plane, a result that is not a dict) goes through moto's own serializer.

A Query of the table itself (not of an index) reads its partition: moto lists every item of the table and keeps those
of the partition, so each such Query cost as much as the table is large (a fleet's journal, read at each batch, in a
table of thousands of members). The partition is found by its key, as DynamoDB finds it; the rest of moto's Query
(conditions, order, pages, filters, projections) is moto's own.

An UpdateExpression is parsed once per text: moto parses it twice per UpdateItem (once to check the placeholders it
names, once to apply it), and the store writes with the same few expressions again and again. The parsed tree is
only read (moto's Validator works on a deep copy of it), and an expression that does not parse raises each time.

tests/sandbox/test_moto_dynamodb.py checks, over every attribute type and every operation here, that both answers
parse to the same response in botocore.
"""

from __future__ import annotations

import base64
import functools
import json
import threading
from datetime import datetime
from decimal import Decimal
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionResult
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table
from moto.dynamodb.parsing import expressions
from moto.dynamodb.responses import DynamoHandler

ITEM_OPERATIONS = frozenset(
    {
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)
CONTENT_TYPE = "application/x-amz-json-1.0"

_moto_serialized = DynamoHandler.serialized
_moto_query = Table.query
_moto_all_items = Table.all_items
UpdateExpressionParser: Any = getattr(expressions, "UpdateExpressionParser")  # noqa: B009  # moto's parsing carries no types
_moto_make = UpdateExpressionParser.__dict__["make"]
_querying = threading.local()
"""The table and partition key a Query of this thread is reading, while moto's Table.query runs."""


def _wire(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, Decimal):
        return str(value)
    raise TypeError(f"not JSON: {type(value).__name__}")


def serialized(handler: DynamoHandler, action_result: ActionResult) -> TYPE_RESPONSE:
    """DynamoHandler.serialized, for the item operations a JSON dump of the result moto built."""
    result = action_result.result
    if not isinstance(result, dict) or handler._get_action() not in ITEM_OPERATIONS:
        return _moto_serialized(handler, action_result)
    body = json.dumps(result, default=_wire, separators=(",", ":"))
    headers: dict[str, Any] = {"Content-Type": CONTENT_TYPE}
    headers.update(handler.response_headers)
    return 200, headers, body


def query(table: Table, hash_key: DynamoType | None, *args: Any, **kwargs: Any) -> Any:
    """Table.query; for the table itself (no index) and a string or binary key, over that partition's items only."""
    index_name = args[6] if len(args) > 6 else kwargs.get("index_name")  # moto's DynamoDBBackend passes it 8th
    if index_name is not None or hash_key is None or hash_key.type not in ("S", "B"):
        return _moto_query(table, hash_key, *args, **kwargs)
    _querying.partition = (table, hash_key)
    try:
        return _moto_query(table, hash_key, *args, **kwargs)
    finally:
        _querying.partition = None


def all_items(table: Table) -> list[Item]:
    """Table.all_items; inside `query`, the items of the partition it reads (the key found as moto stores it)."""
    partition = getattr(_querying, "partition", None)
    if partition is None or partition[0] is not table:
        return _moto_all_items(table)
    stored = table.items.get(partition[1])  # a defaultdict: get() adds no partition
    if stored is None:
        return []
    return list(stored.values()) if table.range_key_attr else [stored]


@functools.lru_cache(maxsize=1024)
def _parsed(expression: str) -> Any:
    return _moto_make.__func__(UpdateExpressionParser, expression)


def make(_: type, expression: str) -> Any:
    """UpdateExpressionParser.make, each text parsed once (the tree is shared: moto only reads it, or copies it)."""
    return _parsed(expression)


def install() -> None:
    """Answer moto's DynamoDB item operations with `serialized`, its table Queries by partition, and parse each
    UpdateExpression once, in this process (idempotent)."""
    DynamoHandler.serialized = serialized  # type: ignore[method-assign,assignment]
    Table.query = query  # type: ignore[method-assign,assignment]
    Table.all_items = all_items  # type: ignore[method-assign,assignment]
    UpdateExpressionParser.make = classmethod(make)


def uninstall() -> None:
    DynamoHandler.serialized = _moto_serialized  # type: ignore[method-assign]
    Table.query = _moto_query  # type: ignore[method-assign]
    Table.all_items = _moto_all_items  # type: ignore[method-assign]
    UpdateExpressionParser.make = _moto_make
