"""PagerDuty: Events API v2 and Change Events for one service's routing key.

- plan.py     what a PagerDuty receiver still needs to be told: one alert per check
- kind.py     PagerDutyKind (PAGERDUTY): performing a step, the workflow's notices
- notices.py  the workflow's notices as Events v2 triggers and Change Events

Incident payloads are rendered by fault_responder.notification.render (pagerduty.py, fleet.py, notes.py); the clients
are fault_responder.adapters.pagerduty.
"""

from fault_responder.notification.receivers.pagerduty.kind import PAGERDUTY, PagerDutyKind

__all__ = ["PAGERDUTY", "PagerDutyKind"]
