"""Notifier clients built from secrets in Secrets Manager (fetched by name with Powertools, cached).

Secret values are wrapped in SecretStr as soon as they are parsed, so they cannot reach a log line or
an exception message by accident.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any, TypeVar

import requests
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from fault_responder.adapters.http import DeliveryError, RetryPolicy
from fault_responder.adapters.pagerduty import PagerDutyEvents
from fault_responder.adapters.slack import SlackWebApi, SlackWebhook

SLACK_API_URL = "https://slack.com/api"
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"


class SecretFormatError(DeliveryError):
    """A notifier secret is missing a field or is not the documented JSON (the message names no value)."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(service, None, reason, retryable=False)


class SlackSecret(BaseModel):
    model_config = ConfigDict(extra="ignore")
    bot_token: SecretStr | None = None
    webhook_urls: dict[str, SecretStr] = Field(default_factory=dict)


class PagerDutySecret(BaseModel):
    model_config = ConfigDict(extra="ignore")
    routing_keys: dict[str, SecretStr] = Field(default_factory=dict)


_Secret = TypeVar("_Secret", SlackSecret, PagerDutySecret)

SecretFetcher = Callable[[str], Any]
"""Returns the secret's parsed JSON by name (Powertools `get_secret(name, transform="json")`)."""


class SecretChannels:
    """The dispatcher's Channels, backed by two secrets named in the stack parameters."""

    def __init__(
        self,
        *,
        fetch_secret: SecretFetcher,
        slack_secret_name: str,
        pagerduty_secret_name: str,
        slack_api_url: str = SLACK_API_URL,
        pagerduty_url: str = PAGERDUTY_EVENTS_URL,
        policy: RetryPolicy | None = None,
    ) -> None:
        self._fetch = fetch_secret
        self._slack_name = slack_secret_name
        self._pagerduty_name = pagerduty_secret_name
        self._slack_api_url = slack_api_url
        self._pagerduty_url = pagerduty_url
        self._policy = policy or RetryPolicy()
        self._session = requests.Session()

    @cached_property
    def _slack(self) -> SlackSecret:
        return _parse(SlackSecret, self._read(self._slack_name, "slack"), "slack")

    @cached_property
    def _pagerduty_secret(self) -> PagerDutySecret:
        return _parse(PagerDutySecret, self._read(self._pagerduty_name, "pagerduty"), "pagerduty")

    def _read(self, name: str, service: str) -> Any:
        try:
            return self._fetch(name)
        except Exception as error:  # any failure to read a secret fails the delivery, retryably
            raise DeliveryError(service, None, f"cannot read secret {name!r} ({type(error).__name__})", True) from None

    def slack_api(self) -> SlackWebApi:
        token = self._slack.bot_token
        if token is None:
            raise SecretFormatError("slack", "the Slack secret has no bot_token, which a channel receiver needs")
        return SlackWebApi(token.get_secret_value(), self._slack_api_url, self._session, self._policy)

    def slack_webhook(self, name: str) -> SlackWebhook:
        url = self._slack.webhook_urls.get(name)
        if url is None:
            raise SecretFormatError("slack", f"the Slack secret has no webhook_urls entry named {name!r}")
        return SlackWebhook(url.get_secret_value(), self._session, self._policy)

    def pagerduty(self) -> PagerDutyEvents:
        return PagerDutyEvents(self._pagerduty_url, self._session, self._policy)

    def routing_key(self, service: str) -> str:
        key = self._pagerduty_secret.routing_keys.get(service)
        if key is None:
            raise SecretFormatError("pagerduty", f"the PagerDuty secret has no routing_keys entry named {service!r}")
        return key.get_secret_value()


def _parse(model: type[_Secret], value: Any, service: str) -> _Secret:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in error.errors()})
        reason = f"the {service} secret is not in the documented format (fields: {fields})"
        raise SecretFormatError(service, reason) from None
