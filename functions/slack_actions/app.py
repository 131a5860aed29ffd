"""SlackActions: Slack's interactive payloads (button presses) from the function URL -> signed, once, allowed -> done.

Thin edge: the raw body (base64-decoded when the function URL encoded it: the signature is over the bytes Slack
sent) and the headers go to fault_responder.actions.slack_actions.SlackActions, which answers with a status code.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.actions.function_url import respond
from fault_responder.core.observability import logger, metrics, tracer
from fault_responder.wiring.slack_actions import slack_actions


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return respond(event, slack_actions().handle)
