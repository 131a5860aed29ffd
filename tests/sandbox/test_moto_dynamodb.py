"""The sandbox's faster DynamoDB answers (sandbox/moto_dynamodb.py) parse to what moto's own serializer answers."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.dynamodb.responses import DynamoHandler
from moto.sqs import models as sqs_models

from sandbox import moto_dynamodb

ITEM: dict[str, Any] = {
    "pk": {"S": "instance#1"},
    "sk": {"S": "RECORD"},
    "text": {"S": 'héllo "quoted" \\ \n'},
    "empty": {"S": ""},
    "number": {"N": "12345678901234567890.5"},
    "negative": {"N": "-0.001"},
    "flag": {"BOOL": False},
    "nothing": {"NULL": True},
    "blob": {"B": b"\x00\xffbinary"},
    "strings": {"SS": ["a", "b"]},
    "numbers": {"NS": ["1", "2.5"]},
    "blobs": {"BS": [b"\x01", b"\x02\x03"]},
    "list": {"L": [{"S": "x"}, {"N": "1"}, {"M": {"deep": {"L": [{"B": b"\x07"}]}}}, {"L": []}]},
    "map": {"M": {"a": {"M": {}}, "b": {"NULL": True}, "c": {"SS": ["z"]}}},
    "og": {"S": "group#1"},
    "oat": {"S": "2026-12-01T00:00:00Z"},
}
_moto_retained = sqs_models.SQSBackend.is_message_valid_based_on_retention_period


@pytest.fixture
def client() -> Iterator[Any]:
    before = DynamoHandler.serialized
    with mock_aws():
        dynamodb = boto3.client("dynamodb", region_name="us-east-1")
        dynamodb.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
            AttributeDefinitions=[{"AttributeName": name, "AttributeType": "S"} for name in ("pk", "sk", "og", "oat")],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "Members",
                    "KeySchema": [
                        {"AttributeName": "og", "KeyType": "HASH"},
                        {"AttributeName": "oat", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield dynamodb
    DynamoHandler.serialized = before  # type: ignore[method-assign]


def reset(client: Any) -> None:
    """The same table before each answer, so a write answers alike both times."""
    moto_dynamodb.uninstall()
    for number in range(3):
        client.put_item(TableName="t", Item={**ITEM, "sk": {"S": f"M#{number}"}})
    client.put_item(TableName="t", Item=ITEM)
    for number in range(4):  # other partitions, before and after in moto's order: a Query of one reads none of them
        client.put_item(TableName="t", Item={**ITEM, "pk": {"S": f"instance#{number * 2}"}, "sk": {"S": f"M#{number}"}})
    for sk in ("M#8", "M#9"):
        client.delete_item(TableName="t", Key={"pk": ITEM["pk"], "sk": {"S": sk}})


def both(client: Any, call: Callable[[], dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
    reset(client)
    theirs = call()
    reset(client)
    moto_dynamodb.install()
    ours = call()
    moto_dynamodb.uninstall()
    for answer in (theirs, ours):
        answer.pop("ResponseMetadata", None)
    return theirs, ours


def test_every_item_operation_parses_to_the_same_response(client: Any) -> None:
    key = {"pk": ITEM["pk"], "sk": ITEM["sk"]}

    def set_flag(**returning: str) -> dict[str, Any]:
        return client.update_item(  # type: ignore[no-any-return]
            TableName="t",
            Key=key,
            UpdateExpression="SET flag = :t",
            ExpressionAttributeValues={":t": {"BOOL": True}},
            **returning,
        )

    calls: list[Callable[[], dict[str, Any]]] = [
        lambda: client.get_item(TableName="t", Key=key),
        lambda: client.get_item(TableName="t", Key={"pk": {"S": "absent"}, "sk": {"S": "x"}}),
        lambda: client.get_item(
            TableName="t",
            Key=key,
            ProjectionExpression="#b, #m.a",
            ExpressionAttributeNames={"#b": "blob", "#m": "map"},
        ),
        lambda: client.update_item(
            TableName="t",
            Key=key,
            UpdateExpression="ADD #n :one",
            ExpressionAttributeNames={"#n": "number"},
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        ),
        *(
            partial(set_flag, **returning)
            for returning in (
                {"ReturnValues": "ALL_OLD"},
                {"ReturnValues": "UPDATED_NEW", "ReturnConsumedCapacity": "TOTAL"},
                {},
            )
        ),
        lambda: client.query(
            TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": ITEM["pk"]}, Limit=2
        ),
        lambda: client.query(
            TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "none"}}
        ),
        lambda: client.query(
            TableName="t",
            KeyConditionExpression="pk = :p AND sk BETWEEN :lo AND :hi",
            FilterExpression="attribute_exists(#f)",
            ExpressionAttributeNames={"#f": "flag"},
            ExpressionAttributeValues={":p": ITEM["pk"], ":lo": {"S": "M#1"}, ":hi": {"S": "M#~"}},
            ScanIndexForward=False,
            ConsistentRead=True,
            Limit=1,
            ExclusiveStartKey={"pk": ITEM["pk"], "sk": {"S": "M#2"}},
        ),
        lambda: client.query(
            TableName="t",
            KeyConditionExpression="pk = :p AND begins_with(sk, :m)",
            ProjectionExpression="sk, #n",
            ExpressionAttributeNames={"#n": "number"},
            ExpressionAttributeValues={":p": {"S": "instance#2"}, ":m": {"S": "M#"}},
        ),
        lambda: client.query(
            TableName="t",
            IndexName="Members",
            KeyConditionExpression="og = :g",
            ExpressionAttributeValues={":g": ITEM["og"]},
            Select="COUNT",
        ),
        lambda: client.scan(TableName="t", Limit=3),
        lambda: client.batch_get_item(RequestItems={"t": {"Keys": [key, {"pk": ITEM["pk"], "sk": {"S": "M#1"}}]}}),
        lambda: client.put_item(TableName="t", Item={**ITEM, "sk": {"S": "M#9"}}, ReturnValues="ALL_OLD"),
        lambda: client.put_item(TableName="t", Item={**ITEM, "flag": {"BOOL": True}}, ReturnValues="ALL_OLD"),
        lambda: client.delete_item(TableName="t", Key={"pk": ITEM["pk"], "sk": {"S": "M#0"}}, ReturnValues="ALL_OLD"),
        lambda: client.transact_get_items(TransactItems=[{"Get": {"TableName": "t", "Key": key}}]),
        lambda: client.batch_write_item(RequestItems={"t": [{"PutRequest": {"Item": {**ITEM, "sk": {"S": "M#8"}}}}]}),
        lambda: client.update_item(  # nested paths, functions, every clause: the validator's and executor's work
            TableName="t",
            Key=key,
            UpdateExpression="SET #l[2].#d = list_append(#l[2].#d, :more), #m.b = :b, #c = if_not_exists(#c, :zero) "
            "REMOVE #m.a, #s ADD #n :one DELETE strings :a",
            ExpressionAttributeNames={
                "#l": "list",
                "#d": "deep",
                "#m": "map",
                "#c": "count",
                "#s": "text",
                "#n": "number",
            },
            ExpressionAttributeValues={
                ":more": {"L": [{"M": {"x": {"NS": ["3"]}}}]},
                ":b": {"M": {"z": {"BOOL": True}, "y": {"B": b"\x01"}}},
                ":zero": {"N": "0"},
                ":one": {"N": "1"},
                ":a": {"SS": ["a"]},
            },
            ReturnValues="ALL_NEW",
        ),
    ]
    for call in calls:
        theirs, ours = both(client, call)
        assert ours == theirs


def test_errors_are_still_moto_s_own(client: Any) -> None:
    moto_dynamodb.install()
    with pytest.raises(client.exceptions.ConditionalCheckFailedException) as failed:
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "a"}, "sk": {"S": "b"}},
            UpdateExpression="SET x = :x",
            ConditionExpression="attribute_exists(pk)",
            ExpressionAttributeValues={":x": {"S": "y"}},
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    assert failed.value.response["Error"]["Code"] == "ConditionalCheckFailedException"


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        ("SET a = :x SET b = :x", {":x": {"S": "y"}}),  # two SET clauses
        ("SET a = :x, a = :x", {":x": {"S": "y"}}),  # one path twice
        ("SET big = :big", {":big": {"S": "x" * 405_000}}),  # the item over DynamoDB's 400 KB
        ("ADD text :x", {":x": {"N": "1"}}),  # a number added to a string
    ],
)
def test_a_refused_update_is_refused_alike(client: Any, expression: str, values: dict[str, Any]) -> None:
    def update() -> dict[str, Any]:
        try:
            client.update_item(
                TableName="t",
                Key={"pk": ITEM["pk"], "sk": ITEM["sk"]},
                UpdateExpression=expression,
                ExpressionAttributeValues=values,
            )
        except client.exceptions.ClientError as refused:
            return dict(refused.response["Error"])
        return {}

    theirs, ours = both(client, update)
    assert theirs and ours == theirs


def test_an_update_expression_parsed_once_still_updates_each_item_and_a_bad_one_fails_every_time(client: Any) -> None:
    moto_dynamodb.install()
    # Given one expression text used on two items (its parsed tree shared), with different values
    for sk, value in (("one", "1"), ("two", "2")):
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "p"}, "sk": {"S": sk}},
            UpdateExpression="SET #v = :v ADD n :n",
            ExpressionAttributeNames={"#v": "v"},
            ExpressionAttributeValues={":v": {"S": value}, ":n": {"N": value}},
        )
    # Then each item has its own values
    items = client.query(TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p"}})[
        "Items"
    ]
    assert [(item["sk"]["S"], item["v"]["S"], item["n"]["N"]) for item in items] == [
        ("one", "1", "1"),
        ("two", "2", "2"),
    ]
    # And an expression that does not parse is refused each time it is sent
    for _ in range(2):
        with pytest.raises(client.exceptions.ClientError) as refused:
            client.update_item(
                TableName="t",
                Key={"pk": {"S": "p"}, "sk": {"S": "one"}},
                UpdateExpression="SET = :v",
                ExpressionAttributeValues={":v": {"S": "x"}},
            )
        assert refused.value.response["Error"]["Code"] == "ValidationException"
    moto_dynamodb.uninstall()


def test_a_message_past_its_queue_s_retention_period_is_no_longer_received_and_one_within_it_is() -> None:
    # Given a queue that keeps messages for 60 s, and two messages, the second sent 61 s ago (moto stops a receive at
    # the first expired message it meets)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="new")
        sqs.send_message(QueueUrl=url, MessageBody="old")
        backend = sqs_models.sqs_backends["123456789012"]["us-east-1"]
        new, old = backend.get_queue("q")._messages
        old.sent_timestamp -= 61_000

        # Then the faster check agrees with moto's own on both
        for message in (old, new):
            assert moto_dynamodb.retained(backend, "q", message) is _moto_retained(backend, "q", message)

        # And, installed, a receive hands out the one within the period
        moto_dynamodb.install()
        try:
            received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        finally:
            moto_dynamodb.uninstall()
    assert [message["Body"] for message in received] == ["new"]


@pytest.mark.parametrize(
    "condition",
    [
        "attribute_exists(pk) AND #n > :low",  # holds
        "attribute_not_exists(pk) OR (size(#t) < :low AND NOT contains(strings, :a))",  # fails
        "#n BETWEEN :low AND :one OR #n IN (:low, :one)",  # fails
        "attribute_exists(pk) AND begins_with(#t, :a",  # does not parse
        "#n > :missing",  # names a value it was not given
    ],
)
def test_a_condition_cut_into_tokens_once_answers_alike_each_time(client: Any, condition: str) -> None:
    def update_twice() -> dict[str, Any]:
        answers = []
        for _ in range(2):  # (installed, the second time reads the tokens kept the first time)
            try:
                answer = client.update_item(
                    TableName="t",
                    Key={"pk": ITEM["pk"], "sk": ITEM["sk"]},
                    UpdateExpression="SET flag = :t",
                    ConditionExpression=condition,
                    ExpressionAttributeNames={"#n": "number", "#t": "text"},
                    ExpressionAttributeValues={
                        ":t": {"BOOL": True},
                        ":low": {"N": "5"},
                        ":one": {"N": "1"},
                        ":a": {"S": "a"},
                    },
                    ReturnValues="ALL_NEW",
                )
                answer.pop("ResponseMetadata")
            except client.exceptions.ClientError as refused:
                answer = dict(refused.response["Error"])
            except (KeyError, ValueError) as failed:  # moto's parser fails so on these, outside its server
                answer = {type(failed).__name__: str(failed)}
            answers.append(answer)
        return {"answers": answers}

    theirs, ours = both(client, update_twice)
    assert ours == theirs


def test_an_action_added_to_a_response_class_after_it_answered_is_answered_and_one_removed_is_not() -> None:
    # Given a response class whose actions were listed once (the class answered a request)
    class Response:
        def describe_alarms(self) -> None: ...

    assert "describe_alarms" in moto_dynamodb.method_names(Response)
    assert "describe_alarm_contributors" not in moto_dynamodb.method_names(Response)

    # When an emulation adds an action to it, Then it is listed; and once taken off again, it is not
    def describe_alarm_contributors(self: Any) -> None: ...

    setattr(Response, "describe_alarm_contributors", describe_alarm_contributors)  # noqa: B010
    assert "describe_alarm_contributors" in moto_dynamodb.method_names(Response)
    delattr(Response, "describe_alarm_contributors")
    assert "describe_alarm_contributors" not in moto_dynamodb.method_names(Response)
