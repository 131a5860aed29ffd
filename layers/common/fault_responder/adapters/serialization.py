"""Instance records to and from plain JSON-compatible dicts (what the store persists).

A record is stored in parts so that writers touch only their own: one part per health check (its facts
and incidents), one for the instance-level facts, one per receiver's lease, one per delivery.

A stored instance record is read part by part (record_from_parts): a part that cannot be read is skipped with a
count and a log line, so nothing stored can make every later event of the instance fail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from fault_responder.core.domain import DRILL_MARK, FaultClass, FleetMember, InstanceRef, ResumeNote, Severity
from fault_responder.events.envelope import EARLIEST
from fault_responder.incidents.record import (
    ActionFact,
    Backoff,
    Delivery,
    HealthFact,
    InstanceRecord,
    KnownIncident,
    Lease,
    NoticeFact,
    Pending,
    QuarantineFact,
    StatusFact,
    TaskStopFact,
)
from fault_responder.noise.fleet import FleetIdentity, JournalEntry, Recent, Told

log = logging.getLogger(__name__)

UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)
"""What reading a damaged part raises: a key missing, a value of another type, a time or number that does not parse."""
MAX_SHOWN = 200


def _ts(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def _dt(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _req(value: Any) -> datetime:
    moment = _dt(value)
    if moment is None:
        raise ValueError("a stored fact has no time")
    return moment


def instance_to_dict(instance: InstanceRef) -> dict[str, Any]:
    data = asdict(instance)
    if instance.attributes:
        data["attributes"] = [[key, value] for key, value in instance.attributes]
    else:
        del data["attributes"]  # only an alarm contributor's record has attributes: every other item is as before
    return data


def instance_from_dict(data: dict[str, Any]) -> InstanceRef:
    attributes = data.get("attributes") or ()
    fields = {key: value for key, value in data.items() if key != "attributes"}
    return InstanceRef(**fields, attributes=tuple((str(key), str(value)) for key, value in attributes))


# --- Check parts ---------------------------------------------------------------------------------------


def check_to_dict(record: InstanceRecord, check: str) -> dict[str, Any]:
    return {
        "type": check,
        "facts": [
            {
                "status": f.status,
                "at": _ts(f.at),
                "event_id": f.event_id,
                "reason": f.reason,
                "updated": _ts(f.updated),
                # Only a drill's reports name who made them: real faults' facts stay as small as they were.
                **({"by": f.by} if f.by else {}),
            }
            for f in record.health.get(check, [])
        ],
        "incidents": [_known_to_dict(k) for k in record.incidents.get(check, [])],
    }


def check_from_dict(data: dict[str, Any]) -> tuple[str, list[HealthFact], list[KnownIncident]]:
    check = str(data["type"])
    facts = [
        HealthFact(
            check_type=check,
            status=f["status"],
            at=_req(f["at"]),
            event_id=f["event_id"],
            reason=f.get("reason"),
            updated=_dt(f.get("updated")),
            by=f.get("by"),
        )
        for f in data.get("facts") or []
    ]
    incidents = [_known_from_dict(k) for k in data.get("incidents") or []]
    _in_range(*(moment for f in facts for moment in (f.at, f.updated)))
    _in_range(*(moment for k in incidents for moment in (k.anchor, k.opened_at, k.closed_at, k.known_at)))
    return check, facts, incidents


def _in_range(*moments: datetime | None) -> None:
    """A stored time an event could not carry today (before EARLIEST: Go's zero time, stored before events were
    bounded) makes its part unreadable: it must never reach the lifecycle's arithmetic."""
    for moment in moments:
        if moment is not None and moment < EARLIEST:
            raise ValueError(f"a stored time ({moment.isoformat()}) is before {EARLIEST.date().isoformat()}")


def _known_to_dict(known: KnownIncident) -> dict[str, Any]:
    return {
        "id": known.id,
        "check_type": known.check_type,
        "anchor": _ts(known.anchor),
        "receivers": list(known.receivers),
        "route": known.route,
        "fleet": known.fleet,
        "status": known.status,
        "opened_at": _ts(known.opened_at),
        "closed_at": _ts(known.closed_at),
        "phase": known.phase,
        "severity": known.severity,
        "title": known.title,
        "fault_class": known.fault_class,
        "xid": known.xid,
        "known_at": _ts(known.known_at),
        "found": known.found,
    }


def _known_from_dict(data: dict[str, Any]) -> KnownIncident:
    return KnownIncident(
        id=data["id"],
        check_type=data["check_type"],
        anchor=_req(data["anchor"]),
        receivers=list(data.get("receivers") or []),
        route=data.get("route"),
        fleet=data.get("fleet"),
        status=data.get("status") or "OPEN",
        opened_at=_dt(data.get("opened_at")),
        closed_at=_dt(data.get("closed_at")),
        phase=data.get("phase"),
        severity=data.get("severity"),
        title=data.get("title"),
        fault_class=data.get("fault_class"),
        xid=int(data["xid"]) if data.get("xid") is not None else None,
        known_at=_dt(data.get("known_at")),
        found=data.get("found"),
    )


def known_list_to_dict(known: list[KnownIncident]) -> list[dict[str, Any]]:
    return [_known_to_dict(k) for k in known]


def known_list_from_dict(data: list[dict[str, Any]] | None) -> list[KnownIncident]:
    return [_known_from_dict(k) for k in data or []]


# --- Fleet members ------------------------------------------------------------------------------------


def member_to_dict(member: FleetMember) -> dict[str, Any]:
    return {
        "instance": instance_to_dict(member.instance),
        "incident": member.incident,
        "opened_at": _ts(member.opened_at),
        "closed_at": _ts(member.closed_at),
        "severity": member.severity.value,
        "fault_class": member.fault_class.value,
        "title": member.title,
        "xid": member.xid,
        "phase": member.phase,
        "v": member.version,
        "fleet": member.fleet,
        "told": member.told,
    }


def member_from_dict(data: dict[str, Any]) -> FleetMember:
    return FleetMember(
        instance=instance_from_dict(data["instance"]),
        incident=data["incident"],
        opened_at=_req(data["opened_at"]),
        closed_at=_dt(data.get("closed_at")),
        severity=Severity(data["severity"]),
        fault_class=FaultClass(data["fault_class"]),
        title=data["title"],
        xid=int(data["xid"]) if data.get("xid") is not None else None,
        phase=data["phase"],
        version=int(data["v"]),
        fleet=data.get("fleet"),
        told=data.get("told"),
    )


def fleet_identities_to_dict(known: list[FleetIdentity]) -> list[dict[str, Any]]:
    return [
        {
            **_known_to_dict(k),
            "since": _ts(k.since),
            "first_seq": k.first_seq,
            "last_seq": k.last_seq,
            "members": k.members,
            "founders": list(k.founders),
        }
        for k in known
    ]


def fleet_identities_from_dict(data: list[dict[str, Any]] | None) -> list[FleetIdentity]:
    identities: list[FleetIdentity] = []
    for item in data or []:
        known = _known_from_dict(item)
        fields = {name: getattr(known, name) for name in KnownIncident.__dataclass_fields__}
        identities.append(
            FleetIdentity(
                **fields,
                since=_dt(item.get("since")),
                first_seq=int(item.get("first_seq") or 0),
                last_seq=int(item["last_seq"]) if item.get("last_seq") is not None else None,
                members=int(item.get("members") or 0),
                founders=[str(founder) for founder in item.get("founders") or []],
            )
        )
    return identities


def recent_to_dict(instance_arn: str, recent: Recent) -> dict[str, Any]:
    return {
        "a": instance_arn,
        "t": _ts(recent.opened_at),
        "s": recent.severity.value,
        "c": recent.fault_class.value,
        "ti": recent.title,
        "x": recent.xid,
    }


def recent_from_dict(data: dict[str, Any]) -> tuple[str, Recent]:
    return str(data["a"]), Recent(
        opened_at=_req(data["t"]),
        severity=Severity(data["s"]),
        fault_class=FaultClass(data["c"]),
        title=str(data["ti"]),
        xid=int(data["x"]) if data.get("x") is not None else None,
    )


def journal_to_dict(entry: JournalEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "fleet": entry.fleet,
        "told": entry.told.value,
        "member": member_to_dict(entry.member),
        "at": _ts(entry.at),
        "written": entry.written,
    }


def journal_from_dict(data: dict[str, Any]) -> JournalEntry:
    return JournalEntry(
        seq=int(data["seq"]),
        fleet=data["fleet"],
        told=Told(data["told"]),
        member=member_from_dict(data["member"]),
        at=_req(data["at"]),
        written=float(data["written"]),
    )


# --- Instance-level facts -----------------------------------------------------------------------------


def has_instance_facts(record: InstanceRecord) -> bool:
    return bool(record.statuses or record.tasks or record.quarantine or record.notices or record.actions)


def instance_facts_to_dict(record: InstanceRecord) -> dict[str, Any]:
    quarantine = record.quarantine
    return {
        "statuses": [
            {"status": f.status, "at": _ts(f.at), "event_id": f.event_id, "version": f.version, "reason": f.reason}
            for f in record.statuses
        ],
        "tasks": [
            {
                "task_arn": f.task_arn,
                "at": _ts(f.at),
                "event_id": f.event_id,
                "family": f.family,
                "reason": f.reason,
                "stop_code": f.stop_code,
                "drained": f.drained,
            }
            for f in record.tasks
        ],
        "quarantine": {"at": _ts(quarantine.at), "reason": quarantine.reason} if quarantine else None,
        "notices": [
            {
                "key": f.key,
                "check_type": f.check_type,
                "fault_at": _ts(f.fault_at),
                "at": _ts(f.at),
                "title": f.title,
                "pages": f.pages,
                "kind": f.kind,
                **({"note": note_to_dict(f.note)} if f.note is not None else {}),
            }
            for f in record.notices
        ],
        "actions": [action_to_dict(f) for f in record.actions],
    }


def apply_instance_facts(record: InstanceRecord, data: dict[str, Any]) -> None:
    """The instance-level facts of `data` set on `record`, all or none (UNREADABLE if any cannot be read)."""
    statuses = [
        StatusFact(
            status=f["status"],
            at=_req(f["at"]),
            event_id=f["event_id"],
            version=int(f["version"]) if f.get("version") is not None else None,
            reason=f.get("reason"),
        )
        for f in data.get("statuses") or []
    ]
    tasks = [
        TaskStopFact(
            task_arn=f["task_arn"],
            at=_req(f["at"]),
            event_id=f["event_id"],
            family=f["family"],
            reason=f["reason"],
            stop_code=f.get("stop_code"),
            drained=bool(f.get("drained")),
        )
        for f in data.get("tasks") or []
    ]
    stored_quarantine = data.get("quarantine")
    quarantine = (
        QuarantineFact(_req(stored_quarantine["at"]), stored_quarantine.get("reason")) if stored_quarantine else None
    )
    notices = [
        NoticeFact(
            key=f["key"],
            check_type=f["check_type"],
            fault_at=_req(f["fault_at"]),
            at=_req(f["at"]),
            title=f["title"],
            pages=bool(f.get("pages")),
            kind=f.get("kind"),
            note=note_from_dict(f["note"]) if f.get("note") else None,
        )
        for f in data.get("notices") or []
    ]
    actions = [action_from_dict(f) for f in data.get("actions") or []]
    _in_range(*(f.at for f in statuses), *(f.at for f in tasks), *(f.at for f in actions))
    _in_range(*(moment for f in notices for moment in (f.fault_at, f.at)), quarantine.at if quarantine else None)
    record.statuses, record.tasks, record.quarantine, record.notices, record.actions = (
        statuses,
        tasks,
        quarantine,
        notices,
        actions,
    )


def note_to_dict(note: ResumeNote) -> dict[str, Any]:
    return {
        "title": note.title,
        "text": note.text,
        "summary": note.summary,
        "severity": note.severity.value,
        "pagerduty": note.pagerduty,
        "dedup_key": note.dedup_key,
        "job_id": note.job_id,
        "approval_id": note.approval_id,
        "held": list(note.held),
    }


def note_from_dict(data: dict[str, Any]) -> ResumeNote:
    return ResumeNote(
        title=str(data["title"]),
        text=str(data["text"]),
        summary=str(data["summary"]),
        severity=Severity(data["severity"]),
        pagerduty=data.get("pagerduty"),
        dedup_key=data.get("dedup_key"),
        job_id=data.get("job_id"),
        approval_id=data.get("approval_id"),
        held=tuple(str(name) for name in data.get("held") or []),
    )


def action_to_dict(action: ActionFact) -> dict[str, Any]:
    data = {
        "key": action.key,
        "incident": action.incident,
        "kind": action.kind,
        "via": action.via,
        "by": action.by,
        "at": _ts(action.at),
        "note": action.note,
    }
    if action.dedup_key is not None:
        data["dedup_key"] = action.dedup_key
    return data


def action_from_dict(data: dict[str, Any]) -> ActionFact:
    """Also an action stored before the dedup key was kept: it has none, and the incident it was matched to."""
    return ActionFact(
        key=data["key"],
        incident=data.get("incident"),
        kind=data["kind"],
        via=data["via"],
        by=data["by"],
        at=_req(data["at"]),
        note=data.get("note"),
        dedup_key=data.get("dedup_key"),
    )


# --- Deliveries and leases ------------------------------------------------------------------------------


def delivery_to_dict(delivery: Delivery) -> dict[str, Any]:
    return {
        "receiver": delivery.receiver,
        "subject": delivery.subject,
        "channel": delivery.channel,
        "ts": delivery.ts,
        "pending": [{"marker": p.marker, "at": _ts(p.at), "owner": p.owner} for p in delivery.pending],
        "digest": delivery.digest,
        "steps": list(delivery.steps),
        "alert": delivery.alert,
        "incident": delivery.incident,
        "last_at": _ts(delivery.last_at),
        "severity": delivery.severity,
        "acked": delivery.acked,
        "cursor": delivery.cursor,
    }


def delivery_from_dict(data: dict[str, Any]) -> Delivery:
    return Delivery(
        receiver=data["receiver"],
        subject=data["subject"],
        channel=data.get("channel"),
        ts=data.get("ts"),
        pending=[Pending(p["marker"], _req(p["at"]), p["owner"]) for p in data.get("pending") or []],
        digest=data.get("digest"),
        steps=list(data.get("steps") or []),
        alert=data.get("alert"),
        incident=data.get("incident"),
        last_at=_dt(data.get("last_at")),
        severity=data.get("severity"),
        acked=data.get("acked"),
        cursor=int(data["cursor"]) if data.get("cursor") is not None else None,
    )


def lease_to_dict(lease: Lease) -> dict[str, Any]:
    return {"receiver": lease.receiver, "owner": lease.owner, "until": lease.until}


def lease_from_dict(data: dict[str, Any]) -> Lease:
    return Lease(receiver=data["receiver"], owner=data["owner"], until=float(data["until"]))


def backoff_to_dict(backoff: Backoff) -> dict[str, Any]:
    return {
        "receiver": backoff.receiver,
        "failures": backoff.failures,
        "since": backoff.since,
        "retry_at": backoff.retry_at,
    }


def backoff_from_dict(data: dict[str, Any]) -> Backoff:
    return Backoff(
        receiver=data["receiver"],
        failures=int(data["failures"]),
        since=float(data["since"]),
        retry_at=float(data["retry_at"]),
    )


# --- A stored instance record, part by part ------------------------------------------------------------------


def record_from_parts(
    arn: str, item: dict[str, Any], plain: Callable[[dict[str, Any]], dict[str, Any]]
) -> InstanceRecord:
    """A stored instance item (attribute name -> stored value, `plain` turns a part into JSON-like data) back into
    a record, part by part.

    A part that cannot be read (damaged, written in another shape, or holding a time no event may carry) is skipped
    with an `UnreadableRecords` count and a log line naming the record and the part, never raised: the record's
    other parts still apply, and the next write of that part (the next fact of that check, the next delivery)
    replaces it. A record whose instance (`ref`) cannot be read is named from its ARN until it is written again.
    """
    data: dict[str, Any] = {}
    for name, value in item.items():
        try:
            data.update(plain({name: value}))
        except UNREADABLE as error:
            unreadable_part(arn, name, error)
    try:
        instance = _instance_ref(data["ref"])
    except UNREADABLE as error:
        unreadable_part(arn, "ref", error)
        instance = instance_from_arn(arn)
    record = InstanceRecord(arn, instance, version=int(data.get("ver", 0)))
    for name, value in data.items():
        try:
            _apply_part(record, name, value)
        except UNREADABLE as error:
            unreadable_part(arn, name, error)
    return record


def _apply_part(record: InstanceRecord, name: str, value: Any) -> None:
    if name.startswith("c_"):
        check, facts, incidents = check_from_dict(value)
        if facts:
            record.health[check] = facts
        if incidents:
            record.incidents[check] = incidents
    elif name.startswith("d_"):
        delivery = delivery_from_dict(value)
        record.deliveries[(delivery.receiver, delivery.subject)] = delivery
    elif name.startswith("l_"):
        lease = lease_from_dict(value)
        record.leases[lease.receiver] = lease
    elif name.startswith("b_"):
        backoff = backoff_from_dict(value)
        record.backoff[backoff.receiver] = backoff
    elif name == "inst" and value:
        apply_instance_facts(record, value)


def _instance_ref(data: Any) -> InstanceRef:
    instance = instance_from_dict(data)
    texts = (instance.region, instance.account, instance.cluster_arn, instance.container_instance_arn)
    optional = (instance.ec2_instance_id, instance.capacity_provider)
    if not all(isinstance(text, str) for text in texts) or not all(o is None or isinstance(o, str) for o in optional):
        raise TypeError("the stored instance has a field of another type")
    return instance


def instance_from_arn(arn: str) -> InstanceRef:
    """The instance as far as its ARN names it: `arn:aws:ecs:REGION:ACCOUNT:container-instance/CLUSTER/ID` gives the
    Region, the account and the cluster (an ARN in the older format, or an alarm's, names no cluster)."""
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return InstanceRef("", "", "", arn, None, None, drill=arn.endswith(DRILL_MARK))
    partition, region, account, resource = parts[1], parts[3], parts[4], parts[5]
    segments = resource.split("/")
    cluster = segments[1] if len(segments) == 3 and segments[0] == "container-instance" else ""
    cluster_arn = f"arn:{partition}:ecs:{region}:{account}:cluster/{cluster}" if cluster else ""
    return InstanceRef(region, account, cluster_arn, arn, None, None, drill=arn.endswith(DRILL_MARK))


PARTS = {"c_": "check", "d_": "delivery", "l_": "lease", "b_": "backoff"}
"""The `Part` dimension of UnreadableRecords: the kind of part (one value per kind, whatever its digest)."""


def unreadable_part(arn: str, attribute: str, error: Exception) -> None:
    """Count and log a stored part that cannot be read: the record and the part are named, the error is clipped."""
    # Imported here: only an unreadable part pays for Powertools' metrics.
    from fault_responder.core.observability import count  # noqa: PLC0415

    part = PARTS.get(attribute[:2], attribute if attribute in ("ref", "inst", "ver") else "other")
    count("UnreadableRecords", "Part", part)
    log.warning(
        "a stored part of a record cannot be read; it is skipped",
        extra={
            "record": arn[:MAX_SHOWN],
            "part": attribute[:MAX_SHOWN],
            "error": f"{type(error).__name__}: {str(error)[:MAX_SHOWN]}",
        },
    )
