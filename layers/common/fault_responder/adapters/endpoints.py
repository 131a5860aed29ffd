"""The public API endpoints, by default (the stack's SLACK_API_URL and PAGERDUTY_EVENTS_URL override them).

A module of constants only, so that settings can name the defaults without importing an HTTP client.
"""

SLACK_API_URL = "https://slack.com/api"
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
PAGERDUTY_CHANGE_EVENTS_URL = "https://events.pagerduty.com/v2/change/enqueue"
