"""Training auto-resume: warm spares, the idle hosts a relaunch takes at once (docs/auto-resume.md#warm-spares).

A spare is a container instance of the job's capacity provider that carries the ECS attribute the stack names
(SpareAttribute, `fault-responder.spare` by default): ACTIVE, its agent connected, no task running or pending, not a
host to avoid, and not claimed by another relaunch. A relaunch claims one spare per task of the job, all or none, by
one conditional write (so two relaunches never take the same spare, and two gangs never hold half a pool each), and
pins each task to its spare by a placement constraint. Once a job runs on them the spares are busy hosts; the
workflow asks the provider's Auto Scaling group for as many instances again, and pages when it cannot. That refill
goes through a record of the attempt's (RefillRecord): its intent, with the desired capacity it computed, is written
before the Auto Scaling call and confirmed after it, so a step that stops between the two leaves the refill to its
retry, which sets that same capacity (refill_to_complete) rather than adding the spares again.

Refills of one group are made one at a time, under the group's lease (RefillLease): Auto Scaling has no conditional
SetDesiredCapacity, so two relaunches that both read the group's size and set it plus their spares would grow it by
one refill instead of two. The holder reads the size, records its intent in the lease as well, makes the call, and
frees the lease as it confirms; the others wait, then read the size it left. A lease whose holder died passes after
REFILL_LEASE, and whoever takes it next first completes the refill the dead holder left pending.

Without a free spare a relaunch is placed as before, kept off the spares other relaunches hold. Managed Instances
accepts no ec2InstanceId in a placement constraint, so its providers have no spares. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from fault_responder.resume.config import _Payload
from fault_responder.resume.fault import ProviderInfo

MAX_SPARES_PER_JOB = 99
"""A claim is one DynamoDB transaction (at most 100 items): a gang of more tasks is placed as before."""
REFILL_LEASE = timedelta(seconds=30)
"""How long a refill holds its group's lease (renewed before its Auto Scaling call): far more than a read, a write
and a call take, so only a holder that died lets it pass."""
REFILL_LEASE_WAIT = timedelta(seconds=45)
"""How long a refill waits for its group's lease before it is reported failed (paged): longer than REFILL_LEASE, so a
dead holder's lease passes within the wait."""


class ScalingError(Exception):
    """An Auto Scaling group could not be read or grown (the message says why)."""


class SpareHost(_Payload):
    """A container instance that carries the spare attribute, as ECS describes it now."""

    container_instance_arn: str
    ec2_instance_id: str
    capacity_provider: str | None = None
    status: str = "ACTIVE"
    agent_connected: bool = True
    running_tasks: int = 0
    pending_tasks: int = 0

    @property
    def idle(self) -> bool:
        return self.status == "ACTIVE" and self.agent_connected and self.running_tasks == 0 and self.pending_tasks == 0


class SpareState(StrEnum):
    USED = "used"
    """Every task of the job was pinned to a spare it claimed."""
    NONE_FREE = "none_free"
    """Spares exist, and too few are free for the job."""
    NONE_DECLARED = "none_declared"
    """No host of the provider carries the attribute."""
    NOT_SUPPORTED = "not_supported"
    """Managed Instances, several providers, a launch type, or a gang larger than a claim."""
    OFF = "off"
    """The stack declares no spare attribute."""


class RefillState(StrEnum):
    ASKED = "asked"
    FAILED = "failed"
    """The provider cannot be grown (no Auto Scaling group, at its maximum, or the call failed): paged."""
    ASKED_BEFORE = "asked_before"
    """A retried step: the first try asked already."""


class Refill(_Payload):
    state: RefillState
    group: str | None = None
    desired_before: int | None = None
    desired_after: int | None = None
    max_size: int | None = None
    detail: str | None = None

    @property
    def grows(self) -> bool:
        """Whether the group is to be set to a larger desired capacity (a partial refill, up to its maximum, too)."""
        return self.desired_after is not None and self.desired_after > (self.desired_before or 0)


class RefillRecord(_Payload):
    """An attempt's refill as the resume store keeps it (its outbox, one per attempt): the refill worked out, with
    the desired capacity to set, written before the Auto Scaling call; `confirmed` once Auto Scaling answered it, or
    when no call was to be made."""

    refill: Refill | None = None
    """None: a marker written before refills were recorded, which says only that the refill was asked."""
    confirmed: bool = True


class RefillLease(_Payload):
    """Who refills an Auto Scaling group now (read its desired capacity, set it), and the refill made under the lease
    and not confirmed yet (`pending`, the attempt's record key `pending_key`): one per group in the resume store,
    every write of it conditional on the `revision` read (0: never written)."""

    group: str
    holder: str | None = None
    """The relaunch holding it (spare_owner: job and attempt); None: free."""
    held_until: datetime | None = None
    pending_key: str | None = None
    pending: Refill | None = None
    revision: int = 0

    def free_for(self, owner: str, now: datetime) -> bool:
        """Whether `owner` may take it now: free, held by `owner` already (a retried step), or its hold has passed
        (its holder died)."""
        return self.holder is None or self.holder == owner or self.held_until is None or self.held_until <= now

    def left_by_another(self, key: str) -> bool:
        """Whether it holds a refill another attempt (not the one recorded under `key`) made and did not confirm:
        that attempt's step died, and the next holder completes its refill first."""
        return self.pending is not None and self.pending_key is not None and self.pending_key != key


class RefillLeaseBusy(Exception):
    """Another relaunch held the group's refill lease for all of REFILL_LEASE_WAIT."""


class RefillLeaseLost(Exception):
    """The group's refill lease was taken from its holder (it held it past REFILL_LEASE): the step stops before any
    Auto Scaling call, and its retry goes on from its record."""


def refill_to_complete(intent: Refill, desired_now: int) -> int | None:
    """The desired capacity a refill recorded but never confirmed still has to set: the one it computed, never the
    group's size now plus the spares again (the call may have reached Auto Scaling before the step stopped, and a
    second one would add the spares twice). None when the group is at that capacity or above it already."""
    if intent.desired_after is None or desired_now >= intent.desired_after:
        return None
    return intent.desired_after


class SpareUse(_Payload):
    """What a relaunch did with the spares of its provider."""

    state: SpareState
    hosts: tuple[str, ...] = ()
    """The EC2 instance ids claimed, one per task in the job's task order."""
    declared: int = 0
    """Hosts of the provider carrying the attribute, busy or free."""
    free: int = 0
    """Of those, free when the relaunch looked (before its own claim)."""
    needed: int = 0
    """One per task of the job."""
    detail: str | None = None
    refill: Refill | None = None

    @property
    def used(self) -> bool:
        return self.state is SpareState.USED


def unsupported_reason(
    providers: Mapping[str, ProviderInfo], provider_names: Sequence[str | None], tasks: int
) -> str | None:
    """Why a job cannot be moved onto spares (None: it can): spares are claimed per provider and pinned by instance."""
    names = set(provider_names)
    if None in names:
        return "its tasks run by launch type, not on a capacity provider"
    if len(names) != 1:
        return "its tasks run on several capacity providers"
    provider = providers.get(str(next(iter(names))))
    if provider is None or not provider.supports_instance_exclusion:
        return "Managed Instances cannot pin a task to a host"
    if tasks > MAX_SPARES_PER_JOB:
        return f"a gang of {tasks} tasks is more than one claim holds ({MAX_SPARES_PER_JOB})"
    return None


def free_spares(
    hosts: Iterable[SpareHost], provider: str, avoid: Container[str], held: Collection[str]
) -> list[SpareHost]:
    """The spares a relaunch may claim: the provider's idle hosts, not to avoid, not held by another relaunch.
    In EC2 instance id order (spread turns it per relaunch)."""
    return sorted(
        (
            host
            for host in hosts
            if host.capacity_provider == provider
            and host.idle
            and host.ec2_instance_id not in avoid
            and host.ec2_instance_id not in held
        ),
        key=lambda host: host.ec2_instance_id,
    )


def spread(free: Sequence[SpareHost], owner: str) -> list[str]:
    """The free spares' ids in the order `owner` reaches for them: the id order, turned by a digest of the owner, so
    relaunches racing for a large pool mostly reach for different spares (and a retried step for the same ones)."""
    ids = [host.ec2_instance_id for host in free]
    if not ids:
        return []
    turn = int(hashlib.sha256(owner.encode()).hexdigest()[:8], 16) % len(ids)
    return ids[turn:] + ids[:turn]


def spare_constraint(ec2_instance_id: str) -> dict[str, str]:
    """Pins one task to its claimed spare."""
    return {"type": "memberOf", "expression": f"ec2InstanceId in ['{ec2_instance_id}']"}


def spare_owner(job_key: str, attempt: int) -> str:
    """Who holds a spare claim: one attempt of one job (a retried step finds its own claims again)."""
    return f"{job_key}#attempt-{attempt}"


def refill(group: str | None, desired: int | None, max_size: int | None, taken: int) -> Refill:
    """How much to ask the provider's Auto Scaling group for: as many instances as the spares taken, within its
    maximum; FAILED (paged) when it has none or is full."""
    if group is None or desired is None or max_size is None:
        return Refill(state=RefillState.FAILED, group=group, detail="the capacity provider has no Auto Scaling group")
    wanted = desired + taken
    if desired >= max_size:
        return Refill(
            state=RefillState.FAILED,
            group=group,
            desired_before=desired,
            max_size=max_size,
            detail=f"{group} is at its maximum size ({max_size}): {taken} spare(s) not replaced",
        )
    after = min(wanted, max_size)
    short = wanted - after
    return Refill(
        state=RefillState.ASKED if short == 0 else RefillState.FAILED,
        group=group,
        desired_before=desired,
        desired_after=after,
        max_size=max_size,
        detail=f"{group} reaches its maximum size ({max_size}): {short} spare(s) not replaced" if short else None,
    )


def describe_use(use: SpareUse) -> str:
    """One sentence for the thread: whether the job went to spares, and the pool's refill."""
    if use.state is SpareState.USED:
        hosts = ", ".join(use.hosts[:5]) + (f" and {len(use.hosts) - 5} more" if len(use.hosts) > 5 else "")
        text = f"Spare: placed on warm spare {hosts} ({use.free} of {use.declared} free), no wait for a new instance."
        return text + _refill_text(use.refill)
    if use.state is SpareState.NONE_FREE:
        return (
            f"Spare: none used ({use.free} of {use.declared} free, {use.needed} needed): "
            "placed on the provider's other capacity, or waits for a new instance."
        )
    if use.state is SpareState.NOT_SUPPORTED:
        return f"Spare: none used: {use.detail}."
    return ""


def _refill_text(refill_: Refill | None) -> str:
    if refill_ is None:
        return ""
    if refill_.state is RefillState.ASKED:
        note = f" ({refill_.detail})" if refill_.detail else ""
        return (
            f" Pool refill: {refill_.group} asked for {refill_.desired_before} → {refill_.desired_after} instances"
            f"{note}."
        )
    if refill_.state is RefillState.ASKED_BEFORE:
        return " Pool refill: asked by an earlier try of this step."
    return f" Pool refill FAILED: {refill_.detail}."
