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

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from fault_responder.actions.function_url import Answer
from fault_responder.actions.interactive import (
    Click,
    GroupMembers,
    Permissions,
    Unauthorized,
    parse_click,
    verify_slack_request,
)
from fault_responder.incidents.incident_actions import ActionKind, IncidentAction, Via
from fault_responder.noise.silences import MAX_AUTHOR, MAX_COMMENT, Silence, SilenceError, new_silence
from fault_responder.notification.buttons import ActionId, BadRequest, IncidentButton
from fault_responder.routing.matchers import Matcher, MatcherError, Op, flag

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


class ActionSink(Protocol):
    """The alert queue (an adapter): the router records the action on the incident and delivers what follows."""

    def send(self, action: IncidentAction) -> None: ...


class SilenceWriter(Protocol):
    """The silences (adapters.silence_store): Silence 1 h / 4 h adds one."""

    def add(self, silence: Silence) -> Silence: ...


class Replies(Protocol):
    """Ephemeral answers through the press's response_url (an adapter)."""

    def ephemeral(self, response_url: str, text: str) -> bool:
        """False when the reply did not arrive (a courtesy: the press's work is done either way)."""
        ...


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
        actions: ActionSink | None = None,
        silences: SilenceWriter | None = None,
        groups: GroupMembers | None = None,
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
        self.actions = actions
        self.silences = silences
        self.groups = groups
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
        if not self.permissions.allows(click, self.groups):
            self.count("NotAllowed", "Action", click.action.value)
            self.log("press not allowed", {"action": click.action.value, "user": click.user_id})
            self._tell(click, f"You are not allowed to {_VERBS[click.action]}: ask the stack's owners to add you.")
            return Answer(200)
        try:
            outcome = self._act(click, signature)
        except BadRequest as bad:
            self.count("RefusedRequests", "Reason", "bad request")
            self.log("request refused", {"reason": bad.reason})
            return Answer(400, bad.reason)
        except (SilenceError, MatcherError) as refused:
            self._tell(click, f"No silence was made: {refused}")
            outcome = Outcome(click.action.value, click.user_id, "refused")
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

    def _act(self, click: Click, signature: str) -> Outcome:
        if click.action in (ActionId.APPROVE, ActionId.REJECT):
            return self._answer_approval(click)
        return self._on_incident(click, signature)

    def _on_incident(self, click: Click, signature: str) -> Outcome:
        """Acknowledge and Resolve go to the router (through the alert queue), which records them on the incident and
        tells PagerDuty and Slack; a silence is made here first, so it holds from this moment."""
        if self.actions is None:
            self._tell(click, "Incident buttons are not set up on this stack: nothing was changed.")
            return Outcome(click.action.value, click.user_id, "unsupported")
        button = IncidentButton.parse(click.value)
        now = self.clock()
        # One id per press: the digest of its signature (a press is signed once; a copy was refused already).
        key = f"slack:{hashlib.sha256(signature.encode()).hexdigest()[:32]}"
        who = f"{click.user_name} ({click.user_id})"
        note: str | None = None
        if click.action in _SILENCES:
            if not button.instance:
                raise BadRequest("a silence button names an instance")
            if self.silences is None:
                self._tell(click, "Silences are not set up on this stack: nothing was changed.")
                return Outcome(click.action.value, click.user_id, "unsupported")
            hours = _SILENCES[click.action]
            silence = self._silence(self.silences, button, who, hours, now)
            until = silence.ends_at.strftime("%H:%M UTC")
            note = f"for {hours} h, until {until} (silence {silence.id})"
            held = (
                f"drills naming `{button.instance}` notify nobody until then; its real faults still page"
                if button.drill
                else "its incidents and notices notify nobody until then (a drill naming it still reaches you)"
            )
            kind, done = (
                ActionKind.SILENCE,
                (
                    f"Silenced {'the drills of ' if button.drill else ''}`{button.instance}` for {hours} h "
                    f"(silence {silence.id}, until {until}): {held}. "
                    f"End it sooner with `python -m fault_responder.cli silence expire {silence.id}`."
                ),
            )
        elif click.action is ActionId.ACKNOWLEDGE:
            kind, done = (
                ActionKind.ACKNOWLEDGE,
                "Acknowledged: PagerDuty and the incident's message follow in a moment.",
            )
        else:
            kind, done = (
                ActionKind.RESOLVE,
                "Resolving: PagerDuty's alert and the incident's message follow in a moment.",
            )
        action = IncidentAction(
            key=key,
            kind=kind,
            via=Via.SLACK,
            by=who,
            at=now,
            record=button.record,
            incident=button.incident,
            note=note,
        )
        self.actions.send(action)
        self._tell(click, done)
        return Outcome(click.action.value, click.user_id, kind.value)

    @staticmethod
    def _silence(silences: SilenceWriter, button: IncidentButton, who: str, hours: int, now: datetime) -> Silence:
        """A silence of the button's instance, and of what it is: a drill's root silences that instance's drills, a
        real fault's root its real faults (a drill someone runs against a silenced instance still proves the path to
        on-call; docs/drills.md)."""
        matchers = [Matcher("instance", Op.EQUAL, button.instance), Matcher("drill", Op.EQUAL, flag(button.drill))]
        if button.cluster:
            matchers.insert(0, Matcher("cluster", Op.EQUAL, button.cluster))
        silence = new_silence(
            matchers,
            ends_at=now + timedelta(hours=hours),
            created_by=f"{who} via Slack"[:MAX_AUTHOR],
            comment=f"Silence {hours} h pressed on incident {button.incident}"[:MAX_COMMENT],
            now=now,
        )
        return silences.add(silence)

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


_SILENCES = {ActionId.SILENCE_1H: 1, ActionId.SILENCE_4H: 4}


_VERBS = {
    ActionId.ACKNOWLEDGE: "acknowledge incidents",
    ActionId.RESOLVE: "resolve incidents",
    ActionId.SILENCE_1H: "silence instances",
    ActionId.SILENCE_4H: "silence instances",
    ActionId.APPROVE: "approve training resumes",
    ActionId.REJECT: "reject training resumes",
}
