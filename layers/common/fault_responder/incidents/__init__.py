"""Facts become incidents: what ECS reported about an instance, and the incident derived from it.

- record.py            what the responder knows about one container instance: its facts, what people were told
- classify.py          where a health check result (an XID) becomes a fault class and a severity
- drain.py             why an instance is draining
- alarms.py            the stack's own CloudWatch alarms as incidents
- incident_actions.py  what people do to an incident (acknowledge, resolve, reassign, silence), as it arrives
- people.py            those actions applied to the incident derived from the facts
- episodes.py          a check's transitions cut into episodes (hold-down, relapses, leaving), and their severity
- timeline.py          what an incident's timeline says, in time order and bounded
- lifecycle.py         events into facts, facts into incidents (the incident lifecycle)

May import core, events and routing. (The noise policy is passed in: lifecycle names its type only.)
"""
