"""Where an instance's incident tells the training auto-resume workflow's notices about it.

An incident that belongs to a fleet incident (it joined it, or it counts in its group's open one: it is open and
opened within the fleet's window or later, as the fleet rule counts members) has its story told by the fleet
incident (fault_responder.noise.fleet): the workflow's notices about it go to the fleet incident's thread and, on
PagerDuty, next to the fleet's alert. Both the workflow (fault_responder.resume.notify), when it tells a notice, and the
router, when it tells one the workflow held back, ask here; any other incident tells them itself.
"""

from __future__ import annotations

from datetime import datetime

from fault_responder.alerting.store import Fleets
from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.domain import FleetPlace, Incident
from fault_responder.noise.fleet import Route, derive_fleet, group_arn, group_of
from fault_responder.noise.policy import Policy
from fault_responder.routing.router import Grouping


def fleet_place(
    store: Fleets,
    incident: Incident,
    grouping: Grouping | None,
    *,
    route: Route,
    now: datetime | None,
    policy: Policy | None,
    accounts: Accounts = SINGLE_ACCOUNT,
) -> FleetPlace | None:
    """The fleet incident the incident belongs to, with its receivers' threads and mutes; None when it belongs to
    none (or fleet incidents are off). One read of the group's head, whatever the group's size."""
    if grouping is None or not grouping.enabled or incident.fleet is not None:
        return None
    if incident.instance.drill or incident.instance.is_alarm:
        return None  # never a member of a fleet incident
    head = store.load_group(group_arn(group_of(incident, grouping, accounts)))
    if head is None:
        return None
    fleet_id = incident.fleet_id
    if fleet_id is None:
        current = head.fleet()
        counts = current is not None and current.since is not None and incident.opened_at >= current.since
        if current is None or not counts or not incident.is_open:
            return None
        fleet_id = current.id
    fleet = derive_fleet(head, grouping, route, now, policy, accounts=accounts).incident(fleet_id)
    if fleet is None:
        return None  # forgotten (a group keeps its latest fleet incidents only): the incident tells them itself
    threads = {
        name: (delivery.channel, delivery.ts)
        for (name, subject), delivery in sorted(head.deliveries.items())
        if subject == fleet.id and delivery.channel and delivery.ts
    }
    return FleetPlace(
        incident=fleet.id,
        dedup_key=fleet.dedup_key,
        receivers=tuple(fleet.receivers),
        threads=threads,
        muted=dict(fleet.muted),
        is_open=fleet.is_open,
    )
