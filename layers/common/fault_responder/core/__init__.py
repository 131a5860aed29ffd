"""The vocabulary every capability shares: domain types, times, and the one logger, tracer and metrics.

- domain.py         the domain types shared by classification, incidents, routing and rendering
- accounts.py       the stack's home account and Region, and the accounts' names (the organization's bus)
- copying.py        cheap copies of records: values shared, lists and dicts copied
- timefmt.py        times as people and APIs read them
- elapsed.py        the clock of every timer that decides by time passed across calls (the sandbox moves it on)
- observability.py  the Powertools logger, tracer and metrics, created once
- logsafety.py      keeps secrets out of every library's logs
- tracing.py        X-Ray tracing, only when the stack turns it on
- places.py         where the responder acts (an account and a Region), and how acting there fails

Imports nothing else of fault_responder.
"""
