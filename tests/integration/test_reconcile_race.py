"""The reconciliation sweep racing the event path, in real parallel processes: never two incidents, two roots or
two pages for one fault.

Two worker processes (each its own AlertRouter, as two Lambda execution environments) act on one instance at the
same moment (a barrier), against one moto server (DynamoDB) and the Slack and PagerDuty stand-ins over HTTP:
- one handles the IMPAIRED event, the other runs the reconciliation sweep, which finds the same transition in
  ECS's answer (the event arrives while the sweep writes what it found);
- both run the reconciliation sweep at once (two overlapping scheduled runs).
ECS's answer is given to the sweep by the harness (tests/integration/parallel.py): the race under test is on the
incidents table and the receivers, where the sweep and the event path meet. 24 runs of each, a new instance per run.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from sandbox.standins import StandIns
from tests.conftest import load_event
from tests.integration.parallel import Workers
from tests.integration.test_concurrency import world  # noqa: F401 - the module's moto server and stand-ins

RUNS = 24
CLUSTER = "arn:aws:ecs:us-west-2:123456789012:cluster/reconcile-race"
FOUND = "found by the sweep: the event was missed"


def instance(run: int) -> str:
    return f"arn:aws:ecs:us-west-2:123456789012:container-instance/reconcile-race/race{run:04d}"


def moment(run: int) -> datetime:
    return datetime(2026, 11, 2, 8, 0, tzinfo=UTC) + timedelta(minutes=run)


def impaired_event(run: int) -> dict[str, Any]:
    event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    stamp = moment(run).strftime("%Y-%m-%dT%H:%M:%SZ")
    # A capacity provider of its own per run: its incident is its own, never a fleet's.
    event["detail"].update(
        clusterArn=CLUSTER, containerInstanceArn=instance(run), capacityProviderName=f"race-p5-{run:04d}"
    )
    event["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=stamp, lastUpdated=stamp)
    event.update(id=f"race{run}-impaired", time=stamp)
    return event


def sweep_job(run: int) -> dict[str, Any]:
    """The reconciliation sweep's run, ECS describing the instance with the same transition the event reports."""
    at = moment(run).isoformat()
    observed = {
        "cluster_arn": CLUSTER,
        "container_instance_arn": instance(run),
        "status": "ACTIVE",
        "ec2_instance_id": "i-07d3f9a1c5e2b8460",
        "capacity_provider": f"race-p5-{run:04d}",
        "version": 3,
        "overall_status": "IMPAIRED",
        "checks": [
            {
                "type": "ACCELERATED_COMPUTE",
                "status": "IMPAIRED",
                "last_status_change": at,
                "last_updated": (moment(run) + timedelta(minutes=4)).isoformat(),
                "reason": "XID_79",
            }
        ],
    }
    return {"reconcile": {"cluster": CLUSTER, "observed": [observed]}}


def on_call_view(standins: StandIns, run: int) -> tuple[int, int, int]:
    """For this run's instance: Slack roots, PagerDuty alerts, and triggers that opened one."""
    key = f"/race{run:04d}/"
    # (each count copies only this run's messages, alerts and requests out of the stand-ins)
    roots = sum(
        len(messages)
        for messages in standins.slack_channels(
            where=lambda message: (
                (message.get("metadata") or {}).get("event_type") == "gpu_fault_incident"
                and key in str(((message.get("metadata") or {}).get("event_payload") or {}).get("id", ""))
            )
        ).values()
    )
    alerts = len(standins.pagerduty_alerts(where=lambda alert: key in alert["dedup_key"]))
    opened = len(_opened(standins, key))
    return roots, alerts, opened


def _opened(standins: StandIns, key: str) -> list[dict[str, Any]]:
    """The requests that opened a PagerDuty alert whose dedup key holds `key`."""
    return standins.requests_since(
        0,
        where=lambda request: (
            request.get("effect") == "opened"
            and isinstance(request["body"], dict)
            and key in str(request["body"].get("dedup_key"))
        ),
    )


@pytest.fixture(scope="module")
def workers(world: dict[str, Any]) -> Any:  # noqa: F811 - the fixture imported above
    pool = Workers(2, world["environment"])
    yield pool
    pool.close()


def test_the_event_and_the_sweep_at_the_same_moment_make_one_incident_one_root_one_page(
    world: dict[str, Any],  # noqa: F811
    workers: Workers,
) -> None:
    standins = world["standins"]
    found = 0
    for run in range(RUNS):
        # Given the IMPAIRED event and a sweep that found the same transition, started at the same moment (the
        # event up to 360 ms later: the sweep reads the table before it writes, so without a head start it never
        # writes first; how much it needs depends on the machine, hence the range)
        delay = (run % 10) * 0.04
        workers.run_jobs([{"events": [_body(impaired_event(run))], "delay": delay}, sweep_job(run)])

        # Then on-call got one Slack root and one PagerDuty alert, opened once
        assert on_call_view(standins, run) == (1, 1, 1), f"run {run}"
        found += _found_by_sweep(standins, run)
    # Whoever wrote first made it known, and both orders happened: the race was run, not avoided.
    print(f"{RUNS} races of the event with the sweep: the sweep was first {found} times")
    assert 0 < found < RUNS


def test_two_sweeps_at_the_same_moment_make_one_incident_one_root_one_page(
    world: dict[str, Any],  # noqa: F811
    workers: Workers,
) -> None:
    standins = world["standins"]
    for run in range(RUNS, 2 * RUNS):
        workers.run_jobs([sweep_job(run), sweep_job(run)])

        assert on_call_view(standins, run) == (1, 1, 1), f"run {run}"
        assert _found_by_sweep(standins, run) == 1, f"run {run}"


def _body(event: dict[str, Any]) -> str:
    return json.dumps(event)


def _found_by_sweep(standins: StandIns, run: int) -> int:
    """1 if this run's page says the sweep found the fault."""
    for request in _opened(standins, f"/race{run:04d}/"):
        return int(request["body"]["payload"]["custom_details"].get("found") == FOUND)
    return 0
