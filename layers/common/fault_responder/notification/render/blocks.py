"""Block Kit's mechanics for every Slack message: the limits, escaping untrusted text, fitting lists and texts into
them, and the few block shapes every message uses (sections, fields, context, headers, links).

Pure functions, no I/O. Nothing exceeds a Block Kit limit, and nothing is left out in silence: a text cut to fit ends
with SHORTENED (or says where its full text is), and a list fitted into the message by `fit_lines` or `fit_fields`
ends with a line counting what it left out and saying where to see it. The messages themselves are render/slack.py's,
render/fleet.py's, render/notes.py's, render/silences.py's and the receivers' (notification/receivers/slack/).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fault_responder.core.timefmt import as_utc
from fault_responder.notification.render.marks import ELLIPSIS, SHORTENED

MAX_BLOCKS = 50
MAX_SECTION_TEXT = 3000
MAX_HEADER_TEXT = 150
MAX_FIELD_TEXT = 2000
MAX_FIELDS_PER_SECTION = 10
MAX_CONTEXT_ELEMENTS = 10
MAX_FALLBACK_TEXT = 40_000
MAX_BUTTON_VALUE = 2000
MORE_IN_THREAD = f"{ELLIPSIS} (more in the thread)"
"""Ends a root's step cut short: its thread reply has the step's text at full length (or says it is cut)."""
MAX_MESSAGE_TEXT = 10_000
"""The characters of text a message's blocks may hold in all. Beyond Block Kit's documented limits, Slack refuses
a message whose blocks hold more than about 12,000 (`msg_blocks_too_long`, undocumented; reported refused from
~11,300 to ~13,300): `_fit` keeps a margin below that."""
MAX_LISTING_TEXT = 6000
"""The characters a list (a notice's details, a fleet's members) may take in one message: most of
MAX_MESSAGE_TEXT, and room left for the header, the fields and the context."""

_LABEL_BUDGET = 200
DASHBOARD_LINK_TEXT = "Dashboard"


@dataclass(frozen=True)
class SlackMessage:
    text: str
    """The notification fallback text (push notifications, screen readers, old clients)."""
    blocks: list[dict[str, Any]]


def escape_mrkdwn(text: str) -> str:
    """Escape Slack's control characters so untrusted text cannot form links or mentions."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(frozen=True)
class Listing:
    """A list fitted into a message (`fit_lines`, `fit_fields`): its blocks, and how much of the list they show."""

    blocks: list[dict[str, Any]]
    shown: int
    """The list's first `shown` items are in `blocks`, in order, each whole or ending with its marker."""
    left_out: int
    """The items after those, in no block: counted by the note when the caller gave one, else the caller's to say."""
    chars: int
    """The characters of text in `blocks`, note included."""


def fit_lines(
    lines: Sequence[str],
    *,
    title: str | None = None,
    max_blocks: int = MAX_BLOCKS,
    max_chars: int | None = None,
    max_line: int = MAX_SECTION_TEXT,
    left_out: Callable[[int], str] | None = None,
    marker: str = SHORTENED,
) -> Listing:
    """Fit `lines` (each already escaped mrkdwn, most important first) into as few section blocks as they need.

    Packs by characters: each section holds as many whole lines, joined by newlines, as its 3,000 characters
    allow; the first starts with `title` (its own line). A line is never cut, except one longer than `max_line`
    (or than a section holding the title), which is cut to that length and ends with `marker`: say there
    "(shortened)" or where its full text is. A blank line shows as "—" (Slack refuses an empty text).

    The lines shown are always the first `shown`, in order: the first line that fits neither the last section
    nor a new one within `max_blocks` sections and `max_chars` characters of text ends the listing. When lines
    are left out and `left_out` is given, `left_out(count)` is the listing's last line, saying how many and where
    to see them (e.g. "…and 37 more: the thread names each one"); room for it is made by leaving out more lines,
    and `count` counts every one. Without `left_out`, `Listing.left_out` is the caller's to say.

    Guarantees: at most `max_blocks` blocks, each text within the section limit, at most `max_chars` characters
    of text in all, and `shown` + `left_out` == len(lines). If not even the note fits, there are no blocks,
    and `left_out` == len(lines) is the caller's to say. No lines, no blocks.

    Give a long list `max_chars` (MAX_LISTING_TEXT): a message holding more than MAX_MESSAGE_TEXT characters in
    all has its longest texts cut by `_fit`, and lines cut there are cut, not counted.
    """
    head = [title] if title else []
    room = MAX_SECTION_TEXT - sum(len(text) + 1 for text in head)
    items = [_clip(line if line.strip() else "—", min(max_line, room), marker) for line in lines]
    packer = _Packer(
        head,
        max_blocks,
        max_chars,
        separator=1,
        fits=lambda section, size, item: size + 1 + len(item) <= MAX_SECTION_TEXT,
    )
    shown = packer.fill(items, left_out, room, marker)
    blocks = [_section("\n".join(section)) for section in packer.sections]
    return Listing(blocks=blocks, shown=shown, left_out=len(items) - shown, chars=packer.used)


def fit_fields(
    fields: Sequence[tuple[str, str]],
    *,
    max_blocks: int = MAX_BLOCKS,
    max_chars: int | None = None,
    left_out: Callable[[int], str] | None = None,
    marker: str = SHORTENED,
) -> Listing:
    """Fit (label, value) fields (each escaped mrkdwn, most important first) into sections of up to 10 fields.

    Each field is "*label*\\nvalue", cut to Slack's 2,000 characters with `marker` at its end if longer. Fields are
    shown in order while they fit in `max_blocks` sections and `max_chars` characters of text; when some are left
    out and `left_out` is given, `left_out(count)` is the last field, counting every field left out (more are left
    out to make room for it). Same guarantees as `fit_lines`.
    """
    items = [_clip(f"*{label}*\n{value}", MAX_FIELD_TEXT, marker) for label, value in fields]
    packer = _Packer(
        [], max_blocks, max_chars, separator=0, fits=lambda section, size, item: len(section) < MAX_FIELDS_PER_SECTION
    )
    shown = packer.fill(items, left_out, MAX_FIELD_TEXT, marker)
    blocks = [
        {"type": "section", "fields": [_mrkdwn(text, MAX_FIELD_TEXT) for text in section]}
        for section in packer.sections
    ]
    return Listing(blocks=blocks, shown=shown, left_out=len(items) - shown, chars=packer.used)


class _Packer:
    """Items into sections, in order, within a budget of sections and characters (fit_lines, fit_fields)."""

    def __init__(
        self,
        head: list[str],
        max_blocks: int,
        max_chars: int | None,
        *,
        separator: int,
        fits: Callable[[list[str], int, str], bool],
    ) -> None:
        self.head = head
        self.separator = separator
        """Characters between two items of a section: the newline between lines, none between fields."""
        self.max_blocks = max_blocks
        self.max_chars = sys.maxsize if max_chars is None else max_chars
        self.fits = fits
        self.sections: list[list[str]] = []
        self.sizes: list[int] = []
        self.used = 0

    def fill(self, items: list[str], left_out: Callable[[int], str] | None, room: int, marker: str) -> int:
        """Place the items while they fit, then the note if any are left out; the number of items placed."""
        shown = 0
        for item in items:
            if not self._place(item):
                break
            shown += 1
        if shown == len(items) or left_out is None:
            return shown
        while not self._place(_clip(left_out(len(items) - shown), room, marker)):
            if shown == 0:
                return 0
            self._unplace()
            shown -= 1
        return shown

    def _place(self, item: str) -> bool:
        if self.sections and self.fits(self.sections[-1], self.sizes[-1], item):
            # Where it fits the last section, the character budget alone decides: a new section would not save it.
            added = self.separator + len(item)
            if self.used + added > self.max_chars:
                return False
            self.sections[-1].append(item)
            self.sizes[-1] += added
            self.used += added
            return True
        start = [] if self.sections else self.head
        size = self._size([*start, item])
        if len(self.sections) >= self.max_blocks or self.used + size > self.max_chars:
            return False
        self.sections.append([*start, item])
        self.sizes.append(size)
        self.used += size
        return True

    def _unplace(self) -> None:
        section = self.sections[-1]
        section.pop()
        self.used -= self.sizes[-1]
        if section == [] or (len(self.sections) == 1 and section == self.head):
            self.sections.pop()
            self.sizes.pop()
            return
        self.sizes[-1] = self._size(section)
        self.used += self.sizes[-1]

    def _size(self, section: list[str]) -> int:
        return sum(len(text) for text in section) + self.separator * (len(section) - 1)


def _slack_time(moment: datetime) -> str:
    """Slack's date token: each reader sees their own time zone; the fallback is UTC."""
    utc = as_utc(moment)
    fallback = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"<!date^{int(utc.timestamp())}^{{date_short_pretty}} {{time_secs}}|{fallback}>"


def _link(url: str, label: str) -> str:
    # Slack decodes &amp; &lt; &gt; inside the URL too; `|` and spaces would end or break the link.
    safe_url = escape_mrkdwn(url).replace("|", "%7C").replace(" ", "%20")
    return f"<{safe_url}|{_clip(escape_mrkdwn(label), _LABEL_BUDGET)}>"


def _header(emoji: str, label: str, title: str) -> dict[str, Any]:
    """The header block; a title too long for it ends with an ellipsis (`_headed` then shows it whole below)."""
    text = _clip(f"{_lead(emoji, label)} · {escape_mrkdwn(title)}", MAX_HEADER_TEXT)
    return {"type": "header", "text": {"type": "plain_text", "text": text, "emoji": True}}


def _headed(emoji: str, label: str, title: str) -> list[dict[str, Any]]:
    """The header, and the whole title right under it when the header had to cut it."""
    header = _header(emoji, label, title)
    if header["text"]["text"] != f"{_lead(emoji, label)} · {escape_mrkdwn(title)}":
        return [header, _section(f"*Title:* {escape_mrkdwn(title)}")]
    return [header]


def _lead(emoji: str, label: str) -> str:
    """What a header begins with: its emoji, if any, and its label."""
    return f"{emoji} {label}" if emoji else label


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": _mrkdwn(text, MAX_SECTION_TEXT)}


def _field_sections(fields: list[tuple[str, str]]) -> list[dict[str, Any]]:
    """A few fields (a known, short list), ten to a section, each cut to Slack's limit saying so."""
    texts = [_mrkdwn(f"*{label}*\n{value}", MAX_FIELD_TEXT) for label, value in fields]
    return [
        {"type": "section", "fields": texts[start : start + MAX_FIELDS_PER_SECTION]}
        for start in range(0, len(texts), MAX_FIELDS_PER_SECTION)
    ]


def _context(elements: list[str]) -> dict[str, Any]:
    """A context block; elements past Slack's ten share the tenth, so none is dropped."""
    if len(elements) > MAX_CONTEXT_ELEMENTS:
        elements = [*elements[: MAX_CONTEXT_ELEMENTS - 1], " · ".join(elements[MAX_CONTEXT_ELEMENTS - 1 :])]
    return {"type": "context", "elements": [_mrkdwn(text, MAX_SECTION_TEXT) for text in elements]}


def root_context(elements: list[str], dashboard_url: str | None) -> dict[str, Any]:
    """A root message's context line: its elements, then the dashboard link (kept when the elements are too many:
    the ones past nine share the ninth)."""
    if not dashboard_url:
        return _context(elements)
    if len(elements) > MAX_CONTEXT_ELEMENTS - 1:
        elements = [*elements[: MAX_CONTEXT_ELEMENTS - 2], " · ".join(elements[MAX_CONTEXT_ELEMENTS - 2 :])]
    return _context([*elements, _link(dashboard_url, DASHBOARD_LINK_TEXT)])


def _mrkdwn(text: str, limit: int) -> dict[str, Any]:
    return {"type": "mrkdwn", "text": _clip(text, limit, SHORTENED), "verbatim": True}


def _fallback(text: str) -> str:
    return _clip(text, MAX_FALLBACK_TEXT, SHORTENED)


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _fit(blocks: list[dict[str, Any]], *, where: str = "") -> list[dict[str, Any]]:
    """At most Slack's 50 blocks and MAX_MESSAGE_TEXT characters of text. Past 50, the body's last blocks make way
    for a note naming each of them, and the message keeps its header and its closing buttons and context; `where`
    says where to see what was dropped (e.g. ": the thread has each one"). Past the characters, the longest texts
    are cut, each to the same length and saying so. Renderers fit their lists first (fit_lines, fit_fields):
    this is the last guard."""
    return _within_message_text(_within_blocks(blocks, where))


def _within_blocks(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    if len(blocks) <= MAX_BLOCKS:
        return blocks
    tail = 0
    while tail < 2 and blocks[len(blocks) - 1 - tail]["type"] in ("actions", "context"):
        tail += 1
    body, closing = blocks[: len(blocks) - tail], blocks[len(blocks) - tail :]
    kept = body[: MAX_BLOCKS - 1 - tail]
    dropped = body[len(kept) :]
    named = "; ".join(_block_name(block) for block in dropped)
    note = f"{_count(len(dropped), 'more block')} not shown ({named}){where}"
    return [*kept, _context([note]), *closing]


def _within_message_text(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The blocks, their longest mrkdwn texts cut to one length (the highest that fits) when they hold too much."""
    texts = [text for block in blocks for text in _text_objects(block)]
    cuttable = [len(text["text"]) for text in texts if text["type"] == "mrkdwn"]
    budget = MAX_MESSAGE_TEXT - sum(len(text["text"]) for text in texts if text["type"] != "mrkdwn")
    if sum(cuttable) <= budget:
        return blocks
    low, high = len(SHORTENED), max(cuttable)
    while low < high:
        level = (low + high + 1) // 2
        low, high = (level, high) if sum(min(size, level) for size in cuttable) <= budget else (low, level - 1)
    return [_cut_texts(block, low) for block in blocks]


def _text_objects(block: dict[str, Any]) -> list[dict[str, Any]]:
    found = [block["text"]] if isinstance(block.get("text"), dict) else []
    found += block.get("fields", [])
    found += [element for element in block.get("elements", []) if element.get("type") in ("mrkdwn", "plain_text")]
    found += [element["text"] for element in block.get("elements", []) if isinstance(element.get("text"), dict)]
    return found


def _cut_texts(block: dict[str, Any], limit: int) -> dict[str, Any]:
    def cut(text: dict[str, Any]) -> dict[str, Any]:
        if text["type"] != "mrkdwn" or len(text["text"]) <= limit:
            return text
        return {**text, "text": _clip(text["text"], limit, SHORTENED)}

    changed = dict(block)
    if isinstance(block.get("text"), dict):
        changed["text"] = cut(block["text"])
    if "fields" in block:
        changed["fields"] = [cut(field) for field in block["fields"]]
    if block["type"] == "context":
        changed["elements"] = [cut(element) for element in block["elements"]]
    return changed


def _block_name(block: dict[str, Any]) -> str:
    """What a dropped block held, in a few words: its first line, or its fields' labels."""
    if "fields" in block:
        return "fields " + ", ".join(field["text"].split("\n", 1)[0] for field in block["fields"])
    if isinstance(block.get("text"), dict):
        return _clip(str(block["text"]["text"]).split("\n", 1)[0], 60)
    return str(block["type"])


def clip_text(text: str, limit: int) -> str:
    """`text` cut to `limit` characters ending with SHORTENED, the one mark of a text cut to fit."""
    return _clip(text, limit, SHORTENED)


def _clip(text: str, limit: int, marker: str = ELLIPSIS) -> str:
    """Cut `text` to `limit` characters ending with `marker`, never inside an entity or our link markup.

    `marker` says the text was cut: SHORTENED, or where its whole text is (MORE_IN_THREAD); a bare ellipsis only
    where the whole text is at hand (a link label, a header whose title follows it)."""
    if len(text) <= limit:
        return text
    if len(marker) >= limit:
        marker = ELLIPSIS
    cut = text[: limit - len(marker)]
    # After escaping, any `&` starts an entity and any `<` starts our own markup: a cut that leaves
    # either unterminated would show `&am` or swallow the rest of the message into a broken link.
    amp = cut.rfind("&")
    if amp != -1 and ";" not in cut[amp:]:
        cut = cut[:amp]
    lt = cut.rfind("<")
    if lt != -1 and ">" not in cut[lt:]:
        cut = cut[:lt]
    return cut + marker
