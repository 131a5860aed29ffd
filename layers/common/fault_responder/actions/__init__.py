"""People acting on incidents from Slack and PagerDuty (docs/slack-actions.md, docs/pagerduty-sync.md).

- function_url.py       what the endpoints behind a Lambda function URL share
- interactive.py        who sent a request, and what it asks; where a button press is verified
- slack_actions.py      the Slack interactivity endpoint: one signed button press in, one answer out
- pagerduty_webhook.py  the PagerDuty webhook endpoint: one signed v3 webhook in, at most one action queued

May import core, events, routing, incidents, noise and notification.
"""
