"""Conditional writes to DynamoDB: whether a write's condition held, told apart from every other failure in one place.

DynamoDB refuses a conditional PutItem, UpdateItem or DeleteItem whose condition does not hold with
ConditionalCheckFailedException (carrying the item as it was when the write asked for it with
ReturnValuesOnConditionCheckFailure=ALL_OLD), and cancels a TransactWriteItems with TransactionCanceledException,
giving one reason per item: ConditionalCheckFailed for each whose condition did not hold, TransactionConflict for one
that another transaction was writing at that moment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

CONDITION_FAILED = "ConditionalCheckFailedException"
TRANSACTION_CANCELED = "TransactionCanceledException"


@dataclass(frozen=True, slots=True)
class Written:
    """What became of a conditional write."""

    held: bool
    """Its condition held: it was written."""
    response: dict[str, Any]
    """DynamoDB's answer when it was written (empty when it was not)."""
    refusal: ClientError | None = None
    """The error DynamoDB refused it with (raise from it to keep the cause)."""

    @property
    def old(self) -> dict[str, Any] | None:
        """The item as it was when refused, if the write asked for it (ReturnValuesOnConditionCheckFailure=ALL_OLD)."""
        if self.refusal is None:
            return None
        item: dict[str, Any] | None = self.refusal.response.get("Item")  # type: ignore[assignment]
        return item


def conditionally(write: Callable[[], Any], *, conflict: bool = False) -> Written:
    """Run `write`, a conditional put, update, delete or transaction, and say whether its condition held. Every other
    error is raised as it was. With `conflict`, a transaction cancelled because another one was writing one of its
    items counts as refused too."""
    try:
        response = write()
    except ClientError as error:
        if refused(error, conflict=conflict):
            return Written(held=False, response={}, refusal=error)
        raise
    return Written(held=True, response=response or {})


def refused(error: ClientError, *, conflict: bool = False) -> bool:
    """The write was refused because a condition did not hold (or, with `conflict`, as a transaction conflicted)."""
    code = error.response.get("Error", {}).get("Code")
    if code == CONDITION_FAILED:
        return True
    if code != TRANSACTION_CANCELED:
        return False
    response: dict[str, Any] = dict(error.response)
    reasons: list[dict[str, Any]] = response.get("CancellationReasons") or []
    wanted = ("ConditionalCheckFailed", "TransactionConflict") if conflict else ("ConditionalCheckFailed",)
    return any(reason.get("Code") in wanted for reason in reasons)
