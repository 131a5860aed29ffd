"""moto's DynamoDB, answered faster: the same answers, written as JSON directly.

moto writes each answer by walking the operation's output shape in botocore's model, value by value. For the item
operations (an UpdateItem returning a record, a Query returning a page) that walk is more than half of the time
moto spends on a request, and the sandbox spends most of a storm's wall time waiting for DynamoDB. The result moto
builds is already DynamoDB's wire form (attribute values as `{"S": ...}`, numbers as strings) except binary
values, held as bytes, and times, held as datetimes; so for those operations the answer is `json.dumps` of it,
with bytes in base64 and times as epoch seconds, as DynamoDB's JSON protocol writes them. Anything else (errors,
the control plane, a result that is not a dict) goes through moto's own serializer.

tests/sandbox/test_moto_dynamodb.py checks, over every attribute type and every operation here, that both answers
parse to the same response in botocore.
"""

from __future__ import annotations

import base64
import json
from datetime import datetime
from decimal import Decimal
from typing import Any

from moto.core.common_types import TYPE_RESPONSE
from moto.core.responses import ActionResult
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


def install() -> None:
    """Answer moto's DynamoDB item operations with `serialized` in this process (idempotent)."""
    DynamoHandler.serialized = serialized  # type: ignore[method-assign,assignment]


def uninstall() -> None:
    DynamoHandler.serialized = _moto_serialized  # type: ignore[method-assign]
