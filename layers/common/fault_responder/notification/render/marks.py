"""The marks every receiver's text shares: one clipping mark for Slack, PagerDuty, Teams and the webhook."""

ELLIPSIS = "…"
SHORTENED = f"{ELLIPSIS} (shortened)"
"""Ends a text cut to fit, so the reader knows there was more."""
