"""A stand-in for a Microsoft Teams Workflows webhook ("When a Teams webhook request is received" → post the card
to a channel), served by the stand-ins' loopback server (sandbox/standins.py) at TEAMS_PATH.

It checks what Teams checks, and answers at once what the real service reports only in the flow's run history:
- the URL's signature (`sig`): missing or wrong → 401, as Logic Apps answers (DirectApiAuthorizationRequired,
  DirectApiInvalidAuthorizationSignature);
- the size: a body over MAX_REQUEST_BYTES (about 28 KB, Teams' message limit) → 413 "Request Entity too large";
- the body: JSON, the message envelope (`type` "message", attachments whose `contentType` is the Adaptive Card's,
  `contentUrl` null or absent, `content` a card) → 400 with the reason;
- each card: `type` AdaptiveCard, a `version` Teams renders (1.5 or lower), and valid against the Adaptive Card JSON
  schema 1.5 (vendored in sandbox/schemas/, validated with jsonschema) → 400 naming the first place that is not;
- otherwise 202 Accepted (empty body), and the message is kept: `messages` lists what the channel shows.

The real service accepts any JSON with 202 and the flow then fails to post what Teams refuses: answering 400 or 413
here makes a test see what on-call would silently miss. Not emulated: throttling (inject 429 through the stand-ins'
`faults`), and the flow's own run history.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import jsonschema
from jsonschema.exceptions import best_match

TEAMS_PATH = "/powerautomate/automations/direct/workflows/0a1b2c3d4e5f60718293a4b5c6d7e8f9/triggers/manual/paths/invoke"
TEAMS_SIG = "sandboxteamsworkflowsignature0123456789abcdef"  # nosec B105  # the stand-in's own, loopback only
TEAMS_QUERY = f"api-version=1&sp=%2Ftriggers%2Fmanual%2Frun&sv=1.0&sig={TEAMS_SIG}"
"""A Workflows URL's query: its `sig` is what makes the URL a secret."""
MAX_REQUEST_BYTES = 28 * 1024
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
NEWEST_VERSION = (1, 5)
"""The newest Adaptive Card version Teams renders: a card requiring more shows only its fallback text."""
SCHEMA_PATH = Path(__file__).with_name("schemas") / "adaptive-card-1.5.json"


@dataclass
class TeamsAnswer:
    status: int
    body: Any
    """A dict is sent as JSON, a str as plain text."""
    headers: dict[str, str] = field(default_factory=dict)


def _error(status: int, code: str, message: str) -> TeamsAnswer:
    return TeamsAnswer(status, {"error": {"code": code, "message": message}})


class TeamsChannel:
    """The channel a Workflows webhook posts to: it answers posts and keeps the messages it accepted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._messages: list[dict[str, Any]] = []

    def post(self, query: str, raw: bytes) -> TeamsAnswer:
        signature = parse_qs(query).get("sig")
        if not signature:
            return _error(401, "DirectApiAuthorizationRequired", "The request must be authenticated: no 'sig'.")
        if signature[-1] != TEAMS_SIG:
            return _error(401, "DirectApiInvalidAuthorizationSignature", "The provided 'sig' is not valid.")
        if len(raw) > MAX_REQUEST_BYTES:
            return _error(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "RequestEntityTooLarge",
                f"Request Entity too large: {len(raw)} bytes, more than Teams' {MAX_REQUEST_BYTES}",
            )
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return _error(HTTPStatus.BAD_REQUEST, "InvalidRequestContent", "The request body is not JSON.")
        problems = message_errors(body)
        if problems:
            return _error(HTTPStatus.BAD_REQUEST, "InvalidRequestContent", "; ".join(problems[:5]))
        with self._lock:
            self._messages.append(
                {"at": time.time(), "size": len(raw), "cards": [a["content"] for a in body["attachments"]]}
            )
        return TeamsAnswer(HTTPStatus.ACCEPTED, "")

    def messages(self) -> list[dict[str, Any]]:
        """The messages accepted so far, in order: {"at", "size" (bytes), "cards"} (a copy)."""
        with self._lock:
            copied: list[dict[str, Any]] = json.loads(json.dumps(self._messages))
        return copied


def message_errors(body: Any) -> list[str]:
    """Why Teams would not post this webhook message (empty: it would): its envelope, then each card."""
    if not isinstance(body, dict):
        return ["the body is not a JSON object"]
    if body.get("type") != "message":
        return ['"type" must be "message"']
    attachments = body.get("attachments")
    if not isinstance(attachments, list) or not attachments:
        return ['"attachments" must be a non-empty list']
    problems = []
    for index, attachment in enumerate(attachments):
        where = f"attachments[{index}]"
        if not isinstance(attachment, dict):
            problems.append(f"{where} is not an object")
            continue
        if attachment.get("contentType") != CARD_CONTENT_TYPE:
            problems.append(f'{where}.contentType must be "{CARD_CONTENT_TYPE}"')
        if attachment.get("contentUrl") is not None:
            problems.append(f"{where}.contentUrl must be null")
        problems.extend(f"{where}.content: {problem}" for problem in card_errors(attachment.get("content")))
    return problems


def card_errors(card: Any) -> list[str]:
    """Why Teams would not render this Adaptive Card (empty: it would)."""
    if not isinstance(card, dict):
        return ["the card is not a JSON object"]
    if card.get("type") != "AdaptiveCard":
        return ['"type" must be "AdaptiveCard"']
    version = card.get("version")
    if not isinstance(version, str):
        return ['"version" is required (a string, e.g. "1.5")']
    try:
        parts = tuple(int(part) for part in version.split("."))
    except ValueError:
        return [f'"version" {version!r} is not a version']
    if parts > NEWEST_VERSION:
        return [f'"version" {version} is newer than Teams renders (1.5)']
    error = best_match(_validator().iter_errors(card))
    if error is None:
        return []
    return [f"{error.json_path}: {error.message[:300]}"]


@cache
def _validator() -> jsonschema.Draft6Validator:
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return jsonschema.Draft6Validator(schema)
