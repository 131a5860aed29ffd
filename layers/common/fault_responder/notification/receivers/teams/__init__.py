"""The Microsoft Teams receiver: Adaptive Cards posted to a Teams Workflows webhook (docs/teams.md).

- target.py   the routing file's `teams: {webhook: <name>}`
- card.py     the message envelope, card elements, markdown escaping, clipping and Teams' size limit
- render.py   incidents, their steps and standalone alerts
- fleet.py    fleet incidents and their member steps
- notices.py  the training auto-resume workflow's notices

A Workflows webhook cannot edit a card or reply in a thread: every change is a new card naming its incident.
The sender, which posts a message to the URL kept in Secrets Manager, is fault_responder.adapters.teams.
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
from fault_responder.notification.receivers.teams.notices import render_notice
from fault_responder.notification.receivers.teams.render import (
    render_alert,
    render_incident,
    render_resolved,
    step_name,
)
from fault_responder.notification.receivers.teams.target import TeamsTarget

__all__ = [
    "CARD_VERSION",
    "MAX_REQUEST_BYTES",
    "MESSAGE_BUDGET",
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
