"""Training auto-resume: which fault counts, its claim, the guards (ECS auto-repair, mass faults) and the
quarantine of the faulty host."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field

from fault_responder.core.domain import InstanceRef, Severity
from fault_responder.core.places import Place
from fault_responder.core.timefmt import iso_utc
from fault_responder.resume.config import ResumeConfig, _Payload

if TYPE_CHECKING:
    from fault_responder.events.ecs import HealthChangeEvent, InstanceStateEvent

MANAGED_INSTANCES = "MANAGED_INSTANCES"
AUTO_REPAIR_ENABLED = "ENABLED"
DRAINING = "DRAINING"
PLANNED_DRAIN = "planned_drain"
"""The fault class of a drain nobody's fault explains (a person, a schedule, maintenance): a move with warning."""
PLANNED_MOVE = "planned_move"
"""The fault class of an operator's move of one job off one host (`fault-responder move`)."""
MOVE = "MOVE"
MOVE_SOURCE = "fault-responder.move"
MOVE_DETAIL_TYPE = "Training Job Move Requested"
PLANNED = frozenset({PLANNED_DRAIN, PLANNED_MOVE})
OWN_DRAIN_WINDOW = timedelta(hours=24)
"""A drain within a day of this stack's own quarantine of the instance is that quarantine's (it never re-activates
an instance), and a drain already claimed within a day is the same drain: ECS announces one with many events."""


class NotResumableError(Exception):
    """The event is not a fault this workflow acts on (the trigger rule is coarse; this is the precise check)."""


class Fault(_Payload):
    event_id: str
    region: str
    account: str
    cluster_arn: str
    container_instance_arn: str
    ec2_instance_id: str | None
    capacity_provider: str
    check_type: str
    status_reason: str | None
    xid: int | None
    title: str
    """e.g. "XID 79: GPU has fallen off the bus"."""
    fault_class: str
    severity: Severity
    impaired_at: datetime
    """The health check's lastStatusChange: with the fingerprint, it names this fault and not a later one."""
    fingerprint: str
    """The incident fingerprint (cluster/container-instance/check-type): the alert pipeline's incident."""
    job_id: str | None = None
    """An operator's move: the one job it moves (the others on the host stay)."""

    @property
    def cluster_name(self) -> str:
        return self.cluster_arn.rsplit("/", 1)[-1]

    @property
    def place(self) -> Place | None:
        """Where it happened, the account and Region the workflow acts in; None when they are not well formed."""
        try:
            return Place.of(self.account, self.region)
        except ValueError:
            return None

    @property
    def key(self) -> str:
        return f"{self.fingerprint}#{iso_utc(self.impaired_at)}"

    @property
    def label(self) -> str:
        """What the fault is called in texts and stop reasons: "XID 79", or the check type."""
        return f"XID {self.xid}" if self.xid is not None else self.check_type

    @property
    def planned(self) -> bool:
        """A move with warning (a drain, an operator's move), not a fault: the job still runs, and no incident of
        ours tells its story."""
        return self.fault_class in PLANNED

    @property
    def host(self) -> str:
        return self.ec2_instance_id or self.container_instance_arn.rsplit("/", 1)[-1]

    def instance_ref(self) -> InstanceRef:
        return InstanceRef(
            region=self.region,
            account=self.account,
            cluster_arn=self.cluster_arn,
            container_instance_arn=self.container_instance_arn,
            ec2_instance_id=self.ec2_instance_id,
            capacity_provider=self.capacity_provider,
        )


def fault_from_event(event: HealthChangeEvent, check_types: Collection[str]) -> Fault:
    """The fault an IMPAIRED health event reports, or NotResumableError saying why it is not one.

    EventBridge matches `type` and `status` of `healthChecks` independently across the array's elements, so the
    rule can fire for a DAEMON check that is IMPAIRED next to an ACCELERATED_COMPUTE check that is OK: here both
    must hold on the same element.
    """
    # Imported here: only ClaimFault reads an event; the other task functions' cold starts need not pay for the
    # event models, the classification and the incident lifecycle.
    from fault_responder.incidents.classify import classify_health_check  # noqa: PLC0415
    from fault_responder.incidents.lifecycle import fingerprint, health_instance  # noqa: PLC0415

    detail = event.detail
    if event.is_drill:
        # ResumeTrainingRule matches aws.ecs only; this holds even if a drill is sent to the workflow by hand.
        raise NotResumableError("a drill (source fault-responder.drill): no host is quarantined, no job stopped")
    # (An overall status that could not be read is absent: the check's own status below decides.)
    if detail.overall_status not in ("IMPAIRED", None):
        raise NotResumableError(f"overall status is {detail.overall_status}, not IMPAIRED")
    if not detail.capacity_provider_name:
        raise NotResumableError("the instance belongs to no capacity provider")
    check = next((c for c in detail.health_checks if c.type in check_types and c.status == "IMPAIRED"), None)
    if check is None:
        raise NotResumableError(f"no health check of type {', '.join(sorted(check_types))} is IMPAIRED")
    instance = health_instance(event)
    classification = classify_health_check(check)
    return Fault(
        event_id=event.id,
        region=event.region,
        account=event.account,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=detail.capacity_provider_name,
        check_type=check.type,
        status_reason=check.status_reason,
        xid=classification.xid,
        title=classification.title,
        fault_class=classification.fault_class.value,
        severity=classification.severity,
        impaired_at=check.last_status_change or event.time,
        fingerprint=fingerprint(instance, check.type),
    )


def drain_from_event(event: InstanceStateEvent, capacity_provider: str | None) -> Fault:
    """The planned move a DRAINING state change announces, or NotResumableError saying why it is none.
    `capacity_provider`: the instance's, when the event does not name it (ECS does not document that it does)."""

    detail = event.detail
    if event.is_drill:
        raise NotResumableError("a drill (source fault-responder.drill): no job is moved")
    if detail.status != DRAINING:
        raise NotResumableError(f"the instance is {detail.status}, not DRAINING")
    provider = detail.capacity_provider_name or capacity_provider
    if not provider:
        raise NotResumableError("the instance belongs to no capacity provider")
    instance = InstanceRef(
        region=event.region,
        account=event.account,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=provider,
    )
    reason = (detail.drain_reason or detail.status_reason or "").strip()[:200] or None
    title = f"DRAINING ({reason})" if reason else "DRAINING (manual or scheduled)"
    at = detail.updated_at or event.time
    return _planned_move(instance, event.id, PLANNED_DRAIN, DRAINING, title=title, reason=reason, at=at)


def _planned_move(
    instance: InstanceRef,
    event_id: str,
    fault_class: str,
    check_type: str,
    *,
    title: str,
    reason: str | None,
    at: datetime,
    job_id: str | None = None,
) -> Fault:
    """A planned move (a drain, an operator's move) as the workflow's fault: informational, no XID."""
    from fault_responder.incidents.lifecycle import fingerprint  # noqa: PLC0415  # as in fault_from_event

    return Fault(
        event_id=event_id,
        region=instance.region,
        account=instance.account,
        cluster_arn=instance.cluster_arn,
        container_instance_arn=instance.container_instance_arn,
        ec2_instance_id=instance.ec2_instance_id,
        capacity_provider=instance.capacity_provider or "",
        check_type=check_type,
        status_reason=reason,
        xid=None,
        title=title,
        fault_class=fault_class,
        severity=Severity.INFO,
        impaired_at=at,
        fingerprint=fingerprint(instance, f"{check_type}/{job_id}" if job_id else check_type),
        job_id=job_id,
    )


class MoveRequest(_Payload):
    """What `fault-responder move` puts in the event that starts the workflow: move `job_id` off one host."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    cluster_arn: str = Field(max_length=400, pattern=r"^arn:[a-z-]+:ecs:[a-z0-9-]+:\d{12}:cluster/[A-Za-z0-9_-]+$")
    container_instance_arn: str = Field(
        max_length=800, pattern=r"^arn:[a-z-]+:ecs:[a-z0-9-]+:\d{12}:container-instance/[A-Za-z0-9_/-]+$"
    )
    ec2_instance_id: str | None = Field(default=None, pattern=r"^i-[0-9a-f]{8,17}$")
    capacity_provider: str = Field(min_length=1, max_length=255)
    job_id: str = Field(min_length=1, max_length=255)
    reason: str = Field(default="", max_length=256)
    requested_by: str = Field(default="", max_length=256)


def move_event(request: MoveRequest, *, event_id: str, region: str, account: str, at: datetime) -> dict[str, Any]:
    """The event an operator's move starts the workflow with (EventBridge's envelope, our source)."""
    return {
        "version": "0",
        "id": event_id,
        "detail-type": MOVE_DETAIL_TYPE,
        "source": MOVE_SOURCE,
        "account": account,
        "time": iso_utc(at),
        "region": region,
        "resources": [request.container_instance_arn],
        "detail": request.model_dump(mode="json"),
    }


def move_from_event(raw: dict[str, Any]) -> Fault:
    """The planned move an operator asked for, or NotResumableError saying why the event is not one."""
    from pydantic import ValidationError  # noqa: PLC0415  # as the other parsers: only ClaimFault reads events

    if raw.get("source") != MOVE_SOURCE or raw.get("detail-type") != MOVE_DETAIL_TYPE:
        raise NotResumableError("not an operator's move")
    try:
        request = MoveRequest.model_validate(raw.get("detail"))
        at = datetime.fromisoformat(str(raw.get("time")))
    except (ValidationError, ValueError) as error:
        raise NotResumableError(f"a move request that cannot be read: {str(error).splitlines()[0]}") from None
    if at.tzinfo is None:
        raise NotResumableError("a move request whose time has no UTC offset")
    instance = InstanceRef(
        region=str(raw.get("region", "")),
        account=str(raw.get("account", "")),
        cluster_arn=request.cluster_arn,
        container_instance_arn=request.container_instance_arn,
        ec2_instance_id=request.ec2_instance_id,
        capacity_provider=request.capacity_provider,
    )
    who = f" by {request.requested_by}" if request.requested_by else ""
    why = f": {request.reason}" if request.reason else ""
    title = f"Moving {request.job_id}, asked{who}{why}"[:300]
    event_id, reason = str(raw.get("id", "")), request.reason or None
    return _planned_move(
        instance, event_id, PLANNED_MOVE, MOVE, title=title, reason=reason, at=at, job_id=request.job_id
    )


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"
    DUPLICATE = "duplicate"
    NOT_APPLICABLE = "not_applicable"


class Claim(_Payload):
    status: ClaimStatus
    reason: str
    fault: Fault | None = None
    config: ResumeConfig


class GuardVerdict(StrEnum):
    PROCEED = "proceed"
    ECS_OWNS_RECOVERY = "ecs_owns_recovery"
    MASS_FAULT = "mass_fault"


class ProviderInfo(_Payload):
    name: str
    type: str | None
    """EC2_AUTOSCALING, MANAGED_INSTANCES, ... (None when ECS did not say)."""
    auto_repair: str | None
    """managedInstancesProvider.autoRepairConfiguration.actionsStatus; None for providers without auto-repair."""
    auto_scaling_group: str | None = None
    """The name of an EC2 provider's Auto Scaling group (autoScalingGroupProvider): where spares are refilled."""

    @property
    def ecs_owns_recovery(self) -> bool:
        """ECS auto-repair drains and replaces IMPAIRED instances of this provider itself."""
        return (self.auto_repair or "").upper() == AUTO_REPAIR_ENABLED

    @property
    def supports_instance_exclusion(self) -> bool:
        """Managed Instances accepts no ec2InstanceId in placement constraints.

        See docs/ecs-events.md#placement-on-managed-instances.
        """
        return self.type != MANAGED_INSTANCES


class Guards(_Payload):
    verdict: GuardVerdict
    provider: ProviderInfo
    impaired: int
    """Distinct instances of the provider with a claimed fault within the window, this one included."""
    instances: int
    allowed: int
    rank: int | None = None
    """This fault's place among them in the order they were claimed (1: claimed first); None: not counted."""


def mass_fault_allowance(instances: int, threshold_percent: int) -> int:
    """How many instances of a provider may be faulty at once before it counts as a mass event.

    The share, rounded down, but never less than one: like ECS's own repair limit (at most 20% at a time,
    one at a time below 9 instances), a small provider may still have one fault handled.
    """
    return max(1, instances * threshold_percent // 100)


def judge_guards(
    provider: ProviderInfo, impaired: int, instances: int, config: ResumeConfig, rank: int | None = None
) -> Guards:
    """Proceed while this fault is among the first `allowed` of the window in claim order (`rank`; without it,
    while the count is within the allowance). Executions that check at the same moment then agree whatever their
    timing: the faults claimed first are handled, the others stop, and never all of them."""
    allowed = mass_fault_allowance(instances, config.mass_fault_threshold_percent)
    if provider.ecs_owns_recovery:
        verdict = GuardVerdict.ECS_OWNS_RECOVERY
    elif (rank if rank is not None else impaired) > allowed:
        verdict = GuardVerdict.MASS_FAULT
    else:
        verdict = GuardVerdict.PROCEED
    return Guards(
        verdict=verdict, provider=provider, impaired=impaired, instances=instances, allowed=allowed, rank=rank
    )


def claim_rank(fault: Fault, claims: Sequence[ClaimedFault]) -> int:
    """This fault's place in claim order among the instances with a claimed fault: 1 + the other instances with
    a claim before this fault's own (a claim without its time, written by an older version, counts as before)."""
    mine = next((c for c in claims if c.fault_key == fault.key and c.claimed_at is not None), None)

    def before(claim: ClaimedFault) -> bool:
        if mine is None or mine.claimed_at is None or claim.claimed_at is None:
            return True
        return (claim.claimed_at, claim.container_instance_arn) < (mine.claimed_at, mine.container_instance_arn)

    ahead = {
        c.container_instance_arn
        for c in claims
        if c.container_instance_arn != fault.container_instance_arn and before(c)
    }
    return len(ahead) + 1


def quarantine_reason(fault: Fault) -> str:
    """Recorded on the instance state; the alert pipeline quotes it when it attributes the drain."""
    return f"{fault.label} on {fault.host}; resuming its training jobs"


class Quarantine(_Payload):
    quarantined: bool
    status: str | None = None
    """The container instance status after the drain (DRAINING), or MISSING when it already left."""


@dataclass(frozen=True, slots=True)
class ClaimedFault:
    """A fault of a provider that an execution claimed (and the mass-fault guard counts)."""

    container_instance_arn: str
    impaired_at: datetime
    host: str | None
    """The faulty host's EC2 instance id (Fault.host); None on a claim recorded before hosts were stored."""
    fault_key: str | None = None
    claimed_at: datetime | None = None
    """When the claim was written (wall clock, microseconds): the order the mass-fault guard ranks by."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    claimed: bool
    execution: str
    """The execution that holds the claim (this one, or the one that got there first)."""
