"""PagerDutyWebhook: PagerDuty's v3 webhooks from the function URL -> signed -> an incident action on the alert queue.

Thin edge: the raw body (base64-decoded when the function URL encoded it: the signature is over the bytes PagerDuty
sent) and the headers go to fault_responder.pagerduty_webhook.PagerDutyWebhook, which answers with a status code.
The account the action envelope names is the function's own (its ARN).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.observability import logger, metrics, tracer
from fault_responder.slack_actions import Answer
from fault_responder.webhook_bootstrap import pagerduty_webhook


def raw_body(event: dict[str, Any]) -> bytes | None:
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


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    method = (event.get("requestContext") or {}).get("http", {}).get("method")
    if method != "POST":
        return Answer(405, "POST only").as_function_url_response()
    body = raw_body(event)
    headers = event.get("headers") or {}
    if body is None or not isinstance(headers, dict):
        return Answer(400, "unreadable request").as_function_url_response()
    account = context.invoked_function_arn.split(":")[4]
    return pagerduty_webhook(account).handle(headers, body).as_function_url_response()
