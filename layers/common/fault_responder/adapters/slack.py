"""Slack delivery: the Web API (bot token: threads and in-place updates) and incoming webhooks.

The Web API answers most errors with HTTP 200 and `{"ok": false, "error": ...}`; treating those as
success would silently lose notifications, so every response body is checked.

chat.postMessage is not idempotent: after a read timeout it is not retried (the message may be there).
Every message carries metadata naming what it is, so `find_message` can look for it first
(conversations.history / conversations.replies, which need the channels:history scope, and
channels:read when the routing file names a channel instead of giving its id).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fault_responder.adapters.endpoints import SLACK_API_URL
from fault_responder.adapters.http import (
    DEFAULT_RETRY_POLICY,
    Budget,
    HttpResponse,
    HttpSession,
    RetryPolicy,
    json_object,
    send_json,
)
from fault_responder.notification.contract import DeliveryError, SlackPostRef

if TYPE_CHECKING:
    from fault_responder.notification.render.blocks import SlackMessage

log = logging.getLogger(__name__)

SERVICE = "slack"

# Slack's transient `ok: false` codes; any other code (channel_not_found, invalid_auth,
# invalid_blocks, ...) fails the same way however often it is retried.
RETRYABLE_ERRORS = frozenset({"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"})
_CHANNEL_ID = re.compile(r"^[CGD][A-Z0-9]{8,}$")
_LOOKUP_PAGES = 5
"""conversations.history pages (of 100 messages) read when looking for a message: a busy channel's last
few minutes fit, and a lookup cannot run away."""


class SlackWebApi:
    """chat.postMessage, chat.update and looking a message up, with a bot token."""

    def __init__(
        self,
        token: str,
        base_url: str = SLACK_API_URL,
        session: HttpSession | None = None,
        policy: RetryPolicy = DEFAULT_RETRY_POLICY,
        *,
        sleep: Callable[[float], None] = time.sleep,
        budget: Budget | None = None,
        channel_ids: dict[str, str] | None = None,
    ) -> None:
        self._token = token
        self._base_url = base_url.rstrip("/")
        self._session = session or HttpSession()
        self._policy = policy
        self._sleep = sleep
        self._budget = budget
        self._channel_ids = channel_ids if channel_ids is not None else {}
        """Channel name -> id, learned from answers (shared by the clients of one container)."""

    def post_message(
        self,
        channel: str,
        message: SlackMessage,
        thread_ts: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> SlackPostRef:
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
        if metadata is not None:
            body["metadata"] = metadata
        answer = self._call("chat.postMessage", body, idempotent=False)
        posted_channel, ts = answer.get("channel"), answer.get("ts")
        if not isinstance(posted_channel, str) or not isinstance(ts, str):
            raise DeliveryError(SERVICE, 200, "chat.postMessage answer has no channel or ts", retryable=False)
        self._channel_ids[channel.removeprefix("#")] = posted_channel
        return SlackPostRef(channel=posted_channel, ts=ts)

    def update_message(self, channel: str, ts: str, message: SlackMessage) -> None:
        # Blocks are always sent: chat.update with text alone would strip the existing blocks.
        self._call("chat.update", {"channel": channel, "ts": ts, "text": message.text, "blocks": message.blocks})

    def find_message(
        self, channel: str, event_type: str, marker: str, oldest: datetime, thread_ts: str | None = None
    ) -> SlackPostRef | None:
        """The message this app posted with this metadata since `oldest`, if Slack has it.

        None when it is not there, or when it cannot be looked for (no history scope, a channel name that
        cannot be resolved): the caller then posts, and a duplicate is possible, which is logged.
        """
        channel_id = self._channel_id(channel)
        if channel_id is None:
            log.warning("cannot look for a message whose post timed out: channel id unknown; posting it again")
            return None
        method = "conversations.replies" if thread_ts else "conversations.history"
        query: dict[str, Any] = {
            "channel": channel_id,
            "oldest": f"{oldest.timestamp():.6f}",
            "include_all_metadata": "true",
            "limit": "100",
        }
        if thread_ts:
            query["ts"] = thread_ts
        try:
            for _ in range(_LOOKUP_PAGES):
                answer = self._call(method, query, form=True)
                for message in answer.get("messages") or []:
                    if _names(message, event_type, marker):
                        return SlackPostRef(channel=channel_id, ts=str(message["ts"]))
                cursor = (answer.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    return None
                query["cursor"] = cursor
        except DeliveryError as error:
            if error.retryable:
                raise
            log.warning("cannot look for a message whose post timed out (%s); posting it again", error.reason)
        return None

    def _channel_id(self, channel: str) -> str | None:
        if _CHANNEL_ID.match(channel):
            return channel
        name = channel.removeprefix("#")
        if name not in self._channel_ids:
            self._learn_channel_ids()
        return self._channel_ids.get(name)

    def _learn_channel_ids(self) -> None:
        query: dict[str, Any] = {"types": "public_channel,private_channel", "exclude_archived": "true", "limit": "1000"}
        try:
            for _ in range(_LOOKUP_PAGES):
                answer = self._call("conversations.list", query, form=True)
                for item in answer.get("channels") or []:
                    if isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("id"), str):
                        self._channel_ids[item["name"]] = item["id"]
                cursor = (answer.get("response_metadata") or {}).get("next_cursor")
                if not cursor:
                    return
                query["cursor"] = cursor
        except DeliveryError as error:
            if error.retryable:
                raise
            log.warning("cannot list channels to resolve a channel name (%s)", error.reason)

    def usergroup_members(self, group: str) -> list[str]:
        """The user ids of a user group (usergroups.users.list; scope usergroups:read)."""
        answer = self._call("usergroups.users.list", {"usergroup": group}, form=True)
        users = answer.get("users")
        return [user for user in users if isinstance(user, str)] if isinstance(users, list) else []

    def _call(
        self, method: str, body: dict[str, Any], *, idempotent: bool = True, form: bool = False
    ) -> dict[str, Any]:
        content_type = "application/x-www-form-urlencoded" if form else "application/json; charset=utf-8"
        response = send_json(
            self._session,
            f"{self._base_url}/{method}",
            body,
            service=SERVICE,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": content_type},
            policy=self._policy,
            sleep=self._sleep,
            is_failure=_web_api_failure,
            budget=self._budget,
            idempotent=idempotent,
            form=form,
        )
        # _web_api_failure has already refused anything but a JSON object with `ok: true`.
        return json_object(response) or {}


def _names(message: Any, event_type: str, marker: str) -> bool:
    if not isinstance(message, dict):
        return False
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != event_type:
        return False
    payload = metadata.get("event_payload")
    return isinstance(payload, dict) and payload.get("id") == marker


class SlackWebhook:
    """An incoming webhook: one fixed channel, no threads, no updates. The URL is the secret."""

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
            budget=self._budget,
            # A post: after a read timeout the message may be there, and a webhook cannot be searched.
            idempotent=False,
        )


def _web_api_failure(response: HttpResponse) -> tuple[bool, bool, str]:
    body = json_object(response)
    if body is None:
        return True, False, "invalid_response"
    if body.get("ok") is True:
        return False, False, ""
    error = body.get("error")
    code = error if isinstance(error, str) and error else "unknown_error"
    return True, code in RETRYABLE_ERRORS, code


def _webhook_failure(response: HttpResponse) -> tuple[bool, bool, str]:
    # Classic webhooks answer plain "ok"; a JSON body with `ok: false` is the Web API's error shape
    # (Workflow Builder triggers and proxies use it) and must not pass for success.
    body = json_object(response)
    if body is None or body.get("ok") is not False:
        return False, False, ""
    return _web_api_failure(response)
