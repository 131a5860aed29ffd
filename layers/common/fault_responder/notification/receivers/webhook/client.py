"""The signed webhook's client: each endpoint's URL and signing secrets from the webhook secret, and a signed POST
through the channels' generic port (notification.contract.ReceiverChannels; docs/webhook.md).

The webhook secret is JSON: `{"endpoints": {"<name>": {"url": "https://...", "signing_secrets": ["<current>",
"<previous>"]}}}`, read through the channels (cached, read again on demand). The URL may carry a token and is a secret
like the signing secrets: none of them reaches a log line or an error message.

Answers are judged as for Slack and PagerDuty: 2xx delivered; 408, 429, 5xx and network errors retried within the
invocation's budget, then left to the queue's redelivery; any other 4xx fails at once, after one more try with the
secret read again when the answer was 401 or 403 (the consumer may have rotated the secret or the URL's token). A
payload is the whole state of its incident, not a change to apply, so sending it twice is harmless: a read timeout
is retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from fault_responder.notification.contract import DeliveryError, ReceiverChannels
from fault_responder.notification.receivers.webhook.signing import MIN_SECRET_LENGTH, MOST_SECRETS, signature_headers
from fault_responder.notification.receivers.webhook.target import check_webhook_url

SERVICE = "webhook"
"""The kind's key: the channels' name of its secret, and the service its errors and metrics name."""
RETRYABLE_STATUSES = frozenset({408})
"""4xx answers retried as 429 is: 408 Request Timeout (the consumer gave up waiting for the body)."""
AUTH_STATUSES = frozenset({401, 403})
USER_AGENT = "GPU-Fault-Responder-Webhook/1"


class WebhookEndpoint(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)
    url: SecretStr
    signing_secrets: list[SecretStr] = Field(min_length=1, max_length=MOST_SECRETS)

    @field_validator("url")
    @classmethod
    def _reachable(cls, url: SecretStr) -> SecretStr:
        check_webhook_url(url.get_secret_value())  # WebhookUrlError is a ValueError that never quotes the URL
        return url

    @field_validator("signing_secrets")
    @classmethod
    def _long_enough(cls, secrets: list[SecretStr]) -> list[SecretStr]:
        if any(len(secret.get_secret_value()) < MIN_SECRET_LENGTH for secret in secrets):
            raise ValueError(
                f"each signing secret is at least {MIN_SECRET_LENGTH} characters (e.g. 32 random bytes, hex)"
            )
        return secrets


class WebhookClient:
    """POSTs payloads to the webhook secret's endpoints, each attempt signed at its own time with every signing
    secret of the endpoint."""

    def __init__(self, channels: ReceiverChannels, *, clock: Callable[[], float] = time.time) -> None:
        self._channels = channels
        self._clock = clock

    def post(self, endpoint: str, payload: dict[str, Any]) -> None:
        """Deliver one payload (payload.render_incident, render_alert, render_resume_notice), or raise DeliveryError.
        A 401 or 403 is left to the caller (ReceiverKind.is_auth_failure: the secret is read again, once)."""
        url, secrets = self._endpoint(endpoint)
        self._channels.post_json(
            SERVICE,
            url,
            payload,
            headers={"User-Agent": USER_AGENT},
            sign=lambda body: signature_headers(secrets, int(self._clock()), body),
            idempotent=True,
            retryable_statuses=RETRYABLE_STATUSES,
        )

    def send(self, endpoint: str, payload: dict[str, Any]) -> None:
        """Deliver `payload` to `endpoint`; refused as unauthorized, once more with the secret read again."""
        try:
            self.post(endpoint, payload)
            return
        except DeliveryError as error:
            if not is_auth_failure(error):
                raise
        self._channels.refresh(SERVICE)
        self.post(endpoint, payload)

    def _endpoint(self, name: str) -> tuple[str, tuple[str, ...]]:
        endpoints = self._channels.secret(SERVICE).get("endpoints")
        found = endpoints.get(name) if isinstance(endpoints, Mapping) else None
        if not isinstance(found, Mapping):
            raise DeliveryError(
                SERVICE, None, f"the webhook secret has no endpoints entry named {name!r}", retryable=False
            )
        endpoint = _parse(name, found)
        return endpoint.url.get_secret_value(), tuple(secret.get_secret_value() for secret in endpoint.signing_secrets)


def is_auth_failure(error: DeliveryError) -> bool:
    """A 401 or 403: the consumer may have rotated the signing secret or the URL's token."""
    return error.service == SERVICE and error.status in AUTH_STATUSES


def _parse(name: str, found: Mapping[str, Any]) -> WebhookEndpoint:
    """The endpoint, read key by key (what the dry run's placeholder secret answers too); one signing secret may be
    written as a string."""
    signing = found.get("signing_secrets")
    fields = {**found, "url": found.get("url"), "signing_secrets": [signing] if isinstance(signing, str) else signing}
    try:
        return WebhookEndpoint.model_validate(fields)
    except ValidationError as error:
        wrong = sorted({".".join(("endpoints", name, *(str(p) for p in e["loc"]))) for e in error.errors()})
        problems = "; ".join(
            str(e["msg"]).removeprefix("Value error, ") for e in error.errors() if e["type"] == "value_error"
        )
        reason = f"the webhook secret is not in the documented format (fields: {wrong})"
        raise DeliveryError(SERVICE, None, f"{reason}: {problems}" if problems else reason, retryable=False) from None
