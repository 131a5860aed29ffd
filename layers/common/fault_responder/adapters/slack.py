"""Slack delivery: the Web API (bot token: threads and in-place updates) and incoming webhooks.

The Web API answers most errors with HTTP 200 and `{"ok": false, "error": ...}`; treating those as
success would silently lose notifications, so every response body is checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from fault_responder.adapters.http import DEFAULT_RETRY_POLICY, DeliveryError, RetryPolicy, json_object, send_json
from fault_responder.render.slack import SlackMessage

SERVICE = "slack"
SLACK_API_URL = "https://slack.com/api"

# Slack's transient `ok: false` codes; any other code (channel_not_found, invalid_auth,
# invalid_blocks, ...) fails the same way however often it is retried.
RETRYABLE_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"})


@dataclass(frozen=True)
class SlackPostRef:
    channel: str
    """The channel id Slack answered with (chat.update needs the id, not the name)."""
    ts: str


class SlackWebApi:
    """chat.postMessage and chat.update with a bot token."""

    def __init__(
        self,
        token: str,
        base_url: str = SLACK_API_URL,
        session: requests.Session | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._token = token
        self._base_url = base_url.rstrip("/")
        self._session = session or requests.Session()
        self._policy = policy
        self._sleep = sleep

    def post_message(self, channel: str, message: SlackMessage, thread_ts: str | None = None) -> SlackPostRef:
        body: dict[str, Any] = {
            "channel": channel,
            "text": message.text,
            "blocks": message.blocks,
            # The console link needs an AWS login: an unfurl would only show a sign-in page.
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if thread_ts is not None:
            body["thread_ts"] = thread_ts
        answer = self._call("chat.postMessage", body)
        posted_channel, ts = answer.get("channel"), answer.get("ts")
        if not isinstance(posted_channel, str) or not isinstance(ts, str):
            raise DeliveryError(SERVICE, 200, "chat.postMessage answer has no channel or ts", retryable=False)
        return SlackPostRef(channel=posted_channel, ts=ts)

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None:
        # Blocks are always sent: chat.update with text alone would strip the existing blocks.
        self._call("chat.update", {"channel": channel, "ts": ts, "text": message.text, "blocks": message.blocks})

    def _call(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        response = send_json(
            self._session,
            f"{self._base_url}/{method}",
            body,
            service=SERVICE,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": "application/json; charset=utf-8"},
            policy=self._policy,
            sleep=self._sleep,
            is_failure=_web_api_failure,
        )
        # _web_api_failure has already refused anything but a JSON object with `ok: true`.
        return json_object(response) or {}


class SlackWebhook:
    """An incoming webhook: one fixed channel, no threads, no updates. The URL is the secret."""

    def __init__(
        self,
        url: str,
        session: requests.Session | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._url = url
        self._session = session or requests.Session()
        self._policy = policy
        self._sleep = sleep

    def post(self, message: SlackMessage) -> None:
        # Webhooks answer 200 "ok", and errors with 4xx/5xx and a plain code (invalid_payload,
        # channel_not_found, ...), which send_json already classifies by status.
        send_json(
            self._session,
            self._url,
            {"text": message.text, "blocks": message.blocks},
            service=SERVICE,
            policy=self._policy,
            sleep=self._sleep,
            is_failure=_webhook_failure,
        )


def _web_api_failure(response: requests.Response) -> tuple[bool, bool, str]:
    body = json_object(response)
    if body is None:
        return True, False, "invalid_response"
    if body.get("ok") is True:
        return False, False, ""
    error = body.get("error")
    code = error if isinstance(error, str) and error else "unknown_error"
    return True, code in RETRYABLE_ERRORS, code


def _webhook_failure(response: requests.Response) -> tuple[bool, bool, str]:
    # Classic webhooks answer plain "ok"; a JSON body with `ok: false` is the Web API's error shape
    # (Workflow Builder triggers and proxies use it) and must not pass for success.
    body = json_object(response)
    if body is None or body.get("ok") is not False:
        return False, False, ""
    return _web_api_failure(response)
