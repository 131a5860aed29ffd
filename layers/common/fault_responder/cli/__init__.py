"""The `fault-responder` command: silences, status, drills and route checks against a stack or a table.

- main.py    the parser and the silence and status commands (docs/silences.md, docs/operations.md)
- drill_command.py  the drill command's options and start: its clients, in another account too (docs/drills.md)
- drills.py  the two drills run against a stack (docs/drills.md)
- targets.py what the commands share: the stack or table they read, who runs them, their two errors

May import every package but wiring.
"""
