"""Receivers as plugins: one package per kind of receiver, behind one interface (docs/architecture.md).

- steps.py     the steps a plan lists and what a plan reads (View, Told), shared by every kind
- kind.py      ReceiverKind, the interface a kind implements, and Capability, what it can do
- registry.py  the kinds by the routing file's key of their target; what callers ask about a receiver
- slack/       Slack (bot token or incoming webhook)
- pagerduty/   PagerDuty (Events API v2, Change Events)
- teams/       Microsoft Teams (Workflows webhook, Adaptive Cards)
- webhook/     a signed generic webhook (Alertmanager's webhook payload, version 4)
"""
