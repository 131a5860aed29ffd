"""What every message about a drill says besides its fault (docs/drills.md): that it is a drill and nobody needs to act,
who started it and when, and what ends it. Plain text: each renderer escapes it for its medium.

A drill pages through the same path as the fault it imitates (that is what it proves), at the same severity: these
words, first in every message, are what tell on-call it is an exercise.
"""

from __future__ import annotations

from fault_responder.core.domain import DRILL_TITLE, Incident

NO_ACTION_HEAD = "DRILL — no action needed"
NO_ACTION_WHY = "this is an exercise, not a real fault"
NO_ACTION = f"{NO_ACTION_HEAD}: {NO_ACTION_WHY}"
"""The line that opens a drill's messages."""
NO_ACTION_SHORT = f"no action needed: {NO_ACTION_WHY}"
"""The same, where the message already began with DRILL (its title does)."""
UNNAMED = "someone the drill event did not name"
HOW_IT_ENDS = (
    "By itself: the `fault-responder drill` that started it sends the check's OK once it has followed the page "
    "(within about 3 minutes with its default timeouts). Still open after that? Press Resolve on its Slack root, or "
    "resolve the alert in PagerDuty."
)
"""What ends a drill: there is no command to stop one, as the drill resolves what it opened (docs/drills.md)."""
IN_A_REAL_FAULT = "In a real fault, not this drill"
"""Frames a drill's runbook action: what on-call would do, not an instruction now."""


def is_drill(incident: Incident) -> bool:
    return incident.instance.drill


def author(incident: Incident) -> str:
    """Who started the drill (untrusted text: the renderer escapes it)."""
    return incident.started_by or UNNAMED


def fault_title(incident: Incident) -> str:
    """The drill's title without its DRILL prefix: what the fault it imitates is called."""
    return incident.classification.title.removeprefix(DRILL_TITLE)
