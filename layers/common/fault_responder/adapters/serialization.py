"""Instance records to and from plain JSON-compatible dicts (what the store persists).

A record is stored in parts so that writers touch only their own: one part per health check (its facts
and incidents), one for the instance-level facts, one per receiver's lease, one per delivery.

Each stored dataclass has a codec derived from its fields and type hints (fault_responder.adapters.codecs); a codec's
options name where the stored shape is not the fields' own. tests/snapshots/records/encodings.json holds items as the
store writes them (tests/unit/test_record_codecs.py): the codecs write them byte for byte, and read them back.

A stored instance record is read part by part (record_from_parts): a part that cannot be read is skipped with a
count and a log line, so nothing stored can make every later event of the instance fail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import fields
from datetime import datetime
from typing import Any

from fault_responder.adapters.codecs import absent, codec, empty
from fault_responder.core.domain import DRILL_MARK, FleetMember, InstanceRef, ResumeNote
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
    QuarantineFact,
    StatusFact,
    TaskStopFact,
)
from fault_responder.noise.fleet import FleetIdentity, JournalEntry, Recent

log = logging.getLogger(__name__)

UNREADABLE = (KeyError, IndexError, TypeError, ValueError, AttributeError, ArithmeticError)
"""What reading a damaged part raises: a key missing, a value of another type, a time or number that does not parse."""
MAX_SHOWN = 200

# --- The codecs of the stored records ---------------------------------------------------------------------------

INSTANCE = codec(
    InstanceRef,
    # Only an alarm contributor's record has attributes: every other item is as it was before they were kept.
    omit={"attributes": empty},
    texts={"attributes"},
    # An instance is read whole or not at all: a field of another version is refused, not dropped.
    strict=True,
)
HEALTH = codec(
    HealthFact,
    # The check is the part's `type`, not repeated in each fact. Only a drill's reports name who made them: real
    # faults' facts stay as small as they were.
    skip={"check_type"},
    omit={"by": empty},
)
KNOWN = codec(KnownIncident)
MEMBER = codec(FleetMember, keys={"version": "v"})
IDENTITY = codec(
    FleetIdentity,
    texts={"founders"},
    # (stored with last_seq before members, as they were first written)
    order=(*(field.name for field in fields(KnownIncident)), "since", "first_seq", "last_seq", "members", "founders"),
)
RECENT = codec(
    Recent,
    # A group's head keeps one of these per recent member: short keys keep the head small.
    keys={"opened_at": "t", "severity": "s", "fault_class": "c", "title": "ti", "xid": "x"},
    texts={"title"},
)
JOURNAL = codec(JournalEntry)
STATUS = codec(StatusFact)
TASK = codec(TaskStopFact)
QUARANTINE = codec(QuarantineFact)
NOTE = codec(ResumeNote, texts={"title", "text", "summary", "held"})
NOTICE = codec(NoticeFact, omit={"note": absent})
ACTION = codec(ActionFact, omit={"dedup_key": absent})
"""(An action stored before the dedup key was kept has none, and the incident it was matched to.)"""
DELIVERY = codec(Delivery)
LEASE = codec(Lease)
BACKOFF = codec(Backoff)
INSTANCE_FACTS = codec(InstanceRecord, only=("statuses", "tasks", "quarantine", "notices", "actions"))
"""The `inst` part: the instance-level facts of a record."""

instance_to_dict, instance_from_dict = INSTANCE.encode, INSTANCE.decode
known_list_to_dict, known_list_from_dict = KNOWN.encode_all, KNOWN.decode_all
member_to_dict, member_from_dict = MEMBER.encode, MEMBER.decode
fleet_identities_to_dict, fleet_identities_from_dict = IDENTITY.encode_all, IDENTITY.decode_all
journal_to_dict, journal_from_dict = JOURNAL.encode, JOURNAL.decode
instance_facts_to_dict = INSTANCE_FACTS.encode
note_to_dict, note_from_dict = NOTE.encode, NOTE.decode
action_to_dict, action_from_dict = ACTION.encode, ACTION.decode
delivery_to_dict, delivery_from_dict = DELIVERY.encode, DELIVERY.decode
lease_to_dict, lease_from_dict = LEASE.encode, LEASE.decode
backoff_to_dict, backoff_from_dict = BACKOFF.encode, BACKOFF.decode


# --- Check parts ---------------------------------------------------------------------------------------


def check_to_dict(record: InstanceRecord, check: str) -> dict[str, Any]:
    return {
        "type": check,
        "facts": HEALTH.encode_all(record.health.get(check, [])),
        "incidents": KNOWN.encode_all(record.incidents.get(check, [])),
    }


def check_from_dict(data: dict[str, Any]) -> tuple[str, list[HealthFact], list[KnownIncident]]:
    check = str(data["type"])
    facts = [HEALTH.decode(fact, check_type=check) for fact in data.get("facts") or []]
    incidents = KNOWN.decode_all(data.get("incidents"))
    _in_range(*(moment for f in facts for moment in (f.at, f.updated)))
    _in_range(*(moment for k in incidents for moment in (k.anchor, k.opened_at, k.closed_at, k.known_at)))
    return check, facts, incidents


def _in_range(*moments: datetime | None) -> None:
    """A stored time an event could not carry today (before EARLIEST: Go's zero time, stored before events were
    bounded) makes its part unreadable: it must never reach the lifecycle's arithmetic."""
    for moment in moments:
        if moment is not None and moment < EARLIEST:
            raise ValueError(f"a stored time ({moment.isoformat()}) is before {EARLIEST.date().isoformat()}")


# --- A group's recent members --------------------------------------------------------------------------


def recent_to_dict(instance_arn: str, recent: Recent) -> dict[str, Any]:
    return {"a": instance_arn, **RECENT.encode(recent)}


def recent_from_dict(data: dict[str, Any]) -> tuple[str, Recent]:
    return str(data["a"]), RECENT.decode(data)


# --- Instance-level facts -----------------------------------------------------------------------------


def has_instance_facts(record: InstanceRecord) -> bool:
    return any(getattr(record, name) for name in INSTANCE_FACTS.names)


def apply_instance_facts(record: InstanceRecord, data: dict[str, Any]) -> None:
    """The instance-level facts of `data` set on `record`, all or none (UNREADABLE if any cannot be read)."""
    read = INSTANCE_FACTS.decode(data, arn=record.arn, instance=record.instance)
    _in_range(*(f.at for f in read.statuses), *(f.at for f in read.tasks), *(f.at for f in read.actions))
    _in_range(
        *(moment for f in read.notices for moment in (f.fault_at, f.at)),
        read.quarantine.at if read.quarantine else None,
    )
    for name in INSTANCE_FACTS.names:
        setattr(record, name, getattr(read, name))


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
