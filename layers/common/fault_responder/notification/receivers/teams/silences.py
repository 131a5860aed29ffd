"""The card that tells a Teams channel a silence started or ended (docs/silences.md, "Who is told"), as Slack's
message does (notification/render/silences.py): what the silence matches, who made it and why, until when, and what it
holds back now (by account and Region in an organization, by cluster otherwise, with the incidents named as far as
they fit; the rest counted). Untrusted text is escaped and clipped as on every card. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from fault_responder.noise.silences import Muted, Phase, Silence, by_place
from fault_responder.notification.receivers.teams.card import (
    MAX_TEXT,
    TeamsMessage,
    clip,
    container,
    escape_markdown,
    fact_set,
    fit_items,
    message,
    open_url,
    text_block,
    within_budget,
)
from fault_responder.notification.receivers.teams.render import DASHBOARD_LINK_TEXT, plain_time

STARTED_MARK = "\N{BELL WITH CANCELLATION STROKE}"
ENDED_MARK = "\N{BELL}"
INCIDENTS_SHOWN = 5
"""Incidents named per place; the others are counted."""
MAX_INCIDENT = 120


def render_silence_news(
    silence: Silence, phase: Phase, muted: Sequence[Muted], *, dashboard_url: str | None = None
) -> TeamsMessage:
    """A card of its own in the channel: the silence started (what it holds back now), or ended (what it held back and
    is still open, which is told now)."""
    sid = escape_markdown(silence.id)
    if phase is Phase.STARTED:
        head = f"{STARTED_MARK} Silence {sid} started"
        lead = f"What its matchers match notifies nobody until {plain_time(silence.ends_at)}."
        title, noun = "Held back now", "open incident"
        fallback = f"Silence {silence.id} started, until {plain_time(silence.ends_at)}"
    else:
        head = f"{ENDED_MARK} Silence {sid} ended"
        lead = (
            f"It held back from {plain_time(silence.starts_at)} to {plain_time(silence.ends_at)}: what it held back "
            "and is still open is told now."
        )
        title, noun = "Still open, told now", "incident"
        fallback = f"Silence {silence.id} ended"
    facts = [
        ("Matches", escape_markdown(clip(", ".join(str(m) for m in silence.matchers), MAX_TEXT))),
        ("By", escape_markdown(silence.created_by)),
        ("Why", escape_markdown(clip(silence.comment, MAX_TEXT))),
    ]
    lines = [_place_line(place, incidents) for place, incidents in by_place(muted).items()]
    context = text_block(
        f"Silence {sid} · `fault-responder silence expire {sid}` ends it sooner", subtle=True, separator=True
    )
    actions = [open_url(DASHBOARD_LINK_TEXT, dashboard_url)] if dashboard_url else []
    fallback = escape_markdown(f"{fallback} ({silence.created_by}: {silence.comment})")

    def build(shown: Sequence[str], left_out: int) -> TeamsMessage:
        listing = [f"**{title}: {_count(len(muted), noun)}**", *shown]
        if left_out:
            listing.append(f"…and {left_out} more accounts and Regions (or clusters) not listed here.")
        body = [
            container([text_block(head, size="Medium", weight="Bolder")], style="accent"),
            text_block(lead),
            *fact_set(facts),
            text_block("\n".join(listing)),
            context,
        ]
        return message(body, fallback=fallback, actions=actions)

    return within_budget(fit_items(lines, build).message)


def _place_line(place: str, incidents: list[str]) -> str:
    shown = ", ".join(escape_markdown(clip(incident, MAX_INCIDENT)) for incident in incidents[:INCIDENTS_SHOWN])
    more = f" and {len(incidents) - INCIDENTS_SHOWN} more" if len(incidents) > INCIDENTS_SHOWN else ""
    return f"- {escape_markdown(place)}: {len(incidents)} ({shown}{more})"


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")
