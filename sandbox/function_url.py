"""Lambda function URLs, as far as the sandbox needs them: the request a URL hands its function.

A function with `FunctionUrlConfig` gets a URL of the real form (`https://<url-id>.lambda-url.<region>.on.aws/`);
a request to it reaches the function's handler as Lambda's payload format 2.0 event (headers in lower case, the
body base64-encoded when it is not text, as Lambda does for form posts it cannot tell are text), and the handler's
`statusCode` is the answer. No HTTP listener: the stand-ins call `request` in process, as moto's Lambda `Invoke`
does for the state machines.
"""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FunctionUrl:
    function_logical_id: str
    url_id: str
    region: str
    auth_type: str

    @property
    def url(self) -> str:
        return f"https://{self.url_id}.lambda-url.{self.region}.on.aws/"


def request_event(url: FunctionUrl, headers: Mapping[str, str], body: bytes, *, method: str = "POST") -> dict[str, Any]:
    """A request to `url` as the function receives it."""
    domain = f"{url.url_id}.lambda-url.{url.region}.on.aws"
    now = time.time()
    return {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": "/",
        "rawQueryString": "",
        "headers": {
            **{name.lower(): value for name, value in headers.items()},
            "host": domain,
            "x-forwarded-proto": "https",
            "x-forwarded-for": "127.0.0.1",
            "x-amzn-trace-id": f"Root=1-{int(now):08x}-{uuid.uuid4().hex[:24]}",
        },
        "requestContext": {
            "accountId": "anonymous",
            "apiId": url.url_id,
            "domainName": domain,
            "domainPrefix": url.url_id,
            "http": {
                "method": method,
                "path": "/",
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": headers.get("user-agent", "Slackbot 1.0 (+https://api.slack.com/robots)"),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": "$default",
            "stage": "$default",
            "time": time.strftime("%d/%b/%Y:%H:%M:%S +0000", time.gmtime(now)),
            "timeEpoch": int(now * 1000),
        },
        "body": base64.b64encode(body).decode(),
        "isBase64Encoded": True,
    }
