"""Adaptive Cards for a Microsoft Teams Workflows webhook: the message envelope, the few card elements the Teams
receiver uses, markdown escaping, clipping, and fitting a message within Teams' size limit.

Pure functions, no I/O. Teams renders a subset of markdown in a TextBlock's text and a Fact's value (bold, italic,
lists, links): everything that came from an event goes through `escape_markdown`, so a reason cannot form a link.
Nothing is left out in silence: a text cut to fit ends with SHORTENED, and a list fitted by `fit_items` ends with an
item that counts what it left out and says where to see it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fault_responder.core.domain import Severity
from fault_responder.notification.render.marks import ELLIPSIS, SHORTENED

CARD_VERSION = "1.5"
"""The Adaptive Card schema version the cards declare: the newest Teams renders on desktop, web and mobile. The cards
use only elements from 1.0 to 1.2 (TextBlock, FactSet, Container, Action.OpenUrl), so older clients show them too."""
SCHEMA_URL = "http://adaptivecards.io/schemas/adaptive-card.json"
CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
MAX_REQUEST_BYTES = 28 * 1024
"""Teams' limit on a message (about 28 KB): a card past it is refused ("Request Entity too large")."""
MESSAGE_BUDGET = 25_000
"""The bytes a rendered request body may take (its JSON as the sender posts it): below MAX_REQUEST_BYTES with a
margin, as Teams counts the card as it posts it, which is a little longer than what we send."""
MAX_TITLE = 300
MAX_TEXT = 2000
"""Characters of one text (a step's text, a reason, a notice's body) before the message is fitted."""
MAX_FACT_VALUE = 500
MAX_LABEL = 200

SEVERITY_STYLE: dict[Severity, str] = {
    Severity.CRITICAL: "attention",
    Severity.ERROR: "attention",
    Severity.WARNING: "warning",
    Severity.INFO: "accent",
}
"""A card's header container style (its colour) by severity; a resolved incident's is `good`."""
SEVERITY_MARK: dict[Severity, str] = {
    Severity.CRITICAL: "\N{POLICE CARS REVOLVING LIGHT}",
    Severity.ERROR: "\N{LARGE RED CIRCLE}",
    Severity.WARNING: "\N{WARNING SIGN}\N{VARIATION SELECTOR-16}",
    Severity.INFO: "\N{INFORMATION SOURCE}\N{VARIATION SELECTOR-16}",
}
RESOLVED_MARK = "\N{WHITE HEAVY CHECK MARK}"

# What starts markdown in a TextBlock or a Fact's value; a backslash makes each one literal. An underscore inside a
# word (ACCELERATED_COMPUTE, XID_79) never emphasizes, and stays as it is.
_MARKDOWN = re.compile(r"[\\`*\[\]<>~]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
# A line that begins like a list item or a heading.
_LINE_START = re.compile(r"^(\s*)(?:([-+]|#+)|(\d+)([.)]))(?=\s)", re.MULTILINE)

Element = dict[str, Any]
_Item = TypeVar("_Item")


@dataclass(frozen=True)
class TeamsMessage:
    """What a Teams Workflows webhook is posted: the message envelope with one Adaptive Card."""

    payload: dict[str, Any]

    @property
    def card(self) -> dict[str, Any]:
        content: dict[str, Any] = self.payload["attachments"][0]["content"]
        return content

    @property
    def size(self) -> int:
        return body_size(self.payload)


def escape_markdown(text: str) -> str:
    """`text` as Teams shows it literally: no link, emphasis, list or heading can be formed from it."""
    escaped = _MARKDOWN.sub(lambda found: "\\" + found[0], text)
    return _LINE_START.sub(
        lambda found: f"{found[1]}\\{found[2]}" if found[2] else f"{found[1]}{found[3]}\\{found[4]}", escaped
    )


def clip(text: str, limit: int, marker: str = SHORTENED) -> str:
    """Cut `text` to `limit` characters ending with `marker` (SHORTENED, or where the whole text is), never after a
    lone escaping backslash (it would escape the marker's first character)."""
    if len(text) <= limit:
        return text
    if len(marker) >= limit:
        marker = ELLIPSIS
    cut = text[: limit - len(marker)]
    trailing = len(cut) - len(cut.rstrip("\\"))
    if trailing % 2:
        cut = cut[:-1]
    return cut + marker


def text_block(
    text: str,
    *,
    size: str | None = None,
    weight: str | None = None,
    color: str | None = None,
    subtle: bool = False,
    separator: bool = False,
) -> Element:
    """A wrapping TextBlock (`text` is markdown: escape what came from an event first). Teams refuses an empty
    text, so an empty one shows as "—"."""
    block: Element = {"type": "TextBlock", "text": text if text.strip() else "—", "wrap": True}
    if size is not None:
        block["size"] = size
    if weight is not None:
        block["weight"] = weight
    if color is not None:
        block["color"] = color
    if subtle:
        block["isSubtle"] = True
    if separator:
        block["separator"] = True
    return block


def fact_set(facts: Sequence[tuple[str, str]]) -> list[Element]:
    """A FactSet of (title, value), each already escaped, cut to fit a phone's width with SHORTENED; none when
    there are no facts (the schema refuses none, and Teams shows an empty set as a gap)."""
    if not facts:
        return []
    shown = [
        {"title": clip(title, MAX_LABEL), "value": clip(value if value.strip() else "—", MAX_FACT_VALUE)}
        for title, value in facts
    ]
    return [{"type": "FactSet", "facts": shown}]


def container(items: list[Element], *, style: str | None = None) -> Element:
    block: Element = {"type": "Container", "items": items}
    if style is not None:
        block["style"] = style
    return block


def open_url(title: str, url: str) -> Element:
    return {"type": "Action.OpenUrl", "title": clip(title, MAX_LABEL, ELLIPSIS), "url": url}


def message(body: list[Element], *, fallback: str, actions: Sequence[Element] = ()) -> TeamsMessage:
    """The envelope a Workflows webhook takes ("Send webhook alerts to a channel"), its one card with `body`, the
    `actions` (links) and the `fallback` text Teams shows in notifications and where a card cannot be rendered."""
    card: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": SCHEMA_URL,
        "version": CARD_VERSION,
        "fallbackText": clip(fallback, MAX_TITLE),
        "body": body,
    }
    if actions:
        card["actions"] = list(actions)
    payload = {
        "type": "message",
        "attachments": [{"contentType": CONTENT_TYPE, "contentUrl": None, "content": card}],
    }
    return TeamsMessage(payload)


def body_size(payload: dict[str, Any]) -> int:
    """The bytes of the request body the sender posts for `payload` (json.dumps, as adapters/http.py sends it)."""
    return len(json.dumps(payload, allow_nan=False).encode())


@dataclass(frozen=True)
class Fitted:
    """A message built around a list fitted into it (`fit_items`), and how much of the list it shows."""

    message: TeamsMessage
    shown: int
    """The list's first `shown` items are in the message, in order."""
    left_out: int
    """The items after those, counted by the message's note."""


def fit_items(
    items: Sequence[_Item],
    build: Callable[[Sequence[_Item], int], TeamsMessage],
    *,
    budget: int = MESSAGE_BUDGET,
) -> Fitted:
    """The message `build(shown, left_out)` with as many of `items` (the first ones, in order) as fit in `budget`
    bytes; `build` says how many it left out, and where to see them, when `left_out` is not 0.

    Found by bisection on the count (a message with more items is never smaller). When not even the note alone
    fits, the message without any item is returned as it is: `within_budget` then cuts its texts.
    """
    whole = build(items, 0)
    if whole.size <= budget:
        return Fitted(whole, len(items), 0)
    low, high = 0, len(items) - 1
    while low < high:
        middle = (low + high + 1) // 2
        if build(items[:middle], len(items) - middle).size <= budget:
            low = middle
        else:
            high = middle - 1
    return Fitted(build(items[:low], len(items) - low), low, len(items) - low)


def within_budget(fitted: TeamsMessage, *, budget: int = MESSAGE_BUDGET) -> TeamsMessage:
    """The message, its longest texts (TextBlock texts and Fact values) cut to one length, the highest that fits,
    each ending with SHORTENED, when it is larger than `budget`: the last guard, after the renderers bounded every
    text and fitted every list."""
    if fitted.size <= budget:
        return fitted
    lengths = [len(text) for text in _texts(fitted.payload)]
    low, high = len(SHORTENED), max(lengths, default=len(SHORTENED))
    while low < high:
        level = (low + high + 1) // 2
        low, high = (level, high) if body_size(_cut(fitted.payload, level)) <= budget else (low, level - 1)
    return TeamsMessage(_cut(fitted.payload, low))


def _texts(node: Any) -> list[str]:
    if isinstance(node, list):
        return [text for item in node for text in _texts(item)]
    if not isinstance(node, dict):
        return []
    found = []
    if node.get("type") == "TextBlock" and isinstance(node.get("text"), str):
        found.append(node["text"])
    if "title" in node and isinstance(node.get("value"), str):
        found.append(node["value"])
    for value in node.values():
        found.extend(_texts(value))
    return found


def _cut(node: Any, level: int) -> Any:
    if isinstance(node, list):
        return [_cut(item, level) for item in node]
    if not isinstance(node, dict):
        return node
    changed = {key: _cut(value, level) for key, value in node.items()}
    if node.get("type") == "TextBlock" and isinstance(node.get("text"), str):
        changed["text"] = clip(node["text"], level)
    if "title" in node and isinstance(node.get("value"), str):
        changed["value"] = clip(node["value"], level)
    return changed
