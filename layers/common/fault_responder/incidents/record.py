"""What the responder knows about one container instance: the facts ECS reported, and what people were told.

ECS delivers events at least once and out of order, and several pollers handle them at once. So nothing here
is "the current state, updated by the next event": an event only adds facts (a health transition, an instance
status, a stopped task), each fact has an identity, and adding a fact twice changes nothing. Incidents are
derived from the set of facts (fault_responder.incidents.lifecycle), so the outcome depends on which events arrived,
never on their order.

Besides the facts, the record keeps what the derivation must not forget between events: each incident's
identity (the transition that first made it known, so its Slack root and PagerDuty alert stay its own when a
late event moves its start) and its receivers; per receiver and subject, what was delivered; per receiver, the
lease that makes one worker at a time deliver to it. Every list is bounded, so a record stays far below
DynamoDB's 400 KB item limit however many events an instance produces.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from fault_responder.core.copying import Record, Value
from fault_responder.core.domain import InstanceRef, ResumeNote

MAX_HEALTH_FACTS = 50
"""Per check type; the oldest transitions go first."""
MAX_STATUS_FACTS = 20
MAX_TASK_FACTS = 50
MAX_NOTICE_FACTS = 50
MAX_ACTION_FACTS = 50
MAX_INCIDENTS_PER_CHECK = 10
MAX_CHECK_TYPES = 8
"""A hostile or broken event can name any number of check types; beyond this many, the rest share one."""
OVERFLOW_CHECK_TYPE = "OTHER_CHECKS"
MAX_TEXT = 500
"""Reasons and other free text ECS sends are clipped to this many characters when they become facts."""
MAX_ID = 200
"""Event ids, task ARNs and the like are clipped (with a digest) to this many characters."""
RECONCILED_PREFIX = "reconcile:"
"""The event id of facts the reconciliation sweep found in ECS's answers, with no event
(fault_responder.operations.reconcile)."""
FOUND_BY_SWEEP = "found by the sweep: the event was missed"


def clip(text: str | None, limit: int = MAX_TEXT) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bounded_id(value: str, limit: int = MAX_ID) -> str:
    """An identifier short enough to store and show; a long one keeps its start and gains a digest of the whole."""
    if len(value) <= limit:
        return value
    return f"{value[: limit - 17]}#{digest(value)}"


def digest(value: str, length: int = 16) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:length]


# --- Facts ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HealthFact(Value):
    """One health check transition: the check reached `status` at `at` (its lastStatusChange)."""

    check_type: str
    status: str
    at: datetime
    event_id: str
    reason: str | None = None
    updated: datetime | None = None
    """The check's lastUpdated: of two reports of one transition, the later one's reason wins."""
    by: str | None = None
    """Who reported it: a drill's author (its event's `detail.drill.startedBy`); None for what ECS reported."""

    @property
    def identity(self) -> tuple[str, datetime]:
        return self.status, self.at

    @property
    def reconciled(self) -> bool:
        """Found by the reconciliation sweep in ECS's answer, not reported by an event."""
        return is_reconciled(self.event_id)

    def newer_than(self, other: HealthFact) -> bool:
        return _report_order(self) > _report_order(other)


def is_reconciled(event_id: str) -> bool:
    return event_id.startswith(RECONCILED_PREFIX)


def _report_order(fact: HealthFact) -> tuple[datetime, str, str]:
    return (fact.updated or fact.at, fact.reason or "", fact.event_id)


@dataclass(frozen=True, slots=True)
class StatusFact(Value):
    """The container instance reached `status` (DRAINING, DEREGISTERING, INACTIVE, ...)."""

    status: str
    at: datetime
    event_id: str
    version: int | None = None
    reason: str | None = None

    @property
    def identity(self) -> tuple[object, ...]:
        return ("v", self.version) if self.version is not None else ("s", self.status, self.at)

    @property
    def order(self) -> tuple[int, datetime, str]:
        """Later first by detail.version (ECS increments it on every change), then by time."""
        return (self.version if self.version is not None else -1, self.at, self.event_id)


@dataclass(frozen=True, slots=True)
class TaskStopFact(Value):
    """A task on the instance stopped because of the infrastructure (interruption, health, a drain)."""

    task_arn: str
    at: datetime
    event_id: str
    family: str
    reason: str
    stop_code: str | None = None
    drained: bool = False
    """Stopped by a drain of its instance; not news on its own, the drain was announced."""

    @property
    def task_id(self) -> str:
        return self.task_arn.rsplit("/", 1)[-1]


@dataclass(frozen=True, slots=True)
class QuarantineFact(Value):
    """The training auto-resume workflow drained the instance itself (recorded before it drains)."""

    at: datetime
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class NoticeFact(Value):
    """Something the training auto-resume workflow told people about a fault, shown in its incident."""

    key: str
    check_type: str
    fault_at: datetime
    """The fault's lastStatusChange: the notice belongs to the incident that contains it."""
    at: datetime
    title: str
    pages: bool = False
    kind: str | None = None
    """What the workflow did (resumed, give_up, ...): a resumed job keeps the incident quiet."""
    note: ResumeNote | None = None
    """Set when the workflow held the notice back from some receivers: what the router tells them, and who they are,
    once nothing holds it back (the fact is written once: the first delivery's decision stands for its retries)."""


@dataclass(frozen=True, slots=True)
class ActionFact(Value):
    """Someone acted on one of the instance's incidents: from Slack's buttons or in PagerDuty
    (fault_responder.incidents.incident_actions). Its key is the action's own id, so a copy adds nothing.

    It keeps what the action named and when it was taken: which incident it is about (the one of its alert open at
    `at`, or none) is decided whenever incidents are derived (fault_responder.incidents.people), so it does not depend
    on which facts had arrived before it."""

    key: str
    incident: str | None
    """The incident's id (fingerprint@anchor) as a Slack button names it; None when the action named only its
    PagerDuty dedup key. One from PagerDuty with no `dedup_key` (stored before it was kept, or by a group's record,
    which matches on arrival) holds the incident it was matched to then: only its alert (incident_series) is read."""
    kind: str
    """acknowledge, unacknowledge, resolve, reassign or silence (incident_actions.ActionKind)."""
    via: str
    """slack or pagerduty."""
    by: str
    at: datetime
    note: str | None = None
    dedup_key: str | None = None
    """The PagerDuty alert's dedup key (its incidents' fingerprint), as PagerDuty's webhooks name it."""


def incident_series(incident_id: str) -> str:
    """What the incidents of one alert share in their ids (`fingerprint@anchor`, a fleet's `fleet:fingerprint@anchor`):
    the id before its anchor."""
    return incident_id.rsplit("@", 1)[0]


def incident_anchor(incident_id: str) -> datetime | None:
    """The anchor an incident id names (the report that first made the incident known), None if it names none."""
    _, separator, anchor = incident_id.rpartition("@")
    try:
        moment = datetime.fromisoformat(anchor) if separator else None
    except ValueError:
        return None
    return moment if moment is None or moment.tzinfo is not None else None


# --- What was delivered, and who delivers -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pending(Value):
    """A Slack post that was started and is not known to have landed."""

    marker: str
    """What the message's metadata names (the subject, and the timeline entry for a reply)."""
    at: datetime
    owner: str
    """The worker (lease owner) that started it: for any other worker its outcome is unknown."""


@dataclass(slots=True)
class Delivery(Record):
    """What one receiver was told about one subject (an incident, or a notice outside any incident)."""

    receiver: str
    subject: str
    channel: str | None = None
    """Slack: the channel id of the message (chat.update needs the id, not the name)."""
    ts: str | None = None
    """Slack: the root message of the incident, or the notice's message."""
    pending: list[Pending] = field(default_factory=list)
    """Slack posts started and not known to have landed (a timeout, or a worker that died): the next
    attempt looks for the message before posting it again."""
    digest: str | None = None
    """Of what the message (or the page) showed when last sent: a different digest means it needs an update."""
    steps: list[str] = field(default_factory=list)
    """Timeline entries already posted (thread replies, or webhook messages)."""
    alert: str | None = None
    """PagerDuty: the last event_action sent (trigger or resolve), None if none was."""
    incident: str | None = None
    """PagerDuty: the incident the open alert was last triggered for (a check's episodes share one alert key)."""
    last_at: datetime | None = None
    """When the last thread reply (or webhook message, or PagerDuty trigger) went out: a fleet incident's updates
    wait for the next batch."""
    severity: str | None = None
    """PagerDuty: the severity of the last trigger (a fleet incident's page goes out again at once if it rises)."""
    acked: str | None = None
    """PagerDuty: the action (its key) whose acknowledge was last sent for the open alert."""
    cursor: int | None = None
    """A fleet incident's thread: the last journal entry told (fault_responder.noise.fleet); None: none yet."""


@dataclass(frozen=True, slots=True)
class Lease(Value):
    """One worker at a time delivers to a receiver for an instance; the lease ends with its invocation."""

    receiver: str
    owner: str
    until: float
    """Epoch seconds: after this the owner's invocation is over, and anyone may take the lease."""


@dataclass(frozen=True, slots=True)
class Backoff(Value):
    """A receiver of this record failed: the sweep tries it again at `retry_at`, not before."""

    receiver: str
    failures: int
    since: float
    """Epoch seconds of the first failure in a row: a closure waiting since then is not told yet."""
    retry_at: float


# --- Incident identities ----------------------------------------------------------------------------


@dataclass(slots=True)
class KnownIncident(Record):
    """An incident as first made known: its id and anchor stay fixed while late events move its bounds.

    `anchor` is the transition that first made it known; the derived episode that contains the anchor is
    this incident. The summary fields are the last derivation, kept for readers (status, reports).
    """

    id: str
    check_type: str
    anchor: datetime
    receivers: list[str] = field(default_factory=list)
    route: str | None = None
    fleet: str | None = None
    """The fleet incident this incident joined while it was open: its own pages are left to the fleet's."""
    status: str = "OPEN"
    opened_at: datetime | None = None
    closed_at: datetime | None = None
    phase: str | None = None
    severity: str | None = None
    title: str | None = None
    fault_class: str | None = None
    xid: int | None = None
    known_at: datetime | None = field(default=None, compare=False)
    """When the responder first made it known (wall clock): a fault reported late is news from then on."""
    found: str | None = None
    """FOUND_BY_SWEEP when the reconciliation sweep made it known (no event had): kept when the event arrives."""


# --- The record ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class InstanceRecord(Record):
    arn: str
    instance: InstanceRef
    health: dict[str, list[HealthFact]] = field(default_factory=dict)
    statuses: list[StatusFact] = field(default_factory=list)
    tasks: list[TaskStopFact] = field(default_factory=list)
    quarantine: QuarantineFact | None = None
    notices: list[NoticeFact] = field(default_factory=list)
    actions: list[ActionFact] = field(default_factory=list)
    incidents: dict[str, list[KnownIncident]] = field(default_factory=dict)
    deliveries: dict[tuple[str, str], Delivery] = field(default_factory=dict)
    leases: dict[str, Lease] = field(default_factory=dict)
    backoff: dict[str, Backoff] = field(default_factory=dict)
    version: int = 0
    """Bumped by every change of facts or incidents; deliveries and leases do not bump it."""

    def delivery(self, receiver: str, subject: str) -> Delivery:
        return self.deliveries.get((receiver, subject)) or Delivery(receiver, subject)

    def check_key(self, check_type: str) -> str:
        """The check type facts are kept under: itself, or the overflow bucket past MAX_CHECK_TYPES."""
        if check_type in self.health or len(self.health) < MAX_CHECK_TYPES:
            return check_type
        return OVERFLOW_CHECK_TYPE

    def add(self, facts: EventFacts) -> bool:
        """Add an event's facts; True if anything was new. Adding the same facts again changes nothing."""
        changed = False
        self.instance = merge_instance(self.instance, facts.instance, authoritative=bool(facts.health))
        for reported in facts.health:
            key = self.check_key(reported.check_type)
            fact = reported if key == reported.check_type else replace(reported, check_type=key)
            merged = _add_health(self.health.get(key, []), fact)
            if merged is not None:
                self.health[key] = merged
                changed = True
        if facts.status is not None:
            statuses = _add_unique(self.statuses, facts.status, _status_identity, _status_order, MAX_STATUS_FACTS)
            if statuses is not None:
                self.statuses = statuses
                changed = True
        if facts.task is not None:
            tasks = _add_unique(self.tasks, facts.task, _task_identity, _task_order, MAX_TASK_FACTS)
            if tasks is not None:
                self.tasks = tasks
                changed = True
        if facts.action is not None:
            changed = self.add_action(facts.action) or changed
        return changed

    def add_action(self, reported: ReportedAction) -> bool:
        """Add a person's action as it named its incident (by id or by dedup key); False when it was added before.
        Which incident it is about is decided when incidents are derived: one that matches none is kept (bounded)
        and told to nobody."""
        actions = with_action(self.actions, reported)
        if actions is None:
            return False
        self.actions = actions
        return True

    def add_quarantine(self, fact: QuarantineFact) -> bool:
        if self.quarantine is not None and self.quarantine.at >= fact.at:
            return False
        self.quarantine = fact
        return True

    def add_notice(self, fact: NoticeFact) -> bool:
        notices = _add_unique(self.notices, fact, _notice_identity, _notice_order, MAX_NOTICE_FACTS)
        if notices is None:
            return False
        self.notices = notices
        return True


def action_fact(reported: ReportedAction) -> ActionFact:
    """The fact an action adds: what it named, and when."""
    return ActionFact(
        reported.key,
        reported.incident,
        reported.kind,
        reported.via,
        reported.by,
        reported.at,
        reported.note,
        reported.dedup_key,
    )


def with_action(actions: list[ActionFact], reported: ReportedAction) -> list[ActionFact] | None:
    """The actions with this one added as it named its incident, oldest dropped past the bound; None if it was there."""
    return _add_unique(actions, action_fact(reported), _action_identity, _action_order, MAX_ACTION_FACTS)


@dataclass(frozen=True, slots=True)
class ReportedAction:
    """An action as its envelope names its incident: by id (Slack's buttons) or by dedup key (PagerDuty)."""

    key: str
    kind: str
    via: str
    by: str
    at: datetime
    incident: str | None = None
    dedup_key: str | None = None
    note: str | None = None


@dataclass(frozen=True, slots=True)
class EventFacts:
    """What one ECS event (or one person's action on an incident) says about one container instance."""

    event_id: str
    instance: InstanceRef
    health: tuple[HealthFact, ...] = ()
    status: StatusFact | None = None
    task: TaskStopFact | None = None
    action: ReportedAction | None = None


def merge_instance(known: InstanceRef, seen: InstanceRef, *, authoritative: bool) -> InstanceRef:
    """Fill what the record did not know yet (a task event carries no EC2 id, a state event may carry no
    provider). Health events name the instance's provider and EC2 id; where another event disagrees, theirs
    wins, so the record does not depend on which event came first."""
    if authoritative:
        return replace(
            known,
            ec2_instance_id=seen.ec2_instance_id or known.ec2_instance_id,
            capacity_provider=seen.capacity_provider or known.capacity_provider,
        )
    return replace(
        known,
        ec2_instance_id=known.ec2_instance_id or seen.ec2_instance_id,
        capacity_provider=known.capacity_provider or seen.capacity_provider,
    )


def _add_health(facts: list[HealthFact], fact: HealthFact) -> list[HealthFact] | None:
    for index, existing in enumerate(facts):
        if existing.identity == fact.identity:
            # The sweep only adds what no event reported; it never rewrites a report (its own copy of a transition
            # would otherwise replace the event's and change what was already told).
            if fact.reconciled or not fact.newer_than(existing):
                return None
            updated = list(facts)
            updated[index] = fact
            return updated
    merged = sorted([*facts, fact], key=lambda f: (f.at, f.status))[-MAX_HEALTH_FACTS:]
    return None if merged == facts else merged


_T = TypeVar("_T")


def _add_unique(
    items: list[_T], item: _T, identity: Callable[[_T], object], order: Callable[[_T], Any], limit: int
) -> list[_T] | None:
    """The items with `item` added, oldest first, the oldest dropped past `limit`; None if it was there."""
    if any(identity(existing) == identity(item) for existing in items):
        return None
    merged = sorted([*items, item], key=order)[-limit:]
    return None if merged == items else merged


def _status_identity(fact: StatusFact) -> object:
    return fact.identity


def _status_order(fact: StatusFact) -> Any:
    return fact.order


def _task_identity(fact: TaskStopFact) -> object:
    return fact.task_arn


def _task_order(fact: TaskStopFact) -> Any:
    return (fact.at, fact.task_arn)


def _notice_identity(fact: NoticeFact) -> object:
    return fact.key


def _notice_order(fact: NoticeFact) -> Any:
    return (fact.at, fact.key)


def _action_identity(fact: ActionFact) -> object:
    return fact.key


def _action_order(fact: ActionFact) -> Any:
    return (fact.at, fact.key)


def compact(record: InstanceRecord) -> None:
    """Make the record smaller, oldest first: halve the longest list of facts.

    Only reached when a record would not fit in a DynamoDB item, which the bounds above prevent for anything
    ECS sends; it keeps a hostile stream of events from making an instance's record unwritable.
    """
    sizes = {
        "tasks": len(record.tasks),
        "notices": len(record.notices),
        "statuses": len(record.statuses),
        "actions": len(record.actions),
    }
    sizes.update({f"health:{check}": len(facts) for check, facts in record.health.items()})
    name, size = max(sizes.items(), key=lambda item: item[1])
    if size <= 1:
        return
    if name.startswith("health:"):
        check = name.removeprefix("health:")
        record.health[check] = record.health[check][size // 2 :]
    else:
        setattr(record, name, getattr(record, name)[size // 2 :])
