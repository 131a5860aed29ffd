"""The routing file's webhook target, and which endpoint URLs a webhook may post to (docs/webhook.md).

The target names an endpoint of the webhook secret: the URL (which may carry a token) and the signing secrets live
in Secrets Manager, never in the routing file. Its model is routing.router's WebhookTarget (the routing file's schema,
which routing/ may not import from here), named here too.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from fault_responder.routing.router import WEBHOOK_DEFAULT_MAX_ALERTS as DEFAULT_MAX_ALERTS
from fault_responder.routing.router import WEBHOOK_MOST_ALERTS as MOST_ALERTS
from fault_responder.routing.router import WebhookTarget

__all__ = ["DEFAULT_MAX_ALERTS", "MOST_ALERTS", "WebhookTarget", "WebhookUrlError", "check_webhook_url"]

MAX_URL = 2048


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
