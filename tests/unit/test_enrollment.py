"""Enrollment (docs/organization.md): with the organization's bus, the router refuses an event whose account or Region
is not enrolled, with its reason, and acts on nothing of it; the stack's own account and Region are always enrolled;
without it, nothing changes. And a training fault of another account is not kept quiet for a workflow that only
starts for this account's faults."""

from __future__ import annotations

import contextlib
import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.events.enrollment import ACTIONS_SOURCE, Enrollment, RefusedFor
from fault_responder.incidents import incident_actions, lifecycle
from fault_responder.noise.policy import Policy, QuietWhenHandled
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.routing.router import Router, load_routing
from fault_responder.wiring.alert_router import AlertRouter, RouterSettings
from tests.conftest import load_event, vary
from tests.unit.test_fleet import START, Clock, report

HOME = "111111111111"
MEMBER = "222222222222"
OTHER = "333333333333"
ROUTER_ENV = {
    "INCIDENTS_TABLE": "incidents",
    "ALERT_DLQ_URL": "https://sqs.us-east-1.amazonaws.com/111111111111/dlq",
    "SLACK_SECRET_NAME": "slack",
    "PAGERDUTY_SECRET_NAME": "pagerduty",
}


def envelope(account: Any = MEMBER, region: Any = "us-west-2", **fields: Any) -> dict[str, Any]:
    event = load_event("aws-docs/health-change-accelerated-compute-xid46.json")
    event.update(account=account, region=region, **fields)
    return event


def test_this_stacks_own_account_and_region_are_always_enrolled_whatever_is_listed() -> None:
    enrollment = Enrollment.of(HOME, "us-east-1", [MEMBER], ["eu-west-1"])

    assert enrollment.refusal(envelope(HOME, "us-east-1")) is None
    assert enrollment.refusal(envelope(MEMBER, "us-east-1")) is None
    assert enrollment.refusal(envelope(MEMBER, "eu-west-1")) is None
    assert enrollment.refusal(envelope(HOME, "eu-west-1")) is None


def test_an_account_not_listed_is_refused_with_its_reason() -> None:
    enrollment = Enrollment.of(HOME, "us-east-1", [MEMBER], [])

    refusal = enrollment.refusal(envelope(OTHER, "us-east-1"))

    assert refusal is not None
    assert refusal.reason is RefusedFor.ACCOUNT
    assert (refusal.account, refusal.region) == (OTHER, "us-east-1")
    assert refusal.detail == f"account {OTHER} is not enrolled (enrolled: this stack's {HOME} and 1 listed)"


def test_a_region_not_listed_is_refused_with_its_reason_even_for_an_enrolled_account() -> None:
    enrollment = Enrollment.of(HOME, "us-east-1", [], ["eu-west-1", "us-west-2"])

    refusal = enrollment.refusal(envelope(MEMBER, "ap-south-1"))

    assert refusal is not None
    assert refusal.reason is RefusedFor.REGION
    assert (
        refusal.detail
        == "Region ap-south-1 is not enrolled (enrolled: this stack's us-east-1 and eu-west-1, us-west-2)"
    )
    assert enrollment.refusal(envelope(HOME, "ap-south-1")) is not None


def test_with_nothing_listed_every_account_the_bus_admits_and_every_region_are_enrolled() -> None:
    enrollment = Enrollment.of(HOME, "us-east-1", [], [])

    for account, region in [(MEMBER, "us-west-2"), (OTHER, "ap-southeast-2"), (HOME, "eu-central-1")]:
        assert enrollment.refusal(envelope(account, region)) is None


@pytest.mark.parametrize(
    ("account", "region", "reason"),
    [
        (None, "us-east-1", RefusedFor.ACCOUNT),
        (111111111111, "us-east-1", RefusedFor.ACCOUNT),
        ("11111111111", "us-east-1", RefusedFor.ACCOUNT),
        (f"{HOME} ", "us-east-1", RefusedFor.ACCOUNT),
        ("x" * 5000, "us-east-1", RefusedFor.ACCOUNT),
        (HOME, None, RefusedFor.REGION),
        (HOME, "US-EAST-1", RefusedFor.REGION),
        (HOME, ["us-east-1"], RefusedFor.REGION),
    ],
)
def test_an_account_or_region_that_is_not_one_is_refused_and_shown_bounded(
    account: Any, region: Any, reason: RefusedFor
) -> None:
    enrollment = Enrollment.of(HOME, "us-east-1", [], [])
    raw = envelope(account, region)
    if account is None:
        del raw["account"]

    refusal = enrollment.refusal(raw)

    assert refusal is not None and refusal.reason is reason
    assert len(refusal.detail) < 200


def test_a_persons_action_is_the_stacks_own_and_never_refused() -> None:
    # Its endpoints put it on the queue themselves (no bus, no rule reads its source)
    action = load_event("actions/acknowledge-from-slack.json")
    enrollment = Enrollment.of(HOME, "us-east-1", [MEMBER], ["eu-west-1"])

    assert ACTIONS_SOURCE == incident_actions.ACTIONS_SOURCE == action["source"]
    assert enrollment.refusal({**action, "account": OTHER, "region": "ap-south-1"}) is None


@pytest.mark.parametrize(
    ("home", "region", "accounts", "regions"),
    [("", "us-east-1", [], []), (HOME, "", [], []), (HOME, "us-east-1", ["*"], []), (HOME, "us-east-1", [], ["any"])],
)
def test_a_malformed_enrollment_is_refused_at_cold_start(
    home: str, region: str, accounts: list[str], regions: list[str]
) -> None:
    with pytest.raises(ValueError, match="not an account id or a Region"):
        Enrollment.of(home, region, accounts, regions)


# --- The router's settings ------------------------------------------------------------------------------------------


def test_without_the_organizations_bus_the_router_checks_no_enrollment() -> None:
    assert RouterSettings.from_env(ROUTER_ENV).enrollment() is None
    assert RouterSettings.from_env({**ROUTER_ENV, "ENROLLED_ACCOUNTS": MEMBER}).enrollment() is None


def test_with_it_the_router_reads_the_enrollment_from_its_environment() -> None:
    settings = RouterSettings.from_env(
        {
            **ROUTER_ENV,
            "ORGANIZATION_MODE": "true",
            "ENROLLED_ACCOUNTS": f"{MEMBER},{OTHER}",
            "ENROLLED_REGIONS": "",
            "STACK_ACCOUNT": HOME,
            "AWS_REGION": "us-east-1",
        }
    )

    assert settings.enrollment() == Enrollment(HOME, "us-east-1", frozenset({MEMBER, OTHER}), frozenset())


def test_an_organization_mode_without_its_account_fails_at_cold_start_naming_it() -> None:
    settings = RouterSettings.from_env({**ROUTER_ENV, "ORGANIZATION_MODE": "true", "AWS_REGION": "us-east-1"})

    with pytest.raises(RuntimeError, match="STACK_ACCOUNT"):
        settings.enrollment()


# --- Quiet when handled, for this account's faults only -------------------------------------------------------------

PROVIDER = "my-capacity-provider"
DEADLINE = timedelta(minutes=30)


def triggers_after_a_training_fault(home: tuple[str, str] | None) -> int:
    """PagerDuty triggers sent for a training fault of account 123456789012 in us-west-2 (the sample's), at once."""
    channels = RecordingChannels()
    clock = Clock()
    routing = load_routing("default.yaml")
    pagerduty = frozenset(name for name, r in routing.receivers.items() if r.pagerduty is not None)
    quiet = QuietWhenHandled(frozenset({PROVIDER}), frozenset({"ACCELERATED_COMPUTE"}), DEADLINE, home=home)
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store),
        Router(routing),
        ReceiverCourier(channels, clock=clock),
        lifecycle.Settings(),
        clock=clock,
        policy=Policy(quiet=quiet, pagerduty_receivers=pagerduty),
    )
    clock.now = START
    service.handle(report(1, "IMPAIRED", START))
    return sum(1 for sent in channels.sent if sent.service == "pagerduty" and sent.action == "trigger")


def test_a_training_fault_of_this_account_is_quiet_while_the_workflow_works_and_another_accounts_pages_at_once() -> (
    None
):
    sample = report(1, "IMPAIRED", START)
    assert (sample["account"], sample["region"]) == ("123456789012", "us-west-2")

    assert triggers_after_a_training_fault(None) == 0
    assert triggers_after_a_training_fault(("123456789012", "us-west-2")) == 0
    assert triggers_after_a_training_fault((HOME, "us-west-2")) == 1
    assert triggers_after_a_training_fault(("123456789012", "us-east-1")) == 1


def test_the_refusal_is_logged_with_the_event_id_and_counted_not_dead_lettered(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the router of a stack in organization mode (its clients are made offline; a refusal calls none of them)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    environment = {
        **ROUTER_ENV,
        "ORGANIZATION_MODE": "true",
        "ENROLLED_ACCOUNTS": MEMBER,
        "STACK_ACCOUNT": HOME,
        "AWS_REGION": "us-east-1",
    }
    router = AlertRouter(RouterSettings.from_env(environment))
    event = vary(envelope(OTHER, "us-east-1"), event_id="forged-1")

    # When an event of an account that is not enrolled arrives
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), caplog.at_level(logging.INFO):
        result = router.process_record(json.dumps(event), "message-1")

    # Then it is refused with its reason, logged with its id, account and Region, counted, and nothing else happens

    assert result == {
        "event_id": "forged-1",
        "kind": "refused",
        "ignored": f"account {OTHER} is not enrolled (enrolled: this stack's {HOME} and 1 listed)",
        "receivers": {},
    }
    [logged] = caplog.records
    assert logged.getMessage() == "event refused: not enrolled"
    assert (logged.event_id, logged.account, logged.region) == ("forged-1", OTHER, "us-east-1")  # type: ignore[attr-defined]
    [metric] = [json.loads(line) for line in printed.getvalue().splitlines()]
    assert metric["Reason"] == "account_not_enrolled"
    assert metric["EventsRefused"] == [1.0]
