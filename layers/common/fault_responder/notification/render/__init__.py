"""Messages as each receiver's API takes them: Slack Block Kit (slack.py), PagerDuty Events API v2
(pagerduty.py), and fleet incidents at any size (fleet.py). Pure: no I/O."""
