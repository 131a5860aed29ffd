"""The stored shape of every record part stays what it was: the codecs derived from the dataclasses
(fault_responder.adapters.serialization) write byte for byte what the hand-written encoders wrote, and read what they
wrote and what older items hold as the hand-written decoders did.

tests/snapshots/records/encodings.json was captured once from the hand-written encoders and decoders these codecs
replaced, over the cases below: for each case, what was written (`encoded`) and what reading it gave back (`decoded`,
the record's repr); for each older or damaged item, what reading it gave (`repr`) or the exception it raised. It is
never regenerated from the codecs: a change of a stored shape is a change of the table's format, not of a snapshot.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from fault_responder.adapters import serialization as codecs
from fault_responder.adapters.codecs import Codec
from fault_responder.core.domain import FaultClass, FleetMember, InstanceRef, ResumeNote, Severity
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

GOLDEN = Path(__file__).resolve().parents[1] / "snapshots" / "records" / "encodings.json"
AT = datetime(2026, 4, 11, 0, 48, 53, 123456, tzinfo=UTC)
LATER = AT + timedelta(minutes=8, seconds=30)
ELSEWHERE = datetime(2026, 4, 11, 2, 0, 0, tzinfo=timezone(timedelta(hours=2)))
ARN = "arn:aws:ecs:us-west-2:123456789012:container-instance/gpu-training/a1b2c3d4e5f6"
INSTANCE = InstanceRef(
    "us-west-2", "123456789012", "arn:aws:ecs:us-west-2:123456789012:cluster/gpu-training", ARN, "i-0abc", "p5"
)
ALARM = InstanceRef(
    "us-east-1",
    "210987654321",
    "",
    "arn:aws:cloudwatch:us-east-1:210987654321:alarm:hot#c:gpu-3",
    None,
    None,
    drill=True,
    attributes=(("InstanceId", "i-0def"), ("GPU", "3")),
)
NOTE = ResumeNote(
    "Training resumed",
    "job-7 resumed from step 1200 on i-0abc",
    "resumed: XID 79 on i-0abc",
    Severity.WARNING,
    pagerduty="change",
    dedup_key="fp-1",
    job_id="job-7",
    approval_id="ap-1",
    held=("pagerduty", "slack-ml"),
)
KNOWN = KnownIncident(
    "fp-1@2026-04-11T00:48:53+00:00",
    "ACCELERATED_COMPUTE",
    AT,
    receivers=["slack", "pagerduty"],
    route="gpu",
    fleet="fleet:fp-9@2026-04-11T00:40:00+00:00",
    status="CLOSED",
    opened_at=AT,
    closed_at=LATER,
    phase="RECOVERED",
    severity="critical",
    title="XID 79: GPU has fallen off the bus",
    fault_class="xid_critical",
    xid=79,
    known_at=ELSEWHERE,
    found="found by the sweep: the event was missed",
)
MEMBER = FleetMember(
    INSTANCE,
    "fp-1@x",
    AT,
    LATER,
    Severity.CRITICAL,
    FaultClass.XID_CRITICAL,
    "XID 79",
    79,
    "RECOVERED",
    12,
    fleet="fleet:fp-9@y",
    told="LEFT",
)
OPEN_MEMBER = FleetMember(ALARM, "fp-2@x", AT, None, Severity.INFO, FaultClass.ALARM, "hot", None, "IMPAIRED", 1)


def rich_record() -> InstanceRecord:
    record = InstanceRecord(ARN, INSTANCE, version=7)
    record.health["ACCELERATED_COMPUTE"] = [
        HealthFact("ACCELERATED_COMPUTE", "IMPAIRED", AT, "evt-1", "XID 79", updated=LATER, by="drill-author"),
        HealthFact("ACCELERATED_COMPUTE", "OK", LATER, "evt-2"),
        HealthFact("ACCELERATED_COMPUTE", "IMPAIRED", ELSEWHERE, "reconcile:1", "", by=""),
    ]
    record.incidents["ACCELERATED_COMPUTE"] = [KNOWN, KnownIncident("fp-2@z", "ACCELERATED_COMPUTE", LATER)]
    record.incidents["CONTAINER_RUNTIME"] = [KnownIncident("fp-3@z", "CONTAINER_RUNTIME", AT, receivers=["slack"])]
    record.health["AGENT"] = [HealthFact("AGENT", "INSUFFICIENT_DATA", AT, "evt-3", None, updated=None, by=None)]
    record.statuses = [StatusFact("DRAINING", AT, "evt-4", 3, "auto-repair"), StatusFact("INACTIVE", LATER, "evt-5")]
    record.tasks = [
        TaskStopFact("arn:aws:ecs:us-west-2:1:task/gpu/abc", AT, "evt-6", "train", "Task stopped", "SpotInterruption"),
        TaskStopFact("arn:aws:ecs:us-west-2:1:task/gpu/def", LATER, "evt-7", "train", "drained", drained=True),
    ]
    record.quarantine = QuarantineFact(AT, "quarantined by the resume workflow")
    record.notices = [
        NoticeFact("n-1", "ACCELERATED_COMPUTE", AT, LATER, "Resumed", pages=True, kind="resumed", note=NOTE),
        NoticeFact("n-2", "ACCELERATED_COMPUTE", AT, LATER, "Gave up"),
        NoticeFact("n-3", "AGENT", AT, LATER, "Held", kind="give_up", note=ResumeNote("t", "x", "s", Severity.INFO)),
    ]
    record.actions = [ACTION, BARE_ACTION]
    return record


ACTION = ActionFact("a-1", "fp-1@x", "acknowledge", "slack", "U123", AT, note="on it", dedup_key="fp-1")
BARE_ACTION = ActionFact("a-2", None, "resolve", "pagerduty", "P123", LATER)
DELIVERY = Delivery(
    "slack",
    "fp-1@x",
    channel="C123",
    ts="1712796533.000100",
    pending=[Pending("fp-1@x#j:000000000001", AT, "worker-1"), Pending("fp-1@x", LATER, "worker-2")],
    digest="abc123",
    steps=["drain:evt-4", "j:000000000002"],
    alert="trigger",
    incident="fp-1@x",
    last_at=LATER,
    severity="critical",
    acked="a-1",
    cursor=0,
)
IDENTITY = FleetIdentity(
    "fleet:fp-9@y",
    "ACCELERATED_COMPUTE",
    AT,
    receivers=["slack"],
    route="gpu-fleet",
    fleet="fleet:outer",
    status="CLOSED",
    opened_at=AT,
    closed_at=LATER,
    phase="RECOVERED",
    severity="critical",
    title="3 hosts",
    fault_class="xid_critical",
    xid=79,
    known_at=AT,
    found="found by the sweep: the event was missed",
    since=AT - timedelta(minutes=10),
    first_seq=4,
    members=17,
    last_seq=40,
    founders=["d1", "d2", "d3"],
)


RECENT = Recent(AT, Severity.ERROR, FaultClass.DAEMON, "daemon", 12)
JOURNAL = JournalEntry(41, "fleet:fp-9@y", Told.JOINED, MEMBER, LATER, 1712796533.25)
LEASE = Lease("slack", "worker-1", 1712796533.75)
BACKOFF = Backoff("pagerduty", 3, 1712796533.5, 1712796593.0)


def _facts(data: dict[str, Any]) -> InstanceRecord:
    record = InstanceRecord(ARN, INSTANCE)
    codecs.apply_instance_facts(record, data)
    return record


Encode = Callable[[], Any]
Decode = Callable[[Any], Any]

CASES: dict[str, tuple[Encode, Decode]] = {
    "instance": (lambda: codecs.instance_to_dict(INSTANCE), codecs.instance_from_dict),
    "instance_alarm_drill": (lambda: codecs.instance_to_dict(ALARM), codecs.instance_from_dict),
    "check_rich": (lambda: codecs.check_to_dict(rich_record(), "ACCELERATED_COMPUTE"), codecs.check_from_dict),
    "check_incidents_only": (lambda: codecs.check_to_dict(rich_record(), "CONTAINER_RUNTIME"), codecs.check_from_dict),
    "check_facts_only": (lambda: codecs.check_to_dict(rich_record(), "AGENT"), codecs.check_from_dict),
    "check_none": (lambda: codecs.check_to_dict(rich_record(), "NONE"), codecs.check_from_dict),
    "known_list": (
        lambda: codecs.known_list_to_dict([KNOWN, KnownIncident("i", "c", AT)]),
        codecs.known_list_from_dict,
    ),
    "member": (lambda: codecs.member_to_dict(MEMBER), codecs.member_from_dict),
    "member_open": (lambda: codecs.member_to_dict(OPEN_MEMBER), codecs.member_from_dict),
    "fleet_identities": (
        lambda: codecs.fleet_identities_to_dict([IDENTITY, FleetIdentity("fleet:f@z", "AGENT", LATER)]),
        codecs.fleet_identities_from_dict,
    ),
    "recent": (lambda: codecs.recent_to_dict(ARN, RECENT), codecs.recent_from_dict),
    "recent_no_xid": (
        lambda: codecs.recent_to_dict(ARN, Recent(LATER, Severity.INFO, FaultClass.ALARM, "hot")),
        codecs.recent_from_dict,
    ),
    "journal": (lambda: codecs.journal_to_dict(JOURNAL), codecs.journal_from_dict),
    "journal_open_member": (
        lambda: codecs.journal_to_dict(JournalEntry(1, "fleet:f", Told.LEFT, OPEN_MEMBER, AT, 1712796533.0)),
        codecs.journal_from_dict,
    ),
    "instance_facts": (lambda: codecs.instance_facts_to_dict(rich_record()), _facts),
    "instance_facts_empty": (
        lambda: codecs.instance_facts_to_dict(InstanceRecord(ARN, INSTANCE)),
        _facts,
    ),
    "note": (lambda: codecs.note_to_dict(NOTE), codecs.note_from_dict),
    "note_bare": (lambda: codecs.note_to_dict(ResumeNote("t", "x", "s", Severity.CRITICAL)), codecs.note_from_dict),
    "action": (lambda: codecs.action_to_dict(ACTION), codecs.action_from_dict),
    "action_bare": (lambda: codecs.action_to_dict(BARE_ACTION), codecs.action_from_dict),
    "delivery": (lambda: codecs.delivery_to_dict(DELIVERY), codecs.delivery_from_dict),
    "delivery_bare": (lambda: codecs.delivery_to_dict(Delivery("pagerduty", "fp-1@x")), codecs.delivery_from_dict),
    "lease": (lambda: codecs.lease_to_dict(LEASE), codecs.lease_from_dict),
    "lease_whole": (lambda: codecs.lease_to_dict(Lease("slack", "w", 1712796533.0)), codecs.lease_from_dict),
    "backoff": (lambda: codecs.backoff_to_dict(BACKOFF), codecs.backoff_from_dict),
}


def _bare(**extra: Any) -> dict[str, Any]:
    return {"id": "fp-1@x", "check_type": "ACCELERATED_COMPUTE", "anchor": AT.isoformat(), **extra}


_MEMBER = {
    "instance": codecs.instance_to_dict(INSTANCE),
    "incident": "fp-1@x",
    "opened_at": AT.isoformat(),
    "severity": "critical",
    "fault_class": "xid_critical",
    "title": "XID 79",
    "phase": "IMPAIRED",
    "v": 3,
}
_NOTE = {"title": "t", "text": "x", "summary": "s", "severity": "info"}
_FACT = {"status": "IMPAIRED", "at": AT.isoformat(), "event_id": "e"}

OLDER: dict[str, tuple[Decode, Any]] = {
    # Older items: the fields added since are missing (or null), and unknown fields are ignored (but an instance's).
    "known_old": (codecs.known_list_from_dict, [_bare(), _bare(status="", receivers=None, xid=None, unknown=1)]),
    "known_numbers_as_text": (codecs.known_list_from_dict, [_bare(xid="79", receivers=("a", "b"), status="CLOSED")]),
    "known_none": (codecs.known_list_from_dict, None),
    "check_old": (codecs.check_from_dict, {"type": "ACCELERATED_COMPUTE"}),
    "check_old_facts": (
        codecs.check_from_dict,
        {"type": "X", "facts": [_FACT, {**_FACT, "reason": "", "updated": "", "by": None}], "incidents": None},
    ),
    "member_old": (codecs.member_from_dict, {**_MEMBER, "closed_at": None, "xid": None, "extra": "x"}),
    "member_text_numbers": (
        codecs.member_from_dict,
        {**_MEMBER, "xid": "79", "v": "4", "fleet": "f", "told": "JOINED"},
    ),
    "identities_old": (
        codecs.fleet_identities_from_dict,
        [_bare(), _bare(first_seq=None, members=0, last_seq=None, founders=None, since="")],
    ),
    "identities_founders": (codecs.fleet_identities_from_dict, [_bare(founders=[1, "d2"], members="5", first_seq="2")]),
    "recent_old": (codecs.recent_from_dict, {"a": 5, "t": AT.isoformat(), "s": "error", "c": "daemon", "ti": 7}),
    "journal_old": (
        codecs.journal_from_dict,
        {"seq": "3", "fleet": "f", "told": "LEFT", "member": _MEMBER, "at": AT.isoformat(), "written": 1700000000},
    ),
    "facts_old": (
        _facts,
        {"statuses": [{"status": "DRAINING", "at": AT.isoformat(), "event_id": "e"}]},
    ),
    "facts_nulls": (
        _facts,
        {
            "statuses": None,
            "quarantine": {},
            "actions": [{"key": "k", "kind": "resolve", "via": "slack", "by": "U", "at": AT.isoformat()}],
            "tasks": [
                {"task_arn": "t", "at": AT.isoformat(), "event_id": "e", "family": "f", "reason": "r", "drained": None}
            ],
            "notices": [
                {
                    "key": "n",
                    "check_type": "c",
                    "fault_at": AT.isoformat(),
                    "at": AT.isoformat(),
                    "title": "t",
                    "pages": 1,
                    "note": {},
                }
            ],
        },
    ),
    "facts_quarantine_old": (_facts, {"quarantine": {"at": AT.isoformat()}, "unknown": [1]}),
    "facts_note_held": (
        _facts,
        {
            "notices": [
                {
                    "key": "n",
                    "check_type": "c",
                    "fault_at": AT.isoformat(),
                    "at": AT.isoformat(),
                    "title": "t",
                    "note": {**_NOTE, "title": 5, "held": ["slack", 7], "pagerduty": "trigger"},
                }
            ]
        },
    ),
    "note_old": (codecs.note_from_dict, _NOTE),
    "action_old": (
        codecs.action_from_dict,
        {"key": "k", "kind": "resolve", "via": "pagerduty", "by": "P", "at": AT.isoformat()},
    ),
    "delivery_old": (codecs.delivery_from_dict, {"receiver": "slack", "subject": "s", "cursor": None, "other": True}),
    "delivery_text_numbers": (
        codecs.delivery_from_dict,
        {"receiver": "slack", "subject": "s", "cursor": "5", "steps": None},
    ),
    "lease_int": (codecs.lease_from_dict, {"receiver": "slack", "owner": "w", "until": 1700000000}),
    "backoff_text": (codecs.backoff_from_dict, {"receiver": "r", "failures": "2", "since": "1.5", "retry_at": 2}),
    "instance_old": (
        codecs.instance_from_dict,
        {k: v for k, v in codecs.instance_to_dict(INSTANCE).items() if k != "drill"},
    ),
    "instance_attributes_null": (codecs.instance_from_dict, {**codecs.instance_to_dict(INSTANCE), "attributes": None}),
    # Damaged items: each refused as the hand-written decoders refused it (the same exception).
    "bad_instance_unknown_field": (codecs.instance_from_dict, {**codecs.instance_to_dict(INSTANCE), "zone": "a"}),
    "bad_instance_missing": (codecs.instance_from_dict, {"region": "r", "account": "a", "cluster_arn": "c"}),
    "bad_instance_attribute": (codecs.instance_from_dict, {**codecs.instance_to_dict(ALARM), "attributes": [["a"]]}),
    "bad_known_anchor": (codecs.known_list_from_dict, [_bare(anchor="")]),
    "bad_known_missing": (codecs.known_list_from_dict, [{"id": "x", "anchor": AT.isoformat()}]),
    "bad_known_xid": (codecs.known_list_from_dict, [_bare(xid="seventy-nine")]),
    "bad_known_time": (codecs.known_list_from_dict, [_bare(opened_at="yesterday")]),
    "bad_check_old_time": (
        codecs.check_from_dict,
        {"type": "X", "facts": [{**_FACT, "at": "0001-01-01T00:00:00+00:00"}]},
    ),
    "bad_member_severity": (codecs.member_from_dict, {**_MEMBER, "severity": "dire"}),
    "bad_member_missing_phase": (codecs.member_from_dict, {k: v for k, v in _MEMBER.items() if k != "phase"}),
    "bad_member_not_a_dict": (codecs.member_from_dict, ["instance"]),
    "bad_journal_told": (
        codecs.journal_from_dict,
        {"seq": 1, "fleet": "f", "told": "MAYBE", "member": _MEMBER, "at": AT.isoformat(), "written": 1},
    ),
    "bad_facts_task": (
        _facts,
        {"tasks": [{"task_arn": "t", "at": AT.isoformat(), "event_id": "e"}]},
    ),
    "bad_facts_action_time": (
        _facts,
        {"actions": [{"key": "k", "kind": "resolve", "via": "slack", "by": "U", "at": None}]},
    ),
    "bad_note_severity": (codecs.note_from_dict, {**_NOTE, "severity": None}),
    "bad_delivery_pending": (
        codecs.delivery_from_dict,
        {"receiver": "r", "subject": "s", "pending": [{"marker": "m"}]},
    ),
    "bad_delivery_cursor": (codecs.delivery_from_dict, {"receiver": "r", "subject": "s", "cursor": "next"}),
    "bad_lease_until": (codecs.lease_from_dict, {"receiver": "r", "owner": "o", "until": None}),
    "bad_backoff_missing": (codecs.backoff_from_dict, {"receiver": "r", "failures": 1, "since": 1}),
}


def decoded(decode: Decode, data: Any) -> dict[str, str]:
    """What reading `data` gives: the record's repr, or the exception's class."""
    try:
        return {"repr": repr(decode(data))}
    except codecs.UNREADABLE as error:
        return {"raises": type(error).__name__}


def capture() -> dict[str, Any]:
    """What the encoders and decoders of fault_responder.adapters.serialization write and read for every case."""
    encodings = {}
    for name, (encode, decode) in CASES.items():
        data = encode()
        encodings[name] = {"encoded": data, "decoded": decoded(decode, json.loads(json.dumps(data)))}
    return {"cases": encodings, "older": {name: decoded(decode, data) for name, (decode, data) in OLDER.items()}}


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(GOLDEN.read_text())
    return loaded


def same(written: Any, expected: Any) -> bool:
    """Equal, and of the same types all the way down (a tuple where a list was is another item for DynamoDB)."""
    if type(written) is not type(expected):
        return False
    if isinstance(expected, dict):
        return list(written) == list(expected) and all(same(written[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        return len(written) == len(expected) and all(same(w, e) for w, e in zip(written, expected, strict=True))
    return bool(written == expected)


def test_the_snapshot_covers_every_case(golden: dict[str, Any]) -> None:
    assert sorted(golden["cases"]) == sorted(CASES)
    assert sorted(golden["older"]) == sorted(OLDER)


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_is_written_is_what_was_written(name: str, golden: dict[str, Any]) -> None:
    encode, _ = CASES[name]
    written = encode()
    expected = golden["cases"][name]["encoded"]
    assert same(written, expected), f"{name}: {written!r} != {expected!r}"
    assert json.dumps(written) == json.dumps(expected)


@pytest.mark.parametrize("name", sorted(CASES))
def test_what_was_written_reads_back_as_before(name: str, golden: dict[str, Any]) -> None:
    _, decode = CASES[name]
    assert decoded(decode, golden["cases"][name]["encoded"]) == golden["cases"][name]["decoded"]


@pytest.mark.parametrize("name", sorted(OLDER))
def test_older_and_damaged_items_read_as_before(name: str, golden: dict[str, Any]) -> None:
    decode, data = OLDER[name]
    assert decoded(decode, data) == golden["older"][name]


def test_the_cases_populate_every_field_of_every_stored_record() -> None:
    """Each stored dataclass's fields each hold a value other than their default in some case (the snapshot proves
    nothing about a field it never saw set)."""
    shown = {
        InstanceRef: [INSTANCE, ALARM],
        HealthFact: rich_record().health["ACCELERATED_COMPUTE"],
        KnownIncident: [KNOWN],
        FleetMember: [MEMBER, OPEN_MEMBER],
        FleetIdentity: [IDENTITY],
        StatusFact: rich_record().statuses,
        TaskStopFact: rich_record().tasks,
        QuarantineFact: [rich_record().quarantine],
        NoticeFact: rich_record().notices,
        ResumeNote: [NOTE],
        ActionFact: [ACTION],
        Delivery: [DELIVERY],
        Pending: DELIVERY.pending,
        Recent: [RECENT],
        JournalEntry: [JOURNAL],
        Lease: [LEASE],
        Backoff: [BACKOFF],
    }
    for cls, instances in shown.items():
        for field in dataclasses.fields(cls):  # type: ignore[arg-type]
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            assert any(getattr(one, field.name) not in (None, default) for one in instances), (cls, field.name)


@dataclasses.dataclass(frozen=True)
class _Leaf:
    at: datetime
    severity: Severity | None = None


@dataclasses.dataclass
class _Tree:
    name: str
    leaves: dict[str, list[_Leaf]]
    pairs: tuple[tuple[str, int], ...] = ()
    kinds: list[FaultClass] = dataclasses.field(default_factory=list)
    parent: _Leaf | None = None
    count: int = 0


def test_a_derived_codec_writes_and_reads_nested_records_mappings_tuples_and_enums() -> None:
    tree_codec: Codec[_Tree] = Codec(_Tree)
    tree = _Tree(
        "t",
        {"a": [_Leaf(AT, Severity.INFO), _Leaf(LATER)], "b": []},
        pairs=(("x", 1), ("y", 2)),
        kinds=[FaultClass.DAEMON],
        parent=_Leaf(ELSEWHERE),
        count=3,
    )
    written = tree_codec.encode(tree)
    assert written == {
        "name": "t",
        "leaves": {
            "a": [{"at": AT.isoformat(), "severity": "info"}, {"at": LATER.isoformat(), "severity": None}],
            "b": [],
        },
        "pairs": [["x", 1], ["y", 2]],
        "kinds": ["daemon"],
        "parent": {"at": ELSEWHERE.isoformat(), "severity": None},
        "count": 3,
    }
    assert tree_codec.decode(json.loads(json.dumps(written))) == tree
    assert tree_codec.decode({"name": "t", "leaves": {}, "parent": {}, "count": "4"}) == _Tree("t", {}, count=4)
    with pytest.raises(ValueError, match="expected 2 values"):
        tree_codec.decode({"name": "t", "leaves": {}, "pairs": [["x", 1, 2]]})
    with pytest.raises(KeyError):
        tree_codec.decode({"name": "t"})


def test_a_codec_refuses_options_that_name_no_field() -> None:
    with pytest.raises(ValueError, match="no field"):
        Codec(_Tree, keys={"nmae": "n"})
    with pytest.raises(ValueError, match="each stored field once"):
        Codec(_Leaf, order=("at",))
