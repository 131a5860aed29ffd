"""Lambda's SQS event source mapping: poll the queue, invoke with a batch, apply partial failures.

What the sandbox does in place of time passing: a failed message is made visible again at once
(standing in for its visibility timeout expiring), and batches are processed one after another
(ScalingConfig.MaximumConcurrency and MaximumBatchingWindowInSeconds are recorded, not simulated).
Moving a message to the dead-letter queue after maxReceiveCount receives is moto's, and matches
SQS: it happens on the receive after the last allowed one.

Two receives are not made, for they can only answer nothing: another to fill a batch after one that handed out fewer
messages than asked (moto hands out every visible message up to the number asked), and one of a queue that holds no
message at all (moto's queue, in this process: the sandbox's moto server runs here).
"""

from __future__ import annotations

import base64
import hashlib
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from moto.sqs.models import sqs_backends

from sandbox.aws import AwsClients
from sandbox.lambda_runtime import InProcessFunction, Invocation
from sandbox.stack import SqsEventSource

# SQS allows at most 10 messages per ReceiveMessage and per batch delete/visibility call.
_SQS_BATCH_LIMIT = 10
# Enough for hundreds of events each retried up to the largest maxReceiveCount the template allows;
# a queue that still has messages after this many batches has one that can never succeed or leave.
DEFAULT_MAX_BATCHES = 1000
# The SenderId of the example SQS event in the Lambda documentation.
_EXAMPLE_SENDER_ID = "AIDAIENQZJOLO23YVJ4VO"


@dataclass(frozen=True)
class BatchOutcome:
    """One invocation of the function with a batch, and which messages it failed."""

    queue: str
    invocation: Invocation
    message_ids: list[str]
    failures: list[str]
    batch_error: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "function": self.invocation.function,
            "queue": self.queue,
            "request_id": self.invocation.request_id,
            "batch_size": len(self.message_ids),
            "message_ids": self.message_ids,
            "failures": self.failures,
            "error": self.batch_error,
            "duration_ms": self.invocation.duration_ms,
            "ended_at": self.invocation.ended_at,
            "logs": self.invocation.logs,
        }


@dataclass(frozen=True)
class DrainResult:
    outcomes: list[BatchOutcome]
    drained: bool


class SqsEventSourceMapping:
    """One `Type: SQS` event of a function, driving that function from its queue."""

    def __init__(self, source: SqsEventSource, function: InProcessFunction, aws: AwsClients, region: str) -> None:
        self.source = source
        self.function = function
        self._sqs = aws.sqs
        self._region = region

    def drain(
        self, on_batch: Callable[[BatchOutcome], None] | None = None, max_batches: int = DEFAULT_MAX_BATCHES
    ) -> DrainResult:
        """Invoke the function with batches until the queue has no visible message left."""
        outcomes: list[BatchOutcome] = []
        for _ in range(max_batches):
            messages = self._receive_batch()
            if not messages:
                return DrainResult(outcomes, drained=True)
            outcome = self._process(messages)
            outcomes.append(outcome)
            if on_batch is not None:
                on_batch(outcome)
        return DrainResult(outcomes, drained=False)

    def _receive_batch(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = []
        if _empty(self.source.queue_arn):
            return messages
        while len(messages) < self.source.batch_size:
            asked = min(_SQS_BATCH_LIMIT, self.source.batch_size - len(messages))
            received = self._sqs.receive_message(
                QueueUrl=self.source.queue_url,
                MaxNumberOfMessages=asked,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            ).get("Messages", [])
            messages.extend(received)
            if len(received) < asked:
                break
        return messages

    def _process(self, messages: list[dict[str, Any]]) -> BatchOutcome:
        event = {"Records": [sqs_record(message, self.source.queue_arn, self._region) for message in messages]}
        invocation = self.function.invoke(event)
        message_ids = [message["MessageId"] for message in messages]
        failures, batch_error = batch_failures(invocation, message_ids, self.source.report_batch_item_failures)
        failed = set(failures)
        self._delete([m for m in messages if m["MessageId"] not in failed])
        self._release([m for m in messages if m["MessageId"] in failed])
        return BatchOutcome(self.source.queue_logical_id, invocation, message_ids, failures, batch_error)

    def _delete(self, messages: list[dict[str, Any]]) -> None:
        for chunk in _chunks(messages):
            self._sqs.delete_message_batch(
                QueueUrl=self.source.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )

    def _release(self, messages: list[dict[str, Any]]) -> None:
        for chunk in _chunks(messages):
            self._sqs.change_message_visibility_batch(
                QueueUrl=self.source.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(chunk)
                ],
            )


def _empty(queue_arn: str) -> bool:
    """Whether moto's queue holds no message at all (visible, in flight or delayed); False if moto has no such queue."""
    _, _, _, region, account_id, name = queue_arn.split(":", 5)
    queue = sqs_backends[account_id][region].queues.get(name)
    return queue is not None and not queue._messages


def batch_failures(
    invocation: Invocation, message_ids: list[str], report_batch_item_failures: bool
) -> tuple[list[str], str | None]:
    """The messages Lambda would return to the queue, and why the whole batch failed if it did."""
    if invocation.error is not None:
        return message_ids, f"{invocation.error.get('errorType')}: {invocation.error.get('errorMessage')}"
    if not report_batch_item_failures or invocation.result is None:
        return [], None
    if not isinstance(invocation.result, dict):
        return message_ids, "the response is not a JSON object: Lambda fails the whole batch"
    items = invocation.result.get("batchItemFailures")
    if not items:
        return [], None
    if not isinstance(items, list):
        return message_ids, "batchItemFailures is not a list: Lambda fails the whole batch"
    failed = []
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not identifier or identifier not in message_ids:
            return message_ids, f"invalid batchItemFailures entry {item!r}: Lambda fails the whole batch"
        failed.append(identifier)
    return [message_id for message_id in message_ids if message_id in failed], None


def _chunks(messages: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [messages[i : i + _SQS_BATCH_LIMIT] for i in range(0, len(messages), _SQS_BATCH_LIMIT)]


def sqs_record(message: Mapping[str, Any], queue_arn: str, region: str) -> dict[str, Any]:
    """A ReceiveMessage message as Lambda puts it in the event's `Records`."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": {
            name: _lambda_message_attribute(value) for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def _lambda_message_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    attribute: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    return attribute


def wrap_in_sqs_event(bodies: list[str], source: SqsEventSource, region: str) -> dict[str, Any]:
    """An SQS event as the mapping would build it for messages EventBridge just sent (received once)."""
    now = str(int(time.time() * 1000))
    messages = [
        {
            "MessageId": str(uuid.uuid4()),
            "ReceiptHandle": base64.b64encode(uuid.uuid4().bytes * 4).decode(),
            "Body": body,
            "MD5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
            "Attributes": {
                "ApproximateReceiveCount": "1",
                "SentTimestamp": now,
                "SenderId": _EXAMPLE_SENDER_ID,
                "ApproximateFirstReceiveTimestamp": now,
            },
        }
        for body in bodies
    ]
    return {"Records": [sqs_record(message, source.queue_arn, region) for message in messages]}
