"""Fleet incidents: many instances of one group failing together are one incident, paged once.

A group is the set of instances whose incidents share the grouping labels (by default cluster, capacity provider
and health check). Each instance's latest incident of the group's check is a *member* of the group's record (one
DynamoDB item per group, written member by member, an older version of a member never over a newer one). The
fleet incidents are derived from the members, so, like an instance's incidents, they depend on which faults
are known and never on the order they arrived in:

- A fleet incident opens at the moment `threshold` members opened within `window` of each other and were all
  still open: the moment the threshold was crossed. Every member open then, and every member that opens while
  it is open, belongs to it.
- It resolves when every member has recovered or left the cluster. No member is ever hidden: the root lists
  them, the thread names each one as it joins and leaves, the PagerDuty alert carries them all.
- An instance whose incident joined an open fleet incident is muted (fault_responder.policy): on-call hears of
  it in the fleet's thread. The members that paged before the threshold was crossed keep their own alerts.

What crossing the threshold means for recovery: ECS auto-repair replaces at most 20 % of a capacity provider's
instances at a time, one at a time below nine instances, so a fleet incident of N members takes several rounds
of drain and replace; the messages say so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from fault_responder.domain import (
    Alert,
    Classification,
    EntryKind,
    FleetMember,
    FleetSummary,
    Incident,
    InstanceRef,
    Severity,
    TimelineEntry,
)
from fault_responder.matchers import incident_labels
from fault_responder.people import apply_actions
from fault_responder.record import (
    ActionFact,
    Delivery,
    KnownIncident,
    Lease,
    ReportedAction,
    action_incident,
    added_action,
    bounded_id,
    digest,
)
from fault_responder.timefmt import iso_utc

if TYPE_CHECKING:
    # Only deriving fleets needs routing and policy; the stores (and the resume functions through them) need the
    # group record alone, and do not pay for the routing file's models at import.
    from fault_responder.policy import Policy
    from fault_responder.routing import Grouping, RouteContext, RouteDecision

GROUP_PREFIX = "group:"
MAX_MEMBERS = 500
"""Per group record; a member past this is not grouped (it pages on its own) and is counted."""
MAX_DEDUP_KEY = 255
MAX_FLEETS = 10
"""Fleet incidents a group record remembers; the oldest closed ones go first."""

Group = tuple[tuple[str, str], ...]
Route = Callable[["RouteContext"], "RouteDecision"]


@dataclass(slots=True)
class GroupRecord:
    """One group: its members, its fleet incidents' identities, and what each receiver was told of them."""

    arn: str
    """The store's key for the group (`group:` and its labels)."""
    group: Group
    where: InstanceRef
    """Region, account, cluster and capacity provider of the group, from its first member."""
    members: dict[str, FleetMember] = field(default_factory=dict)
    """Container instance ARN -> its latest incident of the group's check."""
    incidents: list[KnownIncident] = field(default_factory=list)
    deliveries: dict[tuple[str, str], Delivery] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    version: int = 0
    """Bumped by every member written."""
    incidents_version: int = 0
    """Bumped by every write of the fleet identities (independent of members, so a storm does not contend)."""
    actions: list[ActionFact] = field(default_factory=list)
    """What people did to its fleet incidents (acknowledge, reassign; fault_responder.people), written with the
    identities."""

    def delivery(self, receiver: str, subject: str) -> Delivery:
        return self.deliveries.get((receiver, subject)) or Delivery(receiver, subject)

    def add_action(self, reported: ReportedAction) -> bool:
        """Add a person's action to the fleet incident it names (or whose alert has its dedup key); False when it was
        added before or names none of them."""
        incident = action_incident(reported, self.incidents, self.deliveries)
        actions = added_action(self.actions, reported, incident) if incident is not None else None
        if actions is None:
            return False
        self.actions = actions
        return True


@dataclass(slots=True)
class FleetView:
    """The fleet incidents of one group, shaped like an instance's view for delivery."""

    incidents: list[Incident] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    known: list[KnownIncident] = field(default_factory=list)

    def incident(self, incident_id: str) -> Incident | None:
        return next((incident for incident in self.incidents if incident.id == incident_id), None)

    def open_fleet_of(self, incident_id: str) -> Incident | None:
        """The open fleet incident an instance's incident belongs to, if any."""
        for fleet in self.incidents:
            if fleet.is_open and fleet.fleet and any(m.incident == incident_id for m in fleet.fleet.members):
                return fleet
        return None


# --- Groups and members ---------------------------------------------------------------------------------


def group_of(incident: Incident, grouping: Grouping) -> Group:
    labels = incident_labels(incident)
    return tuple((name, labels.get(name, "")) for name in grouping.by)


def group_arn(group: Group) -> str:
    return GROUP_PREFIX + bounded_id(";".join(f"{name}={value}" for name, value in group), 1500)


def group_where(incident: Incident) -> InstanceRef:
    instance = incident.instance
    return InstanceRef(
        region=instance.region,
        account=instance.account,
        cluster_arn=instance.cluster_arn,
        container_instance_arn="",
        ec2_instance_id=None,
        capacity_provider=instance.capacity_provider,
    )


def member_of(incident: Incident, version: int) -> FleetMember:
    classification = incident.classification
    return FleetMember(
        instance=incident.instance,
        incident=incident.id,
        opened_at=incident.opened_at,
        closed_at=incident.closed_at,
        severity=classification.severity,
        fault_class=classification.fault_class,
        title=classification.title,
        xid=classification.xid,
        phase=incident.phase,
        version=version,
    )


def latest_incidents(incidents: list[Incident]) -> dict[str, Incident]:
    """Per check, the instance's latest incident (what the check's group member shows)."""
    latest: dict[str, Incident] = {}
    for incident in sorted(incidents, key=lambda i: (i.opened_at, i.id)):
        if incident.merged_into is None and incident.fleet is None:
            latest[incident.check_type] = incident
    return latest


# --- Fleet incidents ------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Fleet:
    opened_at: datetime
    members: list[FleetMember]

    @property
    def closed_at(self) -> datetime | None:
        if any(member.is_open for member in self.members):
            return None
        return max(member.closed_at for member in self.members if member.closed_at is not None)

    def contains(self, moment: datetime) -> bool:
        ends = self.closed_at
        return self.opened_at <= moment and (ends is None or moment <= ends)


def fleets(members: list[FleetMember], grouping: Grouping) -> list[_Fleet]:
    """The group's fleet episodes: where `threshold` members opened within `window` and were all open."""
    ordered = sorted(members, key=lambda m: (m.opened_at, m.instance.container_instance_arn))
    found: list[_Fleet] = []
    current: _Fleet | None = None
    for index, member in enumerate(ordered):
        if current is not None:
            ends = current.closed_at
            if ends is None or member.opened_at < ends:
                current.members.append(member)
                continue
            found.append(current)
            current = None
        moment = member.opened_at
        # The members up to this one in that order: faults at the same moment count once each, as they come.
        recent = [
            other
            for other in ordered[: index + 1]
            if moment - grouping.window <= other.opened_at and (other.closed_at is None or other.closed_at > moment)
        ]
        if len(recent) >= grouping.threshold:
            current = _Fleet(moment, recent)
    if current is not None:
        found.append(current)
    return found


def fingerprint(group: Group) -> str:
    value = "fleet/" + "/".join(value or "-" for _, value in group)
    if len(value) <= MAX_DEDUP_KEY:
        return value
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest(value, 32)}"


def derive_fleet(
    record: GroupRecord,
    grouping: Grouping,
    route: Route,
    now: datetime | None = None,
    policy: Policy | None = None,
) -> FleetView:
    """The group's fleet incidents, with their receivers and mutes. Same members, same view, in any order."""
    from fault_responder.runbooks import runbook_for  # noqa: PLC0415

    view = FleetView()
    if not grouping.enabled:
        return view
    unclaimed = sorted((copy.deepcopy(k) for k in record.incidents), key=lambda k: (k.anchor, k.id))
    kept: list[KnownIncident] = []
    for number, episode in enumerate(fleets(list(record.members.values()), grouping), start=1):
        mine = [k for k in unclaimed if episode.contains(k.anchor)]
        if mine:
            identity = mine[0]
            unclaimed = [k for k in unclaimed if k is not identity]
        else:
            anchor = episode.opened_at
            identity = KnownIncident(f"fleet:{fingerprint(record.group)}@{iso_utc(anchor)}", "FLEET", anchor)
        incident = _incident(record, episode, identity, number, grouping, now=now)
        apply_actions(incident, record.actions, may_close=False)
        decision = route(_context(incident))
        identity.receivers = list(decision.receivers)
        identity.route = ",".join(decision.routes) or None
        incident.receivers, incident.route = list(decision.receivers), identity.route
        classification = incident.classification
        incident.runbook = runbook_for(classification.fault_class, classification.xid, override=decision.runbook)
        identity.status, identity.opened_at, identity.closed_at = (
            incident.status,
            incident.opened_at,
            incident.closed_at,
        )
        # The identity keeps what changes rarely (a fleet incident's title counts its members, and writing the
        # identities again for every member would make a storm's writers contend for nothing).
        identity.severity = incident.classification.severity.value
        identity.title = f"fleet of {incident.check_type}"
        view.incidents.append(incident)
        kept.append(identity)
    for orphan in unclaimed:
        # A fleet no longer derived (members aged out): kept closed, so nothing stays open.
        orphan.status = "CLOSED"
        kept.append(orphan)
    view.known = _trimmed(kept)
    if policy is not None:
        policy.apply(view.incidents, [], (), now)
    return view


def _incident(
    record: GroupRecord,
    episode: _Fleet,
    identity: KnownIncident,
    number: int,
    grouping: Grouping,
    *,
    now: datetime | None,
) -> Incident:
    members = sorted(episode.members, key=lambda m: (m.opened_at, m.instance.container_instance_arn))
    worst = max(members, key=lambda m: (m.is_open, m.severity.rank, m.opened_at))
    labels = dict(record.group)
    check = labels.get("check_type") or "health"
    titles = {m.title for m in members}
    xids = {m.xid for m in members}
    title = worst.title if len(titles) == 1 else f"{check} faults"
    where = record.where.capacity_provider or record.where.cluster_name
    classification = Classification(
        worst.fault_class,
        max((m.severity for m in members), key=lambda s: s.rank),
        f"Fleet: {len(members)} instances of {where}: {title}",
        xid=worst.xid if len(xids) == 1 else None,
    )
    closed_at = episode.closed_at
    incident = Incident(
        id=identity.id,
        fingerprint=fingerprint(record.group),
        instance=record.where,
        check_type=check,
        status="OPEN" if closed_at is None else "CLOSED",
        classification=classification,
        opened_at=episode.opened_at,
        phase="IMPAIRED" if closed_at is None else "RESOLVED",
        last_status_change=max(m.closed_at or m.opened_at for m in members),
        closed_at=closed_at,
        close_reason="every member recovered or left the cluster" if closed_at else None,
        opened_count=number,
        slack_threads=[],
        fleet=FleetSummary(
            group=record.group,
            members=tuple(members),
            threshold=grouping.threshold,
            window_minutes=int(grouping.window.total_seconds() // 60),
            as_of=now,
        ),
    )
    incident.timeline = _timeline(incident, members, grouping)
    return incident


def _timeline(incident: Incident, members: list[FleetMember], grouping: Grouping) -> list[TimelineEntry]:
    opened = incident.opened_at
    founding = [m for m in members if m.opened_at <= opened]
    window = int(grouping.window.total_seconds() // 60)
    where = incident.instance.capacity_provider or incident.instance.cluster_name
    entries = [
        TimelineEntry(
            f"fleet:{iso_utc(opened)}",
            opened,
            incident.id,
            "FLEET",
            f"{len(founding)} instances of {where} failed {incident.check_type} within {window} min: one incident",
            EntryKind.OPENED,
            page=True,
        )
    ]
    for member in members:
        name = member_name(member)
        if member.opened_at > opened:
            entries.append(
                TimelineEntry(
                    f"member:{member.instance.container_instance_id}:{iso_utc(member.opened_at)}",
                    member.opened_at,
                    member.incident,
                    "JOINED",
                    f"{name}: {member.title}",
                    EntryKind.CHANGED,
                )
            )
        if member.closed_at is not None:
            entries.append(
                TimelineEntry(
                    f"left:{member.instance.container_instance_id}:{iso_utc(member.closed_at)}",
                    member.closed_at,
                    member.incident,
                    "RECOVERED",
                    f"{name} is no longer impaired (recovered or left the cluster)",
                    EntryKind.CHANGED,
                )
            )
    if incident.closed_at is not None:
        entries.append(
            TimelineEntry(
                f"fleet-closed:{iso_utc(incident.closed_at)}",
                incident.closed_at,
                incident.id,
                "RECOVERED",
                "Every member recovered or left the cluster",
                EntryKind.RECOVERED,
                page=True,
            )
        )
    entries.sort(key=lambda entry: (entry.at, entry.key))
    return entries


def member_name(member: FleetMember) -> str:
    instance = member.instance
    return instance.ec2_instance_id or instance.container_instance_id


def repair_rounds(members: int) -> int:
    """The fewest drain-and-replace rounds ECS auto-repair needs for `members` impaired instances, if they were
    the whole capacity provider: at most 20 % of it at a time, one at a time below nine."""
    if members <= 0:
        return 0
    if members < 9:
        return members
    return -(-members // max(1, members // 5))


def _context(incident: Incident) -> RouteContext:
    from fault_responder.routing import RouteContext  # noqa: PLC0415

    return RouteContext(
        kind="health_impaired",
        cluster=incident.instance.cluster_name,
        capacity_provider=incident.instance.capacity_provider,
        check_type=incident.check_type,
        fault_class=incident.classification.fault_class.value,
        severity=incident.classification.severity,
        drain_attribution=None,
        fleet="true",
    )


def _trimmed(known: list[KnownIncident]) -> list[KnownIncident]:
    ordered = sorted(known, key=lambda k: (k.anchor, k.id))
    while len(ordered) > MAX_FLEETS:
        closed = next((k for k in ordered if k.status != "OPEN"), None)
        if closed is None:
            break
        ordered.remove(closed)
    return ordered


def is_group(arn: str) -> bool:
    return arn.startswith(GROUP_PREFIX)


def severity_rank(severity: Severity) -> int:
    return severity.rank
