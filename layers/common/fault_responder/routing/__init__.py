"""Who hears about what, and when: the routing file's routes and receivers (docs/routing.md).

- router.py         the routing file read into routes, receivers, grouping and inhibit rules; which route an
                    incident takes
- matchers.py       labels and Alertmanager's label matchers (routes, silences and inhibition select with them)
- timeintervals.py  recurring time intervals (maintenance windows, business hours)
- runbooks.py       where a fault class or an XID becomes what on-call should do, with a link
- routes/           the routing files packaged with the stack (default.yaml)

May import core and events.
"""
