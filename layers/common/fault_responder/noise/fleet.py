"""Fleet incidents: many instances of one group failing together are one incident, paged once, at any size.

A group is the set of instances whose incidents share the grouping labels (by default cluster, capacity provider
and health check). Each instance's latest incident of the group's check is a *member*. A group can have ten
thousand members, so nothing here ever holds all of them: each member is an item of its own beside the group's
record, an open member is also listed by the moment it opened (so "how many opened within the window" and "is
any still open" are bounded queries), and what the thread must say of members is a numbered journal. The
group's record (its *head*) stays small: the fleet incidents' identities, a few counters, what each receiver was
told, and the leases.

- A fleet incident opens at the moment `threshold` open members opened within `window` of each other (the
  moment the threshold was crossed): whoever writes a member and sees the crossing opens it, once (a conditional
  write). Its members are the *founding* members (open then, opened at most `window` before that moment) and
  every member that opens while it is open: they *join* it, each with a numbered journal entry.
- It resolves when none of its members is open any more, however each closed (OK, INACTIVE, a person, the
  reconciliation sweep): each member that leaves is a journal entry, and the worker that writes the last one
  closes the fleet incident, only if nobody joined meanwhile (the close is conditional on the head's version,
  which every join moves). A fleet incident never opens again and no new one starts from members closing.
- An instance whose incident counts in an open fleet incident is muted (fault_responder.noise.policy): on-call hears of
  it in the fleet's thread. The members that paged before the threshold was crossed keep their own alerts.

What crossing the threshold means for recovery: ECS auto-repair replaces at most 20 % of a capacity provider's
instances at a time, one at a time below nine instances, so a fleet incident of N members takes several rounds
of drain and replace; the messages say so.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING

from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.copying import Record, Value
from fault_responder.core.domain import (
    Alert,
    Classification,
    EntryKind,
    FaultClass,
    FleetMember,
    FleetSummary,
    Incident,
    InstanceRef,
    Severity,
    TimelineEntry,
)
from fault_responder.core.timefmt import iso_utc
from fault_responder.incidents.people import apply_actions
from fault_responder.incidents.record import (
    ActionFact,
    Backoff,
    Delivery,
    KnownIncident,
    Lease,
    ReportedAction,
    bounded_id,
    digest,
    with_action,
)
from fault_responder.routing.matchers import incident_labels

if TYPE_CHECKING:
    # Only deriving fleets needs routing and policy; the stores (and the resume functions through them) need the
    # group record alone, and do not pay for the routing file's models at import.
    from fault_responder.noise.policy import Policy
    from fault_responder.routing.router import Grouping, RouteContext, RouteDecision

GROUP_PREFIX = "group:"
MAX_DEDUP_KEY = 255
MAX_FLEETS = 10
"""Fleet incidents a group's record remembers; the oldest closed ones go first."""
LISTED_MEMBERS = 300
"""Open members read to render a fleet incident's root and page (when they are sent, never per member)."""
JOURNAL_PAGE = 100
"""Journal entries read at a time: what one thread reply can name."""
MAX_TITLE = 200
"""Characters of a member's title its group's head keeps (a fleet incident's title is that of its members)."""
MAX_FOUNDERS = 100
"""Founding members a fleet incident remembers by name, and counts when it opens; more (a burst larger than this before
anyone crossed the threshold, which each member written checks) are counted when they are next reported, as members
that join (counting them when it opened too counted each of those twice)."""
ABANDONED_AFTER = timedelta(minutes=16)
"""A journal number taken but never written (its worker died in between) is passed over after this long: no
Lambda invocation outlives 15 minutes, so nothing can write it any more."""

Group = tuple[tuple[str, str], ...]
Route = Callable[["RouteContext"], "RouteDecision"]


class Told(StrEnum):
    """What a fleet incident's thread was told of a member."""

    FOUNDING = "FOUNDING"
    """Open when the fleet incident opened: counted and listed then, no journal entry."""
    JOINED = "JOINED"
    LEFT = "LEFT"


def already_told(told: Told) -> tuple[str, ...]:
    """What a member's thread may show when `told` would tell it nothing new: the step itself or a later one (a member
    joins, or founds, before it leaves)."""
    if told is Told.LEFT:
        return (Told.LEFT.value,)
    return (Told.FOUNDING.value, Told.JOINED.value, Told.LEFT.value)


@dataclass(slots=True)
class FleetIdentity(KnownIncident):
    """A fleet incident as it opened: its id and anchor (the moment the threshold was crossed) never change."""

    since: datetime | None = None
    """Members that opened at or after this (the anchor minus the window) and are open count in it."""
    first_seq: int = 0
    """Its thread tells the journal entries after this number."""
    members: int = 0
    """Founding members plus members that joined; while it is open, GroupRecord.joined is the live count."""
    last_seq: int | None = None
    """When it closed: the last journal entry of its thread."""
    founders: list[str] = field(default_factory=list)
    """The founding members (digests of their instance ARNs, at most MAX_FOUNDERS): counted when it opened, so
    when one of them is next reported it is in the fleet already, not a member that joins."""


@dataclass(frozen=True, slots=True)
class Recent(Value):
    """A member reported open lately, as its group's head keeps it while no fleet incident is open: when it opened,
    and what a fleet incident it founds would be (its severity, its fault)."""

    opened_at: datetime
    severity: Severity
    fault_class: FaultClass
    title: str
    xid: int | None = None

    @classmethod
    def of(cls, member: FleetMember) -> Recent:
        return cls(member.opened_at, member.severity, member.fault_class, member.title[:MAX_TITLE], member.xid)


@dataclass(frozen=True, slots=True)
class JournalEntry(Value):
    """One member joining or leaving an open fleet incident: what its thread names, in the order numbered."""

    seq: int
    fleet: str
    told: Told
    member: FleetMember
    at: datetime
    """When the member's incident opened (JOINED) or closed (LEFT)."""
    written: float
    """Epoch seconds when its number was taken."""

    @property
    def key(self) -> str:
        return journal_key(self.seq)


def journal_key(seq: int) -> str:
    return f"j:{seq:012d}"


def journal_seq(key: str) -> int | None:
    """The journal number a timeline entry's key names, None for any other entry."""
    if not key.startswith("j:"):
        return None
    try:
        return int(key[2:])
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class MemberWrite:
    """What writing a member did: `stored` is the member as stored after the call."""

    stored: FleetMember
    previous: FleetMember | None
    written: bool


@dataclass(slots=True)
class GroupRecord(Record):
    """One group's head: its fleet incidents' identities, what each receiver was told of them, the leases, the live
    counts of the open fleet incident. `open_count`, `listed` and `journal` are read beside it for deriving (never
    stored with it, all bounded)."""

    arn: str
    """The store's key for the group (`group:` and its labels)."""
    group: Group
    where: InstanceRef
    """Region, account, cluster and capacity provider of the group, from its first member."""
    incidents: list[FleetIdentity] = field(default_factory=list)
    deliveries: dict[tuple[str, str], Delivery] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    backoff: dict[str, Backoff] = field(default_factory=dict)
    version: int = 0
    """Moved by every journal entry and every person's action: a lease holder reads again before it lets go, and a
    close is refused if a member joined since the closer looked."""
    incidents_version: int = 0
    """Moved by every write of the fleet identities (opening, closing, actions)."""
    actions: list[ActionFact] = field(default_factory=list)
    """What people did to its fleet incidents (acknowledge, reassign; fault_responder.incidents.people)."""
    open_fleet: str | None = None
    """The open fleet incident's id: at most one at a time."""
    joined: int = 0
    """Members of the open fleet incident so far (founding and joined)."""
    left: int = 0
    """Members of the open fleet incident that left it so far: it may close when they are as many as `joined`."""
    journal_seq: int = 0
    """The last journal number taken."""
    recent: dict[str, Recent] = field(default_factory=dict)
    """While no fleet incident is open: the open members reported lately (instance ARN -> when its incident
    opened), what a new member counts to know whether it crosses the threshold. Written with each new member in
    one conditional write that returns them, so concurrent members each see the ones written before them; emptied
    when a fleet incident opens (then the fleet's members are the ones that count), so it stays small."""
    open_count: int = 0
    listed: list[FleetMember] = field(default_factory=list)
    journal: list[JournalEntry] = field(default_factory=list)

    def delivery(self, receiver: str, subject: str) -> Delivery:
        return self.deliveries.get((receiver, subject)) or Delivery(receiver, subject)

    def fleet(self) -> FleetIdentity | None:
        """The open fleet incident, if any."""
        return next((k for k in self.incidents if k.id == self.open_fleet and k.status == "OPEN"), None)

    def add_action(self, reported: ReportedAction) -> bool:
        """Keep a person's action as it named its fleet incident (by id, or by its alert's dedup key): which one it is
        about is decided when the fleet incidents are derived, by its time (fault_responder.incidents.people). False
        when it was kept before."""
        actions = with_action(self.actions, reported)
        if actions is None:
            return False
        self.actions = actions
        return True


@dataclass(slots=True)
class FleetView:
    """The fleet incidents of one group, shaped like an instance's view for delivery."""

    incidents: list[Incident] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)

    def incident(self, incident_id: str) -> Incident | None:
        return next((incident for incident in self.incidents if incident.id == incident_id), None)


# --- Groups and members ---------------------------------------------------------------------------------


def group_of(incident: Incident, grouping: Grouping, accounts: Accounts = SINGLE_ACCOUNT) -> Group:
    return group_from_labels(incident_labels(incident), grouping, accounts)


def group_from_labels(labels: Mapping[str, str], grouping: Grouping, accounts: Accounts = SINGLE_ACCOUNT) -> Group:
    """The group of what has these labels: its values for the grouping labels, and the account and Region it is in when
    they are not the stack's home (a fleet never spans accounts or Regions; at home, and in a single-account stack, the
    group is what it always was, so its key and open fleet incident carry on). `account_name` groups as `account`
    (by the id: an account has one name, and a name may change)."""
    group: list[tuple[str, str]] = []
    for name in grouping.by:
        label = "account" if name == "account_name" else name
        if all(label != known for known, _ in group):
            group.append((label, labels.get(label, "")))
    scope = accounts.scope(labels.get("account", ""), labels.get("region", ""))
    group.extend((name, value) for name, value in scope if all(name != known for known, _ in group))
    return tuple(group)


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


def crossing(opened: Sequence[datetime], threshold: int, window: timedelta) -> datetime | None:
    """The first moment `threshold` of these opened within `window` (inclusive), or None."""
    if threshold < 1:
        return None
    ordered = sorted(opened)
    for index in range(threshold - 1, len(ordered)):
        if ordered[index] - ordered[index - threshold + 1] <= window:
            return ordered[index]
    return None


def counts_in(fleet: FleetIdentity, member: FleetMember) -> bool:
    """Whether the member's incident counts in the fleet incident: it is the fleet's already, or it opened within
    the fleet's window or later."""
    if member.fleet == fleet.id:
        return True
    return fleet.since is not None and member.opened_at >= fleet.since


def fingerprint(group: Group) -> str:
    value = "fleet/" + "/".join(value or "-" for _, value in group)
    if len(value) <= MAX_DEDUP_KEY:
        return value
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest(value, 32)}"


def opened_identity(
    record: GroupRecord,
    moment: datetime,
    window: timedelta,
    founders: dict[str, Recent],
    *,
    now: datetime | None,
) -> FleetIdentity:
    """The identity of the fleet incident that opens at `moment` with these founding members (instance ARN -> what
    its registration said): as severe as the worst of them, their fault if they share one."""
    labels = dict(record.group)
    check = labels.get("check_type") or "health"
    identity = FleetIdentity(
        id=f"fleet:{fingerprint(record.group)}@{iso_utc(moment)}",
        check_type=check,
        anchor=moment,
        status="OPEN",
        opened_at=min((f.opened_at for f in founders.values()), default=moment),
        known_at=now,
        since=moment - window,
        first_seq=record.journal_seq,
        members=len(founders),
        founders=sorted(digest(arn, 24) for arn in founders)[:MAX_FOUNDERS],
    )
    for founder in sorted(founders.values(), key=lambda f: f.opened_at):
        identity = escalated(identity, founder) or identity
    return identity


def escalated(fleet: FleetIdentity, member: Recent) -> FleetIdentity | None:
    """The fleet incident's identity as it must be once this member counts in it (more severe, or a fault of
    another kind than the others'), or None when it already says as much: what routes and pages a fleet incident
    is written on its identity, so every derivation (with its members read or not) routes it alike."""
    check = fleet.check_type
    severity = Severity(fleet.severity) if fleet.severity else None
    worse = severity is None or member.severity.rank > severity.rank
    title = member.title if fleet.title is None else fleet.title if fleet.title == member.title else f"{check} faults"
    xid = member.xid if fleet.title is None else fleet.xid if fleet.xid == member.xid else None
    if not worse and title == fleet.title and xid == fleet.xid:
        return None
    changed = copy.deepcopy(fleet)
    if worse:
        changed.severity, changed.fault_class = member.severity.value, member.fault_class.value
    changed.title, changed.xid = title, xid
    return changed


def founders_of(record: GroupRecord, moment: datetime, window: timedelta) -> dict[str, Recent]:
    """The members that found a fleet incident opening at `moment`: those reported open lately that opened within
    its window or after."""
    return {arn: recent for arn, recent in record.recent.items() if recent.opened_at >= moment - window}


def is_founder(fleet: FleetIdentity, member: FleetMember) -> bool:
    return digest(member.instance.container_instance_arn, 24) in fleet.founders


def stale_recent(record: GroupRecord, window: timedelta) -> list[str]:
    """Members reported open lately that opened too long before the newest to count in any crossing with it: the
    next write forgets them, so the head stays small while no fleet incident opens."""
    if not record.recent:
        return []
    newest = max(recent.opened_at for recent in record.recent.values())
    return sorted(arn for arn, recent in record.recent.items() if recent.opened_at < newest - 2 * window)


def closed_identity(record: GroupRecord, fleet: FleetIdentity, at: datetime) -> FleetIdentity:
    closed = copy.deepcopy(fleet)
    closed.status, closed.phase = "CLOSED", "RESOLVED"
    closed.closed_at = max(at, fleet.anchor)
    closed.members = max(record.joined, fleet.members)
    closed.last_seq = record.journal_seq
    return closed


def trimmed(known: list[FleetIdentity]) -> list[FleetIdentity]:
    ordered = sorted(known, key=lambda k: (k.anchor, k.id))
    while len(ordered) > MAX_FLEETS:
        closed = next((k for k in ordered if k.status != "OPEN"), None)
        if closed is None:
            break
        ordered.remove(closed)
    return ordered


def readable_journal(entries: Sequence[JournalEntry], after: int, now: float) -> list[JournalEntry]:
    """The journal entries after number `after` that can be told now, in order: up to the first number taken and
    not written yet (its worker may still be writing it), unless that number was abandoned (a later one was taken
    more than ABANDONED_AFTER ago)."""
    told: list[JournalEntry] = []
    expected = after + 1
    for entry in sorted(entries, key=lambda e: e.seq):
        if entry.seq < expected:
            continue
        if entry.seq > expected and now - entry.written < ABANDONED_AFTER.total_seconds():
            break
        told.append(entry)
        expected = entry.seq + 1
    return told


# --- Fleet incidents ------------------------------------------------------------------------------------


def derive_fleet(
    record: GroupRecord,
    grouping: Grouping,
    route: Route,
    now: datetime | None = None,
    policy: Policy | None = None,
    *,
    accounts: Accounts = SINGLE_ACCOUNT,
) -> FleetView:
    """The group's fleet incidents, with their receivers and mutes, from its head and what was read beside it; in
    organization mode each says where it is (`accounts`: its account's name)."""
    from fault_responder.routing.runbooks import runbook_for  # noqa: PLC0415

    view = FleetView()
    if not grouping.enabled:
        return view
    for number, identity in enumerate(sorted(record.incidents, key=lambda k: (k.anchor, k.id)), start=1):
        incident = _incident(record, identity, number, grouping, now=now)
        incident.where = accounts.where(record.where)
        apply_actions(incident, record.actions, may_close=False)
        decision = route(_context(incident))
        incident.receivers, incident.route = list(decision.receivers), ",".join(decision.routes) or None
        classification = incident.classification
        incident.runbook = runbook_for(classification.fault_class, classification.xid, override=decision.runbook)
        view.incidents.append(incident)
    if policy is not None:
        policy.apply(view.incidents, [], (), now)
    return view


def _incident(
    record: GroupRecord, identity: FleetIdentity, number: int, grouping: Grouping, *, now: datetime | None
) -> Incident:
    is_open = identity.status == "OPEN" and identity.id == record.open_fleet
    listed = tuple(sorted(record.listed, key=lambda m: (m.opened_at, member_name(m)))) if is_open else ()
    open_count = max(record.open_count, len(listed)) if is_open else 0
    # (A member counted by the index but not yet by the head, a join in flight, is a member all the same.)
    total = max(record.joined, identity.members, open_count) if is_open else identity.members
    labels = dict(record.group)
    check = labels.get("check_type") or "health"
    where = record.where.capacity_provider or record.where.cluster_name
    # What it is comes from its identity alone (written as members escalate it), so that every derivation routes it
    # alike, whether its members were read for a message or not.
    title = identity.title or f"{check} faults"
    classification = Classification(
        _fault_class(identity),
        Severity(identity.severity) if identity.severity else Severity.ERROR,
        f"Fleet: {total} instances of {where}: {title}",
        xid=identity.xid,
    )
    entries = [e for e in record.journal if e.fleet == identity.id]
    seen = [identity.anchor, *(e.at for e in entries), *(m.opened_at for m in listed)]
    closed_at = None if is_open else (identity.closed_at or identity.anchor)
    # While it is open, the moment the threshold was crossed as its open members now show it (whatever order they
    # arrived in); its id stays anchored where it was first seen crossed.
    crossed = crossing([m.opened_at for m in listed], grouping.threshold, grouping.window) if is_open else None
    opened_at = min(identity.anchor, crossed) if crossed is not None else identity.anchor
    incident = Incident(
        id=identity.id,
        fingerprint=fingerprint(record.group),
        instance=record.where,
        check_type=check,
        status="OPEN" if is_open else "CLOSED",
        classification=classification,
        opened_at=opened_at,
        phase="IMPAIRED" if is_open else "RESOLVED",
        last_status_change=closed_at or max(seen),
        closed_at=closed_at,
        close_reason=None if is_open else "every member recovered or left the cluster",
        opened_count=number,
        slack_threads=[],
        known_at=identity.known_at,
        fleet=FleetSummary(
            group=record.group,
            threshold=grouping.threshold,
            window_minutes=int(grouping.window.total_seconds() // 60),
            total=total,
            open=open_count,
            listed=listed,
            first_seen=min([identity.opened_at or identity.anchor, *(m.opened_at for m in listed)]),
            last_change=closed_at or max(seen),
            as_of=now,
            thread_from=identity.first_seq,
            fault=title,
        ),
    )
    incident.timeline = _timeline(incident, identity, entries, grouping)
    return incident


def _timeline(
    incident: Incident, identity: FleetIdentity, entries: list[JournalEntry], grouping: Grouping
) -> list[TimelineEntry]:
    opened = incident.opened_at
    window = int(grouping.window.total_seconds() // 60)
    where = incident.instance.capacity_provider or incident.instance.cluster_name
    founding = f"{identity.members} instances" if identity.members else "Instances"
    timeline = [
        TimelineEntry(
            f"fleet:{iso_utc(opened)}",
            opened,
            incident.id,
            "FLEET",
            f"{founding} of {where} failed {incident.check_type} within {window} min: one incident",
            EntryKind.OPENED,
            page=True,
        )
    ]
    for entry in sorted(entries, key=lambda e: e.seq):
        name = member_name(entry.member)
        if entry.told == Told.JOINED:
            timeline.append(
                TimelineEntry(
                    entry.key,
                    entry.at,
                    entry.member.incident,
                    "JOINED",
                    f"{name}: {entry.member.title}",
                    EntryKind.CHANGED,
                )
            )
        else:
            timeline.append(
                TimelineEntry(
                    entry.key,
                    entry.at,
                    entry.member.incident,
                    "RECOVERED",
                    f"{name}: recovered or left the cluster",
                    EntryKind.CHANGED,
                )
            )
    if incident.closed_at is not None:
        timeline.append(
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
    return timeline


def _fault_class(identity: FleetIdentity) -> FaultClass:
    return FaultClass(identity.fault_class) if identity.fault_class else FaultClass.UNKNOWN_CHECK


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
    from fault_responder.routing.router import RouteContext, name_of  # noqa: PLC0415

    return RouteContext(
        kind="health_impaired",
        cluster=incident.instance.cluster_name,
        capacity_provider=incident.instance.capacity_provider,
        check_type=incident.check_type,
        fault_class=incident.classification.fault_class.value,
        severity=incident.classification.severity,
        drain_attribution=None,
        fleet="true",
        account=incident.instance.account,
        region=incident.instance.region,
        account_name=name_of(incident.where),
    )


def is_group(arn: str) -> bool:
    return arn.startswith(GROUP_PREFIX)
