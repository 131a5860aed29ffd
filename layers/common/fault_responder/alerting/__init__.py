"""The alert router's use case: one event in, its facts recorded, every receiver brought up to date.

- store.py    what the router needs from persistence (the port), and an in-memory implementation
- service.py  the use case: read, record, derive, decide who hears, deliver; the sweep's retries and closures
- announce.py the sweep's news of silences: their start and end told to the channels they mute

May import core, events, routing, incidents, noise and notification; never adapters (wiring/alert_router.py
passes them in).
"""
