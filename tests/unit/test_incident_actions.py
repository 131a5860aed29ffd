"""People's actions on incidents (fault_responder.incidents.incident_actions) through AlertService, with the in-memory
store and the channels that record what would be sent: the envelope's rules, which incident an action lands on, and
what it changes in the derived incident, its timeline and the deliveries."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fault_responder.adapters.serialization import (
    action_from_dict,
    action_to_dict,
    apply_instance_facts,
    delivery_from_dict,
    delivery_to_dict,
    instance_facts_to_dict,
)
from fault_responder.incidents.incident_actions import (
    ACTIONS_SOURCE,
    ActionKind,
    BadAction,
    IncidentAction,
    Via,
    is_action,
    parse_action,
)
from fault_responder.incidents.record import InstanceRecord, ReportedAction, action_fact
from fault_responder.notification.buttons import BadRequest, IncidentButton
from tests.conftest import load_event
from tests.unit.test_lifecycle import INSTANCE, KEY, World, what

XID46 = "aws-docs/health-change-accelerated-compute-xid46.json"
OK = "health/accelerated-compute-xid46-ok.json"
INCIDENT = f"{KEY}@2026-04-11T00:48:53+00:00"
AT = datetime(2026, 4, 11, 0, 55, tzinfo=UTC)


def action(kind: ActionKind, key: str = "a1", *, via: Via = Via.SLACK, **changes: Any) -> IncidentAction:
    base = IncidentAction(
        key=f"{via.value}:{key}",
        kind=kind,
        via=via,
        by="Jane Doe (U0JANEDOE1)",
        at=AT,
        record=INSTANCE if via is Via.SLACK else None,
        incident=INCIDENT if via is Via.SLACK else None,
        dedup_key=KEY if via is Via.PAGERDUTY else None,
    )
    return replace(base, **changes)


@pytest.fixture
def paged() -> World:
    world = World()
    world.send(load_event(XID46))
    return world


def act(world: World, done: IncidentAction) -> list[tuple[str, str]]:
    return what(world.send(done.envelope("us-west-2", "123456789012")))


# --- The envelope ------------------------------------------------------------------------------------


def test_an_action_survives_its_envelope() -> None:
    sent = action(ActionKind.SILENCE, note="for 1 h")
    envelope = sent.envelope("us-west-2", "123456789012")
    assert is_action(envelope) and envelope["source"] == ACTIONS_SOURCE
    assert parse_action(envelope) == sent


@pytest.mark.parametrize(
    "change",
    [
        {"id": "slack:"},
        {"id": "email:abc"},
        {"id": "slack:" + "x" * 200},
        {"detail-type": "ECS Container Instance Health Change"},
        {"detail": None},
        {"detail": {"kind": "acknowledge"}},
    ],
)
def test_a_malformed_envelope_is_refused_with_a_reason(change: dict[str, Any]) -> None:
    envelope = {**action(ActionKind.ACKNOWLEDGE).envelope("us-west-2", "1"), **change}
    with pytest.raises(BadAction):
        parse_action(envelope)


def test_a_naive_time_and_a_record_without_its_incident_are_refused() -> None:
    envelope = action(ActionKind.ACKNOWLEDGE).envelope("us-west-2", "1")
    envelope["detail"]["at"] = "2026-04-11T00:55:00"
    with pytest.raises(BadAction, match="time zone"):
        parse_action(envelope)
    envelope = action(ActionKind.ACKNOWLEDGE, incident=None).envelope("us-west-2", "1")
    with pytest.raises(BadAction, match="incident"):
        parse_action(envelope)


@pytest.mark.parametrize(
    "at", ["0001-01-01T00:00:00+14:00", "0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "9999-12-31T23:00:00-14:00"]
)
def test_an_action_time_out_of_range_is_refused_with_its_reason_never_raised_on_every_receive(at: str) -> None:
    # Go's zero time in a zone east of UTC is in the year 0 in UTC: out of range, as a refusal, not an OverflowError
    envelope = action(ActionKind.ACKNOWLEDGE).envelope("us-west-2", "1")
    envelope["detail"]["at"] = at
    with pytest.raises(BadAction, match=r"malformed action detail: \['at'\]"):
        parse_action(envelope)


def test_who_is_one_line_of_text() -> None:
    envelope = action(ActionKind.ACKNOWLEDGE, by="Jane\n<!channel>\x00").envelope("us-west-2", "1")
    assert "\n" not in parse_action(envelope).by


def test_an_incident_button_value_round_trips_and_refuses_anything_else() -> None:
    button = IncidentButton(record=INSTANCE, incident=INCIDENT, cluster="my-cluster", instance="a1b2c3d4EXAMPLE")
    assert IncidentButton.parse(button.value()) == button
    for bad in ["", "[]", '{"r": "x"}', '{"r": 1, "i": "x", "c": "y", "n": "z"}', "not json"]:
        with pytest.raises(BadRequest):
            IncidentButton.parse(bad)


# --- Which incident ----------------------------------------------------------------------------------


def test_an_action_for_an_unknown_incident_of_a_known_record_is_kept_and_told_to_nobody(paged: World) -> None:
    # Given an incident that paged; When a press names an incident of the check that never was
    sent = act(paged, action(ActionKind.ACKNOWLEDGE, incident=f"{KEY}@2020-01-01T00:00:00+00:00"))
    # Then nothing is sent and the incident is unchanged, but the action is kept (a late fact may yet make it match)
    assert sent == []
    assert paged.incident().acknowledged is None
    assert all(entry.kind != "action" for entry in paged.incident().timeline)
    record = paged.store.load(INSTANCE)
    assert record is not None and [a.key for a in record.actions] == ["slack:a1"]


def test_a_pagerduty_action_lands_on_the_incident_of_its_alert_open_at_its_time(paged: World) -> None:
    act(paged, action(ActionKind.ACKNOWLEDGE, via=Via.PAGERDUTY, by="Tenex Engineer"))
    incident = paged.incident()
    assert incident.acknowledged is not None and incident.acknowledged.by == "Tenex Engineer"


def test_an_action_keeps_what_it_named_and_an_action_stored_before_reads_back() -> None:
    # Given an action by dedup key, one by incident id, and one as stored before the dedup key was kept
    by_key = ReportedAction("pagerduty:e1", "resolve", "pagerduty", "Tenex Engineer", AT, dedup_key=KEY)
    by_id = ReportedAction("slack:s1", "acknowledge", "slack", "Jane", AT, incident=INCIDENT)
    stored_before = {
        "key": "pagerduty:e0",
        "incident": INCIDENT,
        "kind": "acknowledge",
        "via": "pagerduty",
        "by": "Tenex Engineer",
        "at": "2026-04-11T00:50:00+00:00",
        "note": None,
    }
    # When they are stored and read back
    facts = [action_fact(by_key), action_fact(by_id)]
    read = [action_from_dict(action_to_dict(fact)) for fact in facts]
    # Then each names its incident as it did, and the old one reads with the incident it was matched to
    assert read == facts
    assert (read[0].incident, read[0].dedup_key) == (None, KEY)
    assert (read[1].incident, read[1].dedup_key) == (INCIDENT, None)
    assert "dedup_key" not in action_to_dict(facts[1])
    old = action_from_dict(stored_before)
    assert (old.incident, old.dedup_key, old.at) == (INCIDENT, None, datetime(2026, 4, 11, 0, 50, tzinfo=UTC))


# --- What it changes ---------------------------------------------------------------------------------


def test_acknowledge_from_slack_is_sent_to_pagerduty_once_and_a_copy_adds_nothing(paged: World) -> None:
    assert ("pagerduty", "acknowledge") in act(paged, action(ActionKind.ACKNOWLEDGE))
    assert act(paged, action(ActionKind.ACKNOWLEDGE)) == []
    incident = paged.incident()
    assert incident.acknowledged is not None and incident.acknowledged.via == "slack"
    assert [e.text for e in incident.timeline if e.kind == "action"] == [
        "Acknowledged by Jane Doe (U0JANEDOE1) from Slack"
    ]


def test_acknowledge_from_pagerduty_is_not_echoed_back(paged: World) -> None:
    sent = act(paged, action(ActionKind.ACKNOWLEDGE, via=Via.PAGERDUTY))
    assert sent == [("slack", "reply"), ("slack", "update")]  # the thread and the root; nothing to PagerDuty


def test_a_second_acknowledge_by_someone_else_is_sent_again(paged: World) -> None:
    act(paged, action(ActionKind.ACKNOWLEDGE))
    sent = act(paged, action(ActionKind.ACKNOWLEDGE, "a2", by="Sam Roe (U0SAMROE01)", at=AT + timedelta(minutes=1)))
    assert ("pagerduty", "acknowledge") in sent
    assert paged.incident().acknowledged is not None
    assert paged.incident().acknowledged.by == "Sam Roe (U0SAMROE01)"  # type: ignore[union-attr]


def test_resolve_closes_the_incident_at_that_moment_and_resolves_its_alert(paged: World) -> None:
    sent = act(paged, action(ActionKind.RESOLVE))
    assert ("pagerduty", "resolve") in sent
    incident = paged.incident()
    assert not incident.is_open and incident.closed_at == AT and incident.phase == "RESOLVED"
    assert incident.close_reason == "resolved by Jane Doe (U0JANEDOE1) from Slack"
    assert incident.resolved_by is not None
    record = paged.store.load(INSTANCE)
    assert record is not None and [k.status for k in record.incidents["ACCELERATED_COMPUTE"]] == ["CLOSED"]


def test_after_a_manual_resolve_the_next_fault_of_the_check_is_a_new_incident_that_pages(paged: World) -> None:
    act(paged, action(ActionKind.RESOLVE))
    paged.send(load_event(OK))
    again = load_event(XID46)
    again["id"] = "xid46-again"
    again["detail"]["healthChecks"][0]["lastStatusChange"] = "2026-04-11T03:00:00Z"
    sent = paged.send(again)
    assert ("pagerduty", "trigger") in what(sent)
    assert [i.is_open for i in paged.incidents()] == [False, True]


def test_an_action_after_the_incident_ended_changes_nothing(paged: World) -> None:
    paged.send(load_event(OK))
    late = AT + timedelta(days=1)
    assert act(paged, action(ActionKind.RESOLVE, at=late)) == []
    assert act(paged, action(ActionKind.ACKNOWLEDGE, "a9", at=late)) == []
    assert all(entry.kind != "action" for entry in paged.incident().timeline)


def test_unacknowledge_takes_the_acknowledgement_back_and_reassign_names_the_assignees(paged: World) -> None:
    act(paged, action(ActionKind.ACKNOWLEDGE, "e1", via=Via.PAGERDUTY))
    act(paged, action(ActionKind.REASSIGN, "e2", via=Via.PAGERDUTY, note="to Maeve", at=AT + timedelta(minutes=1)))
    act(paged, action(ActionKind.UNACKNOWLEDGE, "e3", via=Via.PAGERDUTY, at=AT + timedelta(minutes=2)))
    incident = paged.incident()
    assert incident.acknowledged is None
    assert incident.assigned is not None and incident.assigned.note == "to Maeve"
    assert [e.phase for e in incident.timeline if e.kind == "action"] == [
        "ACKNOWLEDGED",
        "REASSIGNED",
        "UNACKNOWLEDGED",
    ]


def test_actions_are_applied_in_time_order_whatever_order_they_arrive_in() -> None:
    early = action(ActionKind.ACKNOWLEDGE, "e1", via=Via.PAGERDUTY)
    late = action(ActionKind.UNACKNOWLEDGE, "e2", via=Via.PAGERDUTY, at=AT + timedelta(minutes=5))
    seen = []
    for order in ([early, late], [late, early]):
        world = World()
        world.send(load_event(XID46))
        for done in order:
            act(world, done)
        seen.append((world.incident().acknowledged, [e.key for e in world.incident().timeline]))
    assert seen[0] == seen[1]
    assert seen[0][0] is None


def test_actions_and_the_acknowledged_delivery_survive_the_store() -> None:
    world = World()
    world.send(load_event(XID46))
    act(world, action(ActionKind.ACKNOWLEDGE))
    record = world.store.load(INSTANCE)
    assert record is not None and len(record.actions) == 1
    copy = InstanceRecord(record.arn, record.instance)
    apply_instance_facts(copy, instance_facts_to_dict(record))
    assert copy.actions == record.actions
    [pagerduty] = [d for (_, subject), d in record.deliveries.items() if subject.startswith("pd:")]
    assert pagerduty.acked == "slack:a1"
    assert delivery_from_dict(delivery_to_dict(pagerduty)) == pagerduty


def test_the_list_of_actions_is_bounded(paged: World) -> None:
    record = paged.store.load(INSTANCE)
    assert record is not None
    for number in range(80):
        record.add_action(
            ReportedAction(f"slack:k{number}", "silence", "slack", "x", AT + timedelta(seconds=number), INCIDENT)
        )
    assert len(record.actions) == 50
    assert record.actions[0].key == "slack:k30"


def test_an_action_dated_in_the_future_counts_as_of_now(paged: World) -> None:
    before = datetime.now(UTC)
    act(paged, action(ActionKind.RESOLVE, at=datetime(2099, 1, 1, tzinfo=UTC)))
    closed = paged.incident().closed_at
    assert closed is not None and before <= closed <= datetime.now(UTC)


_ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(field=st.sampled_from(["kind", "via", "by", "at", "record", "incident", "dedup_key", "note"]), value=_ANY_JSON)
def test_any_value_in_an_actions_detail_is_read_or_refused_with_a_reason(field: str, value: Any) -> None:
    envelope = action(ActionKind.ACKNOWLEDGE).envelope("us-west-2", "123456789012")
    envelope["detail"][field] = value
    try:
        parsed = parse_action(envelope)
    except BadAction as refused:
        assert str(refused)
    else:
        assert parsed.key == envelope["id"] and parsed.at.tzinfo is not None
