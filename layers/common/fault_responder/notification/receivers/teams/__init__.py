"""The Microsoft Teams receiver: Adaptive Cards posted to a Teams Workflows webhook (docs/teams.md).

- kind.py     TeamsKind (TEAMS): what a Teams receiver can do, its plan, each step's card, the workflow's notices
- client.py   the Teams secret's webhook URLs, and posting a card through the channels' generic port
- card.py     the message envelope, card elements, markdown escaping, clipping and Teams' size limit
- render.py   incidents, their steps and standalone alerts
- fleet.py    fleet incidents and their member steps
- notices.py  the training auto-resume workflow's notices
- silences.py a silence's start and end

A Workflows webhook cannot edit a card or reply in a thread: every change is a new card naming its incident. The
routing file's `teams: {webhook: <name>}` is fault_responder.routing.router.TeamsTarget (the routing schema, which
this package builds on).
"""

from fault_responder.notification.receivers.teams.card import (
    CARD_VERSION,
    MAX_REQUEST_BYTES,
    MESSAGE_BUDGET,
    TeamsMessage,
)
from fault_responder.notification.receivers.teams.fleet import (
    fleet_steps_that_fit,
    render_fleet,
    render_fleet_steps,
)
from fault_responder.notification.receivers.teams.kind import TEAMS, TeamsKind
from fault_responder.notification.receivers.teams.notices import render_notice
from fault_responder.notification.receivers.teams.render import (
    render_alert,
    render_incident,
    render_resolved,
    step_name,
)
from fault_responder.routing.router import TeamsTarget

__all__ = [
    "CARD_VERSION",
    "MAX_REQUEST_BYTES",
    "MESSAGE_BUDGET",
    "TEAMS",
    "TeamsKind",
    "TeamsMessage",
    "TeamsTarget",
    "fleet_steps_that_fit",
    "render_alert",
    "render_fleet",
    "render_fleet_steps",
    "render_incident",
    "render_notice",
    "render_resolved",
    "step_name",
]
