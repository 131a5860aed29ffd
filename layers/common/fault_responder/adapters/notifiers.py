"""Notifier clients built from secrets in Secrets Manager (fetched by name with Powertools, cached).

Slack's and PagerDuty's secret values are wrapped in SecretStr as soon as they are parsed, so they cannot reach a
log line or an exception message by accident. Every other receiver kind's secret is handed to that kind's own client
as parsed JSON (`secret(kind)`, the ReceiverChannels port), which parses it the same way; its posts go through
`post_json`, under the same retry policy, budget and session as Slack's. A secret is read again when a call says it
may have been rotated (`refresh`), and at the latest when Powertools' cache expires.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from fault_responder.adapters.endpoints import PAGERDUTY_EVENTS_URL, SLACK_API_URL
from fault_responder.adapters.http import Budget, HttpResponse, HttpSession, RetryPolicy, send_json
from fault_responder.adapters.pagerduty import PagerDutyChangeEvents, PagerDutyEvents
from fault_responder.adapters.slack import SlackWebApi, SlackWebhook
from fault_responder.notification.contract import AnswerCheck, DeliveryError, PostAnswer

_ROUTING_KEY = re.compile(r"^[A-Za-z0-9]{32}$")


class SecretFormatError(DeliveryError):
    """A notifier secret is missing a field or is not the documented JSON (the message names no value)."""

    def __init__(self, service: str, reason: str) -> None:
        super().__init__(service, None, reason, retryable=False)


# defer_build: built when a secret is first read (the first delivery), not on every cold start.
class SlackSecret(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    bot_token: SecretStr | None = None
    webhook_urls: dict[str, SecretStr] = Field(default_factory=dict)


class PagerDutySecret(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)
    routing_keys: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("routing_keys")
    @classmethod
    def _integration_keys(cls, keys: dict[str, SecretStr]) -> dict[str, SecretStr]:
        wrong = sorted(name for name, key in keys.items() if not _ROUTING_KEY.match(key.get_secret_value()))
        if wrong:
            raise ValueError(
                f"routing_keys {wrong}: an Events API v2 integration key is 32 letters and digits (check for "
                "spaces, quotes, or a REST API key pasted instead)"
            )
        return keys


_Secret = TypeVar("_Secret", SlackSecret, PagerDutySecret)

SecretFetcher = Callable[[str, bool], Any]
"""Returns the secret's parsed JSON by name; the flag forces a fresh read past the cache."""


class SecretChannels:
    """The delivery Channels, backed by the secrets named in the stack parameters: Slack's and PagerDuty's, and one
    per other receiver kind the stack configures (`receiver_secrets`: kind -> secret name).

    One instance per execution environment; `budget` is set for each invocation, and every client built
    after that spends from it.
    """

    def __init__(
        self,
        *,
        fetch_secret: SecretFetcher,
        slack_secret_name: str,
        pagerduty_secret_name: str,
        receiver_secrets: Mapping[str, str] | None = None,
        slack_api_url: str = SLACK_API_URL,
        pagerduty_url: str = PAGERDUTY_EVENTS_URL,
        policy: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._fetch = fetch_secret
        self._sleep = sleep
        """How `post_json` waits between attempts."""
        self._names = {"slack": slack_secret_name, "pagerduty": pagerduty_secret_name}
        self._receiver_names = {
            kind: name for kind, name in (receiver_secrets or {}).items() if name and kind not in self._names
        }
        self._slack_api_url = slack_api_url
        self._pagerduty_url = pagerduty_url
        self._policy = policy or RetryPolicy()
        self._secrets: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self._channel_ids: dict[str, str] = {}
        self.budget = Budget.unlimited()

    def refresh(self, service: str) -> None:
        """Forget the cached secret and read it again now (once per rotation suspicion, by the caller)."""
        with self._lock:
            self._secrets.pop(service, None)
            self._secrets[service] = self._load(service, force=True)

    def secret(self, kind: str) -> Mapping[str, Any]:
        """The receiver kind's secret as parsed JSON (a read-only view; cached until `refresh(kind)`)."""
        if kind not in self._receiver_names:
            raise SecretFormatError(kind, f"the stack names no {kind} secret (its secret name parameter is empty)")
        value: Mapping[str, Any] = self._secret(kind)
        return value

    def post_json(
        self,
        kind: str,
        url: str,
        payload: dict[str, Any],
        *,
        headers: Mapping[str, str] | None = None,
        sign: Callable[[bytes], Mapping[str, str]] | None = None,
        idempotent: bool = True,
        retryable_statuses: frozenset[int] = frozenset(),
        is_failure: AnswerCheck | None = None,
    ) -> PostAnswer:
        """POST through adapters/http.py's send_json: this thread's session, the stack's retry policy, the
        invocation's budget and the lease's fence (ReceiverChannels.post_json)."""
        response = send_json(
            self._session,
            url,
            payload,
            service=kind,
            headers=dict(headers) if headers else None,
            policy=self._policy,
            sleep=self._sleep,
            is_failure=_judged_by(is_failure) if is_failure is not None else None,
            budget=self.budget,
            idempotent=idempotent,
            sign=sign,
            retryable_statuses=retryable_statuses,
        )
        return _answer(response)

    def _secret(self, service: str) -> Any:
        with self._lock:
            if service not in self._secrets:
                self._secrets[service] = self._load(service, force=False)
            return self._secrets[service]

    def _load(self, service: str, *, force: bool) -> SlackSecret | PagerDutySecret | Mapping[str, Any]:
        name = self._names.get(service) or self._receiver_names.get(service)
        if name is None:
            raise SecretFormatError(service, f"the stack names no {service} secret")
        try:
            value = self._fetch(name, force)
        except Exception as error:  # any failure to read a secret fails the delivery, retryably
            raise DeliveryError(service, None, f"cannot read secret {name!r} ({type(error).__name__})", True) from None
        if service == "slack":
            return _parse(SlackSecret, value, service)
        if service == "pagerduty":
            return _parse(PagerDutySecret, value, service)
        if not isinstance(value, Mapping):
            reason = f"the {service} secret is not a JSON object (docs/{service}.md shows its format)"
            raise SecretFormatError(service, reason)
        return MappingProxyType(dict(value))

    @property
    def _session(self) -> HttpSession:
        """One HTTP session per thread: channels are delivered to in parallel."""
        session: HttpSession | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = HttpSession()
        return session

    def slack_api(self) -> SlackWebApi:
        secret: SlackSecret = self._secret("slack")
        if secret.bot_token is None:
            raise SecretFormatError("slack", "the Slack secret has no bot_token, which a channel receiver needs")
        return SlackWebApi(
            secret.bot_token.get_secret_value(),
            self._slack_api_url,
            self._session,
            self._policy,
            budget=self.budget,
            channel_ids=self._channel_ids,
        )

    def slack_webhook(self, name: str) -> SlackWebhook:
        secret: SlackSecret = self._secret("slack")
        url = secret.webhook_urls.get(name)
        if url is None:
            raise SecretFormatError("slack", f"the Slack secret has no webhook_urls entry named {name!r}")
        return SlackWebhook(url.get_secret_value(), self._session, self._policy, budget=self.budget)

    def pagerduty(self) -> PagerDutyEvents:
        return PagerDutyEvents(self._pagerduty_url, self._session, self._policy, budget=self.budget)

    def pagerduty_changes(self) -> PagerDutyChangeEvents:
        """Change Events, at the Events API's own host (…/v2/enqueue -> …/v2/change/enqueue)."""
        url = f"{self._pagerduty_url.removesuffix('/v2/enqueue')}/v2/change/enqueue"
        return PagerDutyChangeEvents(url, self._session, self._policy, budget=self.budget)

    def routing_key(self, service: str) -> str:
        secret: PagerDutySecret = self._secret("pagerduty")
        key = secret.routing_keys.get(service)
        if key is None:
            raise SecretFormatError("pagerduty", f"the PagerDuty secret has no routing_keys entry named {service!r}")
        return key.get_secret_value()


def _judged_by(check: AnswerCheck) -> Callable[[HttpResponse], tuple[bool, bool, str]]:
    """send_json's failure check (failed, retryable, reason) from the port's (None, or retryable and reason)."""

    def judged(response: HttpResponse) -> tuple[bool, bool, str]:
        found = check(_answer(response))
        return (False, False, "") if found is None else (True, found[0], found[1])

    return judged


def _answer(response: HttpResponse) -> PostAnswer:
    return PostAnswer(status=response.status_code, headers=response.headers, body=response.content)


def _parse(model: type[_Secret], value: Any, service: str) -> _Secret:
    try:
        return model.model_validate(value)
    except ValidationError as error:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in error.errors()})
        problems = "; ".join(
            str(e["msg"]).removeprefix("Value error, ") for e in error.errors() if e["type"] == "value_error"
        )
        reason = f"the {service} secret is not in the documented format (fields: {fields})"
        raise SecretFormatError(service, f"{reason}: {problems}" if problems else reason) from None
