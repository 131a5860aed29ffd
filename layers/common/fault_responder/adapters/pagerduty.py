"""PagerDuty Events API v2 delivery (trigger, acknowledge, resolve).

PagerDuty answers 202 when it accepts an event, 400 when the event is invalid (never retried),
429 and 5xx when it should be sent again later. The routing key travels inside the event body and
is a secret: it never reaches a log or an error message.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fault_responder.adapters.endpoints import PAGERDUTY_CHANGE_EVENTS_URL, PAGERDUTY_EVENTS_URL
from fault_responder.adapters.http import (
    DEFAULT_RETRY_POLICY,
    Budget,
    HttpResponse,
    HttpSession,
    RetryPolicy,
    json_object,
    send_json,
)
from fault_responder.notification.contract import DeliveryError

SERVICE = "pagerduty"


class _PagerDutyEndpoint:
    """One PagerDuty ingestion endpoint: both answer 202 `{"status": "success", ...}` when they take an event."""

    def __init__(
        self,
        url: str,
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
    ) -> None:
        self._url = url
        self._session = session or HttpSession()
        self._policy = policy
        self._sleep = sleep
        self._budget = budget

    def _post(self, event: dict[str, Any]) -> HttpResponse:
        return send_json(
            self._session,
            self._url,
            event,
            service=SERVICE,
            policy=self._policy,
            sleep=self._sleep,
            is_failure=_event_failure,
            budget=self._budget,
        )


class PagerDutyEvents(_PagerDutyEndpoint):
    """Events API v2 (`/v2/enqueue`): trigger, acknowledge, resolve."""

    def __init__(
        self,
        url: str = PAGERDUTY_EVENTS_URL,
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
    ) -> None:
        super().__init__(url, session, policy, sleep, budget)

    def send(self, event: dict[str, Any]) -> str:
        """Send one event; returns the dedup key PagerDuty filed it under (generated if we sent none)."""
        response = self._post(event)
        dedup_key = (json_object(response) or {}).get("dedup_key")
        if not isinstance(dedup_key, str):
            raise DeliveryError(SERVICE, response.status_code, "answer has no dedup_key", retryable=False)
        return dedup_key


def _event_failure(response: HttpResponse) -> tuple[bool, bool, str]:
    body = json_object(response)
    if body is None or body.get("status") != "success":
        return True, False, "invalid_response"
    return False, False, ""


class PagerDutyChangeEvents(_PagerDutyEndpoint):
    """PagerDuty Change Events (`/v2/change/enqueue`): informational, they never page and need no resolve.

    PagerDuty answers 202 `{"status": "success", "message": "Change event processed"}`, with no dedup key.
    """

    def __init__(
        self,
        url: str = PAGERDUTY_CHANGE_EVENTS_URL,
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
    ) -> None:
        super().__init__(url, session, policy, sleep, budget)

    def send(self, event: dict[str, Any]) -> None:
        self._post(event)
