"""Slack: a channel through the bot token, or an incoming webhook.

- plan.py     what a bot-token or a webhook receiver still needs to be told
- kind.py     SlackKind (SLACK): performing a step, the workflow's notices, a silence's news
- notices.py  the workflow's notices in Block Kit

The messages themselves are rendered by fault_responder.notification.render (slack.py, fleet.py, notes.py,
silences.py), which PagerDuty's payloads share parts of; the Web API and webhook clients are
fault_responder.adapters.slack.
"""

from fault_responder.notification.receivers.slack.kind import SLACK, SlackKind

__all__ = ["SLACK", "SlackKind"]
