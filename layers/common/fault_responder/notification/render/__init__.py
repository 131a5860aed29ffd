"""Messages as each receiver's API takes them: Slack Block Kit (slack.py, on blocks.py's limits and fitting),
PagerDuty Events API v2 (pagerduty.py), and fleet incidents at any size (fleet.py). Pure: no I/O."""
