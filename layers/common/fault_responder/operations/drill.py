"""Drills (docs/drills.md): what a drill sends, how far it got, and what it prints. Pure: no boto3, no clock.

The synthetic drill puts an ECS Container Instance Health Change with the source `fault-responder.drill` on the
default bus, follows it through the incidents table hop by hop (event put → incident recorded → Slack root posted
→ PagerDuty triggered → resolved), then sends the OK that resolves it. The DCGM drill injects a real XID on a
test cluster and times ECS's own reaction against the reference timings AWS published.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.domain import DRILL_MARK, DRILL_SOURCE, InstanceRef
from fault_responder.core.timefmt import iso_utc
from fault_responder.incidents.lifecycle import fingerprint
from fault_responder.incidents.record import InstanceRecord

HEALTH_CHANGE = "ECS Container Instance Health Change"
CHECK_TYPE = "ACCELERATED_COMPUTE"
DEFAULT_XID = 79
DEFAULT_CLUSTER = "fault-responder-drill"
DRILL_TARGET_TAG = "fault-responder:drill-target"
"""The tag (value `true`) a cluster must carry for the DCGM drill to inject a fault on its instances."""


class Hop(StrEnum):
    """The hops of a synthetic drill, in order; each names what the table shows when it is done."""

    EVENT = "event"
    INCIDENT = "incident"
    SLACK = "slack"
    PAGERDUTY = "pagerduty"
    RESOLVE = "resolve"


HOP_TEXT = {
    Hop.EVENT: "event put on the default bus",
    Hop.INCIDENT: "incident recorded",
    Hop.SLACK: "Slack root posted",
    Hop.PAGERDUTY: "PagerDuty triggered",
    Hop.RESOLVE: "resolved",
}


# --- What the drill sends ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DrillTarget:
    """Where the synthetic fault is said to be: a cluster and a container instance, by name or id."""

    region: str
    account: str
    cluster: str
    instance: str
    xid: int = DEFAULT_XID
    capacity_provider: str | None = None
    ec2_instance_id: str | None = None
    author: str | None = None
    """Who runs the drill: every message about it says so (the event's `detail.drill.startedBy`)."""
    home: tuple[str, str] | None = None
    """The stack's own account and Region, when the drill is of another account (`--account`): its incident's key
    names that account and Region, as the router's does (fault_responder.core.accounts)."""

    @property
    def cluster_arn(self) -> str:
        return f"arn:aws:ecs:{self.region}:{self.account}:cluster/{self.cluster}"

    @property
    def container_instance_arn(self) -> str:
        return f"arn:aws:ecs:{self.region}:{self.account}:container-instance/{self.cluster}/{self.instance}"

    @property
    def record_arn(self) -> str:
        """Where the router keeps the drill's facts (never the real instance's record)."""
        return self.container_instance_arn + DRILL_MARK

    def instance_ref(self) -> InstanceRef:
        return InstanceRef(
            region=self.region,
            account=self.account,
            cluster_arn=self.cluster_arn,
            container_instance_arn=self.record_arn,
            ec2_instance_id=self.ec2_instance_id,
            capacity_provider=self.capacity_provider,
            drill=True,
        )

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.instance_ref(), CHECK_TYPE, Accounts(home=self.home) if self.home else SINGLE_ACCOUNT)

    def incident_id(self, impaired_at: datetime) -> str:
        """The id the router gives the incident this drill opens (lifecycle: fingerprint@anchor)."""
        return f"{self.fingerprint}@{iso_utc(impaired_at)}"


def health_entry(target: DrillTarget, status: str, at: datetime) -> dict[str, Any]:
    """A PutEvents entry: the health change ECS would send for an XID on the target (IMPAIRED), or its recovery
    (OK), with the drill's own source so that nothing can take it for a real fault."""
    reason = f"XID_{target.xid}" if status == "IMPAIRED" else None
    check: dict[str, Any] = {
        "type": CHECK_TYPE,
        "status": status,
        "lastStatusChange": iso_utc(at),
        "lastUpdated": iso_utc(at),
    }
    if reason:
        check["statusReason"] = reason
    detail: dict[str, Any] = {
        "clusterArn": target.cluster_arn,
        "containerInstanceArn": target.container_instance_arn,
        "overallStatus": status,
        "healthChecks": [check],
    }
    if target.capacity_provider:
        detail["capacityProviderName"] = target.capacity_provider
    if target.ec2_instance_id:
        detail["ec2InstanceId"] = target.ec2_instance_id
    if target.author:
        detail["drill"] = {"startedBy": target.author}
    return {
        "Source": DRILL_SOURCE,
        "DetailType": HEALTH_CHANGE,
        "Detail": json.dumps(detail, separators=(",", ":")),
        "Resources": [target.container_instance_arn],
        "Time": at,
        "EventBusName": "default",
    }


# --- How far it got ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Receivers:
    """The routing file's receivers by target: which deliveries are Slack's and which PagerDuty's."""

    slack: frozenset[str]
    pagerduty: frozenset[str]


@dataclass(frozen=True, slots=True)
class Observation:
    """What the incidents table shows of one drill incident, hop by hop (each a reason when not reached)."""

    reached: dict[Hop, bool]
    why_not: dict[Hop, str]
    receivers: tuple[str, ...] = ()


def observe(record: InstanceRecord | None, incident_id: str, pd_subject: str, receivers: Receivers) -> Observation:
    """Which hops the record shows as done for the incident `incident_id` (the event hop is not in the table)."""
    reached: dict[Hop, bool] = {}
    why: dict[Hop, str] = {}
    known = None
    if record is not None:
        known = next((k for k in record.incidents.get(CHECK_TYPE, []) if k.id == incident_id), None)
    reached[Hop.INCIDENT] = known is not None
    if record is None or known is None:
        for hop in (Hop.INCIDENT, Hop.SLACK, Hop.PAGERDUTY, Hop.RESOLVE):
            reached[hop] = False
            why[hop] = "no incident in the incidents table" if hop == Hop.INCIDENT else "no incident"
        return Observation(reached, why)
    routed = tuple(known.receivers)
    slack = [name for name in routed if name in receivers.slack]
    pagerduty = [name for name in routed if name in receivers.pagerduty]
    if not slack:
        reached[Hop.SLACK] = False
        why[Hop.SLACK] = f"routed to no Slack receiver (receivers: {', '.join(routed) or 'none'})"
    else:
        posted = [n for n in slack if record.delivery(n, incident_id).ts or record.delivery(n, incident_id).steps]
        reached[Hop.SLACK] = len(posted) == len(slack)
        if not reached[Hop.SLACK]:
            why[Hop.SLACK] = f"no Slack root for {', '.join(n for n in slack if n not in posted)}"
    if not pagerduty:
        reached[Hop.PAGERDUTY] = False
        why[Hop.PAGERDUTY] = f"routed to no PagerDuty receiver (receivers: {', '.join(routed) or 'none'})"
        paged_and_resolved = False
    else:
        deliveries = [record.delivery(n, pd_subject) for n in pagerduty]
        # A trigger names the incident it paged for; its resolve forgets it (delivery.py). The resolve hop is
        # judged only after this drill's trigger was seen, so a resolve then is this drill's.
        triggered = [d for d in deliveries if d.alert == "trigger" and d.incident == incident_id]
        resolved = [d for d in deliveries if d.alert == "resolve"]
        reached[Hop.PAGERDUTY] = len(triggered) + len(resolved) == len(pagerduty) and bool(triggered or resolved)
        if not reached[Hop.PAGERDUTY]:
            missing = [d.receiver for d in deliveries if d not in triggered and d not in resolved]
            why[Hop.PAGERDUTY] = f"no trigger sent to {', '.join(missing)}"
        paged_and_resolved = len(resolved) == len(pagerduty)
    closed = known.status == "CLOSED"
    reached[Hop.RESOLVE] = closed and (paged_and_resolved or not pagerduty)
    if not closed:
        why[Hop.RESOLVE] = "the incident is still open"
    elif not reached[Hop.RESOLVE]:
        why[Hop.RESOLVE] = "the incident is closed, and PagerDuty was not sent its resolve"
    return Observation(reached, why, routed)


# --- The report ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class HopResult:
    hop: Hop
    ok: bool
    seconds: float | None = None
    """Since the event (the OK, for the resolve) was put; None when not reached."""
    timeout: float | None = None
    detail: str = ""


@dataclass(slots=True)
class DrillReport:
    target: DrillTarget
    incident_id: str
    hops: list[HopResult] = field(default_factory=list)

    @property
    def failed(self) -> list[HopResult]:
        return [result for result in self.hops if not result.ok]

    @property
    def exit_status(self) -> int:
        return 1 if self.failed else 0


def render_report(report: DrillReport) -> str:
    target = report.target
    lines = [
        f"Drill on {target.cluster}/{target.instance} (XID {target.xid}), incident {report.incident_id}",
    ]
    for number, result in enumerate(report.hops, start=1):
        name = f"{number}. {result.hop.value:<9} {HOP_TEXT[result.hop]:<29}"
        since = "since the OK" if result.hop == Hop.RESOLVE else "since the event"
        if result.ok:
            lines.append(f"  {name} ok      {result.seconds:6.1f}s {since}")
        elif result.seconds is None and result.timeout is None:
            lines.append(f"  {name} skipped  ({result.detail})")
        else:
            lines.append(f"  {name} FAILED  after {result.timeout:.0f}s: {result.detail}")
    if report.failed:
        names = ", ".join(result.hop.value for result in report.failed)
        lines.append(f"Drill FAILED at: {names}")
    else:
        lines.append("Drill passed: every hop reached.")
    return "\n".join(lines) + "\n"


def follow(
    hops: Sequence[Hop],
    look: Callable[[], Observation],
    *,
    started: float,
    timeouts: Mapping[Hop, float],
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    poll: float,
) -> list[HopResult]:
    """Poll the table until each hop in turn is reached or its timeout (counted from the previous hop's end)
    passes. Every poll notes when each hop was first seen reached, so a hop waited for after one that timed out
    still reports its own latency: Slack failing says nothing of PagerDuty. The incident hop failing ends it
    (nothing after it can be seen)."""
    results: list[HopResult] = []
    first_seen: dict[Hop, float] = {}
    since = started
    for hop in hops:
        deadline = since + timeouts[hop]
        while True:
            observation = look()
            now = clock()
            for seen in hops:
                if observation.reached.get(seen):
                    first_seen.setdefault(seen, now)
            if hop in first_seen:
                results.append(HopResult(hop, True, first_seen[hop] - started, timeouts[hop]))
                since = max(since, first_seen[hop])
                break
            if now >= deadline:
                results.append(HopResult(hop, False, None, timeouts[hop], observation.why_not.get(hop, "not reached")))
                since = now
                break
            sleep(min(poll, max(deadline - now, 0.0)))
        if hop == Hop.INCIDENT and not results[-1].ok:
            results.extend(HopResult(h, False, detail="no incident") for h in hops[hops.index(hop) + 1 :])
            break
    return results


# --- The DCGM drill's recovery-time report ------------------------------------------------------------


class Milestone(StrEnum):
    IMPAIRED = "impaired"
    PAGED = "paged"
    DRAINING = "draining"
    REPLACEMENT = "replacement"
    TASKS_RUNNING = "tasks_running"
    INACTIVE = "inactive"


MILESTONE_TEXT = {
    Milestone.IMPAIRED: "to IMPAIRED",
    Milestone.PAGED: "to the page",
    Milestone.DRAINING: "to DRAINING",
    Milestone.REPLACEMENT: "to a replacement registered",
    Milestone.TASKS_RUNNING: "to tasks running again",
    Milestone.INACTIVE: "to the old instance INACTIVE",
}

REFERENCE = {
    Milestone.IMPAIRED: timedelta(minutes=2),
    Milestone.DRAINING: timedelta(minutes=3),
    Milestone.REPLACEMENT: timedelta(minutes=4),
    Milestone.INACTIVE: timedelta(minutes=10),
}
"""AWS's published run of this injection on ECS Managed Instances (XID 79, auto repair on): IMPAIRED about 2
minutes after the injection, DRAINING a minute later, the replacement provisioned about a minute after that, and
the impaired instance gone about 8 minutes after IMPAIRED (docs/drills.md cites the source). AWS published no
time for the tasks to run again: that depends on the workload."""


@dataclass(slots=True)
class RecoveryReport:
    cluster: str
    instance: str
    """The container instance the injector landed on."""
    injected_at: datetime
    reached: dict[Milestone, datetime] = field(default_factory=dict)
    missing: dict[Milestone, str] = field(default_factory=dict)
    replacement: str | None = None

    @property
    def exit_status(self) -> int:
        return 1 if self.missing else 0


def render_recovery(report: RecoveryReport, scale: float = 1.0) -> str:
    """The recovery-time report: each milestone after the injection, beside AWS's reference (times `scale`: the
    sandbox's emulated ECS is faster by that factor, and says so)."""
    lines = [
        f"DCGM drill on {report.cluster}, instance {report.instance}, XID injected at {iso_utc(report.injected_at)}",
        f"  {'milestone':<30} {'after injection':>16}   AWS reference",
    ]
    for milestone in Milestone:
        reference = REFERENCE.get(milestone)
        ref_text = f"about {_clock(reference * scale)}" if reference is not None else "—"
        at = report.reached.get(milestone)
        took = _clock(at - report.injected_at) if at is not None else "not reached"
        lines.append(f"  {MILESTONE_TEXT[milestone]:<30} {took:>16}   {ref_text}")
    if report.replacement:
        lines.append(f"  replacement instance: {report.replacement}")
    if scale != 1.0:
        lines.append(f"  (reference times scaled by {scale:g}, as the emulated ECS is)")
    for milestone, why in report.missing.items():
        lines.append(f"  NOT REACHED {MILESTONE_TEXT[milestone]}: {why}")
    return "\n".join(lines) + "\n"


def _clock(delta: timedelta) -> str:
    seconds = max(delta.total_seconds(), 0.0)
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:04.1f}s"
