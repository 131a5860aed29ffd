"""The webhook's routing target, and the endpoint URLs it accepts."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fault_responder.notification.receivers.webhook.target import (
    DEFAULT_MAX_ALERTS,
    WebhookTarget,
    WebhookUrlError,
    check_webhook_url,
)


def test_a_target_names_an_endpoint_and_may_cap_its_alerts() -> None:
    assert WebhookTarget.model_validate({"endpoint": "ops-tool"}).max_alerts == DEFAULT_MAX_ALERTS
    assert WebhookTarget.model_validate({"endpoint": "ops-tool", "max_alerts": 0}).max_alerts == 0
    for wrong in ({"endpoint": "ops tool"}, {"endpoint": "ops", "max_alerts": 1001}, {"endpoint": "ops", "url": "x"}):
        with pytest.raises(ValidationError):
            WebhookTarget.model_validate(wrong)


@pytest.mark.parametrize(
    "url", ["https://tools.example.com/hooks/gpu?token=abc", "http://127.0.0.1:8765/webhook/x", "http://[::1]/x"]
)
def test_https_anywhere_and_plain_http_to_loopback_are_accepted(url: str) -> None:
    assert check_webhook_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://tools.example.com/hooks/gpu?token=abc",
        "http://10.0.0.5/hook?token=abc",
        "ftp://tools.example.com/?token=abc",
        "https:///nohost?token=abc",
        "https://tools.example.com/a b?token=abc",
        "https://tools.example.com:99999/?token=abc",
    ],
)
def test_anything_else_is_refused_without_quoting_the_url(url: str) -> None:
    with pytest.raises(WebhookUrlError) as raised:
        check_webhook_url(url)

    assert "token=abc" not in str(raised.value)
