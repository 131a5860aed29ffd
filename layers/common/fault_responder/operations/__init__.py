"""Running the responder: the reconciliation sweep, drills, status and route checks (docs/operations.md).

- reconcile.py   what ECS says now against what the responder believes; faults it missed
- alarm_reconcile.py  the same for the stack's CloudWatch alarms
- organization.py    the reconciliation in every enrolled account and Region, a few at a time
- drill.py       what a drill sends, how far it got, and what it prints (docs/drills.md)
- status.py      what is open, what is held back and why, what the workflow did
- routecheck.py  which route and receivers an event reaches, without sending anything

May import core, events, routing, incidents, noise, notification and alerting.
"""
