"""Local emulation of the stack: AWS on moto, Slack and PagerDuty stand-ins (python -m sandbox)."""
