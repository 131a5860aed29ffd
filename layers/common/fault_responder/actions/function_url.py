"""What the endpoints behind a Lambda function URL share (SlackActionsFunction, PagerDutyWebhookFunction): the
request's raw body, the answer, and the signing secrets they check requests with.

A signature is over the bytes the sender sent, so the body is taken as received (base64-decoded when the function
URL encoded it), never parsed and re-encoded. A signing secret is cached (Powertools parameters, five minutes); a
request it does not verify makes the endpoint read the secret again, as it may have been rotated, but at most once
a minute, so forged requests cannot turn into a flood of Secrets Manager calls.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from aws_lambda_powertools.utilities import parameters

from fault_responder.core import elapsed

SECRET_CACHE_SECONDS = 300
MIN_FORCED_REFRESH_SECONDS = 60.0

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: str = ""

    def as_function_url_response(self) -> dict[str, Any]:
        return {"statusCode": self.status, "headers": {"Content-Type": "text/plain"}, "body": self.body}


def raw_body(event: Mapping[str, Any]) -> bytes | None:
    """The request's body as sent; None when the event is not a function URL request we can read."""
    body = event.get("body") or ""
    if not isinstance(body, str):
        return None
    if event.get("isBase64Encoded"):
        try:
            return base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            return None
    return body.encode("utf-8")


def respond(event: Mapping[str, Any], handle: Callable[[Mapping[str, str], bytes], Answer]) -> dict[str, Any]:
    """A POST's headers and raw body to `handle`; anything else answered 405 or 400 without it."""
    method = (event.get("requestContext") or {}).get("http", {}).get("method")
    if method != "POST":
        return Answer(405, "POST only").as_function_url_response()
    body = raw_body(event)
    headers = event.get("headers") or {}
    if body is None or not isinstance(headers, dict):
        return Answer(400, "unreadable request").as_function_url_response()
    return handle(headers, body).as_function_url_response()


def fetch_json_secret(name: str, force: bool) -> Any:
    return parameters.get_secret(name, transform="json", max_age=SECRET_CACHE_SECONDS, force_fetch=force)


class RotatingSecret(Generic[_T]):
    """A signing secret from a JSON secret in Secrets Manager: `read` takes it out of the secret's value;
    `secret(force=True)` reads the secret again, at most once a minute (else the cached value)."""

    def __init__(
        self, name: str, fetch: Callable[[str, bool], Any], monotonic: Callable[[], float] = elapsed.monotonic
    ) -> None:
        self._name = name
        self._fetch = fetch
        self._monotonic = monotonic
        self._forced_at: float | None = None

    def read(self, value: Any) -> _T:
        raise NotImplementedError

    def __call__(self, force: bool) -> _T:
        if force:
            now = self._monotonic()
            if self._forced_at is not None and now - self._forced_at < MIN_FORCED_REFRESH_SECONDS:
                force = False
            else:
                self._forced_at = now
        return self.read(self._fetch(self._name, force))
