"""Microsoft Teams delivery: a card posted to a Workflows webhook ("When a Teams webhook request is received").

The URL is the secret (its `sig` query parameter signs it): it is kept in Secrets Manager, in the Teams secret's
`webhook_urls` by name ({"webhook_urls": {"<name>": "https://...powerplatform.com/...&sig=..."}}), and never
logged (adapters/http.py reduces transport errors to fixed names and logs no URL).

What a Workflows webhook answers, and what is done about it (through adapters/http.py's retries and budget):
- 202 Accepted (or another 2xx): the flow was started; Teams posts the card asynchronously. A card the flow then
  fails to post (refused as invalid, or too large) is seen only in the flow's run history, never by the sender:
  the renderers keep every card within the schema and the size limit for that reason.
- 429 Too Many Requests (the trigger's throttling; Teams asks for exponential back-off) and 5xx: retryable,
  honouring Retry-After.
- 400 (the body is not the JSON the trigger takes), 401/403 (the signature is missing, wrong, or the flow's owner
  lost access), 404 (the flow or its trigger was deleted), 413 (too large): permanent; sending the same again
  cannot help, the URL or the flow needs fixing.
- The retired Office 365 connector URLs answered HTTP 200 with "Microsoft Teams endpoint returned HTTP error <n>"
  in a text body: read as that status (retryable for 429 and 5xx), never as delivered.

A post is not idempotent (a read timeout may leave a card posted): it is not retried after an unknown outcome.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from fault_responder.adapters.http import (
    DEFAULT_RETRY_POLICY,
    Budget,
    HttpResponse,
    HttpSession,
    RetryPolicy,
    send_json,
)
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.receivers.teams.card import TeamsMessage

SERVICE = "teams"
_CONNECTOR_ERROR = re.compile(r"returned HTTP error (\d{3})")


class TeamsSecret(BaseModel):
    """The Teams secret: `{"webhook_urls": {"<name>": "<Workflows webhook URL>"}}` (docs/teams.md)."""

    model_config = ConfigDict(extra="ignore", defer_build=True)
    webhook_urls: dict[str, SecretStr] = Field(default_factory=dict)

    @field_validator("webhook_urls")
    @classmethod
    def _urls(cls, urls: dict[str, SecretStr]) -> dict[str, SecretStr]:
        wrong = sorted(
            name for name, url in urls.items() if not url.get_secret_value().startswith(("https://", "http://"))
        )
        if wrong:
            raise ValueError(f"webhook_urls {wrong}: a Workflows webhook URL starts with https:// (copy it whole)")
        return urls


def webhook_url(secret: Any, name: str) -> str:
    """The URL named `name` in the Teams secret's parsed JSON; a permanent DeliveryError naming the field, never a
    value, when the secret is not in the documented format or has no such name."""
    try:
        parsed = TeamsSecret.model_validate(secret)
    except ValidationError as error:
        fields = sorted({".".join(str(p) for p in e["loc"]) for e in error.errors()})
        problems = "; ".join(
            str(e["msg"]).removeprefix("Value error, ") for e in error.errors() if e["type"] == "value_error"
        )
        reason = f"the teams secret is not in the documented format (fields: {fields})"
        raise DeliveryError(SERVICE, None, f"{reason}: {problems}" if problems else reason, retryable=False) from None
    url = parsed.webhook_urls.get(name)
    if url is None:
        raise DeliveryError(
            SERVICE, None, f"the Teams secret has no webhook_urls entry named {name!r}", retryable=False
        )
    return url.get_secret_value()


def post_card(
    url: str,
    message: TeamsMessage,
    *,
    session: HttpSession,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
    budget: Budget | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Post `message` to the Workflows webhook `url`; DeliveryError (retryable or permanent, see above) if it is
    not accepted."""
    send_json(
        session,
        url,
        message.payload,
        service=SERVICE,
        policy=policy,
        sleep=sleep,
        is_failure=_connector_failure,
        budget=budget,
        # A post: after a read timeout the card may be there, and a webhook cannot be searched.
        idempotent=False,
    )


class TeamsWebhook:
    """One Workflows webhook (one channel or chat, fixed by the flow): `post` a card to it."""

    def __init__(
        self,
        url: str,
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        *,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
    ) -> None:
        self._url = url
        self._session = session or HttpSession()
        self._policy = policy
        self._sleep = sleep
        self._budget = budget

    def post(self, message: TeamsMessage) -> None:
        post_card(
            self._url, message, session=self._session, policy=self._policy, budget=self._budget, sleep=self._sleep
        )


def _connector_failure(response: HttpResponse) -> tuple[bool, bool, str]:
    """A 2xx answer that is an error: the retired connectors' "Microsoft Teams endpoint returned HTTP error <n>"."""
    found = _CONNECTOR_ERROR.search(response.text[:1000])
    if found is None:
        return False, False, ""
    status = int(found[1])
    return True, status == 429 or status >= 500, f"Teams answered HTTP error {status}"
