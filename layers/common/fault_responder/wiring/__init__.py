"""Composition roots: each function's environment read into settings, and its use case built with its adapters,
once per container. The only place that knows both the use cases and the adapters.

- alert_router.py       AlertRouterFunction, SweepFunction, ReconcileFunction
- slack_actions.py      SlackActionsFunction
- pagerduty_webhook.py  PagerDutyWebhookFunction
- resume_training.py    the ResumeTraining workflow's task functions
- envtypes.py           types for reading the environment with pydantic

May import every package but cli.
"""
