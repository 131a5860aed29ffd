"""AlertRouter: ECS GPU fault events from the alert queue -> incidents -> Slack and PagerDuty.

Thin edge. The records of a batch are processed at once (Powertools' async batch processor, each record
in a thread), so a record waiting on a slow Slack never holds back the pages of the others; a failed record
is reported as a partial failure, retried by SQS and, on its last receive, dead-lettered with its reason by
the router. The work is in fault_responder.bootstrap.AlertRouter.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import AsyncBatchProcessor, EventType, async_process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.bootstrap import alert_router
from fault_responder.observability import logger, metrics, tracer

processor = AsyncBatchProcessor(event_type=EventType.SQS)


async def record_handler(record: SQSRecord) -> None:
    receives = int(record.attributes.approximate_receive_count or 1)
    await asyncio.to_thread(alert_router().process_record, record.body, record.message_id, receives)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    metrics.add_metric(name="RecordsReceived", unit=MetricUnit.Count, value=len(event.get("Records", [])))
    return async_process_partial_response(
        event=event, record_handler=record_handler, processor=processor, context=context
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def sweep_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """SweepFunction, every minute: open incidents brought up to date with the time (fault_responder.service)."""
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    return router.sweep()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def reconcile_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """ReconcileFunction, on its schedule: the watched clusters' instances as ECS describes them, against the
    incidents table (fault_responder.reconcile): missed faults opened, missed recoveries and departures closed."""
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    return router.reconcile()
