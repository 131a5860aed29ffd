"""What the interactivity endpoint keeps in the incidents table (single table, see template.yaml IncidentsTable).

- Replay guard: pk = `REPLAY#<sha256 of the signature>`, sk = `-`. A signed request is acted on only by the call
  that puts its item first (a conditional put); a copy of it, within the five minutes its timestamp is accepted,
  finds the item and is refused. `expires_at` (the table's TTL) lets DynamoDB delete it after ten minutes; reads
  never need it again, since a request older than five minutes is refused on its timestamp alone.
- Approvals: pk = `APPROVAL#<approval id>`, sk = `-`: the Step Functions task token of a resume waiting for a
  person, kept here so that it never appears in Slack (the buttons carry the approval id). `expires_at` is the
  approval's timeout: after it the workflow stopped waiting and the token is worthless. Taking an approval deletes
  it (a conditional delete), so two presses of Approve, or Approve then Reject, act once.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

import boto3

from fault_responder.adapters.dynamo_conditions import conditionally
from fault_responder.notification.buttons import approval_id

__all__ = ["DynamoDBInteractionStore", "approval_id"]

SK = "-"
REPLAY_RETENTION_SECONDS = 10 * 60
RESTORE_SECONDS = 15 * 60


class DynamoDBInteractionStore:
    def __init__(self, table_name: str, client: Any | None = None, *, epoch: Callable[[], float] = time.time) -> None:
        self.table_name = table_name
        self._client = client or boto3.client("dynamodb")
        self._epoch = epoch

    def claim_request(self, signature: str) -> bool:
        """True the first time a signature is seen; False for a replay."""
        digest = hashlib.sha256(signature.encode()).hexdigest()
        written = conditionally(
            lambda: self._client.put_item(
                TableName=self.table_name,
                Item={
                    "pk": {"S": f"REPLAY#{digest}"},
                    "sk": {"S": SK},
                    "expires_at": {"N": str(int(self._epoch()) + REPLAY_RETENTION_SECONDS)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        )
        return written.held

    def put_approval(self, task_token: str, timeout_seconds: int, execution: str) -> str:
        """Keep `task_token` until the approval times out; returns its approval id."""
        ident = approval_id(task_token)
        self._client.put_item(
            TableName=self.table_name,
            Item={
                "pk": {"S": f"APPROVAL#{ident}"},
                "sk": {"S": SK},
                "task_token": {"S": task_token},
                "execution": {"S": execution},
                "expires_at": {"N": str(int(self._epoch()) + max(1, timeout_seconds))},
            },
        )
        return ident

    def take_approval(self, ident: str) -> str | None:
        """The task token of approval `ident`, removed so that no one can use it again; None when there is none
        (already answered, timed out, or never was)."""
        written = conditionally(
            lambda: self._client.delete_item(
                TableName=self.table_name,
                Key={"pk": {"S": f"APPROVAL#{ident}"}, "sk": {"S": SK}},
                ConditionExpression="attribute_exists(pk) AND expires_at > :now",
                ExpressionAttributeValues={":now": {"N": str(int(self._epoch()))}},
                ReturnValues="ALL_OLD",
            )
        )
        if not written.held:
            return None
        item = written.response.get("Attributes") or {}
        token = item.get("task_token", {}).get("S")
        return str(token) if token else None

    def restore_approval(self, ident: str, task_token: str, seconds: int = RESTORE_SECONDS) -> None:
        """Put back an approval taken by a press whose answer did not reach Step Functions, so it can be pressed
        again. Its original end is not known here: a press after the workflow stopped waiting is told so by Step
        Functions (TaskTimedOut), so a generous lifetime does no harm."""
        conditionally(  # (one that is there already is kept)
            lambda: self._client.put_item(
                TableName=self.table_name,
                Item={
                    "pk": {"S": f"APPROVAL#{ident}"},
                    "sk": {"S": SK},
                    "task_token": {"S": task_token},
                    "expires_at": {"N": str(int(self._epoch()) + seconds)},
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        )
