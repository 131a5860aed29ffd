"""The Slack interactivity endpoint's work: one signed button press in, one HTTP answer out.

Order matters, and is the whole of the security story (docs/slack-actions.md):
1. the signature and timestamp (interactive.verify_slack_request): else 401;
2. the replay guard (the signature claimed once): a copy gets 401;
3. the payload (one block_actions press of a button we render): else 400;
4. who may press it (Permissions): else an ephemeral "not allowed", logged and counted;
5. the action.

Only then is anything changed. Typed in and out; the I/O is behind the protocols below (adapters).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from fault_responder.interactive import (
    ActionId,
    BadRequest,
    Click,
    Permissions,
    Unauthorized,
    parse_click,
    verify_slack_request,
)

RESPONSE_URL_PREFIX = "https://hooks.slack.com/"
"""Where Slack's response_urls point (https://hooks.slack.com/actions/...)."""


class ReplayGuard(Protocol):
    def claim_request(self, signature: str) -> bool: ...


class Approvals(Protocol):
    def take_approval(self, ident: str) -> str | None: ...

    def restore_approval(self, ident: str, task_token: str) -> None: ...


class TaskAnswers(Protocol):
    """Step Functions' SendTaskSuccess / SendTaskFailure (an adapter)."""

    def approve(self, task_token: str, by: str) -> bool:
        """False when the workflow no longer waits (timed out, stopped)."""
        ...

    def reject(self, task_token: str, by: str) -> bool: ...


class Replies(Protocol):
    """Ephemeral answers through the press's response_url (an adapter)."""

    def ephemeral(self, response_url: str, text: str) -> bool:
        """False when the reply did not arrive (a courtesy: the press's work is done either way)."""
        ...


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: str = ""

    def as_function_url_response(self) -> dict[str, Any]:
        return {"statusCode": self.status, "headers": {"Content-Type": "text/plain"}, "body": self.body}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a press did, for the log (never a token or a secret)."""

    action: str
    user: str
    result: str


class SlackActions:
    def __init__(
        self,
        *,
        signing_secret: Callable[[bool], str],
        replay_guard: ReplayGuard,
        approvals: Approvals,
        tasks: TaskAnswers,
        replies: Replies,
        permissions: Permissions,
        response_url_prefix: str = RESPONSE_URL_PREFIX,
        clock: Callable[[], datetime],
        count: Callable[[str, str, str], None] = lambda name, dimension, value: None,
        log: Callable[[str, dict[str, Any]], None] = lambda message, extra: None,
    ) -> None:
        self.signing_secret = signing_secret
        self.replay_guard = replay_guard
        self.approvals = approvals
        self.tasks = tasks
        self.replies = replies
        self.permissions = permissions
        self.response_url_prefix = response_url_prefix
        self.clock = clock
        self.count = count
        self.log = log

    def handle(self, headers: Mapping[str, str], body: bytes) -> Answer:
        try:
            signature = self._verify(headers, body)
            if not self.replay_guard.claim_request(signature):
                raise Unauthorized("replayed")
        except Unauthorized as refused:
            self.count("RefusedRequests", "Reason", refused.reason)
            self.log("request refused", {"reason": refused.reason})
            return Answer(401, "unauthorized")
        try:
            click = parse_click(body)
        except BadRequest as bad:
            self.count("RefusedRequests", "Reason", "bad request")
            self.log("request refused", {"reason": bad.reason})
            return Answer(400, bad.reason)
        if not self.permissions.allows(click):
            self.count("NotAllowed", "Action", click.action.value)
            self.log("press not allowed", {"action": click.action.value, "user": click.user_id})
            self._tell(click, f"You are not allowed to {_VERBS[click.action]}: ask the stack's owners to add you.")
            return Answer(200)
        outcome = self._act(click)
        self.count("ActionsTaken", "Action", f"{click.action.value}:{outcome.result}")
        self.log("press handled", {"action": outcome.action, "user": outcome.user, "result": outcome.result})
        return Answer(200)

    def _verify(self, headers: Mapping[str, str], body: bytes) -> str:
        secret = self.signing_secret(False)
        try:
            return verify_slack_request(secret, headers, body, self.clock())
        except Unauthorized as refused:
            if refused.reason != "wrong signature":
                raise
            # The secret may have been rotated since it was cached: read it again (the reader limits how often),
            # and only if it changed, check once more.
            fresh = self.signing_secret(True)
            if fresh == secret:
                raise
            return verify_slack_request(fresh, headers, body, self.clock())

    def _act(self, click: Click) -> Outcome:
        if click.action in (ActionId.APPROVE, ActionId.REJECT):
            return self._answer_approval(click)
        # The incident buttons (acknowledge, resolve, silence) are not rendered yet: a forged press of one is told so.
        self._tell(click, "That button does nothing yet: nothing was changed.")
        return Outcome(click.action.value, click.user_id, "unsupported")

    def _answer_approval(self, click: Click) -> Outcome:
        token = self.approvals.take_approval(click.value)
        if token is None:
            self._tell(click, "This approval request was already answered or has timed out: nothing was changed.")
            return Outcome(click.action.value, click.user_id, "gone")
        who = f"{click.user_name} ({click.user_id})"
        try:
            if click.action is ActionId.APPROVE:
                taken = self.tasks.approve(token, who)
                done, result = f"Approved by {who}: the workflow resumes the job.", "approved"
            else:
                taken = self.tasks.reject(token, who)
                done, result = f"Rejected by {who}: the job is left as it is.", "rejected"
        except Exception:
            # Step Functions did not take the answer (throttled, unavailable): the approval goes back, so the next
            # press can answer it, and the request fails, so Slack shows the person an error.
            self.approvals.restore_approval(click.value, token)
            raise
        if not taken:
            self._tell(click, "The workflow no longer waits for this answer (timed out or stopped): nothing changed.")
            return Outcome(click.action.value, click.user_id, "gone")
        self._tell(click, done)
        return Outcome(click.action.value, click.user_id, result)

    def _tell(self, click: Click, text: str) -> None:
        # Only to Slack's own response URLs: the payload is signed, but a reply never goes anywhere else.
        url = click.response_url
        if url and url.startswith(self.response_url_prefix) and not self.replies.ephemeral(url, text):
            self.count("RepliesFailed", "Action", click.action.value)


_VERBS = {
    ActionId.ACKNOWLEDGE: "acknowledge incidents",
    ActionId.RESOLVE: "resolve incidents",
    ActionId.SILENCE_1H: "silence instances",
    ActionId.SILENCE_4H: "silence instances",
    ActionId.APPROVE: "approve training resumes",
    ActionId.REJECT: "reject training resumes",
}
