"""Wiring for PagerDutyWebhookFunction: environment -> settings -> PagerDutyWebhook with its adapters. Built once per
container. Kept apart from fault_responder.wiring.alert_router (and actions_bootstrap) so that this function's cold
start imports neither the router nor Slack's interactivity."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities import parameters
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from fault_responder.actions.function_url import RotatingSecret, fetch_json_secret
from fault_responder.actions.pagerduty_webhook import PagerDutyWebhook
from fault_responder.adapters.action_queue import ActionQueue
from fault_responder.core.observability import count, logger
from fault_responder.wiring.envtypes import declared


class WebhookSettings(BaseModel):
    """PagerDutyWebhookFunction's environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    alert_queue_url: str = Field(alias="ALERT_QUEUE_URL", min_length=1)
    pagerduty_secret_name: str = Field(alias="PAGERDUTY_SECRET_NAME", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WebhookSettings:
        values = declared(cls, env)
        # Lambda sets AWS_REGION; tools and tests may set only AWS_DEFAULT_REGION.
        values.setdefault("AWS_REGION", env.get("AWS_DEFAULT_REGION", ""))
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            fields = sorted({str(e["loc"][0]) for e in error.errors()})
            raise RuntimeError(f"PagerDutyWebhook environment is incomplete or invalid: {fields}") from None


class _WebhookSecrets(BaseModel):
    model_config = ConfigDict(extra="ignore")
    webhook_secrets: list[SecretStr] = Field(min_length=1, max_length=10)


class WebhookSecrets(RotatingSecret[list[str]]):
    """The `webhook_secrets` field of the PagerDuty secret (one per webhook subscription, two while one is being
    rotated; function_url.RotatingSecret: cached, re-read on demand at most once a minute)."""

    def read(self, value: Any) -> list[str]:
        try:
            secret = _WebhookSecrets.model_validate(value)
        except ValidationError:
            raise RuntimeError("the PagerDuty secret has no webhook_secrets list (docs/pagerduty-sync.md)") from None
        return [item.get_secret_value() for item in secret.webhook_secrets]


_fetch_json_secret = fetch_json_secret


@cache
def pagerduty_webhook(account: str) -> PagerDutyWebhook:
    """The webhook's work, for the account the function runs in (from its ARN: the envelope names it)."""
    current = WebhookSettings.from_env(os.environ)
    return PagerDutyWebhook(
        secrets=WebhookSecrets(current.pagerduty_secret_name, _fetch_json_secret),
        actions=ActionQueue(current.alert_queue_url, current.region, account),
        count=count,
        log=lambda message, extra: logger.info(message, extra=extra),
    )


def reset() -> None:
    """Forget the wiring and cached secrets (tests and the sandbox call this)."""
    pagerduty_webhook.cache_clear()
    parameters.clear_caches()  # type: ignore[no-untyped-call]
