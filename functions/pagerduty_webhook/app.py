"""PagerDutyWebhook: PagerDuty's v3 webhooks from the function URL -> signed -> an incident action on the alert queue.

Thin edge: the raw body (base64-decoded when the function URL encoded it: the signature is over the bytes PagerDuty
sent) and the headers go to fault_responder.actions.pagerduty_webhook.PagerDutyWebhook, which answers with a status
code. The account the action envelope names is the function's own (its ARN).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.actions.function_url import respond
from fault_responder.core.observability import logger, metrics, tracer
from fault_responder.wiring.pagerduty_webhook import pagerduty_webhook


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    account = context.invoked_function_arn.split(":")[4]
    return respond(event, pagerduty_webhook(account).handle)
