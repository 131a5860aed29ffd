"""Domain types shared by classification, incidents, routing and rendering.

Nothing here touches boto3 or HTTP: adapters translate to and from these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from urllib.parse import quote

from fault_responder.core.copying import Value

ALARM_ARN_MARK = ":alarm:"
"""What an alarm's ARN has and an ECS ARN never has: arn:aws:cloudwatch:REGION:ACCOUNT:alarm:NAME."""
CONTRIBUTOR_MARK = "#contributor/"
"""Between an alarm's ARN and a contributor's id, where one time series of a multi time series alarm keeps its facts
(arn:aws:cloudwatch:REGION:ACCOUNT:alarm:NAME#contributor/ID): no alarm's name may contain it
(fault_responder.events.cloudwatch), and a contributor's id has neither `#` nor `/`."""


class Severity(StrEnum):
    """PagerDuty Events v2 severities, most severe first."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        return _SEVERITY_RANK[self]


_SEVERITY_RANK = {Severity.CRITICAL: 3, Severity.ERROR: 2, Severity.WARNING: 1, Severity.INFO: 0}


DRILL_SOURCE = "fault-responder.drill"
"""The EventBridge source of a drill's events (`python -m fault_responder.cli drill`, docs/drills.md). AWS
reserves `aws.*` for its services, so only ECS can send `aws.ecs` and a drill can never pass for a real fault."""
DRILL_MARK = "#drill"
"""Appended to a drill's container instance ARN where the responder keeps its facts: a drill naming a real
instance never shares that instance's record, incidents or PagerDuty alert."""
DRILL_TITLE = "DRILL: "
"""Begins a drill's title: its Slack root, its fallback text and its PagerDuty summary say it first."""
MAX_DRILL_AUTHOR = 100
"""The characters of a drill's author kept (its event's `detail.drill.startedBy`), as long as a silence's author."""


class EventKind(StrEnum):
    """What a notification is about: the `kind` routing matcher."""

    HEALTH_IMPAIRED = "health_impaired"
    """An incident (a health check fault), from its open to its resolve."""
    INSTANCE_STATE = "instance_state"
    TASK_STOPPED = "task_stopped"
    ALARM = "alarm"
    """An incident made by one of the stack's CloudWatch alarms (fault_responder.incidents.alarms), from ALARM to OK."""


class FaultClass(StrEnum):
    """The class of a health fault; a routing matcher and the PagerDuty `class`."""

    XID_CRITICAL = "xid_critical"
    XID_RESTART_APP = "xid_restart_app"
    XID_UNKNOWN = "xid_unknown"
    GPU_NO_REASON = "gpu_no_reason"
    DAEMON = "daemon"
    AGENT_CONNECTIVITY = "agent_connectivity"
    CONTAINER_RUNTIME = "container_runtime"
    INSUFFICIENT_DATA = "insufficient_data"
    UNKNOWN_CHECK = "unknown_check"
    RECOVERY = "recovery"
    INSTANCE_LIFECYCLE = "instance_lifecycle"
    TASK_INTERRUPTION = "task_interruption"
    GPU_TEMPERATURE = "gpu_temperature"
    """A CloudWatch alarm: a GPU of the fleet runs hotter than its threshold."""
    GPU_RESTART_APP_XIDS = "gpu_restart_app_xids"
    """A CloudWatch alarm: tasks reported restart-the-application XIDs (TaskGPURestartAppXidCount)."""
    RESPONDER_HEALTH = "responder_health"
    """A CloudWatch alarm on the responder itself: its router, queues, deliveries or resume workflow."""
    ALARM = "alarm"
    """Any other CloudWatch alarm whose state changes reach the router."""


class DrainCause(StrEnum):
    """Why an instance drains. AWS documents no reason-code enum (docs/ecs-events.md#drain-reasons)."""

    ECS_AUTO_REPAIR = "ecs_auto_repair"
    FAULT_RESPONDER_QUARANTINE = "fault_responder_quarantine"
    ECS_REPORTED = "ecs_reported"
    MANUAL_OR_SCHEDULED = "manual_or_scheduled"


@dataclass(frozen=True, slots=True)
class Classification:
    fault_class: FaultClass
    severity: Severity
    title: str
    """Short human title, e.g. "XID 79: GPU has fallen off the bus"."""
    xid: int | None = None
    reason: str | None = None
    """The raw statusReason as ECS sent it (untrusted text)."""


@dataclass(frozen=True, slots=True)
class Runbook:
    """What on-call should do about a fault, in one line, and where to read more (fault_responder.routing.runbooks)."""

    action: str
    """One line, e.g. "The GPU fell off the bus: ECS replaces the instance if auto-repair is on; ..."."""
    url: str
    """An https link: NVIDIA's XID catalog, the ECS documentation, or a route's own runbook."""
    link_text: str


@dataclass(frozen=True, slots=True)
class DrainAttribution:
    cause: DrainCause
    label: str
    """What people read, e.g. "ECS auto-repair (XID 79)"."""
    reason: str | None = None
    """The reason text the event carried, if any (untrusted text)."""


@dataclass(frozen=True, slots=True)
class InstanceRef(Value):
    """Where a fault is: enough to name it, link to it and route on it."""

    region: str
    account: str
    cluster_arn: str
    container_instance_arn: str
    ec2_instance_id: str | None
    capacity_provider: str | None
    drill: bool = False
    """Reported by a drill (source fault-responder.drill), never by ECS: labelled, titled and routed as one, and
    its `container_instance_arn` ends with DRILL_MARK."""
    attributes: tuple[tuple[str, str], ...] = ()
    """An alarm contributor's attributes (its time series' dimensions), bounded (fault_responder.incidents.alarms);
    empty for anything else."""

    @property
    def cluster_name(self) -> str:
        return self.cluster_arn.rsplit("/", 1)[-1]

    @property
    def is_alarm(self) -> bool:
        """A CloudWatch alarm's record (fault_responder.incidents.alarms): the alarm's ARN stands where an instance's
        would."""
        arn = self.container_instance_arn
        # The service part of the ARN decides: an ECS event's container instance ARN can never make itself an alarm.
        return arn.startswith("arn:") and arn.split(":", 3)[2:3] == ["cloudwatch"] and ALARM_ARN_MARK in arn

    @property
    def alarm_contributor(self) -> str | None:
        """For one contributor of a multi time series alarm (its own record), the contributor's id."""
        if not self.is_alarm or CONTRIBUTOR_MARK not in self.container_instance_arn:
            return None
        return self.container_instance_arn.rsplit(CONTRIBUTOR_MARK, 1)[1]

    @property
    def container_instance_id(self) -> str:
        """The container instance's id; for an alarm (or one of its contributors), the alarm's name (which may
        contain "/")."""
        if self.is_alarm:
            name = self.container_instance_arn.split(ALARM_ARN_MARK, 1)[1]
            return name.rsplit(CONTRIBUTOR_MARK, 1)[0] if CONTRIBUTOR_MARK in name else name
        arn = self.container_instance_arn
        if self.drill and arn.endswith(DRILL_MARK):
            arn = arn[: -len(DRILL_MARK)]
        return arn.rsplit("/", 1)[-1]

    @property
    def console_url(self) -> str:
        if self.is_alarm:
            name = quote(self.container_instance_id, safe="")
            return f"https://{self.region}.console.aws.amazon.com/cloudwatch/home?region={self.region}#alarmsV2:alarm/{name}"
        return (
            f"https://{self.region}.console.aws.amazon.com/ecs/v2/clusters/{self.cluster_name}"
            f"/infrastructure/container-instances/{self.container_instance_id}?region={self.region}"
        )


@dataclass(frozen=True, slots=True)
class Where(Value):
    """The account and Region a fault is in, as an organization's pages name them (fault_responder.core.accounts);
    a single-account stack's incidents have none."""

    account: str
    region: str
    name: str = ""
    """The account's name; empty when neither AccountNames nor AWS Organizations tells it."""

    @property
    def account_text(self) -> str:
        """`prod-ml (111111111111)`, or the id alone when the name is not known."""
        return f"{self.name} ({self.account})" if self.name else self.account

    def __str__(self) -> str:
        """`account prod-ml (111111111111), us-west-2`."""
        return f"account {self.account_text}, {self.region}"


@dataclass(frozen=True, slots=True)
class ContributorReading:
    """What an alarm contributor's incident says of its time series (fault_responder.incidents.alarms): the
    cluster, the value that crossed the threshold and the threshold, as far as the alarm's reason tells them."""

    contributor_id: str
    cluster: str
    value: float | None
    """None: CloudWatch's reason did not say (or not readably): shown as "value not reported"."""
    threshold: float | None
    unit: str
    """" °C" for the temperature, "" for a count."""


class EntryKind(StrEnum):
    """What a timeline step is, which decides where it goes."""

    OPENED = "opened"
    """The fault that opened the incident: the root message says it, no thread reply."""
    CHANGED = "changed"
    """The check reports another reason or status while still failing."""
    INSTANCE = "instance"
    """The container instance changed status (DRAINING, DEREGISTERING, INACTIVE)."""
    TASK = "task"
    """A task on the instance stopped."""
    RECOVERED = "recovered"
    """The check is OK again."""
    NOTICE = "notice"
    """What the training auto-resume workflow did (it posts its own thread replies; those it held back from a
    receiver, the router tells once nothing holds them back: `TimelineEntry.note`)."""
    ACTION = "action"
    """What a person did: acknowledged, resolved, reassigned or silenced it (from Slack or in PagerDuty)."""


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    key: str
    """Stable across derivations: which replies went out is recorded by it."""
    at: datetime
    event_id: str
    phase: str
    """IMPAIRED, INSUFFICIENT_DATA, DRAINING, DEREGISTERING, INACTIVE, TASK_STOPPED, RECOVERED, RESUME, ..."""
    text: str
    """One line for people; untrusted parts are escaped by the renderers, not here."""
    kind: EntryKind
    page: bool = False
    """Whether this step is pager news (it changes what the PagerDuty alert says)."""
    muted: str | None = None
    """Why this step notifies nobody (an inhibition rule): recorded, shown nowhere new."""
    classification: Classification | None = None
    """A health report's own classification (an incident is classified by its most severe report)."""
    note: ResumeNote | None = None
    """A training auto-resume notice that the workflow held back from some receivers: what they are told once
    nothing holds it back."""


@dataclass(frozen=True, slots=True)
class ResumeNote(Value):
    """A training auto-resume notice held back from some of its incident's receivers (a silence, a maintenance window,
    an inhibition, or the same on the fleet incident that tells the incident's notices): kept with the incident's
    facts, bounded, so that the router tells it at the next event or the sweep once nothing holds it back."""

    title: str
    text: str
    """The notice's body, clipped to MAX_NOTE_TEXT characters (with a mark where it was cut)."""
    summary: str
    """Its one-line summary for PagerDuty: the notice, the fault and the host."""
    severity: Severity
    pagerduty: str | None = None
    """`trigger` (a page), `change` (a change event, which never pages) or None (Slack only)."""
    dedup_key: str | None = None
    """A page's dedup key when it goes to the incident's own alert (a fleet's goes to the fleet's)."""
    job_id: str | None = None
    approval_id: str | None = None
    """An approval request's opaque id, for its Approve and Reject buttons (never the task token)."""
    held: tuple[str, ...] = ()
    """The receivers it was held back from: the workflow told the others."""


MAX_NOTE_TEXT = 1500
"""Characters of a held-back notice's body kept with the incident's facts."""


@dataclass(frozen=True, slots=True)
class FleetPlace:
    """Where an instance's incident tells its training auto-resume notices when it belongs to a fleet incident (it
    joined it, or counts in the open one): the fleet incident, and its receivers' threads and mutes."""

    incident: str
    """The fleet incident's id."""
    dedup_key: str
    """Its PagerDuty alert's dedup key: a page about one of its members joins it."""
    receivers: tuple[str, ...]
    threads: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Receiver -> the channel and ts of the fleet incident's root it posted (its thread)."""
    muted: dict[str, str] = field(default_factory=dict)
    """Receiver -> why it hears nothing new of the fleet incident now (a silence, a maintenance window)."""
    is_open: bool = True
    """A closed fleet incident's alert is resolved: a page about one of its members goes to the job's own alert."""


@dataclass(frozen=True, slots=True)
class FleetMember(Value):
    """One instance's fault in a fleet incident: its latest incident of the group's check."""

    instance: InstanceRef
    incident: str
    opened_at: datetime
    closed_at: datetime | None
    severity: Severity
    fault_class: FaultClass
    title: str
    xid: int | None
    phase: str
    version: int
    """The instance record's version this was derived from: an older one never overwrites a newer one."""
    fleet: str | None = None
    """The fleet incident this member's incident counts in (founding, or joined while it was open), if any."""
    told: str | None = None
    """What the fleet incident's thread was last told of this member: JOINED, LEFT, or FOUNDING (listed when the
    fleet opened); None when nothing (a member outside any fleet)."""

    @property
    def is_open(self) -> bool:
        return self.closed_at is None


@dataclass(frozen=True, slots=True)
class FleetSummary:
    """What makes an incident a fleet incident: its group, how many members it has, and the open members it lists.

    A fleet incident can have thousands of members: it carries their counts and a bounded list of open members
    (the root and the page list those; the thread names every member as it joins and leaves), never all of them."""

    group: tuple[tuple[str, str], ...]
    """The grouping labels and their values, e.g. (("cluster", "gpu"), ("capacity_provider", "p5"), ...)."""
    threshold: int
    window_minutes: int
    total: int
    """Members it ever had: the founding members and every member that joined while it was open."""
    open: int
    """Members still impaired."""
    listed: tuple[FleetMember, ...] = ()
    """Open members, oldest first, at most fault_responder.noise.fleet.LISTED_MEMBERS of them."""
    first_seen: datetime | None = None
    last_change: datetime | None = None
    as_of: datetime | None = None
    """When it was derived: member updates wait a little to go out together (see delivery.fleet_batch)."""
    thread_from: int = 0
    """Its thread names the journal entries numbered after this (fault_responder.noise.fleet)."""
    fault: str = ""
    """What its members have (their common title, or "<check> faults")."""

    @property
    def not_listed(self) -> int:
        """Open members the list leaves out (the thread names each one as it joins)."""
        return max(0, self.open - len(self.listed))


@dataclass(frozen=True, slots=True)
class PersonAction:
    """Who did something to an incident, when, and where (slack or pagerduty)."""

    by: str
    """Untrusted text (a Slack display name, a PagerDuty user's name): escaped by the renderers."""
    at: datetime
    via: str
    note: str | None = None


@dataclass(slots=True)
class SlackThread:
    receiver: str
    channel: str
    ts: str


@dataclass(slots=True)
class Incident:
    """One fault episode on one container instance for one health check type, derived from its facts."""

    id: str
    """Stable for the incident's life: `fingerprint@anchor`."""
    fingerprint: str
    """cluster/container-instance/check-type: the PagerDuty dedup_key of every episode of this check."""
    instance: InstanceRef
    check_type: str
    status: str
    """OPEN or CLOSED."""
    classification: Classification
    opened_at: datetime
    phase: str
    """The headline state: the check's status (IMPAIRED, INSUFFICIENT_DATA, ...), DRAINING, DEREGISTERING, or
    RESOLVED."""
    last_status_change: datetime | None = None
    closed_at: datetime | None = None
    close_reason: str | None = None
    drain: DrainAttribution | None = None
    receivers: list[str] = field(default_factory=list)
    route: str | None = None
    slack_threads: list[SlackThread] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    opened_count: int = 1
    """This is the n-th episode of its check on this instance that the record still holds."""
    runbook: Runbook | None = None
    """What to do: the default for its classification, or its route's override."""
    relapses: int = 0
    """Times the check went OK and relapsed within the hold-down: more than zero is a flapping incident."""
    resolves_at: datetime | None = None
    """The check is OK again: the incident resolves at this time unless it relapses first (the hold-down)."""
    merged_into: str | None = None
    """Closed because a relapse learned late made it part of that (earlier) incident."""
    fleet_id: str | None = None
    """The fleet incident it belongs to: on-call hears of it there."""
    reading: ContributorReading | None = None
    """An alarm contributor's incident: its cluster, value and threshold (None for anything else)."""
    known_at: datetime | None = field(default=None, compare=False)
    """When the responder first made it known (None: before that was kept); later than `opened_at` for a fault
    reported late."""
    found: str | None = None
    """How it was found when no event announced it ("found by the sweep: the event was missed"), else None."""
    fleet: FleetSummary | None = None
    """Set on a fleet incident (many instances of one group at once); its `instance` names only the group's
    cluster and capacity provider."""
    muted: dict[str, str] = field(default_factory=dict)
    """Receiver -> why it hears nothing new of this incident now (a silence, a maintenance window, an
    inhibition, the fleet incident, the resume workflow handling it). Updates in place and resolves still go."""
    held: dict[str, str] = field(default_factory=dict)
    """Receiver -> why a training auto-resume notice about it is held back now: its silences, maintenance windows
    and inhibitions (a fleet incident it belongs to tells its notices instead; the workflow's own quiet never holds
    back its notices)."""
    fleet_place: FleetPlace | None = None
    """Set where its training auto-resume notices are told (the workflow, and the router for those it held back):
    the fleet incident it belongs to, whose thread tells them."""
    acknowledged: PersonAction | None = None
    """Who said "on it" (Slack's Acknowledge, or PagerDuty's), unless it was taken back since."""
    acknowledge_key: str | None = None
    """The action that acknowledged it: PagerDuty is told of a Slack acknowledgement once per action."""
    assigned: PersonAction | None = None
    """PagerDuty's last reassignment (`note` names the assignees)."""
    resolved_by: PersonAction | None = None
    """Closed by a person (Slack's Resolve, or PagerDuty's) while the fault was still open."""
    started_by: str | None = None
    """A drill's author, as its event named them (untrusted text, escaped by the renderers); None when the event
    named nobody, and for every real fault. A drill starts when it reports its fault: `opened_at`."""
    where: Where | None = None
    """In organization mode, the account (its id and name) and Region it is in, which its pages name beside the
    cluster; None in a single-account stack."""

    @property
    def flapping(self) -> bool:
        return self.relapses > 0

    @property
    def kind(self) -> EventKind:
        """The `kind` label: an alarm's incident is `alarm`, a health fault's `health_impaired`."""
        return EventKind.ALARM if self.instance.is_alarm else EventKind.HEALTH_IMPAIRED

    @property
    def is_open(self) -> bool:
        return self.status == "OPEN"

    @property
    def dedup_key(self) -> str:
        return self.fingerprint


@dataclass(frozen=True, slots=True)
class Alert:
    """A notice that belongs to no incident: a drain or a stopped task with no fault to explain it."""

    key: str
    """Stable across derivations, e.g. `drain:<event id>`."""
    event_id: str
    kind: EventKind
    instance: InstanceRef
    severity: Severity
    title: str
    text: str
    at: datetime
    fault_class: FaultClass
    drain: DrainAttribution | None = None
    details: dict[str, str] = field(default_factory=dict)
    receivers: tuple[str, ...] = ()
    runbook: Runbook | None = None
    """What to do: the default for its fault class, or its route's override."""
    superseded_by: str | None = None
    """An incident learned later explains it (a DRAINING that arrived before its fault): the message already
    sent is corrected in place to point at the incident, and nothing new is sent for it."""
    muted: dict[str, str] = field(default_factory=dict)
    """Receiver -> why it is not told of this notice now."""
    where: Where | None = None
    """In organization mode, the account and Region it is in (as an incident's `where`)."""
