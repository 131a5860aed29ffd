"""A scenario's delay reaches every clock the router decides by (docs/sandbox.md, Clocks): the flap hold-down, the
backoff of a receiver that failed and the delivery leases follow the wall clock, which the sandbox's clock moves on;
the router's copy of the silences follows the product's elapsed-time clock, which it moves on too
(scenarios/silence-expired-then-page.yaml). Each case runs with the delay and without it, nothing else changed: the
delay alone makes the difference, as the time it stands for would on AWS."""

from __future__ import annotations

import copy
import json
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from fault_responder.adapters.dynamodb_store import DynamoDBInstanceStore
from fault_responder.incidents.record import Lease
from sandbox.replay import EventFile, replay
from sandbox.report import Timeline
from sandbox.run import SandboxClock
from sandbox.session import Sandbox
from sandbox.template import load_template
from sandbox.world import INCIDENTS_TABLE
from tests.scenarios.conftest import REPO_ROOT, failed, run

pytestmark = pytest.mark.sandbox

XID79 = REPO_ROOT / "events" / "incident-xid79" / "01-impaired-xid79.json"
HOLD_DOWN_SECONDS = 600  # the default routing file's flapping.hold_down
PAGERDUTY = "gpu-oncall"  # the default routing file's PagerDuty receiver

WORLD = {
    "clusters": [
        {"name": "gpu-inference", "capacity_providers": [{"name": "gpu-p5", "instances": [{"name": "gpu-a"}]}]}
    ]
}


def health(event_id: str, status: str, at: str) -> dict[str, Any]:
    """gpu-a's XID 79 check, IMPAIRED or OK at `at` (a placeholder: `now`, `now-20m`)."""
    check = {
        "type": "ACCELERATED_COMPUTE",
        "status": status,
        "statusReason": "XID_79" if status == "IMPAIRED" else None,
        "lastStatusChange": f"{{{{{at}}}}}",
        "lastUpdated": f"{{{{{at}}}}}",
    }
    return {
        "file": str(XID79),
        "instance": "gpu-a",
        "overrides": {
            "id": event_id,
            "time": f"{{{{{at}}}}}",
            "detail": {"overallStatus": status, "healthChecks": [check]},
        },
    }


def scenario(tmp_path: Path, name: str, document: dict[str, Any]) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"description": name, "world": WORLD, **document}, sort_keys=False))
    return path


def resolves(report: dict[str, Any]) -> list[int]:
    """The HTTP status of each resolve the router sent PagerDuty, in order."""
    return [
        request["status"]
        for request in report["requests"]
        if request["service"] == "pagerduty" and (request.get("body") or {}).get("event_action") == "resolve"
    ]


# --- The flap hold-down --------------------------------------------------------------------------------


@pytest.mark.parametrize(("delay", "closed"), [(0, False), (HOLD_DOWN_SECONDS // 2 + 1, True)])
def test_the_hold_down_ends_with_a_scenarios_delay(tmp_path: Path, delay: int, closed: bool) -> None:
    # Given a fault whose check has been OK again for 5 minutes, held open for the 10-minute hold-down
    events = [health("impaired", "IMPAIRED", "now-15m"), health("ok", "OK", f"now-{HOLD_DOWN_SECONDS // 2}s")]

    # When the sweep runs at once, or 5 minutes and a second later
    sweep: dict[str, Any] = {"sweep": True, "delay_seconds": delay} if delay else {"sweep": True}
    result = run(scenario(tmp_path, "hold-down", {"events": [*events, sweep]}))

    # Then the incident closes and its alert is resolved only once the hold-down has passed
    assert result.passed, "\n".join(failed(result))
    assert resolves(result.report) == ([202] if closed else [])
    [incident] = [item for item in result.report["incidents"] if item.get("status") in {"OPEN", "CLOSED"}]
    assert incident["status"] == ("CLOSED" if closed else "OPEN")


# --- The backoff of a receiver that failed --------------------------------------------------------------


@pytest.mark.parametrize(("delay", "retried"), [(0, False), (61, True)])
def test_a_failed_receivers_backoff_ends_with_a_scenarios_delay(tmp_path: Path, delay: int, retried: bool) -> None:
    # Given a fault past its hold-down whose resolve PagerDuty refused at two runs of the sweep (4 attempts each):
    # the next try waits a minute
    document = {
        "faults": {"pagerduty": [{"pass": 1}, {"fail": 500, "times": 8}]},
        "events": [
            health("impaired", "IMPAIRED", "now-20m"),
            health("ok", "OK", "now-597s"),
            {"sweep": True, "delay_seconds": 4},
            {"sweep": True},
            # When the sweep runs again at once, or a minute and a second later
            {"sweep": True, "delay_seconds": delay} if delay else {"sweep": True},
        ],
    }
    result = run(scenario(tmp_path, "backoff", document))

    # Then PagerDuty (recovered by then) is tried again, and resolves the alert, only once the backoff has ended
    assert result.passed, "\n".join(failed(result))
    assert resolves(result.report) == [500] * 8 + ([202] if retried else [])


# --- Delivery leases ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("delay", "taken_over"), [(0, False), (121, True)])
def test_a_lease_left_by_a_router_that_died_ends_with_the_sandboxs_clock(delay: int, taken_over: bool) -> None:
    impaired = json.loads(XID79.read_text())
    arn = impaired["detail"]["containerInstanceArn"]
    draining = json.loads((XID79.parent / "02-draining.json").read_text())
    inactive = json.loads((XID79.parent / "05-inactive.json").read_text())
    clock = SandboxClock()

    with Sandbox(load_template(REPO_ROOT / "template.yaml")) as sandbox:
        table = str(sandbox.stack.resources[INCIDENTS_TABLE].ref)
        store = DynamoDBInstanceStore(table, timedelta(days=30), sandbox.aws.dynamodb)

        def router_dies_holding_pagerduty() -> None:
            # A router that took PagerDuty's lease for two minutes, and died before it sent anything
            assert store.take_lease(arn, Lease(PAGERDUTY, "a-router-that-died", time.time() + 120), time.time())

        def then() -> None:
            if delay:
                clock.wait(delay, idle=True)

        try:
            report = replay(
                sandbox,
                [
                    EventFile(Path("impaired.json"), [copy.deepcopy(impaired)]),
                    EventFile(Path("draining.json"), [draining]),  # PagerDuty's update is left to the holder
                    EventFile(Path("inactive.json"), [inactive]),
                ],
                Timeline(None),
                after_file={1: router_dies_holding_pagerduty, 2: then},
            )
        finally:
            clock.stop()

    # Then the event after the lease's end takes it over and brings PagerDuty up to date; before its end, nobody does
    pagerduty = [r for r in report["requests"] if r["service"] == "pagerduty"]
    assert [r["status"] for r in pagerduty][:1] == [202]  # the page, before the router died
    assert (len(pagerduty) > 1) is taken_over
    assert (resolves(report) == [202]) is taken_over
