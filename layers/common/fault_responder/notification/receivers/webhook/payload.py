"""Webhook payloads in the shape of Alertmanager's webhook payload, version 4, for each incident change.

Pure functions, no I/O. One payload is one Alertmanager "group": an incident (one alert), a fleet incident (an alert
for the fleet, then one per impaired host), a notice that belongs to no incident (one alert) or one of the training
auto-resume workflow's notices (one alert). The mapping from
the responder's incidents to the format is in docs/webhook.md; the labels are the ones routes, silences and
inhibition rules match (fault_responder.routing.matchers), so a consumer can group and filter by the same names.

Nothing grows without bound and nothing is left out in silence: a text cut to fit ends with SHORTENED, a timeline is
its newest steps after a count of the earlier ones, and a payload carries at most `max_alerts` alerts and at most
MAX_BODY_BYTES as sent; the alerts it leaves out (the last ones: a fleet's newest hosts) are counted in
`truncatedAlerts`, as Alertmanager's own `max_alerts` does, and its fleet alert says so in words.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import quote

from fault_responder.core.domain import (
    Alert,
    EntryKind,
    EventKind,
    FleetMember,
    FleetSummary,
    Incident,
    InstanceRef,
    Runbook,
    Severity,
    TimelineEntry,
    Where,
)
from fault_responder.core.timefmt import as_utc, format_duration
from fault_responder.incidents.alarms import shown
from fault_responder.noise.fleet import member_name, repair_rounds
from fault_responder.notification.receivers.webhook.target import DEFAULT_MAX_ALERTS
from fault_responder.notification.render import drill
from fault_responder.notification.render.marks import SHORTENED
from fault_responder.routing.matchers import alert_labels, flag, incident_labels, where_labels

VERSION = "4"
MAX_BODY_BYTES = 256 * 1024
"""The most a payload is, as sent (JSON with every non-ASCII character escaped): far below what webhook consumers
commonly accept (API Gateway takes 10 MB, a Lambda function URL 6 MB)."""
ZERO_TIME = "0001-01-01T00:00:00Z"
"""A firing alert's endsAt, as Alertmanager writes it (Go's zero time)."""
STEPS_IN_DESCRIPTION = 5
DETAILS_IN_NOTICE = 50
# Label values and annotation texts: this long at first, shorter while the payload would pass MAX_BODY_BYTES with a
# single alert (only text of many escaped characters in every field can make it).
_TEXT_LIMITS = (4096, 1024, 256)
_MAX_LABEL = 1024
_MAX_URL = 2048
_DRAIN_PHASES = frozenset({"DRAINING", "DEREGISTERING", "INACTIVE"})

FLEET_ALERTNAME = "ECSFleetHealthImpaired"
RESUME_ALERTNAME = "TrainingAutoResume"
"""The `alertname` of the training auto-resume workflow's notices."""
NO_BUTTONS = "Approve or Reject from the Slack message that carries this request's buttons: a webhook cannot act"
ALERTNAMES: Mapping[EventKind, str] = {
    EventKind.HEALTH_IMPAIRED: "ECSInstanceHealthImpaired",
    EventKind.ALARM: "CloudWatchAlarm",
    EventKind.INSTANCE_STATE: "ECSInstanceStateChange",
    EventKind.TASK_STOPPED: "ECSTaskStopped",
}
"""The `alertname` label by what the payload is about (a fleet's alerts are all FLEET_ALERTNAME)."""


class Change(StrEnum):
    """What happened that the payload tells: its alerts' `change` annotation."""

    OPENED = "opened"
    UPDATED = "updated"
    """Its state changed while it stays open (another reason, a member joined or left, someone acknowledged it)."""
    DRAIN_ATTRIBUTED = "drain_attributed"
    """Its instance is draining, and the responder says why (ECS auto-repair, the responder's quarantine, ...)."""
    RESOLVED = "resolved"
    NOTICE = "notice"
    """Something that belongs to no incident (a drain or a stopped task with no fault to explain it)."""


def change_for_step(incident: Incident, entry: TimelineEntry) -> Change:
    """What a timeline step of `incident` tells, once it is recorded."""
    if not incident.is_open:
        return Change.RESOLVED
    if entry.kind == EntryKind.OPENED:
        return Change.OPENED
    if entry.phase in _DRAIN_PHASES and incident.drain is not None:
        return Change.DRAIN_ATTRIBUTED
    return Change.UPDATED


def rfc3339(moment: datetime) -> str:
    """RFC 3339 in UTC as Alertmanager writes times (Go's RFC3339Nano): `Z`, and a fraction only when there is one,
    without trailing zeros: `2026-12-05T00:23:41Z`, `2026-12-05T00:23:41.5Z`."""
    utc = as_utc(moment)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond:06d}".rstrip("0")
    return text + "Z"


def encode(payload: Mapping[str, Any]) -> bytes:
    """The body as sent: JSON, non-ASCII characters escaped (what MAX_BODY_BYTES counts)."""
    return json.dumps(payload, allow_nan=False).encode()


def render_incident(
    incident: Incident,
    *,
    receiver: str,
    change: Change,
    step: TimelineEntry | None = None,
    max_alerts: int = DEFAULT_MAX_ALERTS,
    external_url: str = "",
) -> dict[str, Any]:
    """The payload telling `change` of `incident` (a fleet incident's too), to the routing file's `receiver`; `step`
    is the timeline step it announces, if any. `max_alerts` 0: as many alerts as fit in MAX_BODY_BYTES.
    `external_url`: the stack's dashboard, or empty."""
    if incident.fleet is not None:
        return _render_fleet(
            incident,
            incident.fleet,
            receiver=receiver,
            change=change,
            step=step,
            max_alerts=max_alerts,
            external_url=external_url,
        )
    group = _group(ALERTNAMES[incident.kind], incident=incident.id)

    def alerts(count: int, limit: int) -> list[dict[str, Any]]:
        return [_incident_alert(incident, group, change, step, limit)]

    return _payload(receiver, group, external_url, alerts, max_alerts=max_alerts, resolved=not incident.is_open)


def render_alert(alert: Alert, *, receiver: str, external_url: str = "") -> dict[str, Any]:
    """The payload of a notice that belongs to no incident: one firing alert, never resolved (there is nothing to
    resolve: docs/webhook.md)."""
    group = _group(ALERTNAMES[alert.kind], notice=alert.key)

    def built(count: int, limit: int) -> list[dict[str, Any]]:
        labels = {**group, **alert_labels(alert)}
        details = list(alert.details.items())[:DETAILS_IN_NOTICE]
        lines = [alert.text, *(f"{key}: {value}" for key, value in details)]
        if len(alert.details) > len(details):
            left_out = len(alert.details) - len(details)
            lines.append(f"{_count(left_out, 'more detail')} not listed: ECS event {alert.event_id} has them")
        annotations = {
            "summary": f"{alert.title} on {_host(alert.instance)} in cluster {alert.instance.cluster_name}",
            "description": "\n".join(line for line in lines if line),
            "change": Change.NOTICE.value,
            "event_id": alert.event_id,
            **_runbook(alert.runbook, with_action=True, for_drill=alert.instance.drill),
            **_drain(alert.drain.label if alert.drain else None, alert.drain.reason if alert.drain else None),
        }
        return [
            _alert(
                labels,
                annotations,
                (alert.at, None),
                generator=_generator(alert.instance),
                identity=alert.key,
                limit=limit,
            )
        ]

    return _payload(receiver, group, external_url, built, max_alerts=0, resolved=False)


def render_resume_notice(
    notice: ResumeView,
    *,
    receiver: str,
    key: str,
    at: datetime,
    incident: str | None,
    external_url: str = "",
) -> dict[str, Any]:
    """The payload of one of the training auto-resume workflow's notices (told as it happens, or held back and told
    later): one firing alert of its own, never resolved, as a notice that belongs to no incident is; `key` names it
    for its life (its fingerprint), `incident` the incident it is about, when one exists."""
    group = _group(RESUME_ALERTNAME, notice=key)
    instance = notice.instance

    def built(count: int, limit: int) -> list[dict[str, Any]]:
        labels = {
            **group,
            "notice_kind": notice.kind,
            "cluster": instance.cluster_name,
            "capacity_provider": instance.capacity_provider or "",
            "instance": instance.container_instance_id,
            "ec2_instance": instance.ec2_instance_id or "",
            "severity": notice.severity.value,
            "drill": flag(instance.drill),
            "incident": incident or "",
            "job": notice.job_id or "",
            **where_labels(instance, notice.where),
        }
        details = list(notice.details.items())[:DETAILS_IN_NOTICE]
        lines = [notice.text, *(f"{name}: {value}" for name, value in details)]
        if len(notice.details) > len(details):
            lines.append(f"{_count(len(notice.details) - len(details), 'more detail')} not listed")
        place = f"cluster {instance.cluster_name}" + (f", {notice.where}" if notice.where is not None else "")
        annotations = {
            "summary": f"Training auto-resume: {notice.title} ({notice.fault_title} on {notice.host}, {place})",
            "description": "\n".join(line for line in lines if line),
            "change": Change.NOTICE.value,
            **({"approval": NO_BUTTONS} if notice.approval_id else {}),
        }
        return [_alert(labels, annotations, (at, None), generator=_generator(instance), identity=key, limit=limit)]

    return _payload(receiver, group, external_url, built, max_alerts=0, resolved=False)


class ResumeView(Protocol):
    """What a resume notice's payload reads (receivers.kind.ResumeNotice, or a held-back notice with its incident)."""

    @property
    def title(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def severity(self) -> Severity: ...
    @property
    def kind(self) -> str: ...
    @property
    def instance(self) -> InstanceRef: ...
    @property
    def host(self) -> str: ...
    @property
    def fault_title(self) -> str: ...
    @property
    def job_id(self) -> str | None: ...
    @property
    def approval_id(self) -> str | None: ...
    @property
    def details(self) -> Mapping[str, Any]: ...
    @property
    def where(self) -> Where | None: ...


# --- one incident ------------------------------------------------------------------------------------------------


def _incident_alert(
    incident: Incident, group: dict[str, str], change: Change, step: TimelineEntry | None, limit: int
) -> dict[str, Any]:
    labels = {**group, **incident_labels(incident), "route": incident.route or ""}
    annotations: dict[str, str] = {
        "summary": _summary(incident),
        "description": _description(incident),
        "change": change.value,
        **({"step": _step_line(step)} if step is not None else {}),
        **({"drill": drill.NO_ACTION} if drill.is_drill(incident) else {}),
        **_runbook(incident.runbook, with_action=incident.is_open, for_drill=drill.is_drill(incident)),
        **_drain(incident.drain.label if incident.drain else None, incident.drain.reason if incident.drain else None),
    }
    return _alert(
        labels,
        annotations,
        (incident.opened_at, _ended(incident)),
        generator=_generator(incident.instance),
        identity=incident.id,
        limit=limit,
    )


def _summary(incident: Incident) -> str:
    instance = incident.instance
    state = _state(incident)
    where = f", {incident.where}" if incident.where is not None else ""
    if instance.is_alarm:
        cluster = f" in cluster {instance.cluster_name}" if instance.cluster_name and not incident.reading else ""
        text = f"{incident.classification.title}: alarm {instance.container_instance_id}{cluster}{where} ({state})"
    else:
        host = f"{_host(instance)} in cluster {instance.cluster_name}"
        text = f"{incident.classification.title} on {host}{where} ({state})"
    if drill.is_drill(incident):
        text += f" — {drill.NO_ACTION_SHORT}"
    return text


def _state(incident: Incident) -> str:
    if not incident.is_open:
        duration = _duration(incident)
        return f"RESOLVED after {duration}" if duration else "RESOLVED"
    if incident.phase in _DRAIN_PHASES and incident.drain is not None:
        return f"{incident.phase}, {incident.drain.label}"
    return incident.phase


def _description(incident: Incident) -> str:
    classification = incident.classification
    lines = [f"Status: {_state(incident)}", f"Check: {incident.check_type}", f"Opened: {rfc3339(incident.opened_at)}"]
    if classification.reason:
        lines.append(f"Reason: {classification.reason}")
    if incident.reading is not None:
        found = incident.reading
        value, threshold = shown(found.value, found.unit), shown(found.threshold, found.unit)
        lines.append(f"Value: {value} (threshold {threshold}), contributor {found.contributor_id}")
    if incident.found:
        lines.append(incident.found)
    if incident.fleet_id:
        lines.append(f"Part of fleet incident {incident.fleet_id}: its payloads tell what follows")
    if not incident.is_open:
        closed = f" at {rfc3339(incident.closed_at)}" if incident.closed_at else ""
        lines.append(f"Resolved{closed}" + (f": {incident.close_reason}" if incident.close_reason else ""))
    steps = [entry for entry in incident.timeline if entry.muted is None]
    recent = steps[-STEPS_IN_DESCRIPTION:]
    if recent:
        earlier = len(steps) - len(recent)
        lines.append("Latest steps" + (f" ({_count(earlier, 'earlier step')} not listed):" if earlier else ":"))
        lines.extend(f"- {_step_line(entry)}" for entry in recent)
    return "\n".join(lines)


def _step_line(entry: TimelineEntry) -> str:
    return f"{rfc3339(entry.at)} {entry.phase}: {entry.text}"


def _ended(incident: Incident) -> datetime | None:
    if incident.is_open:
        return None
    return incident.closed_at or incident.last_status_change or incident.opened_at


def _duration(incident: Incident) -> str | None:
    if incident.closed_at is None:
        return None
    return format_duration(as_utc(incident.closed_at) - as_utc(incident.opened_at))


# --- a fleet incident --------------------------------------------------------------------------------------------


def _render_fleet(
    incident: Incident,
    fleet: FleetSummary,
    *,
    receiver: str,
    change: Change,
    step: TimelineEntry | None,
    max_alerts: int,
    external_url: str,
) -> dict[str, Any]:
    group = _group(FLEET_ALERTNAME, incident=incident.id)
    base = {**group, **incident_labels(incident), "fleet": "true", "route": incident.route or ""}
    for name in ("instance", "ec2_instance", "xid"):
        base.pop(name, None)  # a fleet's own alert names no one host; its hosts' alerts do
    # A closed fleet's payload is its own alert, resolved: its hosts recovered or left (docs/webhook.md).
    members = sorted(fleet.listed, key=lambda m: (m.opened_at, member_name(m))) if incident.is_open else []
    # The fleet's own alert, then one per host it lists; the open members it does not list count as left out.
    total = 1 + len(members) + (max(0, fleet.open - len(members)) if incident.is_open else 0)
    common = _runbook(incident.runbook, with_action=incident.is_open, for_drill=drill.is_drill(incident))

    def fleet_alert(limit: int, left_out: int) -> dict[str, Any]:
        annotations = {
            "summary": _fleet_summary(incident, fleet),
            "description": _fleet_description(incident, fleet),
            "change": change.value,
            **({"step": _step_line(step)} if step is not None else {}),
            **common,
        }
        if left_out:
            annotations["hosts_not_listed"] = (
                f"{_count(left_out, 'impaired host')} not in this payload (truncatedAlerts counts them): the fleet "
                "incident's Slack thread names every member as it joins and leaves"
            )
        return _alert(
            base,
            annotations,
            (incident.opened_at, _ended(incident)),
            generator=_cluster_url(incident.instance),
            identity=incident.id,
            limit=limit,
        )

    def host_alert(member: FleetMember, limit: int) -> dict[str, Any]:
        instance = member.instance
        labels = {
            **base,
            "member_incident": member.incident,
            "instance": instance.container_instance_id,
            "ec2_instance": instance.ec2_instance_id or "",
            "xid": "" if member.xid is None else str(member.xid),
            "severity": member.severity.value,
            "fault_class": member.fault_class.value,
        }
        state = member.phase if member.is_open else "RESOLVED"
        annotations = {
            "summary": f"{member.title} on {member_name(member)} ({state}), one host of fleet incident "
            f"{incident.fingerprint}",
            "description": f"Status: {state}\nOpened: {rfc3339(member.opened_at)}\nHost incident: {member.incident}",
            "change": change.value,
            **common,
        }
        return _alert(
            labels,
            annotations,
            (member.opened_at, member.closed_at),
            generator=_generator(instance),
            identity=member.incident,
            limit=limit,
        )

    def alerts(count: int, limit: int) -> list[dict[str, Any]]:
        # The fleet's alert says how many hosts the payload leaves out, once it is known how many it carries.
        return [fleet_alert(limit, total - count), *(host_alert(member, limit) for member in members[: count - 1])]

    return _payload(
        receiver,
        group,
        external_url,
        alerts,
        available=1 + len(members),
        total=total,
        max_alerts=max_alerts,
        resolved=not incident.is_open,
    )


def _fleet_summary(incident: Incident, fleet: FleetSummary) -> str:
    where = incident.instance
    source = where.capacity_provider or where.cluster_name
    place = f"cluster {where.cluster_name}" + (f", {incident.where}" if incident.where is not None else "")
    fault = fleet.fault or incident.classification.title
    if not incident.is_open:
        return f"RESOLVED [FLEET] all {fleet.total} instances of {source} ({place}) recovered or left: {fault}"
    failing = f"{fleet.open} of {fleet.total} instances of {source} ({place}) failing {incident.check_type}"
    return f"[FLEET] {failing}: {fault}"


def _fleet_description(incident: Incident, fleet: FleetSummary) -> str:
    grouped = ", ".join(f"{name}={value}" for name, value in fleet.group)
    lines = [
        f"Members: {fleet.open} impaired of {fleet.total}"
        if incident.is_open
        else f"Members: {fleet.total}, all recovered or left",
        f"Grouped by {grouped}: {fleet.threshold} or more faults within {fleet.window_minutes} min",
        f"First seen: {rfc3339(fleet.first_seen or incident.opened_at)}",
        f"Last change: {rfc3339(fleet.last_change or incident.opened_at)}",
    ]
    if incident.is_open:
        rounds = repair_rounds(fleet.open)
        lines.append(
            "Recovery: ECS auto-repair drains and replaces at most 20 % of a capacity provider's instances at a time "
            f"(one at a time below nine): at least {_count(rounds, 'round')} if these were the whole provider"
        )
    else:
        closed = f" at {rfc3339(incident.closed_at)}" if incident.closed_at else ""
        lines.append(f"Resolved{closed}" + (f": {incident.close_reason}" if incident.close_reason else ""))
    return "\n".join(lines)


# --- the payload -------------------------------------------------------------------------------------------------


Alerts = Callable[[int, int], list[dict[str, Any]]]
"""(count, text limit) -> the payload's first `count` alerts, each text within the limit."""


def _payload(
    receiver: str,
    group: dict[str, str],
    external_url: str,
    alerts: Alerts,
    *,
    available: int = 1,
    total: int = 1,
    max_alerts: int,
    resolved: bool,
) -> dict[str, Any]:
    """The payload with as many of the `available` alerts (the first ones) as `max_alerts` allows (0: no cap) and
    MAX_BODY_BYTES holds, and `truncatedAlerts` counting the rest of `total`. With the shortest texts one alert
    always fits."""
    cap = max(1, available if max_alerts == 0 else min(max_alerts, available))
    group_key = "{}:" + _label_set(group)

    def build(count: int, limit: int) -> dict[str, Any]:
        made = alerts(count, limit)
        return {
            "version": VERSION,
            "groupKey": group_key,
            "truncatedAlerts": total - count,
            "status": "resolved" if resolved else "firing",
            "receiver": receiver,
            "groupLabels": dict(group),
            "commonLabels": _common([alert["labels"] for alert in made]),
            "commonAnnotations": _common([alert["annotations"] for alert in made]),
            "externalURL": external_url,
            "alerts": made,
        }

    for limit in _TEXT_LIMITS:
        fitted = _largest_that_fits(build, cap, limit)
        if fitted is not None:
            return fitted
    raise AssertionError("one alert with the shortest texts always fits MAX_BODY_BYTES")  # pragma: no cover


def _largest_that_fits(build: Callable[[int, int], dict[str, Any]], cap: int, limit: int) -> dict[str, Any] | None:
    """The payload of the most alerts (1 to `cap`) within MAX_BODY_BYTES, texts cut to `limit`; None when not even
    one fits."""
    whole = build(cap, limit)
    if len(encode(whole)) <= MAX_BODY_BYTES:
        return whole
    low, high = 0, cap - 1  # `low` alerts fit (0: none known to), `high + 1` do not
    while low < high:
        middle = (low + high + 1) // 2
        if len(encode(build(middle, limit))) <= MAX_BODY_BYTES:
            low = middle
        else:
            high = middle - 1
    # Fewer alerts can share more (commonAnnotations): the count found is checked as sent, and lowered if need be.
    while low:
        fitted = build(low, limit)
        if len(encode(fitted)) <= MAX_BODY_BYTES:
            return fitted
        low -= 1
    return None


def _alert(
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    span: tuple[datetime, datetime | None],
    *,
    generator: str,
    identity: str,
    limit: int,
) -> dict[str, Any]:
    """One alert; `span`: when it started, and when it ended (None: firing). `identity` makes its fingerprint,
    stable for the life of what it is about."""
    starts, ends = span
    return {
        "status": "firing" if ends is None else "resolved",
        # The group's labels are bounded once (`_group`) and never cut again: every alert carries them whole.
        "labels": {
            name: value if name in _GROUP_NAMES else _clip(value, min(limit, _MAX_LABEL))
            for name, value in labels.items()
            if value
        },
        "annotations": {name: _clip(value, limit) for name, value in annotations.items() if value},
        "startsAt": rfc3339(starts),
        "endsAt": ZERO_TIME if ends is None else rfc3339(ends),
        "generatorURL": generator if len(generator) <= _MAX_URL else "",
        "fingerprint": hashlib.sha256(identity.encode()).hexdigest()[:16],
    }


_GROUP_NAMES = frozenset({"alertname", "incident", "notice"})


def _group(alertname: str, **identity: str) -> dict[str, str]:
    """A payload's groupLabels: its alertname and what it is about, each within _MAX_LABEL characters."""
    return {"alertname": alertname, **{name: _clip(value, _MAX_LABEL) for name, value in identity.items()}}


def _common(sets: list[dict[str, str]]) -> dict[str, str]:
    """The names whose value every one of `sets` has alike (Alertmanager's commonLabels, commonAnnotations)."""
    if not sets:
        return {}
    first, *rest = sets
    return {name: value for name, value in first.items() if all(other.get(name) == value for other in rest)}


def _label_set(labels: Mapping[str, str]) -> str:
    """`{a="x", b="y"}`: names in order, values quoted as Prometheus prints a label set (the groupKey's form)."""
    quoted = (f"{name}={json.dumps(value, ensure_ascii=False)}" for name, value in sorted(labels.items()))
    return "{" + ", ".join(quoted) + "}"


def _runbook(runbook: Runbook | None, *, with_action: bool, for_drill: bool = False) -> dict[str, str]:
    if runbook is None:
        return {}
    found = {"runbook_url": runbook.url}
    if with_action:
        found["what_to_do"] = f"{drill.IN_A_REAL_FAULT}: {runbook.action}" if for_drill else runbook.action
    return found


def _drain(label: str | None, reason: str | None) -> dict[str, str]:
    if label is None:
        return {}
    return {"drain": label, **({"drain_reason": reason} if reason else {})}


def _cluster_url(instance: InstanceRef) -> str:
    """A fleet's cluster in the ECS console."""
    region, cluster = instance.region, quote(instance.cluster_name, safe="")
    return f"https://{region}.console.aws.amazon.com/ecs/v2/clusters/{cluster}/infrastructure?region={region}"


def _generator(instance: InstanceRef) -> str:
    """Where the alert comes from: the instance (or the alarm) in the AWS console."""
    return instance.console_url


def _host(instance: InstanceRef) -> str:
    return instance.ec2_instance_id or instance.container_instance_id or instance.container_instance_arn


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - len(SHORTENED)] + SHORTENED
