"""The interactivity endpoint's I/O: Step Functions' task answers and Slack's response_url."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import boto3
from botocore.exceptions import ClientError

from fault_responder.adapters.http import Budget, HttpSession, RetryPolicy, send_json
from fault_responder.adapters.slack import SlackWebApi
from fault_responder.core import elapsed
from fault_responder.core.observability import logger
from fault_responder.notification.contract import DeliveryError

_GONE = frozenset({"TaskDoesNotExist", "TaskTimedOut", "InvalidToken"})
"""Step Functions' answers for a token whose wait is over: the workflow moved on, there is nothing to answer."""


class StepFunctionsTaskAnswers:
    """SendTaskSuccess / SendTaskFailure for a resume waiting on a person (the RequestApproval state)."""

    def __init__(self, client: Any | None = None) -> None:
        self._client = client or boto3.client("stepfunctions")

    def approve(self, task_token: str, by: str) -> bool:
        """True when the workflow took the answer; False when its wait was already over."""
        return self._send(
            lambda: self._client.send_task_success(
                taskToken=task_token, output=json.dumps({"approved": True, "by": by[:200]})
            )
        )

    def reject(self, task_token: str, by: str) -> bool:
        return self._send(
            lambda: self._client.send_task_failure(
                taskToken=task_token, error="Rejected", cause=f"rejected in Slack by {by}"[:256]
            )
        )

    @staticmethod
    def _send(call: Any) -> bool:
        try:
            call()
        except ClientError as error:
            if str(error.response.get("Error", {}).get("Code", "")) in _GONE:
                return False
            raise
        return True


class ResponseUrlReplies:
    """Ephemeral messages (only the presser sees them) through the press's response_url."""

    def __init__(self, session: HttpSession | None = None, seconds: float = 2.0) -> None:
        self._session = session or HttpSession()
        # One quick attempt: the reply is a courtesy; the action it reports is already done and recorded.
        self._policy = RetryPolicy(max_attempts=1, connect_timeout=1.0, read_timeout=1.5)
        self._seconds = seconds

    def ephemeral(self, response_url: str, text: str) -> bool:
        """False when Slack did not take the reply: the press's work is done and recorded either way, so a reply
        that did not arrive is logged (without its URL, which is a credential for 30 minutes) and not retried."""
        try:
            send_json(
                self._session,
                response_url,
                {"response_type": "ephemeral", "replace_original": False, "text": text},
                service="Slack",
                policy=self._policy,
                budget=Budget(self._seconds, margin=0.0),
                idempotent=False,
            )
        except DeliveryError as error:
            logger.warning("ephemeral reply not delivered", extra={"reason": str(error)[:300]})
            return False
        return True


GROUP_CACHE_SECONDS = 300.0
"""A user group's members are read again after this long: someone added to the on-call group can press within five
minutes, and a burst of presses costs one call (usergroups.users.list is rate limited at about 20 a minute)."""


class SlackUserGroups:
    """interactive.GroupMembers from Slack (usergroups.users.list with the bot token), each group cached."""

    def __init__(
        self,
        token: Callable[[], str],
        base_url: str,
        *,
        session: HttpSession | None = None,
        clock: Callable[[], float] = elapsed.monotonic,
        cache_seconds: float = GROUP_CACHE_SECONDS,
    ) -> None:
        self._token = token
        self._base_url = base_url
        self._session = session or HttpSession()
        self._clock = clock
        self._cache_seconds = cache_seconds
        self._cache: dict[str, tuple[frozenset[str], float]] = {}
        self._lock = threading.Lock()

    def members(self, group: str) -> frozenset[str]:
        now = self._clock()
        with self._lock:
            cached = self._cache.get(group)
        if cached is not None and now - cached[1] < self._cache_seconds:
            return cached[0]
        try:
            api = SlackWebApi(
                self._token(),
                self._base_url,
                self._session,
                RetryPolicy(max_attempts=2, connect_timeout=1.0, read_timeout=1.0),
                budget=Budget(2.0, margin=0.0),
            )
            members = frozenset(api.usergroup_members(group))
        except DeliveryError as error:
            # Fail closed: no one is let in on a group that cannot be read; the last answer, if any, still counts.
            logger.warning("cannot read a Slack user group", extra={"group": group, "reason": error.reason[:200]})
            return cached[0] if cached is not None else frozenset()
        with self._lock:
            self._cache[group] = (members, now)
        return members
