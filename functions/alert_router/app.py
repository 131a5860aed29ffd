"""AlertRouter: ECS GPU fault events from the alert queue -> incidents -> Slack and PagerDuty.

Thin edge: the batch processor reports partial failures (a failed record is retried by SQS and,
after the receive limit, dead-lettered; it never blocks its batch neighbours). The work is in
fault_responder.bootstrap.AlertRouter.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.bootstrap import alert_router
from fault_responder.observability import logger, metrics, tracer

processor = BatchProcessor(event_type=EventType.SQS)


@tracer.capture_method
def record_handler(record: SQSRecord) -> None:
    try:
        alert_router().process_body(record.body, record.message_id)
    except Exception as error:
        logger.error(
            "event processing failed; SQS will retry it",
            extra={"event_id": logger.get_correlation_id(), "reason": str(error)},
        )
        raise


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    alert_router().idempotency.register_lambda_context(context)
    metrics.add_metric(name="RecordsReceived", unit=MetricUnit.Count, value=len(event.get("Records", [])))
    return process_partial_response(event=event, record_handler=record_handler, processor=processor, context=context)
