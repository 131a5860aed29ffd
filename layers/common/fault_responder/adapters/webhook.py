"""The signed generic webhook's delivery: each endpoint's URL and signing secrets from Secrets Manager, and a POST
through adapters/http.py (docs/webhook.md).

The webhook secret is JSON: `{"endpoints": {"<name>": {"url": "https://...", "signing_secrets": ["<current>",
"<previous>"]}}}`, read by name with the notifiers' fetcher (cached, read again on demand). The URL may carry a token
and is a secret like the signing secrets: none of them reaches a log line or an error message.

Answers are judged as for Slack and PagerDuty: 2xx delivered; 408, 429, 5xx and network errors retried within the
invocation's budget, then left to the queue's redelivery; any other 4xx fails at once, after one more try with the
secret read again when the answer was 401 or 403 (the consumer may have rotated the secret or the URL's token). A
payload is the whole state of its incident, not a change to apply, so sending it twice is harmless: a read timeout
is retried.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from fault_responder.adapters.http import DEFAULT_RETRY_POLICY, Budget, HttpSession, RetryPolicy, send_json
from fault_responder.adapters.notifiers import SecretFetcher, SecretFormatError
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.webhook.signing import MIN_SECRET_LENGTH, MOST_SECRETS, signature_headers
from fault_responder.notification.receivers.webhook.target import WebhookUrlError, check_webhook_url

SERVICE = "webhook"
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


class WebhookSecret(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    endpoints: dict[str, WebhookEndpoint] = Field(default_factory=dict)


class WebhookSender:
    """POSTs payloads to one endpoint, each attempt signed at its own time with every signing secret."""

    def __init__(
        self,
        url: str,
        signing_secrets: Sequence[str],
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        *,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        try:
            self._url = check_webhook_url(url)
        except WebhookUrlError as error:
            raise DeliveryError(SERVICE, None, str(error), retryable=False) from None
        if not 1 <= len(signing_secrets) <= MOST_SECRETS:
            raise DeliveryError(SERVICE, None, f"an endpoint has 1 to {MOST_SECRETS} signing secrets", retryable=False)
        self._secrets = tuple(signing_secrets)
        self._session = session or HttpSession()
        self._policy = policy
        self._sleep = sleep
        self._budget = budget
        self._clock = clock

    def send(self, payload: dict[str, Any]) -> None:
        """Deliver one payload (payload.render_incident, render_alert), or raise DeliveryError."""
        send_json(
            self._session,
            self._url,
            payload,
            service=SERVICE,
            headers={"User-Agent": USER_AGENT},
            policy=self._policy,
            sleep=self._sleep,
            budget=self._budget,
            sign=lambda body: signature_headers(self._secrets, int(self._clock()), body),
            retryable_statuses=RETRYABLE_STATUSES,
        )


class WebhookEndpoints:
    """The endpoints of the webhook secret, named in the stack's parameters; one instance per execution environment.
    `budget` is set for each invocation, and every sender made after that spends from it."""

    def __init__(
        self,
        *,
        fetch_secret: SecretFetcher,
        secret_name: str,
        policy: RetryPolicy | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._fetch = fetch_secret
        self._name = secret_name
        self._policy = policy or RetryPolicy()
        self._clock = clock
        self._sleep = sleep
        self._secret: WebhookSecret | None = None
        self._lock = threading.Lock()
        self._local = threading.local()
        self.budget = Budget.unlimited()

    def refresh(self) -> None:
        """Forget the cached secret and read it again now."""
        with self._lock:
            self._secret = self._load(force=True)

    def sender(self, endpoint: str) -> WebhookSender:
        with self._lock:
            if self._secret is None:
                self._secret = self._load(force=False)
            found = self._secret.endpoints.get(endpoint)
        if found is None:
            raise SecretFormatError(SERVICE, f"the webhook secret has no endpoints entry named {endpoint!r}")
        return WebhookSender(
            found.url.get_secret_value(),
            [secret.get_secret_value() for secret in found.signing_secrets],
            self._session,
            self._policy,
            sleep=self._sleep,
            budget=self.budget,
            clock=self._clock,
        )

    def send(self, endpoint: str, payload: dict[str, Any]) -> None:
        """Deliver `payload` to `endpoint`; refused as unauthorized, once more with the secret read again."""
        try:
            self.sender(endpoint).send(payload)
            return
        except DeliveryError as error:
            if error.status not in AUTH_STATUSES:
                raise
        self.refresh()
        self.sender(endpoint).send(payload)

    @property
    def _session(self) -> HttpSession:
        """One HTTP session per thread: receivers are delivered to in parallel."""
        session: HttpSession | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = HttpSession()
        return session

    def _load(self, *, force: bool) -> WebhookSecret:
        try:
            value = self._fetch(self._name, force)
        except Exception as error:  # any failure to read a secret fails the delivery, retryably
            reason = f"cannot read secret {self._name!r} ({type(error).__name__})"
            raise DeliveryError(SERVICE, None, reason, retryable=True) from None
        try:
            return WebhookSecret.model_validate(value)
        except ValidationError as error:
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in error.errors()})
            problems = "; ".join(
                str(e["msg"]).removeprefix("Value error, ") for e in error.errors() if e["type"] == "value_error"
            )
            reason = f"the webhook secret is not in the documented format (fields: {fields})"
            raise SecretFormatError(SERVICE, f"{reason}: {problems}" if problems else reason) from None
