"""AlertRouter: ECS GPU fault events from the alert queue -> incidents -> Slack and PagerDuty.

Thin edge. The records of a batch are processed at once (a thread each), so a record waiting on a slow Slack
never holds back the pages of the others; a failed record is reported as a partial failure
(ReportBatchItemFailures), retried by SQS and, on its last receive, dead-lettered with its reason by the router.
The work is in fault_responder.wiring.alert_router.AlertRouter.

The batch loop is ours rather than Powertools' batch processor: that one imports asyncio and every event
source's data classes, about a fifth of this function's cold import, for the twenty lines below.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from fault_responder.core.observability import logger, metrics, tracer
from fault_responder.wiring.alert_router import alert_router

MAX_RECORD_THREADS = 10
"""The event source mapping's BatchSize: every record of a batch gets a thread."""


class BatchFailedError(Exception):
    """Every record of the batch failed: the invocation fails (and counts as an error), SQS retries them all."""


def process_batch(event: dict[str, Any]) -> dict[str, list[dict[str, str]]]:
    """Each SQS record handled in a thread of its own; the ids of the records that raised, for SQS to retry."""
    records = [record for record in event.get("Records") or [] if isinstance(record, dict)]
    if not records:
        return {"batchItemFailures": []}
    router = alert_router()

    def handle(record: dict[str, Any]) -> None:
        receives = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 1)
        router.process_record(str(record.get("body") or ""), str(record.get("messageId") or ""), receives)

    failures: list[dict[str, str]] = []
    with ThreadPoolExecutor(max_workers=min(len(records), MAX_RECORD_THREADS)) as pool:
        futures = [(record, pool.submit(handle, record)) for record in records]
        for record, future in futures:
            error = future.exception()
            if error is not None:
                message_id = str(record.get("messageId") or "")
                logger.warning(
                    "record failed; SQS will deliver it again",
                    extra={"message_id": message_id, "error": type(error).__name__},
                )
                failures.append({"itemIdentifier": message_id})
    if len(failures) == len(records):
        raise BatchFailedError(f"all {len(records)} records of the batch failed; SQS delivers them again")
    return {"batchItemFailures": failures}


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, list[dict[str, str]]]:
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    metrics.add_metric(name="RecordsReceived", unit=MetricUnit.Count, value=len(event.get("Records", [])))
    return process_batch(event)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def sweep_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """SweepFunction, every minute: open incidents brought up to date with the time
    (fault_responder.alerting.service)."""
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    return router.sweep()


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def reconcile_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    """ReconcileFunction, on its schedule: the stack's alarms as CloudWatch describes them
    (fault_responder.operations.alarm_reconcile), then the watched clusters' instances as ECS describes them
    (fault_responder.operations.reconcile), against the incidents table: missed faults opened, missed recoveries and
    departures closed."""
    router = alert_router()
    router.start_invocation(context.get_remaining_time_in_millis() / 1000)
    return router.reconcile()
