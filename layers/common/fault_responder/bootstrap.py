"""Wiring: environment -> settings -> the alert router with its adapters. Built once per container."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from datetime import timedelta
from functools import cache
from typing import Any

import boto3
from aws_lambda_powertools.utilities import parameters
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fault_responder import lifecycle
from fault_responder.adapters.dynamodb_store import DynamoDBIncidentStore
from fault_responder.adapters.http import RetryPolicy
from fault_responder.adapters.notifiers import PAGERDUTY_EVENTS_URL, SLACK_API_URL, SecretChannels
from fault_responder.dispatch import Dispatcher
from fault_responder.models.events import UnsupportedEventError
from fault_responder.observability import count, logger
from fault_responder.routing import Router, load_routing
from fault_responder.service import AlertService

SECRET_CACHE_SECONDS = 300
IDEMPOTENCY_SECONDS = 24 * 3600


class RouterSettings(BaseModel):
    """The AlertRouter's environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    incidents_table: str = Field(alias="INCIDENTS_TABLE", min_length=1)
    idempotency_table: str = Field(alias="IDEMPOTENCY_TABLE", min_length=1)
    alert_dlq_url: str = Field(alias="ALERT_DLQ_URL", min_length=1)
    slack_secret_name: str = Field(alias="SLACK_SECRET_NAME", min_length=1)
    pagerduty_secret_name: str = Field(alias="PAGERDUTY_SECRET_NAME", min_length=1)
    routing_file: str = Field(alias="ROUTING_FILE", default="default.yaml")
    incident_retention_days: int = Field(alias="INCIDENT_RETENTION_DAYS", default=30, ge=1)
    drain_attribution_window_minutes: int = Field(alias="DRAIN_ATTRIBUTION_WINDOW_MINUTES", default=60, ge=1)
    slack_api_url: str = Field(alias="SLACK_API_URL", default=SLACK_API_URL)
    pagerduty_events_url: str = Field(alias="PAGERDUTY_EVENTS_URL", default=PAGERDUTY_EVENTS_URL)
    http_max_attempts: int = Field(alias="HTTP_MAX_ATTEMPTS", default=4, ge=1, le=10)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RouterSettings:
        try:
            return cls.model_validate(dict(env))
        except ValidationError as error:
            fields = sorted({str(e["loc"][0]) for e in error.errors()})
            raise RuntimeError(f"AlertRouter environment is incomplete or invalid: {fields}") from None


class MalformedEventError(Exception):
    """The record is not an event we can ever process: it goes to the DLQ at once, not through retries."""


class AlertRouter:
    """The SQS record handler: malformed input is dead-lettered, everything else processed idempotently."""

    def __init__(self, settings: RouterSettings) -> None:
        self.settings = settings
        routing = load_routing(settings.routing_file)
        channels = SecretChannels(
            fetch_secret=_fetch_json_secret,
            slack_secret_name=settings.slack_secret_name,
            pagerduty_secret_name=settings.pagerduty_secret_name,
            slack_api_url=settings.slack_api_url,
            pagerduty_url=settings.pagerduty_events_url,
            policy=RetryPolicy(max_attempts=settings.http_max_attempts),
        )
        store = DynamoDBIncidentStore(settings.incidents_table, timedelta(days=settings.incident_retention_days))
        dispatcher = Dispatcher(
            routing.receivers,
            channels,
            store,
            on_delivery=lambda channel, ok: count(
                "NotificationsSent" if ok else "NotificationsFailed", "Channel", channel
            ),
        )
        self.service = AlertService(
            store,
            Router(routing),
            dispatcher,
            lifecycle.Settings(drain_window=timedelta(minutes=settings.drain_attribution_window_minutes)),
            count=count,
        )
        self.idempotency = IdempotencyConfig(
            event_key_jmespath="id", expires_after_seconds=IDEMPOTENCY_SECONDS, raise_on_no_idempotency_key=True
        )
        persistence = DynamoDBPersistenceLayer(table_name=settings.idempotency_table)
        self._handle_once: Callable[..., dict[str, Any]] = idempotent_function(
            data_keyword_argument="event", config=self.idempotency, persistence_store=persistence
        )(self._handle)
        self._sqs = boto3.client("sqs")

    def _handle(self, event: dict[str, Any]) -> dict[str, Any]:
        return self.service.handle(event)

    def process_body(self, body: str, message_id: str) -> dict[str, Any] | None:
        """Handle one SQS message body. Returns None when the message was dead-lettered as malformed."""
        try:
            raw = json.loads(body)
        except json.JSONDecodeError as error:
            self._dead_letter(body, message_id, None, f"body is not JSON: {error}")
            return None
        event_id = raw.get("id") if isinstance(raw, dict) else None
        logger.set_correlation_id(event_id if isinstance(event_id, str) else message_id)
        if not isinstance(event_id, str) or not event_id:
            self._dead_letter(body, message_id, None, "event has no id")
            return None
        try:
            result = self._handle_once(event=raw)
        except (ValidationError, UnsupportedEventError) as error:
            self._dead_letter(body, message_id, event_id, _describe(error))
            return None
        logger.info("event processed", extra={"event_id": event_id, "result": result})
        return result

    def _dead_letter(self, body: str, message_id: str, event_id: str | None, reason: str) -> None:
        logger.error("malformed event dead-lettered", extra={"event_id": event_id or message_id, "reason": reason})
        count("MalformedEvents", "Queue", "AlertQueue")
        self._sqs.send_message(
            QueueUrl=self.settings.alert_dlq_url,
            MessageBody=body,
            MessageAttributes={
                "error": {"DataType": "String", "StringValue": reason[:1000]},
                "source_message_id": {"DataType": "String", "StringValue": message_id},
            },
        )


def _describe(error: Exception) -> str:
    if isinstance(error, ValidationError):
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()[:5]]
        return "invalid event: " + "; ".join(problems)
    return str(error)


def _fetch_json_secret(name: str) -> Any:
    return parameters.get_secret(name, transform="json", max_age=SECRET_CACHE_SECONDS)


@cache
def alert_router() -> AlertRouter:
    return AlertRouter(RouterSettings.from_env(os.environ))


def reset() -> None:
    """Forget the wiring and cached secrets (the sandbox calls this when it points us at new endpoints)."""
    alert_router.cache_clear()
    parameters.clear_caches()  # type: ignore[no-untyped-call]
