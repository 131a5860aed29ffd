"""Microsoft Teams delivery: a card posted to a Workflows webhook ("When a Teams webhook request is received"), through
the channels' generic port (notification/contract.py ReceiverChannels: the stack's retries, the invocation's budget,
the delivery lease's fence).

The URL is the secret (its `sig` query parameter signs it): it is kept in Secrets Manager, in the Teams secret's
`webhook_urls` by name ({"webhook_urls": {"<name>": "https://...powerplatform.com/...&sig=..."}}), named by the
stack's TeamsSecretName, and never logged (adapters/http.py reduces transport errors to fixed names and logs no URL).

What a Workflows webhook answers, and what is done about it:
- 202 Accepted (or another 2xx): the flow was started; Teams posts the card asynchronously. A card the flow then
  fails to post (refused as invalid, or too large) is seen only in the flow's run history, never by the sender:
  the renderers keep every card within the schema and the size limit for that reason.
- 429 Too Many Requests (the trigger's throttling; Teams asks for exponential back-off) and 5xx: retryable,
  honouring Retry-After.
- 400 (the body is not the JSON the trigger takes), 401/403 (the signature is missing, wrong, or the flow's owner
  lost access), 404 (the flow or its trigger was deleted), 413 (too large): permanent; sending the same again
  cannot help, the URL or the flow needs fixing. 401, 403 and 404 may also be a URL replaced in the secret since it
  was read: the secret is read again and the post tried once more (`AUTH_STATUSES`, the kind's is_auth_failure).
- The retired Office 365 connector URLs answered HTTP 200 with "Microsoft Teams endpoint returned HTTP error <n>"
  in a text body: read as that status (retryable for 429 and 5xx), never as delivered.

A post is not idempotent (a read timeout may leave a card posted): it is not retried after an unknown outcome.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Protocol

from fault_responder.notification.contract import DeliveryError, PostAnswer, ReceiverChannels
from fault_responder.notification.receivers.teams.card import TeamsMessage

SERVICE = "teams"
AUTH_STATUSES = frozenset({401, 403, 404})
"""Answers that may mean the URL was replaced in the secret (a new flow, a new signature): read it again, once."""
_CONNECTOR_ERROR = re.compile(r"returned HTTP error (\d{3})")


def webhook_url(secret: Mapping[str, Any], name: str) -> str:
    """The URL named `name` in the Teams secret's parsed JSON; a permanent DeliveryError naming the field, never a
    value, when the secret is not in the documented format or has no such name."""
    urls = secret.get("webhook_urls") if isinstance(secret, Mapping) else None
    if not isinstance(urls, Mapping):
        reason = "the teams secret is not in the documented format (fields: ['webhook_urls'])"
        raise DeliveryError(SERVICE, None, reason, retryable=False)
    url = urls.get(name)
    if url is None:
        raise DeliveryError(
            SERVICE, None, f"the Teams secret has no webhook_urls entry named {name!r}", retryable=False
        )
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        reason = (
            f"the teams secret is not in the documented format (fields: ['webhook_urls.{name}']): webhook_urls "
            f"['{name}']: a Workflows webhook URL starts with https:// (copy it whole)"
        )
        raise DeliveryError(SERVICE, None, reason, retryable=False)
    return url


def post_card(channels: ReceiverChannels, url: str, message: TeamsMessage) -> None:
    """Post `message` to the Workflows webhook `url`; DeliveryError (retryable or permanent, see above) if it is
    not accepted."""
    channels.post_json(
        SERVICE,
        url,
        message.payload,
        is_failure=_connector_answer,
        # A post: after a read timeout the card may be there, and a webhook cannot be searched.
        idempotent=False,
    )


class TeamsWebhook:
    """One Workflows webhook (one channel or chat, fixed by the flow), by its name in the Teams secret: `post` a card
    to it. The URL is read from the secret at each post (cached by the channels, read again after a refresh)."""

    def __init__(self, channels: ReceiverChannels, name: str) -> None:
        self._channels = channels
        self._name = name

    def post(self, message: TeamsMessage) -> None:
        post_card(self._channels, webhook_url(self._channels.secret(SERVICE), self._name), message)


class _Answer(Protocol):
    @property
    def text(self) -> str: ...


def _connector_failure(response: _Answer) -> tuple[bool, bool, str]:
    """A 2xx answer that is an error: the retired connectors' "Microsoft Teams endpoint returned HTTP error <n>"."""
    found = _CONNECTOR_ERROR.search(response.text[:1000])
    if found is None:
        return False, False, ""
    status = int(found[1])
    return True, status == 429 or status >= 500, f"Teams answered HTTP error {status}"


def _connector_answer(answer: PostAnswer) -> tuple[bool, str] | None:
    failed, retryable, reason = _connector_failure(answer)
    return (retryable, reason) if failed else None
