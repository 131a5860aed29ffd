"""One conditional write helper for every DynamoDB store (moto): whether the condition held, the item as it was, and
every other error raised as it was."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from fault_responder.adapters.dynamo_conditions import conditionally, refused

TABLE = "conditions"


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield dynamodb


def put_once(client: Any, pk: str, value: str) -> Any:
    return lambda: client.put_item(
        TableName=TABLE,
        Item={"pk": {"S": pk}, "value": {"S": value}},
        ConditionExpression="attribute_not_exists(pk)",
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
    )


def test_a_write_whose_condition_holds_is_written_and_one_whose_condition_fails_is_refused(client: Any) -> None:
    first = conditionally(put_once(client, "a", "first"))
    second = conditionally(put_once(client, "a", "second"))
    assert (first.held, first.old, first.refusal) == (True, None, None)
    assert "ResponseMetadata" in first.response
    assert (second.held, second.response) == (False, {})
    assert second.old == {"pk": {"S": "a"}, "value": {"S": "first"}}
    assert second.refusal is not None and refused(second.refusal)


def test_a_transaction_cancelled_by_a_condition_is_refused(client: Any) -> None:
    conditionally(put_once(client, "taken", "x"))
    written = conditionally(
        lambda: client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": {"pk": {"S": "free"}}}},
                {
                    "Put": {
                        "TableName": TABLE,
                        "Item": {"pk": {"S": "taken"}},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    )
    assert not written.held
    assert "Item" not in client.get_item(TableName=TABLE, Key={"pk": {"S": "free"}})


def test_any_other_error_is_raised_as_it_was(client: Any) -> None:
    with pytest.raises(ClientError) as raised:
        conditionally(lambda: client.put_item(TableName="no-such-table", Item={"pk": {"S": "a"}}))
    assert raised.value.response["Error"]["Code"] == "ResourceNotFoundException"


def cancelled(*reasons: str) -> ClientError:
    response: Any = {
        "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
        "CancellationReasons": [{"Code": reason} for reason in reasons],
    }
    return ClientError(response, "TransactWriteItems")


@pytest.mark.parametrize(
    ("reasons", "conflict", "expected"),
    [
        (("None", "ConditionalCheckFailed"), False, True),
        (("TransactionConflict", "None"), False, False),
        (("TransactionConflict", "None"), True, True),
        (("None", "ThrottlingError"), True, False),
    ],
)
def test_a_cancelled_transaction_is_refused_for_its_condition_or_if_asked_its_conflict(
    reasons: tuple[str, ...], conflict: bool, expected: bool
) -> None:
    """(moto never cancels for a conflict: the reasons as DynamoDB documents them.)"""
    error = cancelled(*reasons)

    def write() -> None:
        raise error

    if expected:
        assert conditionally(write, conflict=conflict).refusal is error
    else:
        with pytest.raises(ClientError) as raised:
            conditionally(write, conflict=conflict)
        assert raised.value is error
