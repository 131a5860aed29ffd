"""The routing file's webhook target, and which endpoint URLs a webhook may post to (docs/webhook.md).

The target names an endpoint of the webhook secret: the URL (which may carry a token) and the signing secrets live
in Secrets Manager, never in the routing file.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field

from fault_responder.routing.router import Name

DEFAULT_MAX_ALERTS = 100
"""Alerts one payload carries at most unless the target says otherwise; the rest are counted in truncatedAlerts."""
MOST_ALERTS = 1000
MAX_URL = 2048


class WebhookTarget(BaseModel):
    """`webhook: {endpoint: ops-tool, max_alerts: 100}` in a receiver of the routing file."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    endpoint: Name = Field(description="A key of the webhook secret's endpoints: its url and signing_secrets.")
    max_alerts: int = Field(
        default=DEFAULT_MAX_ALERTS,
        ge=0,
        le=MOST_ALERTS,
        description="Alerts one payload carries at most (0: as many as fit in MAX_BODY_BYTES); the alerts left "
        "out are counted in truncatedAlerts, as Alertmanager's max_alerts does.",
    )


class WebhookUrlError(ValueError):
    """An endpoint URL the webhook refuses; the message says why and never quotes the URL (it may hold a token)."""


def check_webhook_url(url: str) -> str:
    """`url` if a webhook may post to it: https to any host, or http to a loopback address only (where the
    sandbox's stand-ins listen); else WebhookUrlError saying why."""
    if not isinstance(url, str) or len(url) > MAX_URL or any(char.isspace() for char in url):
        raise WebhookUrlError(f"a webhook url is one absolute URL of at most {MAX_URL} characters, with no spaces")
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018  # an unreadable port raises ValueError here
    except ValueError:
        raise WebhookUrlError("a webhook url must be https://host/...: it cannot be read") from None
    if not host:
        raise WebhookUrlError("a webhook url must be https://host/...: it names no host")
    if parts.scheme == "https":
        return url
    if parts.scheme == "http" and _loopback(host):
        return url
    raise WebhookUrlError(
        f"a webhook url must be https://host/... (plain http only to a loopback address); it is {parts.scheme}:// "
        "to another host"
    )


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
