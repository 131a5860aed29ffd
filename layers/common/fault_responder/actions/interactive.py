"""Acting from Slack (and hearing from PagerDuty): who sent a request, and what it asks. Pure: no I/O.

Every request to the interactivity endpoint is authenticated before anything is read from it:

- Slack signs each request (its "v0" scheme): `v0=` + hex HMAC-SHA256, keyed with the app's signing secret, over
  `v0:{X-Slack-Request-Timestamp}:{raw body}`. The raw body is what was sent, before any decoding: a body that was
  parsed and re-encoded would not be the bytes that were signed.
- A timestamp more than five minutes from now is refused, whatever the signature: a request recorded and replayed
  later would otherwise stay valid for ever. Within those five minutes, the replay guard (an adapter: a
  conditional put of the signature) refuses a second copy.
- PagerDuty's webhooks (v3) carry `X-PagerDuty-Signature: v1=<hex HMAC-SHA256 of the raw body>`, possibly several
  comma-separated (one per secret while a secret is being rotated): one that matches is enough.

Comparisons are constant-time (hmac.compare_digest). A refusal says why in the log (never the secret, never the
signature) and answers 401; nothing else happens.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import parse_qs

from fault_responder.notification.buttons import MAX_VALUE, ActionId, BadRequest

SLACK_VERSION = "v0"
MAX_SKEW_SECONDS = 5 * 60
"""Slack's own advice: refuse a request whose timestamp is more than five minutes from now."""
MAX_BODY_BYTES = 64 * 1024
"""An interactive payload is a few kilobytes; anything much bigger is not one, and is refused before hashing."""
_HEX_SIGNATURE = re.compile(r"^[0-9a-f]{64}$")
_SLACK_ID = re.compile(r"^[A-Z0-9]{2,32}$")


class Unauthorized(Exception):
    """The request is not from who it says (or is too old, or a copy): answer 401, do nothing."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    # Function URLs deliver header names in lower case; HTTP in general does not promise a case.
    wanted = name.lower()
    for key, value in headers.items():
        if key.lower() == wanted:
            return value
    return None


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Slack's v0 signature of `body` sent at `timestamp` (also what the sandbox's Slack stand-in signs with)."""
    base = f"{SLACK_VERSION}:{timestamp}:".encode() + body
    return f"{SLACK_VERSION}=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def verify_slack_request(secret: str, headers: Mapping[str, str], body: bytes, now: datetime) -> str:
    """Raise Unauthorized unless `body` was signed by Slack with `secret` within five minutes of `now`. Returns the
    signature, which the caller claims once in the replay guard."""
    if not secret:
        raise Unauthorized("no signing secret configured")
    if len(body) > MAX_BODY_BYTES:
        raise Unauthorized("body too large")
    timestamp = _header(headers, "X-Slack-Request-Timestamp")
    signature = _header(headers, "X-Slack-Signature")
    if not timestamp or not signature:
        raise Unauthorized("unsigned")
    if not timestamp.isdigit() or len(timestamp) > 12:
        raise Unauthorized("malformed timestamp")
    if abs(now.timestamp() - int(timestamp)) > MAX_SKEW_SECONDS:
        raise Unauthorized("stale timestamp")
    if not signature.startswith(f"{SLACK_VERSION}=") or not _HEX_SIGNATURE.match(signature[3:]):
        raise Unauthorized("malformed signature")
    if not hmac.compare_digest(slack_signature(secret, timestamp, body), signature):
        raise Unauthorized("wrong signature")
    return signature


def pagerduty_signature(secret: str, body: bytes) -> str:
    """PagerDuty's v1 webhook signature of `body` (also what the sandbox's PagerDuty stand-in signs with)."""
    return "v1=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_pagerduty_request(secrets: Sequence[str], headers: Mapping[str, str], body: bytes) -> str:
    """Raise Unauthorized unless one of the comma-separated signatures in `X-PagerDuty-Signature` is `body`'s
    signature with one of `secrets`. Returns the matching signature (for the replay guard)."""
    secrets = [s for s in secrets if s]
    if not secrets:
        raise Unauthorized("no webhook secret configured")
    if len(body) > MAX_BODY_BYTES:
        raise Unauthorized("body too large")
    header = _header(headers, "X-PagerDuty-Signature")
    if not header:
        raise Unauthorized("unsigned")
    offered = [s.strip() for s in header.split(",") if s.strip()][:10]
    expected = [pagerduty_signature(secret, body) for secret in secrets]
    for candidate in offered:
        # Every pair compared, whatever matched first: the time taken says nothing about which one did.
        if any(hmac.compare_digest(candidate, wanted) for wanted in expected):
            return candidate
    raise Unauthorized("wrong signature")


@dataclass(frozen=True, slots=True)
class Click:
    """One button press: who, which button, on what (the button's value: an incident fingerprint, an approval id),
    and where to answer them (Slack's response_url, for ephemeral replies)."""

    user_id: str
    user_name: str
    action: ActionId
    value: str
    response_url: str | None
    channel_id: str | None
    message_ts: str | None


def parse_click(body: bytes) -> Click:
    """The one button press of a signed `block_actions` payload (form-encoded, its JSON in the `payload` field)."""
    try:
        form = parse_qs(body.decode("utf-8"), strict_parsing=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError):
        raise BadRequest("not a form-encoded body") from None
    raw = form.get("payload")
    if not raw or len(raw) != 1:
        raise BadRequest("no payload field")
    try:
        payload = json.loads(raw[0])
    except json.JSONDecodeError:
        raise BadRequest("payload is not JSON") from None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        raise BadRequest("not a block_actions payload")
    user = payload.get("user")
    actions = payload.get("actions")
    if not isinstance(user, dict) or not isinstance(actions, list) or len(actions) != 1:
        raise BadRequest("a block_actions payload needs a user and exactly one action")
    user_id = user.get("id")
    if not isinstance(user_id, str) or not _SLACK_ID.match(user_id):
        raise BadRequest("malformed user id")
    action = actions[0]
    if not isinstance(action, dict):
        raise BadRequest("malformed action")
    try:
        action_id = ActionId(str(action.get("action_id")))
    except ValueError:
        raise BadRequest("unknown action id") from None
    value = action.get("value")
    if not isinstance(value, str) or not value or len(value) > MAX_VALUE:
        raise BadRequest("malformed action value")
    response_url = payload.get("response_url")
    channel = _object(payload.get("channel"))
    container = _object(payload.get("container"))
    name = user.get("username") or user.get("name") or user_id
    return Click(
        user_id=user_id,
        user_name=str(name)[:80],
        action=action_id,
        value=value,
        response_url=response_url if isinstance(response_url, str) and len(response_url) <= MAX_VALUE else None,
        channel_id=_str_or_none(channel.get("id")),
        message_ts=_str_or_none(container.get("message_ts")),
    )


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


class GroupMembers(Protocol):
    """Slack user groups' members (an adapter: usergroups.users.list, cached)."""

    def members(self, group: str) -> frozenset[str]:
        """The group's user ids; empty when it cannot be read (no one is let in on a group that cannot be read)."""
        ...


@dataclass(frozen=True, slots=True)
class Permissions:
    """Who may press which button: Slack user ids (`U…`, `W…`) and user groups (`S…`: their members, read from Slack).
    Approving and rejecting a resume, and resolving, are limited to the listed people; acknowledging and silencing
    are open to anyone in the channel (what an on-call engineer who reads the channel needs to say "on it" or stop
    the noise; both are undone by the next page or the silence's end, and both are recorded with the person's
    name)."""

    approvers: frozenset[str] = frozenset()
    resolvers: frozenset[str] = frozenset()

    def allows(self, click: Click, groups: GroupMembers | None = None) -> bool:
        if click.action in (ActionId.APPROVE, ActionId.REJECT):
            allowed = self.approvers
        elif click.action is ActionId.RESOLVE:
            allowed = self.resolvers
        else:
            return True
        if click.user_id in allowed:
            return True
        if groups is None:
            return False
        return any(click.user_id in groups.members(group) for group in sorted(allowed) if is_user_group(group))

    @property
    def groups(self) -> frozenset[str]:
        return frozenset(entry for entry in self.approvers | self.resolvers if is_user_group(entry))

    @classmethod
    def parse(cls, approvers: Sequence[str], resolvers: Sequence[str]) -> Permissions:
        for entry in (*approvers, *resolvers):
            if not _SLACK_ID.match(entry) or entry[0] not in "UWS":
                raise ValueError(f"not a Slack user id (U…, W…) or user group id (S…): {entry[:40]!r}")
        return cls(approvers=frozenset(approvers), resolvers=frozenset(resolvers))


def is_user_group(entry: str) -> bool:
    return entry.startswith("S")
