"""The organization mode end to end in the sandbox (docs/organization.md): template.yaml deployed with an
organization's bus, events of the stack's own account (forwarded to the bus by LocalEventsForwardRule), of an enrolled
member account and Region (put on the bus as its forwarder sends them), and of an account and a Region that are not
enrolled, through the real rules, queue and router, with Slack and PagerDuty over HTTP.

An event that is not enrolled reaches the router, as it would (the bus admits the whole organization), and is refused
there: logged with its id and reason, counted, never an incident, a page or a dead letter."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT, load_event

TEMPLATE = load_template(ROOT / "template.yaml")
HOME = "123456789012"  # the sandbox's account, in us-east-1
MEMBER = "222222222222"
OUTSIDER = "333333333333"
ORGANIZATION = {"OrganizationId": "o-a1b2c3d4e5", "EnrolledAccounts": MEMBER, "EnrolledRegions": "us-west-2"}


def fault_in(account: str, region: str, number: int) -> dict[str, Any]:
    """The AWS documentation's XID 46, happening on its own instance in `account` and `region`."""
    event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    text = json.dumps(event).replace("us-west-2:123456789012", f"{region}:{account}")
    event = json.loads(text.replace("a1b2c3d4EXAMPLE", f"instance{number:04d}"))
    event.update(id=f"fault-{number}-{account}-{region}", account=account, region=region)
    return event


def run(events: list[dict[str, Any]], overrides: dict[str, str]) -> dict[str, Any]:
    with Sandbox(TEMPLATE, parameter_overrides=overrides) as sandbox:
        return replay(sandbox, [EventFile(Path("organization.json"), events)], Timeline(None))


def logged(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        json.loads(line) for invocation in report["invocations"] for line in invocation["logs"] if line.startswith("{")
    ]


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    events = [
        fault_in(HOME, "us-east-1", 1),
        fault_in(MEMBER, "us-west-2", 2),
        fault_in(OUTSIDER, "us-west-2", 3),
        fault_in(MEMBER, "ap-south-1", 4),
    ]
    return run(events, ORGANIZATION)


def test_events_reach_the_organization_bus_in_one_hop_from_this_account_and_directly_from_the_others(
    report: dict[str, Any],
) -> None:
    routes = {event["id"]: event["matched_rules"] for event in report["events"]}

    assert routes == {
        f"fault-1-{HOME}-us-east-1": ["LocalEventsForwardRule", "HealthChangeRule"],
        f"fault-2-{MEMBER}-us-west-2": ["HealthChangeRule"],
        f"fault-3-{OUTSIDER}-us-west-2": ["HealthChangeRule"],
        f"fault-4-{MEMBER}-ap-south-1": ["HealthChangeRule"],
    }
    assert all(target["delivered"] for event in report["events"] for target in event["targets"])


def test_the_enrolled_faults_page_and_the_others_are_refused_with_their_reason_never_acted_on(
    report: dict[str, Any],
) -> None:
    # The enrolled ones: an incident each, paged; the others: no incident, no word to Slack or PagerDuty
    instances = sorted(incident["instance"]["container_instance_arn"] for incident in report["incidents"])
    assert instances == [
        f"arn:aws:ecs:us-east-1:{HOME}:container-instance/my-cluster/instance0001",
        f"arn:aws:ecs:us-west-2:{MEMBER}:container-instance/my-cluster/instance0002",
    ]
    sent = json.dumps(report["requests"])
    assert "instance0001" in sent and "instance0002" in sent
    assert "instance0003" not in sent and "instance0004" not in sent

    # ... each refusal logged with the event's id and its reason, and counted by reason
    refusals = {
        line["event_id"]: line["reason"]
        for line in logged(report)
        if line.get("message", "").startswith("event refused")
    }
    assert refusals == {
        f"fault-3-{OUTSIDER}-us-west-2": (
            f"account {OUTSIDER} is not enrolled (enrolled: this stack's {HOME} and 1 listed)"
        ),
        f"fault-4-{MEMBER}-ap-south-1": (
            "Region ap-south-1 is not enrolled (enrolled: this stack's us-east-1 and us-west-2)"
        ),
    }
    counted = sorted(line["Reason"] for line in logged(report) if "EventsRefused" in line)
    assert counted == ["account_not_enrolled", "region_not_enrolled"]

    # ... and nothing dead-lettered, no error: a refusal is not a failure to retry
    assert report["dlq"] == []
    assert report["errors"] == []
    assert all(invocation["failures"] == [] for invocation in report["invocations"])


def test_without_the_organization_mode_the_same_events_are_all_acted_on_from_the_default_bus() -> None:
    events = [fault_in(OUTSIDER, "ap-south-1", 5)]

    single = run(events, {})

    assert [event["matched_rules"] for event in single["events"]] == [["HealthChangeRule"]]
    assert [incident["instance"]["container_instance_arn"] for incident in single["incidents"]] == [
        f"arn:aws:ecs:ap-south-1:{OUTSIDER}:container-instance/my-cluster/instance0005"
    ]
    assert not [line for line in logged(single) if "EventsRefused" in line]
