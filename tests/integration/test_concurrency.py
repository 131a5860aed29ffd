"""Concurrent deliveries for one instance never post two roots or open two alerts: real parallel processes.

2 and 4 worker processes (each its own AlertRouter, as separate Lambda execution environments) handle the
same instance's events at the same moment, every worker all of them in its own order (so every event is
also a duplicate), against one moto server and the Slack and PagerDuty stand-ins over HTTP. 100 runs each,
a new instance per run. The harness is tests/integration/parallel.py.
"""

from __future__ import annotations

import copy
import json
import multiprocessing
import random
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, StandIns
from tests.conftest import incidents_table, load_event
from tests.integration.parallel import Workers, free_port, serve_moto, wait_for

RUNS = 100
REGION = "us-east-1"
CLUSTER = "gpu-fleet"
ROOT = "gpu_fault_incident"  # the metadata event type of an incident's root message


@pytest.fixture(scope="module")
def world() -> Iterator[dict[str, Any]]:
    port = free_port()
    server = multiprocessing.get_context("spawn").Process(target=serve_moto, args=(port,), daemon=True)
    server.start()
    wait_for(port)
    endpoint = f"http://127.0.0.1:{port}"
    credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": REGION}
    dynamodb = boto3.client("dynamodb", endpoint_url=endpoint, **credentials)
    dynamodb.create_table(TableName="incidents", **incidents_table())
    dlq = boto3.client("sqs", endpoint_url=endpoint, **credentials).create_queue(QueueName="dlq")["QueueUrl"]
    secrets = boto3.client("secretsmanager", endpoint_url=endpoint, **credentials)
    with StandIns() as standins:
        secrets.create_secret(Name="slack", SecretString=json.dumps({"bot_token": DEFAULT_SLACK_TOKEN}))
        secrets.create_secret(
            Name="pagerduty", SecretString=json.dumps({"routing_keys": {"gpu-oncall": SANDBOX_ROUTING_KEY}})
        )
        environment = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGION,
            "AWS_REGION": REGION,
            "INCIDENTS_TABLE": "incidents",
            "ALERT_DLQ_URL": dlq,
            "SLACK_SECRET_NAME": "slack",
            "PAGERDUTY_SECRET_NAME": "pagerduty",
            "SLACK_API_URL": standins.slack_api_url,
            "PAGERDUTY_EVENTS_URL": standins.pagerduty_url,
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
            "POWERTOOLS_LOG_LEVEL": "ERROR",
        }
        yield {"standins": standins, "environment": environment}
    server.terminate()


def instance_events(run: int) -> list[dict[str, Any]]:
    """Two faults on one instance (a GPU XID 79, reported twice; a daemon), its drain and a stopped task."""
    arn = f"arn:aws:ecs:us-west-2:123456789012:container-instance/{CLUSTER}/run{run:04d}"
    start = datetime(2026, 11, 1, 8, 0, tzinfo=UTC) + timedelta(minutes=run)

    def at(seconds: int) -> str:
        return (start + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")

    gpu = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    # Each run's instance on a capacity provider of its own: its incidents are its own, never a fleet's.
    gpu["detail"].update(
        clusterArn=f"arn:aws:ecs:us-west-2:123456789012:cluster/{CLUSTER}",
        containerInstanceArn=arn,
        capacityProviderName=f"p5-run{run:04d}",
    )
    gpu["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=at(0), lastUpdated=at(0))
    gpu.update(id=f"run{run}-gpu", time=at(5))
    again = copy.deepcopy(gpu)
    again["id"] = f"run{run}-gpu-again"
    daemon = copy.deepcopy(load_event("aws-docs/health-change-daemon-impaired.json"))
    daemon["detail"].update(
        clusterArn=gpu["detail"]["clusterArn"], containerInstanceArn=arn, capacityProviderName=f"p5-run{run:04d}"
    )
    daemon["detail"]["healthChecks"][0].update(lastStatusChange=at(20), lastUpdated=at(20))
    daemon.update(id=f"run{run}-daemon", time=at(25))
    drain = copy.deepcopy(load_event("state/draining-after-xid46.json"))
    drain["detail"].update(clusterArn=gpu["detail"]["clusterArn"], containerInstanceArn=arn, updatedAt=at(60))
    drain.update(id=f"run{run}-drain", time=at(60))
    task = copy.deepcopy(load_event("task/stopped-instance-draining.json"))
    task["detail"].update(clusterArn=gpu["detail"]["clusterArn"], containerInstanceArn=arn, stoppedAt=at(70))
    task.update(id=f"run{run}-task", time=at(70))
    return [gpu, again, daemon, drain, task]


def on_call_view(standins: StandIns, run: int, since: int = 0) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    """For this run's instance: roots per incident, PagerDuty alerts per dedup key, triggers that opened one (among
    the requests from the `since`th on: a run's requests all come after those before it started)."""

    def incident_of(message: Mapping[str, Any]) -> str:
        metadata = message.get("metadata") or {}
        return str((metadata.get("event_payload") or {}).get("id", "")) if metadata.get("event_type") == ROOT else ""

    roots: dict[str, int] = {}
    # (only this run's messages and alerts are copied out of the stand-ins: the earlier runs' stay put)
    for messages in standins.slack_channels(where=lambda message: f"/run{run:04d}/" in incident_of(message)).values():
        for message in messages:
            fingerprint = incident_of(message).split("@", 1)[0]
            roots[fingerprint] = roots.get(fingerprint, 0) + 1
    alerts: dict[str, int] = {}
    for alert in standins.pagerduty_alerts(where=lambda alert: f"/run{run:04d}/" in alert["dedup_key"]):
        alerts[alert["dedup_key"]] = alerts.get(alert["dedup_key"], 0) + 1
    opened: dict[str, int] = {}
    for request in standins.requests_since(since):
        body = request["body"] if isinstance(request["body"], dict) else {}
        if request.get("effect") == "opened" and f"/run{run:04d}/" in str(body.get("dedup_key")):
            opened[body["dedup_key"]] = opened.get(body["dedup_key"], 0) + 1
    return roots, alerts, opened


@pytest.mark.parametrize("workers", [2, 4])
def test_parallel_workers_post_one_root_and_open_one_alert_per_incident(world: dict[str, Any], workers: int) -> None:
    pool = Workers(workers, world["environment"])
    expected = {f"{CLUSTER}/run{{run:04d}}/ACCELERATED_COMPUTE": 1, f"{CLUSTER}/run{{run:04d}}/DAEMON": 1}
    conflicts = 0
    try:
        for run in range(RUNS * 10 * workers, RUNS * 10 * workers + RUNS):
            events = instance_events(run)
            rng = random.Random(run)
            # Given every worker handles every event of the instance, each in its own order, at the same moment
            orders = [rng.sample(events, len(events)) for _ in range(workers)]
            before = world["standins"].request_count()
            conflicts += pool.run(orders)
            # Then each incident has exactly one Slack root and one PagerDuty alert, opened by one trigger
            roots, alerts, opened = on_call_view(world["standins"], run, since=before)
            want = {key.format(run=run): count for key, count in expected.items()}
            assert (roots, alerts, opened) == (want, want, want), f"run {run}"
    finally:
        pool.close()
    # (How often a worker lost a race and retried: the races were real.)
    print(f"{workers} workers, {RUNS} runs: {conflicts} records retried after losing a race")


def storm_events(size: int, reports: int) -> list[dict[str, Any]]:
    """`size` instances of one capacity provider IMPAIRED with XID 79 within two minutes, each reported
    `reports` times (distinct event ids, as ECS re-reports)."""
    start = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    events = []
    for number in range(size):
        at = (start + timedelta(seconds=120 * number // size)).strftime("%Y-%m-%dT%H:%M:%SZ")
        arn = f"arn:aws:ecs:us-west-2:123456789012:container-instance/storm/{number:032x}"
        for copy_number in range(reports):
            event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
            event["detail"].update(
                clusterArn="arn:aws:ecs:us-west-2:123456789012:cluster/storm",
                containerInstanceArn=arn,
                capacityProviderName="p5-storm",
                ec2InstanceId=f"i-0{number:016x}",
            )
            event["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=at, lastUpdated=at)
            event.update(id=f"storm-{number}-{copy_number}", time=at, resources=[arn])
            events.append(event)
    return events


def test_a_storm_handled_by_parallel_workers_pages_once_as_a_fleet(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given 40 instances of one provider failing within two minutes, each reported three times, and four
    # workers that each handle every event, in their own order, at the same moment
    events = storm_events(40, reports=3)
    pool = Workers(4, world["environment"])
    try:
        conflicts = pool.run([random.Random(worker).sample(events, len(events)) for worker in range(4)])
    finally:
        pool.close()
    standins = world["standins"]
    # And the sweep a minute later, which sends what waited to go out together (member updates, the page's
    # member list), run here with its clock a minute ahead
    sweep_a_minute_later(world["environment"], monkeypatch)

    # Then PagerDuty opened one alert for the fleet incident and at most one for each instance whose fault was seen
    # before the threshold was (two: the workers may have written more members than that before any looked); Slack
    # got a root for each of them; every instance is in the fleet incident's page
    opened = [
        request["body"]["dedup_key"]
        for request in standins.requests
        if request.get("effect") == "opened" and "storm" in str(request["body"].get("dedup_key"))
    ]
    roots = [
        message
        for messages in standins.slack_channels().values()
        for message in messages
        if not message["thread_ts"] and "storm" in json.dumps(message.get("metadata") or {})
    ]
    fleet_pages = [
        request["body"]
        for request in standins.requests
        if isinstance(request["body"], dict) and str(request["body"].get("dedup_key", "")).startswith("fleet/storm/")
    ]
    print(f"storm of 40 x 3 reports, 4 workers: {len(opened)} alerts opened, {len(roots)} roots, {conflicts} retries")
    assert len(opened) <= 3 and len(set(opened)) == len(opened)
    assert sum(key.startswith("fleet/") for key in opened) == 1
    assert len(roots) == len(opened)
    details = fleet_pages[-1]["payload"]["custom_details"]
    members = {member["ec2_instance_id"] for member in details["members"]}
    assert members == {f"i-0{number:016x}" for number in range(40)}
    # and counts each instance once, however many workers handled its reports at the same moment
    assert (details["members_total"], details["members_open"]) == (40, 40)


def sweep_a_minute_later(environment: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    from fault_responder.wiring.alert_router import AlertRouter, RouterSettings, reset  # noqa: PLC0415

    # This process may have wired the router to another test's moto server before: forget those clients and
    # cached secrets, as the sandbox does when it points the router at new endpoints.
    reset()
    router = AlertRouter(RouterSettings.from_env(environment))
    later = datetime.now(UTC) + timedelta(minutes=1, seconds=5)
    router.service.clock = lambda: later
    router.service.courier.clock = lambda: later
    router.start_invocation(60.0)
    router.sweep()
