"""The `fault-responder` command: silences, status, drills and route checks against a stack or a table.

- main.py    the parser and the silence and status commands (docs/silences.md, docs/operations.md)
- drills.py  the two drills run against a stack (docs/drills.md)

May import every package but wiring.
"""
