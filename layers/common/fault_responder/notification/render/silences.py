"""The message that tells a channel a silence started or ended (docs/silences.md, "Who is told").

The sweep posts it in each channel the silence mutes: the Slack receivers of the open incidents its matchers match
(fault_responder.alerting.announce). It says what the silence matches, who made it and why, until when, and what it
holds back now (by account and Region in an organization, by cluster otherwise, with the incidents named as far as they
fit). Untrusted text (author, comment, values) is escaped and clipped as everywhere (render/slack.py). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from fault_responder.noise.silences import Muted, Phase, Silence, by_place
from fault_responder.notification.render import blocks
from fault_responder.notification.render.blocks import SlackMessage, escape_mrkdwn

STARTED_EMOJI = ":no_bell:"
ENDED_EMOJI = ":bell:"
PLACES_SHOWN = 20
"""Accounts and Regions (or clusters) named one by one; the others are counted."""
INCIDENTS_SHOWN = 5
"""Incidents named per place; the others are counted."""


def render_silence_news(
    silence: Silence, phase: Phase, muted: Sequence[Muted], *, dashboard_url: str | None = None
) -> SlackMessage:
    """A message of its own in the channel: the silence started (what it holds back now), or ended (what it held back
    and is still open, which is told now)."""
    matchers = ", ".join(f"`{escape_mrkdwn(str(matcher))}`" for matcher in silence.matchers)
    who = f"*By:* {escape_mrkdwn(silence.created_by)} · *Why:* {escape_mrkdwn(silence.comment)}"
    if phase is Phase.STARTED:
        lead = (
            f"{STARTED_EMOJI} *Silence `{silence.id}` started*: what its matchers match notifies nobody until "
            f"{blocks._slack_time(silence.ends_at)}."
        )
        title, count_text = "*Held back now*", "open incident"
        fallback = f"Silence {silence.id} started, until {_utc(silence)}"
    else:
        lead = (
            f"{ENDED_EMOJI} *Silence `{silence.id}` ended* (it held back from {blocks._slack_time(silence.starts_at)} "
            f"to {blocks._slack_time(silence.ends_at)}): what it held back and is still open is told now."
        )
        title, count_text = "*Still open, told now*", "incident"
        fallback = f"Silence {silence.id} ended"
    result = [blocks._section(lead), blocks._section(f"*Matches:* {matchers}\n{who}")]
    places = by_place(muted)
    lines = [_place_line(place, incidents) for place, incidents in list(places.items())[:PLACES_SHOWN]]
    left = len(places) - len(lines)
    listing = blocks.fit_lines(
        lines,
        title=f"{title}: {blocks._count(len(muted), count_text)}",
        max_blocks=4,
        max_chars=blocks.MAX_LISTING_TEXT,
        left_out=lambda n: f"…and {n + left} more accounts and Regions (or clusters) not listed here.",
    )
    result.extend(listing.blocks)
    if not listing.left_out and left:
        result.append(blocks._section(f"…and {left} more accounts and Regions (or clusters) not listed here."))
    result.append(
        blocks.root_context(
            [f"Silence `{silence.id}` · `fault-responder silence expire {silence.id}` ends it sooner"], dashboard_url
        )
    )
    fallback = f"{fallback} ({silence.created_by}: {silence.comment}): " + ", ".join(str(m) for m in silence.matchers)
    return SlackMessage(text=blocks._fallback(escape_mrkdwn(fallback)), blocks=blocks._fit(result))


def _place_line(place: str, incidents: list[str]) -> str:
    shown = ", ".join(f"`{escape_mrkdwn(blocks._clip(incident, 120))}`" for incident in incidents[:INCIDENTS_SHOWN])
    more = f" and {len(incidents) - INCIDENTS_SHOWN} more" if len(incidents) > INCIDENTS_SHOWN else ""
    return f"• {escape_mrkdwn(place)}: {len(incidents)} ({shown}{more})"


def _utc(silence: Silence) -> str:
    return silence.ends_at.strftime("%Y-%m-%d %H:%M UTC")
