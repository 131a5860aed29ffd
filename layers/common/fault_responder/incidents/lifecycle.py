"""The incident lifecycle: ECS events become facts, and incidents are derived from the facts.

Pure functions, no I/O. ECS delivers at least once and out of order, so the rules are stated over the *set* of
facts an instance has, never over the order they arrived in (docs/reliability.md has them for people):

- A health check's transitions, in time order, form episodes: a non-OK transition opens one when none is open,
  later non-OK transitions belong to it, an OK closes it. Each episode is an incident.
- An incident is classified by its most severe report (the latest among equals), so XID 13 then XID 79 is a
  critical incident whichever arrived first.
- INACTIVE closes every incident on the instance, including those whose events arrive after it: the instance
  is gone. A fault learned when it is already over (its OK, or INACTIVE, is known) is an incident that is
  closed from the start: on-call is told, with its duration, and nothing pages.
- A drain belongs to the incidents open when it happened and is attributed from everything known (see
  drain.py); a drain with no incident to belong to is a notice of its own. When a fault that explains an
  earlier-announced drain arrives late, the drain joins the incident and its notice is marked superseded, so
  the message already sent is corrected in place.
- An incident keeps its identity (its Slack root, its PagerDuty alert) while late events move its bounds: the
  transition that first made it known anchors it.

The episodes are cut in episodes.py, and each incident's timeline is written in timeline.py.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from fault_responder.core.accounts import SINGLE_ACCOUNT, Accounts
from fault_responder.core.domain import (
    DRILL_MARK,
    DRILL_TITLE,
    MAX_DRILL_AUTHOR,
    Alert,
    Classification,
    DrainAttribution,
    DrainCause,
    EventKind,
    FaultClass,
    Incident,
    InstanceRef,
    Severity,
    SlackThread,
    Where,
)
from fault_responder.core.timefmt import iso_utc
from fault_responder.events.ecs import (
    ALARM_CONTRIBUTOR_STATE_CHANGE,
    DRAINING_STOP_REASON,
    INFRASTRUCTURE_STOP_CODES,
    EcsEvent,
    HealthChangeEvent,
    HealthCheck,
    InstanceStateEvent,
    TaskStateEvent,
)
from fault_responder.incidents.alarms import (
    alarm_facts,
    alarm_fingerprint,
    contributor_facts,
    contributor_title,
    found_by_sweep,
    is_unknown_clusters,
    reading,
    told_by_contributors,
    unknown_clusters_ok,
    unknown_clusters_title,
)
from fault_responder.incidents.drain import attribute_drain
from fault_responder.incidents.episodes import Episode, classify_episode, episodes, left_cluster
from fault_responder.incidents.people import apply_actions
from fault_responder.incidents.record import (
    MAX_INCIDENTS_PER_CHECK,
    EventFacts,
    HealthFact,
    InstanceRecord,
    KnownIncident,
    StatusFact,
    TaskStopFact,
    bounded_id,
    clip,
)
from fault_responder.incidents.timeline import incident_timeline
from fault_responder.routing.runbooks import runbook_for

if TYPE_CHECKING:
    # Imported for their types only: the models of an alarm event; a policy, handed in by the alert pipeline (so
    # the resume functions that derive incidents do not import silences and their time intervals); and routing,
    # imported where derive routes (so the resume functions that only fingerprint a fault do not build the
    # routing file's models).
    from fault_responder.events.cloudwatch import AlarmEvent
    from fault_responder.noise.policy import Policy
    from fault_responder.routing.router import RouteContext, RouteDecision

MAX_DEDUP_KEY = 255
MAX_CHECKS_PER_EVENT = 16
"""ECS sends one to four; an event listing more is broken or hostile, and the rest are not read."""
MAX_ARN = 1024
_DRAIN_PHASES = ("DRAINING", "DEREGISTERING")

Route = Callable[["RouteContext"], "RouteDecision"]


@dataclass(frozen=True, slots=True)
class Settings:
    drain_window: timedelta = timedelta(minutes=60)
    """A drain this soon after a fault ended is still attributed to it."""
    hold_down: timedelta = timedelta(0)
    """Flap damping: a check must stay OK this long before its incident resolves; a relapse within it
    continues the same incident (marked flapping). Zero: an OK resolves at once."""
    accounts: Accounts = SINGLE_ACCOUNT
    """The stack's home and the accounts' names: an alarm's key of another account names it, and in organization
    mode every incident and notice says where it is (`where`)."""


def fingerprint(instance: InstanceRef, check_type: str, accounts: Accounts = SINGLE_ACCOUNT) -> str:
    """cluster/container-instance/check-type: stable, readable, and a valid PagerDuty dedup_key; a drill's begins
    with `drill/`, so its alert is never a real fault's (an alarm's: cloudwatch-alarm/region/name, with the account
    before the Region when it is not the stack's home: two accounts' alarms share their names). A container
    instance's id is unique across accounts (its ARN names its account and Region): its key is the same wherever
    it is; a drill's names a made-up instance, and names the account and Region too when they are not the home's."""
    home = accounts.is_home(instance.account, instance.region)
    if instance.is_alarm:
        return alarm_fingerprint(instance, home=home)
    value = f"{instance.cluster_name}/{instance.container_instance_id}/{check_type}"
    if instance.drill:
        value = f"drill/{value}" if home else f"drill/{instance.account}/{instance.region}/{value}"
    if len(value) <= MAX_DEDUP_KEY:
        return value
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{value[: MAX_DEDUP_KEY - 33]}#{digest}"


# --- Events to facts ---------------------------------------------------------------------------------


def health_instance(event: HealthChangeEvent) -> InstanceRef:
    """The container instance a health change is about."""
    detail = event.detail
    return _instance(
        event, detail.cluster_arn, detail.container_instance_arn, detail.ec2_instance_id, detail.capacity_provider_name
    )


def _instance(
    event: EcsEvent, cluster_arn: str, container_instance_arn: str, ec2_instance_id: str | None, provider: str | None
) -> InstanceRef:
    """Every part bounded: an absurdly long value keeps its start and a digest of the whole, so two
    different instances never become one. A drill's facts are kept apart from the instance it names (DRILL_MARK):
    whether an event is a drill comes from its source alone."""
    drill = event.is_drill
    return InstanceRef(
        region=bounded_id(event.region, 64),
        account=bounded_id(event.account, 64),
        cluster_arn=bounded_id(cluster_arn, MAX_ARN),
        container_instance_arn=bounded_id(container_instance_arn, MAX_ARN) + (DRILL_MARK if drill else ""),
        ec2_instance_id=bounded_id(ec2_instance_id, 256) if ec2_instance_id else None,
        capacity_provider=bounded_id(provider, 256) if provider else None,
        drill=drill,
    )


def facts_from_event(event: EcsEvent | AlarmEvent) -> EventFacts | None:
    """What the event says about its container instance (or alarm, or alarm contributor), or None if it says nothing
    we act on."""
    event_id = bounded_id(event.id)
    if not isinstance(event, HealthChangeEvent | InstanceStateEvent | TaskStateEvent):
        if event.detail_type == ALARM_CONTRIBUTOR_STATE_CHANGE:
            return contributor_facts(event, event_id)  # type: ignore[arg-type]
        return alarm_facts(event, event_id)  # type: ignore[arg-type]
    if isinstance(event, HealthChangeEvent):
        return _health_facts(event, event_id)
    if isinstance(event, InstanceStateEvent):
        detail = event.detail
        status = StatusFact(
            status=bounded_id(detail.status, 64),
            at=detail.updated_at or event.time,
            event_id=event_id,
            version=detail.version,
            reason=clip((detail.drain_reason or detail.status_reason or "").strip() or None),
        )
        instance = _instance(
            event,
            detail.cluster_arn,
            detail.container_instance_arn,
            detail.ec2_instance_id,
            detail.capacity_provider_name,
        )
        return EventFacts(event_id, instance, status=status)
    return _task_facts(event, event_id)


def closed_elsewhere(event: EcsEvent | AlarmEvent) -> EventFacts | None:
    """What an event says about a record other than its own: a multi time series alarm's OK is the OK of the page the
    reconciliation sweep made for the alarm as a whole when its clusters could not be read
    (fault_responder.incidents.alarms.unknown_clusters_ok). None for every other event."""
    if isinstance(event, HealthChangeEvent | InstanceStateEvent | TaskStateEvent):
        return None
    if event.detail_type == ALARM_CONTRIBUTOR_STATE_CHANGE:
        return None
    return unknown_clusters_ok(event, bounded_id(event.id))  # type: ignore[arg-type]


def _health_facts(event: HealthChangeEvent, event_id: str) -> EventFacts | None:
    detail = event.detail
    checks = list(detail.health_checks[:MAX_CHECKS_PER_EVENT])
    if not checks and detail.overall_status != "OK":
        # IMPAIRED with no check listed: still a fault, labelled unknown. So is an event that lists no check and
        # whose overall status could not be read (schema drift): a change to the event's schema that hid both
        # must page, not silence every health event.
        checks = [HealthCheck(type="UNKNOWN", status=detail.overall_status or "UNKNOWN")]
    facts = tuple(
        HealthFact(
            check_type=bounded_id(check.type, 64),
            status=bounded_id(check.status, 64),
            at=check.last_status_change or event.time,
            event_id=event_id,
            reason=clip(check.status_reason or None),
            updated=check.last_updated,
            by=drill_author(event),
        )
        for check in checks
        if check.status != "INITIALIZING"
    )
    if not facts:
        return None
    return EventFacts(event_id, health_instance(event), health=facts)


def drill_author(event: HealthChangeEvent) -> str | None:
    """Who started a drill, as its event names them: one line, bounded. Read from a drill's event alone (by its
    source), so nothing ECS sends can name an author."""
    drill = event.detail.drill
    if not event.is_drill or drill is None or drill.started_by is None:
        return None
    return clip(" ".join(drill.started_by.split()), MAX_DRILL_AUTHOR) or None


def _task_facts(event: TaskStateEvent, event_id: str) -> EventFacts | None:
    detail = event.detail
    drained = (detail.stopped_reason or "").startswith(DRAINING_STOP_REASON)
    stopped_by_infrastructure = detail.stop_code in INFRASTRUCTURE_STOP_CODES or drained
    if detail.last_status != "STOPPED" or not stopped_by_infrastructure or not detail.container_instance_arn:
        return None
    task = TaskStopFact(
        task_arn=bounded_id(detail.task_arn),
        at=detail.stopped_at or event.time,
        event_id=event_id,
        family=clip((detail.group or "").removeprefix("family:") or "task", 200) or "task",
        reason=clip(detail.stopped_reason or "no reason given") or "",
        stop_code=clip(detail.stop_code, 64),
        drained=drained,
    )
    instance = _instance(event, detail.cluster_arn, detail.container_instance_arn, None, detail.capacity_provider_name)
    return EventFacts(event_id, instance, task=task)


# --- Facts to incidents ------------------------------------------------------------------------------


@dataclass(slots=True)
class InstanceView:
    """Everything derived from one record: incidents, notices outside incidents, and incident identities."""

    incidents: list[Incident] = field(default_factory=list)
    alerts: list[Alert] = field(default_factory=list)
    known: dict[str, list[KnownIncident]] = field(default_factory=dict)

    def incident(self, incident_id: str) -> Incident | None:
        return next((incident for incident in self.incidents if incident.id == incident_id), None)


def derive(
    record: InstanceRecord,
    settings: Settings,
    route: Route,
    now: datetime | None = None,
    policy: Policy | None = None,
) -> InstanceView:
    """The incidents and notices the facts make, with their receivers and, under a policy, who is not told
    now and why; as of `now` (None: long after every fact, with no silence or window in force). Same facts and
    time, same view, in any order."""
    gone = left_cluster(record.statuses)
    # A drill's OK is sent by the drill itself, not by a sensor that may flap, and an alarm is already damped by
    # CloudWatch's evaluation periods: neither has a hold-down of its own.
    hold_down = timedelta(0) if record.instance.drill or record.instance.is_alarm else settings.hold_down
    by_check = {check: episodes(check, facts, gone, hold_down, now) for check, facts in sorted(record.health.items())}
    all_episodes = [episode for found in by_check.values() for episode in found]
    drains = {fact: _attribute(fact, record, all_episodes, settings) for fact in record.statuses if _is_drain(fact)}
    view = InstanceView()
    for check, found in by_check.items():
        known = _identify(
            check, found, record.incidents.get(check, []), record.instance, now, accounts=settings.accounts
        )
        kept: list[KnownIncident] = []
        for number, (episode, identity) in enumerate(known.matched, start=1):
            incident = _incident(record, episode, identity, number, drains, accounts=settings.accounts)
            _route(incident, identity, route)
            _remember(identity, incident)
            view.incidents.append(incident)
            kept.append(identity)
        for orphan in known.orphans:
            incident = _orphan_incident(record, orphan, settings.accounts, known.absorbed.get(orphan.id))
            view.incidents.append(incident)
            kept.append(orphan)
        view.known[check] = _trimmed(kept)
    view.incidents.sort(key=lambda incident: (incident.opened_at, incident.id))
    view.alerts = _alerts(record, view.incidents, drains, route, settings.accounts.where(record.instance))
    if policy is not None:
        view.alerts = policy.apply(view.incidents, view.alerts, record.notices, now)
    return view


@dataclass(slots=True)
class _Identified:
    matched: list[tuple[Episode, KnownIncident]]
    orphans: list[KnownIncident]
    absorbed: dict[str, str] = field(default_factory=dict)
    """Orphan id -> the incident whose episode now contains its anchor (a relapse learned late joined them)."""


def _identify(
    check: str,
    found: list[Episode],
    known: list[KnownIncident],
    instance: InstanceRef,
    now: datetime | None,
    *,
    accounts: Accounts,
) -> _Identified:
    """Each episode is the known incident whose anchor it contains, or a new incident anchored at its start.

    Works on copies: the view's identities are compared with the record's to see whether anything changed.
    """
    unclaimed = sorted((copy.deepcopy(k) for k in known), key=lambda k: (k.anchor, k.id))
    matched: list[tuple[Episode, KnownIncident]] = []
    absorbed: dict[str, str] = {}
    for episode in found:
        mine = [k for k in unclaimed if episode.holds(k.anchor)]
        if mine:
            identity = mine[0]
            unclaimed = [k for k in unclaimed if k is not identity]
            absorbed.update({other.id: identity.id for other in mine[1:]})
        else:
            anchor = episode.opened_at
            identity = KnownIncident(
                f"{fingerprint(instance, check, accounts)}@{iso_utc(anchor)}",
                check,
                anchor,
                known_at=now,
                found=found_by_sweep(instance) if episode.reports[0].reconciled else None,
            )
        matched.append((episode, identity))
    return _Identified(matched, unclaimed, absorbed)


def _incident(
    record: InstanceRecord,
    episode: Episode,
    identity: KnownIncident,
    number: int,
    drains: dict[StatusFact, DrainAttribution],
    *,
    accounts: Accounts,
) -> Incident:
    classification = classify_episode(episode)
    if record.instance.drill:
        classification = replace(classification, title=f"{DRILL_TITLE}{classification.title}")
    found = reading(record.instance, episode.check_type, classification.reason)
    if found is not None:
        title = contributor_title(episode.check_type, classification, found, record.instance.attributes)
        classification = replace(classification, title=title)
    elif is_unknown_clusters(record.instance):
        classification = replace(classification, title=unknown_clusters_title(episode.check_type, classification))
    within = [fact for fact in record.statuses if episode.contains(fact.at)]
    drain_facts = [fact for fact in within if _is_drain(fact) and episode.open_at(fact.at)]
    last_report = episode.close or episode.reports[-1]
    incident = Incident(
        id=identity.id,
        fingerprint=fingerprint(record.instance, episode.check_type, accounts),
        instance=record.instance,
        check_type=episode.check_type,
        status="OPEN" if episode.is_open else "CLOSED",
        classification=classification,
        opened_at=episode.opened_at,
        phase=_phase(episode, within),
        last_status_change=last_report.at,
        closed_at=episode.closed_at,
        close_reason=episode.close_reason,
        drain=drains[drain_facts[-1]] if drain_facts else None,
        slack_threads=_threads(record, identity.id),
        opened_count=number,
        relapses=len(episode.relapsed),
        resolves_at=episode.resolves_at,
        fleet_id=identity.fleet,
        known_at=identity.known_at,
        found=identity.found,
        started_by=next((fact.by for fact in episode.reports if fact.by), None) if record.instance.drill else None,
        reading=found,
        where=accounts.where(record.instance),
    )
    incident.timeline = incident_timeline(record, episode, within)
    apply_actions(incident, record.actions)
    return incident


def _phase(episode: Episode, statuses: list[StatusFact]) -> str:
    if not episode.is_open:
        return "RESOLVED"
    latest = max(statuses, key=lambda fact: fact.order, default=None)
    if latest is not None and latest.status in _DRAIN_PHASES:
        return latest.status
    if episode.recovering is not None:
        return "RECOVERING"
    return episode.reports[-1].status


def _threads(record: InstanceRecord, subject: str) -> list[SlackThread]:
    return [
        SlackThread(delivery.receiver, delivery.channel, delivery.ts)
        for (_, about), delivery in sorted(record.deliveries.items())
        if about == subject and delivery.channel and delivery.ts
    ]


def _route(incident: Incident, identity: KnownIncident, route: Route) -> None:
    """Routed by what the incident is now (its most severe report, its drain). A receiver that heard of it
    and is no longer routed to (a late event showed the critical report belonged to an earlier incident) is
    brought up to date by delivery: its page resolved, its Slack root kept current. Its runbook is the default
    for what it is now, unless a matched route gives its own."""
    from fault_responder.routing.router import incident_context  # noqa: PLC0415

    decision = route(incident_context(incident))
    if told_by_contributors(incident.instance, incident.check_type):
        # A multi time series alarm's own ALARM: its contributors are the incidents, each naming its cluster, and
        # the fault pages once (docs/alarms.md). Recorded, with the route it matched, and told to no one.
        decision = replace(decision, receivers=())
    identity.route = ",".join(decision.routes) or None
    identity.receivers = list(decision.receivers)
    incident.receivers = list(decision.receivers)
    incident.route = identity.route
    classification = incident.classification
    incident.runbook = runbook_for(classification.fault_class, classification.xid, override=decision.runbook)


def _remember(identity: KnownIncident, incident: Incident) -> None:
    """The derivation's summary on the identity, for readers that do not derive (status, reports)."""
    identity.status = incident.status
    identity.opened_at = incident.opened_at
    identity.closed_at = incident.closed_at
    identity.phase = incident.phase
    identity.severity = incident.classification.severity.value
    identity.title = incident.classification.title
    identity.fault_class = incident.classification.fault_class.value
    identity.xid = incident.classification.xid


def _orphan_incident(
    record: InstanceRecord, orphan: KnownIncident, accounts: Accounts, merged_into: str | None = None
) -> Incident:
    """A known incident no episode contains any more: closed, so nothing stays open. Either its facts aged out,
    or a relapse learned late showed it to be part of an earlier incident (`merged_into`)."""
    opened = orphan.opened_at or orphan.anchor
    classification = Classification(
        FaultClass(orphan.fault_class) if orphan.fault_class else FaultClass.UNKNOWN_CHECK,
        Severity(orphan.severity) if orphan.severity else Severity.ERROR,
        orphan.title or f"{orphan.check_type} fault",
        xid=orphan.xid,
    )
    orphan.status, orphan.phase = "CLOSED", "RESOLVED"
    orphan.closed_at = orphan.closed_at or opened
    return Incident(
        id=orphan.id,
        fingerprint=fingerprint(record.instance, orphan.check_type, accounts),
        instance=record.instance,
        check_type=orphan.check_type,
        status="CLOSED",
        classification=classification,
        opened_at=opened,
        phase="RESOLVED",
        closed_at=orphan.closed_at,
        close_reason=(
            f"the check relapsed within the hold-down: this is part of incident {merged_into}"
            if merged_into
            else "its reports aged out of the record; closed so that nothing stays open"
        ),
        receivers=list(orphan.receivers),
        route=orphan.route,
        slack_threads=_threads(record, orphan.id),
        merged_into=merged_into,
        where=accounts.where(record.instance),
    )


def _trimmed(known: list[KnownIncident]) -> list[KnownIncident]:
    """At most MAX_INCIDENTS_PER_CHECK per check: the oldest closed ones go first."""
    ordered = sorted(known, key=lambda k: (k.anchor, k.id))
    while len(ordered) > MAX_INCIDENTS_PER_CHECK:
        closed = next((k for k in ordered if k.status != "OPEN"), None)
        if closed is None:
            break
        ordered.remove(closed)
    return ordered


# --- Drains and notices outside incidents --------------------------------------------------------------


def _is_drain(fact: StatusFact) -> bool:
    return fact.status == "DRAINING"


def _attribute(
    fact: StatusFact, record: InstanceRecord, all_episodes: list[Episode], settings: Settings
) -> DrainAttribution:
    faults = [
        (episode.opened_at, _fault_label(episode))
        for episode in all_episodes
        if classify_episode(episode).severity.rank > 0
        and episode.opened_at <= fact.at
        and (episode.closed_at is None or fact.at - episode.closed_at <= settings.drain_window)
    ]
    return attribute_drain(
        at=fact.at,
        reason=fact.reason,
        quarantine=record.quarantine,
        fault=max(faults)[1] if faults else None,
        window=settings.drain_window,
    )


def _fault_label(episode: Episode) -> str:
    xid = classify_episode(episode).xid
    return f"XID {xid}" if xid is not None else episode.check_type


def _alerts(
    record: InstanceRecord,
    incidents: list[Incident],
    drains: dict[StatusFact, DrainAttribution],
    route: Route,
    where: Where | None = None,
) -> list[Alert]:
    alerts: list[Alert] = []
    by_id = {incident.id: incident for incident in incidents}
    for fact in record.statuses:
        if _is_drain(fact):
            drain = drains[fact]
            owner = _owner(by_id, fact.at, open_only=True)
            severity = Severity.WARNING if drain.cause == DrainCause.ECS_AUTO_REPAIR else Severity.INFO
            alerts.append(
                Alert(
                    key=f"drain:{fact.event_id}",
                    event_id=fact.event_id,
                    kind=EventKind.INSTANCE_STATE,
                    instance=record.instance,
                    severity=severity,
                    title="Container instance draining",
                    text=f"Draining: {drain.label}",
                    at=fact.at,
                    fault_class=FaultClass.INSTANCE_LIFECYCLE,
                    drain=drain,
                    superseded_by=owner,
                    where=where,
                )
            )
        elif fact.status == "REGISTRATION_FAILED":
            alerts.append(
                Alert(
                    key=f"status:{fact.event_id}",
                    event_id=fact.event_id,
                    kind=EventKind.INSTANCE_STATE,
                    instance=record.instance,
                    severity=Severity.WARNING,
                    title="Container instance registration failed",
                    text=fact.reason or "ECS gave no reason",
                    at=fact.at,
                    fault_class=FaultClass.INSTANCE_LIFECYCLE,
                    where=where,
                )
            )
    for task in record.tasks:
        owner = _owner(by_id, task.at, open_only=False)
        if owner is None and task.drained:
            continue  # the drain itself was announced; one message per drained task would be noise
        code = f" [{task.stop_code}]" if task.stop_code else ""
        alerts.append(
            Alert(
                key=f"task:{task.task_arn}",
                event_id=task.event_id,
                kind=EventKind.TASK_STOPPED,
                instance=record.instance,
                severity=Severity.WARNING if task.stop_code == "InfrastructureHealth" else Severity.INFO,
                title=f"Task stopped by the infrastructure ({task.stop_code})",
                text=f"Task {task.family} ({task.task_id}) stopped: {task.reason}{code}",
                at=task.at,
                fault_class=FaultClass.TASK_INTERRUPTION,
                superseded_by=owner,
                where=where,
            )
        )
    from fault_responder.routing.router import alert_context  # noqa: PLC0415

    # One notice per key: two facts under one event id (a producer that reuses ids) are one event, its first report
    # in the record's order; two notices with one key would each make the other's message look out of date.
    unique = list({alert.key: alert for alert in reversed(alerts)}.values())
    decisions = [(alert, route(alert_context(alert))) for alert in unique]
    routed = [
        replace(alert, receivers=decision.receivers, runbook=runbook_for(alert.fault_class, override=decision.runbook))
        for alert, decision in decisions
    ]
    return sorted(routed, key=lambda alert: (alert.at, alert.key))


def _owner(incidents: dict[str, Incident], moment: datetime, *, open_only: bool) -> str | None:
    """The incident a drain or a task stop at `moment` belongs to (the earliest opened, for a stable answer)."""
    for incident in sorted(incidents.values(), key=lambda i: (i.opened_at, i.id)):
        ends = incident.closed_at
        inside = incident.opened_at <= moment and (ends is None or moment < ends or (not open_only and moment <= ends))
        if inside:
            return incident.id
    return None
