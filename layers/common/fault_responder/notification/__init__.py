"""Telling people: what each receiver is told, and telling it (docs/routing.md).

- contract.py  what delivery and the channels agree on: the errors a send raises, the fence of a lease, where
               a Slack message is
- buttons.py   what the responder's Slack buttons carry
- render/      Slack Block Kit and PagerDuty Events API v2 payloads (incidents, notices, fleets)
- receivers/   one package per kind of receiver (Slack, PagerDuty) behind one interface, and their registry by the
               routing file's key: what a kind can do, its plan, performing a step, the workflow's notices
- delivery.py  what each receiver still needs to be told, and telling it (through the receiver's kind)
- dryrun.py    channels that record what would be sent instead of sending it

May import core, events, routing, incidents and noise.
"""
