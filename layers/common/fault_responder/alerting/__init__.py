"""The alert router's use case: one event in, its facts recorded, every receiver brought up to date.

- store.py       what the router needs from persistence (the ports Records, Leases and Fleets), and an in-memory
                 implementation
- service.py     AlertService, what the handlers and the wiring call: it builds the parts below and hands each call
                 to the one that decides it
- intake.py      an event, a person's action or reconciled facts in: the facts written, the incidents derived
- membership.py  fleet membership: an instance's member of its group; the fleet incident opened, joined, left, closed
- dispatch.py    each receiver with work flushed by its lease's holder, every call fenced by the lease; the backoff
                 after a failure, and the event retried
- sweep.py       the sweep: every record on its list reconciled with the time, taken off once everyone was told
- views.py       what a record means now: incidents derived, a group's head read with what deriving it needs
- context.py     what every part reads alike: receivers, settings, policy, grouping, clocks, metrics
- places.py      where an incident's workflow notices go: its own thread, or its fleet incident's
- announce.py    the sweep's news of silences: their start and end told to the channels they mute

May import core, events, routing, incidents, noise and notification; never adapters (wiring/alert_router.py
passes them in).
"""
