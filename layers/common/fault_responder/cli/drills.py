"""`fault-responder drill`: the two drills run against a stack (docs/drills.md).

Glue only: what is sent and how a hop or a milestone is judged is fault_responder.operations.drill; the AWS calls are
fault_responder.adapters.drill_aws; the incidents table is read with the router's own store. The clock and the
sleep are parameters, so a test can run a drill without waiting.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.adapters import drill_aws
from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.incidents.lifecycle import fingerprint
from fault_responder.incidents.record import InstanceRecord
from fault_responder.notification.delivery import pagerduty_subject
from fault_responder.notification.receivers.kind import Capability
from fault_responder.notification.receivers.registry import with_capability
from fault_responder.operations.drill import (
    CHECK_TYPE,
    DEFAULT_CLUSTER,
    DRILL_TARGET_TAG,
    DrillReport,
    DrillTarget,
    Hop,
    HopResult,
    Milestone,
    Receivers,
    RecoveryReport,
    follow,
    health_entry,
    observe,
    render_recovery,
    render_report,
)
from fault_responder.routing.router import load_routing

RETENTION = timedelta(days=30)


@dataclass(frozen=True)
class DrillContext:
    clients: Callable[[str], Any]
    """service name -> a boto3 client with the operator's credentials (or the sandbox's moto)."""
    table: str
    routing_file: str
    watched_clusters: str = ""
    """The stack's ClusterArns parameter (comma-separated; empty: every cluster)."""
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    out: Callable[[str], None] = field(default=lambda text: print(text, end="", flush=True))
    """Where the report is written (the CLI binds the stream it started with)."""
    home: tuple[str, str] | None = None
    """The stack's own account and Region, for a drill of another account (whose incident's key names that one)."""


def receivers_of(routing_file: str) -> Receivers:
    routing = load_routing(routing_file)
    return Receivers(
        slack=with_capability(routing.receivers, Capability.TIMELINE),
        pagerduty=with_capability(routing.receivers, Capability.PAGE),
    )


# --- The synthetic drill -------------------------------------------------------------------------------


def synthetic_drill(context: DrillContext, args: argparse.Namespace) -> int:
    """The drill's event happens where its clients act: the caller's account and Region, or (--account) the
    member's, where the forwarder sends it on to the stack's bus as it would a real fault."""
    events = context.clients("events")
    region, account = events.meta.region_name, drill_aws.account_id(context.clients("sts"))
    target = DrillTarget(
        region=region,
        account=account,
        cluster=args.cluster
        or _first_watched(context.watched_clusters, account, region, getattr(args, "account", None))
        or DEFAULT_CLUSTER,
        instance=args.instance or f"drill-{context.now():%Y%m%dT%H%M%SZ}",
        xid=args.xid,
        capacity_provider=args.capacity_provider,
        author=args.author,
        home=context.home,
    )
    # Whole seconds: the incident id the router derives from the event's lastStatusChange is then known exactly.
    impaired_at = context.now().replace(microsecond=0)
    report = DrillReport(target, target.incident_id(impaired_at))
    store = DynamoDBInstanceStore(context.table, RETENTION, context.clients("dynamodb"))
    receivers = receivers_of(context.routing_file)
    subject = pagerduty_subject(target.fingerprint)

    def look() -> Any:
        return observe(store.load(target.record_arn), report.incident_id, subject, receivers)

    timeouts = {
        Hop.INCIDENT: args.incident_timeout,
        Hop.SLACK: args.slack_timeout,
        Hop.PAGERDUTY: args.pagerduty_timeout,
        Hop.RESOLVE: args.resolve_timeout,
    }
    started = context.clock()
    try:
        drill_aws.put_events(events, [health_entry(target, "IMPAIRED", impaired_at)])
    except drill_aws.DrillAwsError as error:
        report.hops.append(HopResult(Hop.EVENT, False, None, 0.0, str(error)))
        context.out(render_report(report))
        return report.exit_status
    report.hops.append(HopResult(Hop.EVENT, True, context.clock() - started))
    poll = args.poll_seconds
    report.hops.extend(
        follow(
            [Hop.INCIDENT, Hop.SLACK, Hop.PAGERDUTY],
            look,
            started=started,
            timeouts=timeouts,
            clock=context.clock,
            sleep=context.sleep,
            poll=poll,
        )
    )
    # The OK is sent whatever happened: the drill leaves nothing open behind it.
    ok_at = max(context.now().replace(microsecond=0), impaired_at + timedelta(seconds=1))
    resolving = context.clock()
    try:
        drill_aws.put_events(events, [health_entry(target, "OK", ok_at)])
    except drill_aws.DrillAwsError as error:
        report.hops.append(HopResult(Hop.RESOLVE, False, None, 0.0, f"its OK was not sent: {error}"))
        context.out(render_report(report))
        return report.exit_status
    if report.hops[1].ok:
        report.hops.extend(
            follow(
                [Hop.RESOLVE],
                look,
                started=resolving,
                timeouts=timeouts,
                clock=context.clock,
                sleep=context.sleep,
                poll=poll,
            )
        )
    else:
        report.hops.append(HopResult(Hop.RESOLVE, False, detail="no incident to resolve (its OK was sent)"))
    context.out(render_report(report))
    return report.exit_status


def _first_watched(cluster_arns: str, account: str, region: str, member: str | None) -> str | None:
    """The name of the first watched cluster of that account and Region; without a member account, the first
    watched cluster whatever its account."""
    watched = [arn.strip() for arn in cluster_arns.split(",") if arn.strip()]
    for arn in watched:
        parts = arn.split(":")
        if len(parts) >= 6 and (parts[3], parts[4]) == (region, account):
            return arn.rsplit("/", 1)[-1]
    return watched[0].rsplit("/", 1)[-1] if watched and member is None else None


# --- The DCGM drill ------------------------------------------------------------------------------------


def dcgm_drill(context: DrillContext, args: argparse.Namespace) -> int:
    """Inject the XID with dcgmi on an instance of a drill-target cluster and time ECS's repair."""
    ecs = context.clients("ecs")
    cluster_arn, tags = drill_aws.cluster_tags(ecs, args.cluster)
    if tags.get(DRILL_TARGET_TAG) != "true":
        raise drill_aws.DrillRefusedError(
            f"cluster {args.cluster!r} is not a drill target: tag it {DRILL_TARGET_TAG}=true to allow a DCGM drill"
        )
    store = DynamoDBInstanceStore(context.table, RETENTION, context.clients("dynamodb"))
    receivers = receivers_of(context.routing_file)
    before = {view.arn: view for view in drill_aws.instances(ecs, cluster_arn)}
    command = drill_aws.inject_command(args.xid)
    task_definition = drill_aws.register_injector(ecs, command, args.injector_image or drill_aws.INJECTOR_IMAGE)
    try:
        task = drill_aws.run_injector(ecs, cluster_arn, task_definition, args.capacity_provider)
        context.out(f"injector {task} started on {args.cluster}; waiting for it to land\n")
        landed, injected_at = _landed(context, ecs, cluster_arn, task, args)
        context.out(f"injector landed on {landed} at {injected_at.isoformat()}; following ECS\n")
        report = _follow_recovery(
            context,
            ecs=ecs,
            store=store,
            receivers=receivers,
            cluster=cluster_arn,
            landed=landed,
            injected_at=injected_at,
            before=before,
            args=args,
        )
    finally:
        drill_aws.deregister_injector(ecs, task_definition)
    context.out(render_recovery(report))
    return report.exit_status


def _landed(context: DrillContext, ecs: Any, cluster: str, task: str, args: argparse.Namespace) -> tuple[str, datetime]:
    """The container instance the injector runs on, and when it was seen started (the injection's moment)."""
    deadline = context.clock() + args.recovery_timeout
    while True:
        view = drill_aws.describe_task(ecs, cluster, task)
        if view.container_instance_arn and view.last_status in ("RUNNING", "DEPROVISIONING", "STOPPING", "STOPPED"):
            return view.container_instance_arn, context.now()
        if view.last_status == "STOPPED":
            raise drill_aws.DrillAwsError(f"the injector stopped before it ran: {view.stopped_reason}")
        if context.clock() >= deadline:
            raise drill_aws.DrillAwsError(f"the injector was not running after {args.recovery_timeout:.0f}s")
        context.sleep(args.poll_seconds)


def _follow_recovery(
    context: DrillContext,
    *,
    ecs: Any,
    store: DynamoDBInstanceStore,
    receivers: Receivers,
    cluster: str,
    landed: str,
    injected_at: datetime,
    before: dict[str, drill_aws.InstanceView],
    args: argparse.Namespace,
) -> RecoveryReport:
    report = RecoveryReport(cluster.rsplit("/", 1)[-1], landed.rsplit("/", 1)[-1], injected_at)
    tasks_before = before[landed].running_tasks if landed in before else 0
    deadline = context.clock() + args.recovery_timeout
    while len(report.reached) < len(Milestone) and context.clock() < deadline:
        record = store.load(landed)
        _from_record(report, record, receivers, injected_at, context.now())
        current = {view.arn: view for view in drill_aws.instances(ecs, cluster)}
        status = current[landed].status if landed in current else drill_aws.instance_status(ecs, cluster, landed)
        now = context.now()
        if status == "DRAINING":
            report.reached.setdefault(Milestone.DRAINING, now)
        if status in (None, "INACTIVE"):
            report.reached.setdefault(Milestone.INACTIVE, now)
        new = [view for arn, view in current.items() if arn not in before and view.status == "ACTIVE"]
        if new and Milestone.REPLACEMENT not in report.reached:
            first = min(new, key=lambda view: str(view.registered_at))
            report.replacement = first.arn.rsplit("/", 1)[-1]
            registered = first.registered_at if isinstance(first.registered_at, datetime) else now
            report.reached[Milestone.REPLACEMENT] = max(registered.astimezone(UTC), injected_at)
        if report.replacement and Milestone.TASKS_RUNNING not in report.reached:
            replacement = next((v for v in new if v.arn.endswith("/" + report.replacement)), None)
            if replacement is not None and replacement.running_tasks >= tasks_before:
                report.reached[Milestone.TASKS_RUNNING] = now
        if len(report.reached) < len(Milestone):
            context.sleep(args.poll_seconds)
    for milestone in Milestone:
        if milestone not in report.reached:
            report.missing[milestone] = f"not seen within {args.recovery_timeout:.0f}s"
    return report


def _from_record(
    report: RecoveryReport, record: InstanceRecord | None, receivers: Receivers, injected_at: datetime, now: datetime
) -> None:
    """IMPAIRED (ECS's own lastStatusChange), the page (as first seen) and DRAINING (ECS's event time), from the
    incident the router opened for the instance."""
    if record is None:
        return
    since = injected_at - timedelta(seconds=5)
    known = [k for k in record.incidents.get(CHECK_TYPE, []) if k.anchor >= since]
    if not known:
        return
    incident = min(known, key=lambda k: k.anchor)
    report.reached.setdefault(Milestone.IMPAIRED, max(incident.anchor, injected_at))
    subject = pagerduty_subject(fingerprint(record.instance, CHECK_TYPE))
    paged = [
        record.delivery(name, subject)
        for name in incident.receivers
        if name in receivers.pagerduty and record.delivery(name, subject).incident == incident.id
    ]
    if paged:
        # When the drill first sees it (the table keeps only the latest trigger's time: an update re-triggers).
        report.reached.setdefault(Milestone.PAGED, now)
    for fact in record.statuses:
        if fact.status == "DRAINING" and fact.at >= since:
            report.reached[Milestone.DRAINING] = min(report.reached.get(Milestone.DRAINING, fact.at), fact.at)
