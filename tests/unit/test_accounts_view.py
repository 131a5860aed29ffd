"""`fault-responder accounts`' checks and view (fault_responder.operations.accounts) and its forwarder check
(fault_responder.adapters.forwarder_rules): a few places checked at once, each within its own time box, one that does
not answer reported as such without holding up the others; what makes a place broken; the rules read as EventBridge
answers, its refusals included."""

from __future__ import annotations

import re
import threading
import time
from datetime import UTC, datetime

import boto3
import pytest
from botocore.stub import Stubber

from fault_responder.adapters.forwarder_rules import forwarder_check
from fault_responder.core.places import MemberThrottled, Place
from fault_responder.operations.accounts import (
    ForwarderCheck,
    ForwarderState,
    PlaceCheck,
    PlaceStatus,
    RoleCheck,
    RoleState,
    RuleState,
    render,
    statuses,
    survey,
    view,
)

HOME = Place("123456789012", "us-east-1")
PLACES = [HOME, *(Place(f"22222222220{n}", "us-west-2") for n in range(1, 7))]
FINE = PlaceCheck(RoleCheck(RoleState.ASSUMED), ForwarderCheck.of([RuleState("forward-health", "ENABLED")]))
BUS = "arn:aws:events:us-east-1:123456789012:event-bus/gpu-fault-responder-organization"
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def failed(place: Place, error: Exception) -> PlaceCheck:
    return PlaceCheck(
        RoleCheck(RoleState.FAILED, f"{type(error).__name__}: {error}"), ForwarderCheck(ForwarderState.NOT_CHECKED)
    )


def test_the_forwarder_is_in_place_when_every_rule_sending_to_the_bus_is_enabled() -> None:
    assert ForwarderCheck.of([]).state is ForwarderState.MISSING
    assert "2 other rule(s) send there" in ForwarderCheck.of([], hidden=2).detail
    half = ForwarderCheck.of([RuleState("a", "ENABLED"), RuleState("b", "DISABLED")])
    assert (half.state, half.detail) == (
        ForwarderState.DISABLED,
        "1 of 2 rules that send to the stack's bus are not ENABLED: b (DISABLED)",
    )
    assert ForwarderCheck.of([RuleState("a", "ENABLED")], more=3).state is ForwarderState.IN_PLACE


@pytest.mark.parametrize(
    ("role", "forwarder", "broken"),
    [
        (RoleState.ASSUMED, ForwarderState.IN_PLACE, False),
        (RoleState.OWN, ForwarderState.IN_PLACE, False),
        (RoleState.ASSUMED, ForwarderState.NOT_CHECKED, False),
        (RoleState.NOT_CHECKED, ForwarderState.NOT_CHECKED, False),
        (RoleState.NOT_ENROLLED, ForwarderState.NOT_CHECKED, False),
        (RoleState.NOT_ASSUMABLE, ForwarderState.NOT_CHECKED, True),
        (RoleState.FAILED, ForwarderState.NOT_CHECKED, True),
        (RoleState.TIMED_OUT, ForwarderState.NOT_CHECKED, True),
        (RoleState.ASSUMED, ForwarderState.MISSING, True),
        (RoleState.ASSUMED, ForwarderState.DISABLED, True),
        (RoleState.ASSUMED, ForwarderState.FAILED, True),
    ],
)
def test_a_place_is_broken_when_its_role_or_its_forwarder_is(
    role: RoleState, forwarder: ForwarderState, broken: bool
) -> None:
    status = PlaceStatus(PLACES[1], check=PlaceCheck(RoleCheck(role), ForwarderCheck(forwarder)))
    assert status.broken is broken


def test_no_more_places_are_checked_at_once_than_the_concurrency_and_every_one_is_answered() -> None:
    lock = threading.Lock()
    running, most = 0, 0

    def check(place: Place) -> PlaceCheck:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.02)
        with lock:
            running -= 1
        return FINE

    results = survey(PLACES, check, failed, concurrency=2, box_seconds=30)

    assert set(results) == set(PLACES) and all(result == FINE for result in results.values())
    assert most == 2


def test_a_place_that_does_not_answer_is_timed_out_and_the_others_are_checked_all_the_same() -> None:
    # Given one place whose check never answers (until the test ends), and one that raises
    stuck, released = PLACES[2], threading.Event()

    def check(place: Place) -> PlaceCheck:
        if place == stuck:
            released.wait()
        if place == PLACES[3]:
            raise RuntimeError("the endpoint is gone")
        return FINE

    # When they are checked, one at a time, each within 0.2 s
    try:
        results = survey(PLACES, check, failed, concurrency=1, box_seconds=0.2)
    finally:
        released.set()

    # Then the stuck one is timed out, the one that raised failed, and every other one was checked
    assert results[stuck].role == RoleCheck(RoleState.TIMED_OUT, "no answer within 0.2s")
    assert results[PLACES[3]].role == RoleCheck(RoleState.FAILED, "RuntimeError: the endpoint is gone")
    assert [place for place in PLACES if results[place] == FINE] == [p for p in PLACES if p not in (stuck, PLACES[3])]


def test_an_account_with_open_incidents_that_is_not_enrolled_is_listed_after_the_enrolled_ones() -> None:
    outsider = Place("999999999999", "eu-west-1")

    rows = statuses(
        PLACES[:2],
        home=HOME,
        names=lambda account: {"222222222201": "research"}.get(account, ""),
        seen={PLACES[1]: "2026-12-04T11:57:00Z"},
        checks={HOME: FINE, PLACES[1]: FINE},
        open_counts={outsider: (2, 1), PLACES[1]: (1, 0)},
    )

    assert [(row.place, row.home, row.enrolled, row.name) for row in rows] == [
        (HOME, True, True, ""),
        (PLACES[1], False, True, "research"),
        (outsider, False, False, ""),
    ]
    assert (rows[2].check.role.state, rows[2].broken, rows[2].incidents, rows[2].fleets) == (
        RoleState.NOT_ENROLLED,
        False,
        2,
        1,
    )
    text = render(view(rows, at=NOW, stack="gpu-fault-responder"))
    assert re.search(r"\n  research \(222222222201\) +us-west-2 +2026-12-04 11:57Z \(3m ago\) +assumed +in place", text)
    assert re.search(
        r"\n  999999999999 +eu-west-1 +none in 30 days +not enrolled +not checked +2 incidents, 1 fleet", text
    )
    assert text.endswith("3 accounts and Regions, none broken\n")


# --- The forwarder's rules as EventBridge answers -------------------------------------------------------------------
# moto lists and describes rules (tests/integration/test_accounts_cli.py), but never refuses them nor throttles:
# botocore's Stubber checks each request against the API model and answers as EventBridge shapes its errors.


def events_client() -> object:
    return boto3.client("events", region_name="us-west-2", aws_access_key_id="x", aws_secret_access_key="x")


def test_rules_are_listed_page_by_page_and_those_the_role_may_not_describe_are_not_the_forwarders() -> None:
    client = events_client()
    with Stubber(client) as stubbed:
        stubbed.add_response(
            "list_rule_names_by_target", {"RuleNames": ["fwd-health"], "NextToken": "t"}, {"TargetArn": BUS}
        )
        stubbed.add_response(
            "list_rule_names_by_target",
            {"RuleNames": ["fwd-state", "someone-elses"]},
            {"TargetArn": BUS, "NextToken": "t"},
        )
        stubbed.add_response("describe_rule", {"Name": "fwd-health", "State": "ENABLED"}, {"Name": "fwd-health"})
        stubbed.add_response("describe_rule", {"Name": "fwd-state", "State": "ENABLED"}, {"Name": "fwd-state"})
        stubbed.add_client_error("describe_rule", service_error_code="AccessDeniedException", http_status_code=400)

        found = forwarder_check(client, BUS, PLACES[1], refused="not allowed")

    assert found.state is ForwarderState.IN_PLACE
    assert [rule.name for rule in found.rules] == ["fwd-health", "fwd-state"]


def test_a_role_that_may_not_list_the_rules_leaves_the_forwarder_not_checked_saying_why() -> None:
    client = events_client()
    with Stubber(client) as stubbed:
        stubbed.add_client_error("list_rule_names_by_target", service_error_code="AccessDeniedException")

        found = forwarder_check(client, BUS, PLACES[1], refused="AllowForwarderChecks is false")

    assert (found.state, found.detail) == (ForwarderState.NOT_CHECKED, "AllowForwarderChecks is false")


def test_a_throttled_account_is_a_failure_of_its_place() -> None:
    client = events_client()
    with Stubber(client) as stubbed:
        stubbed.add_client_error("list_rule_names_by_target", service_error_code="ThrottlingException")

        with pytest.raises(MemberThrottled) as raised:
            forwarder_check(client, BUS, PLACES[1], refused="")

    assert raised.value.place == PLACES[1]


def test_what_the_run_leaves_out_is_counted_and_said_in_json_too() -> None:
    rows = statuses([HOME], home=HOME, names=lambda account: "", seen={}, checks={HOME: FINE}, open_counts={})

    shown = view(rows, at=NOW, stack=None, left_out=PLACES[1:3])

    assert shown["left_out"] == ["222222222201/us-west-2", "222222222202/us-west-2"]
    assert "\n2 more not listed: the stack acts in at most 500 accounts and Regions a run\n" in render(shown)
