"""The sandbox's own AWS calls answered in process (sandbox/moto_in_process.py) answer as moto's server does: the
same results, the same errors, URLs that name the server, DynamoDB one request at a time and recorded; and so does
the sandbox's moto server, which answers JSON-protocol requests the same way."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core.request import Request as MotoRequest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import make_server

from sandbox import moto_in_process
from sandbox.session import _AtomicDynamoDB

ENDPOINT = "http://127.0.0.1:9"  # nothing listens there: every answer below came from this process


@pytest.fixture
def through_the_application(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests handed to the WSGI application (the rest went straight to their handler)."""
    paths: list[str] = []
    call = _AtomicDynamoDB.__call__

    def recorded(app: _AtomicDynamoDB, environ: dict[str, Any], start_response: Any) -> Any:
        paths.append(environ["PATH_INFO"])
        return call(app, environ, start_response)

    monkeypatch.setattr(_AtomicDynamoDB, "__call__", recorded)
    return paths


@pytest.fixture(params=["in process", "over HTTP"])
def served(
    request: pytest.FixtureRequest, through_the_application: list[str]
) -> Iterator[tuple[_AtomicDynamoDB, dict[str, Any]]]:
    """The same calls answered in this process's calling thread, or over HTTP by a server as the sandbox runs it."""
    app = _AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock_aws())
        if request.param == "in process":
            endpoint = ENDPOINT
            stack.enter_context(moto_in_process.answered_in_process(endpoint, app))
        else:
            server = make_server("127.0.0.1", 0, moto_in_process.AnsweredDirectly(app), threaded=True)
            stack.callback(server.shutdown)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            endpoint = f"http://127.0.0.1:{server.server_port}"
        clients = {
            name: boto3.client(
                name,
                endpoint_url=endpoint,
                region_name="us-east-1",
                aws_access_key_id="testing",
                aws_secret_access_key="testing",
            )
            for name in ("dynamodb", "sqs", "s3")
        }
        yield app, clients | {"endpoint": endpoint}


def test_json_protocol_calls_answer_and_fail_as_the_server_does(
    served: tuple[_AtomicDynamoDB, dict[str, Any]], through_the_application: list[str]
) -> None:
    app, clients = served
    dynamodb, sqs = clients["dynamodb"], clients["sqs"]

    # A table, an item, and a conditional write that must be refused
    dynamodb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    dynamodb.put_item(TableName="t", Item={"pk": {"S": "a"}, "n": {"N": "1"}})
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName="t", Item={"pk": {"S": "a"}}, ConditionExpression="attribute_not_exists(pk)")
    with pytest.raises(ClientError) as missing:
        dynamodb.describe_table(TableName="nothing")

    assert refused.value.response["Error"]["Code"] == "ConditionalCheckFailedException"
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "a"}})["Item"]["n"] == {"N": "1"}
    # DynamoDB's requests went through the server's one-at-a-time lock, and were recorded
    assert [operation for _, _, operation in app.calls] == [
        "CreateTable",
        "PutItem",
        "PutItem",
        "DescribeTable",
        "GetItem",
    ]

    # A queue's URL names the server the client called, as the server's answer does
    url = sqs.create_queue(QueueName="q")["QueueUrl"]
    assert url.startswith(f"{clients['endpoint']}/")
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["hello"]
    # and none of it needed the WSGI application
    assert through_the_application == []


def test_a_rest_request_still_goes_through_the_application(
    served: tuple[_AtomicDynamoDB, dict[str, Any]], through_the_application: list[str]
) -> None:
    s3 = served[1]["s3"]

    s3.create_bucket(Bucket="checkpoints")
    s3.put_object(Bucket="checkpoints", Key="k/1", Body=b"data")

    assert s3.get_object(Bucket="checkpoints", Key="k/1")["Body"].read() == b"data"
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="checkpoints", Prefix="k/")["Contents"]] == ["k/1"]
    assert "/checkpoints/k/1" in through_the_application


def test_each_service_s_handler_is_found_once_whatever_the_day_or_the_sandbox(
    served: tuple[_AtomicDynamoDB, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moto_in_process, "_handlers", {})  # (what other tests of this process found, set aside)
    # Given calls to two services, from clients of this sandbox and of a second one (its own dispatcher)
    served[1]["dynamodb"].list_tables()
    served[1]["sqs"].list_queues()
    other = _AtomicDynamoDB(DomainDispatcherApplication(create_backend_app))
    signed = "AWS4-HMAC-SHA256 Credential=testing/{day}/us-east-1/dynamodb/aws4_request, SignedHeaders=host"

    # Then a handler is kept per region and service, not per dispatcher or per day
    handler = moto_in_process._handler(other.dispatcher, signed.format(day="20261202"), "DynamoDB_20120810.ListTables")
    again = moto_in_process._handler(other.dispatcher, signed.format(day="20271231"), "DynamoDB_20120810.GetItem")
    assert handler is not None and again is handler
    assert {key.split("|")[0] for key in moto_in_process._handlers} <= {"us-east-1/dynamodb", "us-east-1/sqs"}


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        (
            "http://127.0.0.1:5000/",
            {
                "X-Amz-Target": "DynamoDB_20120810.UpdateItem",
                "Content-Type": "application/x-amz-json-1.0",
                "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20261203/us-east-1/dynamodb/aws4_request",
                "Content-Length": "13",
                "X-Amz-Date": "20261203T000000Z",
            },
        ),
        (
            "https://localhost?a=1&b=%2F",
            {"Host": "elsewhere:81", "Transfer-Encoding": "chunked", "X-Amz-Meta-my_key": "v"},
        ),
    ],
)
def test_a_request_is_handed_to_moto_as_moto_builds_it(url: str, headers: dict[str, str]) -> None:
    body = b'{"Key": "\xc3\xa9"}'

    ours = moto_in_process._request(url, headers, body)
    theirs = MotoRequest.from_primitives("POST", url, headers, body)

    def seen(request: MotoRequest) -> dict[str, Any]:
        plain = {k: v for k, v in request.environ.items() if k not in ("werkzeug.request", "wsgi.input")}
        return {
            "environ": plain,
            "headers": sorted(request.headers),
            "data": request.get_data(),
            "urls": (request.url, request.raw_url, request.host, request.path, request.raw_path),
            "args": request.args.to_dict(flat=False),
        }

    assert seen(ours) == seen(theirs)
