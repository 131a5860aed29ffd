"""A silence's start and end are each told once to the channels it mutes, however many sweeps run at once: real parallel
processes (docs/silences.md, "Who is told").

An organization's stack (ORGANIZATION_MODE): four worker processes (each its own AlertRouter, as four Lambda execution
environments of the SweepFunction) run the sweep at the same moment, against one moto server (DynamoDB) and the Slack
and PagerDuty stand-ins over HTTP, after a silence starts and again after it ends. The harness is
tests/integration/parallel.py; what is judged is what reached Slack and PagerDuty.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.adapters.silence_store import DynamoDBSilenceStore
from fault_responder.alerting.announce import EVENT_TYPE
from fault_responder.noise.silences import new_silence
from fault_responder.routing.matchers import parse_matchers
from tests.conftest import load_event
from tests.integration.parallel import Workers, moto_client
from tests.integration.test_concurrency import world  # noqa: F401 - the module's moto server and stand-ins

WORKERS = 4
HOME = "123456789012"
CLUSTER = "silenced"


def fault(number: int, at: datetime) -> dict[str, Any]:
    """XID 79 on an instance of the `silenced` cluster, each on a capacity provider of its own (no fleet)."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    arn = f"arn:aws:ecs:us-west-2:{HOME}:container-instance/{CLUSTER}/{number:032x}"
    event = copy.deepcopy(load_event("aws-docs/health-change-accelerated-compute-xid46.json"))
    event["detail"].update(
        clusterArn=f"arn:aws:ecs:us-west-2:{HOME}:cluster/{CLUSTER}",
        containerInstanceArn=arn,
        capacityProviderName=f"p5-silenced-{number}",
        ec2InstanceId=f"i-0{number:016x}",
    )
    event["detail"]["healthChecks"][0].update(statusReason="XID_79", lastStatusChange=stamp, lastUpdated=stamp)
    event.update(id=f"silenced-{number}", time=stamp, resources=[arn], account=HOME, region="us-west-2")
    return event


def news(world: dict[str, Any]) -> dict[str, list[str]]:  # noqa: F811
    """Channel -> the silence news posted there (their markers)."""
    posted: dict[str, list[str]] = {}
    for channel, messages in world["standins"].slack_channels().items():
        for message in messages:
            metadata = message.get("metadata") or {}
            if metadata.get("event_type") == EVENT_TYPE:
                posted.setdefault(channel, []).append(metadata["event_payload"]["id"])
    return posted


def test_four_sweeps_at_once_tell_a_silences_start_and_its_end_once_each(world: dict[str, Any]) -> None:  # noqa: F811
    environment = {**world["environment"], "ORGANIZATION_MODE": "true", "STACK_ACCOUNT": HOME}
    store = DynamoDBSilenceStore("incidents", moto_client("dynamodb", environment["AWS_ENDPOINT_URL"]))
    now = datetime.now(UTC)
    pool = Workers(WORKERS, environment)
    try:
        # Given two open incidents on the cluster (they paged: Slack and PagerDuty), and a silence of it made now
        pool.run([[fault(1, now - timedelta(minutes=3)), fault(2, now - timedelta(minutes=2))], [], [], []])
        matchers = parse_matchers([f"cluster={CLUSTER}"])
        silence = new_silence(
            matchers, ends_at=now + timedelta(hours=1), created_by="alice", comment="rack work", now=datetime.now(UTC)
        )
        store.add(silence)
        before = {name: list(changes) for name, changes in news(world).items()}
        assert before == {}

        # When four sweeps run at once, twice over
        for _ in range(2):
            pool.run_jobs([{"sweep": True}] * WORKERS)

        # Then the channel of its incidents was told once that it started; PagerDuty nothing
        started = news(world)
        assert started == {"gpu-alerts": [f"silence:{silence.id}:started"]}
        assert not [c for c in world["standins"].pagerduty_changes() if silence.id in str(c)]

        # When it is expired, and four sweeps run at once, twice over
        store.expire(silence.id, datetime.now(UTC))
        for _ in range(2):
            pool.run_jobs([{"sweep": True}] * WORKERS)
    finally:
        pool.close()

    # Then that channel was told once that it ended, and of its start no more than once
    assert news(world) == {"gpu-alerts": [f"silence:{silence.id}:started", f"silence:{silence.id}:ended"]}
    [ended] = [
        message
        for message in world["standins"].slack_channels()["gpu-alerts"]
        if (message.get("metadata") or {}).get("event_payload", {}).get("id") == f"silence:{silence.id}:ended"
    ]
    assert f"Silence `{silence.id}` ended" in str(ended["blocks"])
    assert "2 incidents" in str(ended["blocks"])
