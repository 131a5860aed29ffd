"""Calling a function behind a Lambda function URL as Lambda does: its handler module loaded from functions/
(tests.conftest.load_app), a payload format 2.0 request event, and a Lambda context."""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

from tests.conftest import load_app

__all__ = ["FunctionContext", "function_url_event", "load_app"]


class FunctionContext:
    """The Lambda context of one invocation of `function_name`."""

    function_version = "$LATEST"
    memory_limit_in_mb = 256
    log_stream_name = "test"

    def __init__(self, function_name: str, region: str = "us-east-1", account: str = "123456789012") -> None:
        self.function_name = function_name
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{account}:function:{function_name}"
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.aws_request_id = str(uuid.uuid4())

    def get_remaining_time_in_millis(self) -> int:
        return 10_000


def function_url_event(
    headers: dict[str, str], body: bytes, *, method: str = "POST", base64_body: bool = True
) -> dict[str, Any]:
    """A function URL request (payload format 2.0) as Lambda delivers it."""
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": "",
        "headers": {**headers, "host": "abc.lambda-url.us-east-1.on.aws"},
        "requestContext": {
            "accountId": "anonymous",
            "apiId": "abc",
            "domainName": "abc.lambda-url.us-east-1.on.aws",
            "http": {"method": method, "path": "/", "protocol": "HTTP/1.1", "sourceIp": "198.51.100.1"},
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": "01/Dec/2026:01:00:00 +0000",
            "timeEpoch": int(time.time() * 1000),
        },
        "body": base64.b64encode(body).decode() if base64_body else body.decode(),
        "isBase64Encoded": base64_body,
    }
