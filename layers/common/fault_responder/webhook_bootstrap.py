"""Wiring for PagerDutyWebhookFunction: environment -> settings -> PagerDutyWebhook with its adapters. Built once per
container. Kept apart from fault_responder.bootstrap (and actions_bootstrap) so that this function's cold start
imports neither the router nor Slack's interactivity."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities import parameters
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from fault_responder.adapters.action_queue import ActionQueue
from fault_responder.observability import count, logger
from fault_responder.pagerduty_webhook import PagerDutyWebhook

SECRET_CACHE_SECONDS = 300
MIN_FORCED_REFRESH_SECONDS = 60.0
"""A wrong signature re-reads the secret (it may have been rotated), at most this often: forged requests cannot
turn into a flood of Secrets Manager calls."""


class WebhookSettings(BaseModel):
    """PagerDutyWebhookFunction's environment, validated once at cold start."""

    model_config = ConfigDict(frozen=True)
    alert_queue_url: str = Field(alias="ALERT_QUEUE_URL", min_length=1)
    pagerduty_secret_name: str = Field(alias="PAGERDUTY_SECRET_NAME", min_length=1)
    region: str = Field(alias="AWS_REGION", min_length=1)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> WebhookSettings:
        values = dict(env)
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


class WebhookSecrets:
    """The `webhook_secrets` field of the PagerDuty secret (one per webhook subscription, two while one is being
    rotated), cached (Powertools parameters), re-read on demand at most once a minute."""

    def __init__(
        self, name: str, fetch: Callable[[str, bool], Any], monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._name = name
        self._fetch = fetch
        self._monotonic = monotonic
        self._forced_at: float | None = None

    def __call__(self, force: bool) -> list[str]:
        if force:
            now = self._monotonic()
            if self._forced_at is not None and now - self._forced_at < MIN_FORCED_REFRESH_SECONDS:
                force = False
            else:
                self._forced_at = now
        try:
            secret = _WebhookSecrets.model_validate(self._fetch(self._name, force))
        except ValidationError:
            raise RuntimeError("the PagerDuty secret has no webhook_secrets list (docs/pagerduty-sync.md)") from None
        return [value.get_secret_value() for value in secret.webhook_secrets]


def _fetch_json_secret(name: str, force: bool) -> Any:
    return parameters.get_secret(name, transform="json", max_age=SECRET_CACHE_SECONDS, force_fetch=force)


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
