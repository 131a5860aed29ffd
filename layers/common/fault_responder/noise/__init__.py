"""Who hears nothing new, and why (docs/noise.md, docs/silences.md).

- silences.py  silences: for a while, incidents whose labels match notify nobody; where a silence is matched
- policy.py    silences, maintenance windows, inhibition, fleets and the resume workflow, as one policy
- fleet.py     many instances of one group failing together are one incident, paged once, at any size

May import core, events, routing and incidents.
"""
