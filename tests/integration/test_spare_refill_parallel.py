"""A refill is never lost to another: relaunches in real parallel processes (a cold ResumeSteps each) refill the same
Auto Scaling group at the same moment, round after round, against one moto server (DynamoDB for the refill records
and the group's lease, Auto Scaling for the group), applying each request atomically (tests/integration/parallel.py).
Without the lease, two that read the same desired capacity both set it plus their own spares, and the group grows
by one refill instead of two (docs/auto-resume.md#warm-spares)."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import pytest

from tests.integration.parallel import moto_client
from tests.integration.tables import create_incidents_table

CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:cluster/training"
PROVIDER = "p5-training"
WORKERS = 4
ROUNDS = 8
START = 10
"""The group's desired capacity before the first round."""


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The integration tests' moto server (tests/integration/conftest.py): a race has a table and a group of its own."""
    return moto_server


def _spares_taken(worker: int, round_: int) -> int:
    """How many spares a relaunch took: one or two, varying by worker and round."""
    return 1 + (worker + round_) % 2


def _relaunches_refill(endpoint: str, table: str, group: str, worker: int, barrier: Any) -> list[dict[str, Any]]:
    """Worker `worker`, in a process of its own: each round, a relaunch of its job that took some spares refills
    `group` at the same moment as the other workers' (a barrier), and says what it asked for."""
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    from fault_responder.adapters.autoscaling import AutoScalingAdapter  # noqa: PLC0415
    from fault_responder.adapters.resume_store import DynamoDBResumeStore  # noqa: PLC0415
    from fault_responder.resume.config import ResumeConfig  # noqa: PLC0415
    from fault_responder.resume.fault import ProviderInfo  # noqa: PLC0415
    from fault_responder.resume.jobs import Job  # noqa: PLC0415
    from fault_responder.resume.spares import SpareState, SpareUse  # noqa: PLC0415
    from fault_responder.resume.steps import ResumeSteps  # noqa: PLC0415

    unused: Any = None
    scaling = AutoScalingAdapter(moto_client("autoscaling", endpoint))
    records = DynamoDBResumeStore(table, moto_client("dynamodb", endpoint))
    steps = ResumeSteps(
        ecs=unused,
        store=records,
        spare_records=records,
        incidents=unused,
        fleets=unused,
        checkpoints=unused,
        notifier=unused,
        config=ResumeConfig(),
        scaling=lambda: scaling,
    )
    job = Job(
        job_id=f"job-{worker}",
        cluster_arn=CLUSTER_ARN,
        checkpoint_uri="s3://b/j/",
        mode="auto",
        task_count=2,
        hosts=(),
    )
    provider = ProviderInfo(name=PROVIDER, type="EC2_AUTOSCALING", auto_repair=None, auto_scaling_group=group)
    asked = []
    for round_ in range(ROUNDS):
        taken = _spares_taken(worker, round_)
        spare = SpareUse(
            state=SpareState.USED, hosts=tuple(f"i-{worker}-{round_}-{n}" for n in range(taken)), needed=taken
        )
        barrier.wait()
        refilled = steps.refill_spares(job, round_ + 1, {PROVIDER: provider}, spare, ResumeConfig())
        assert refilled is not None
        asked.append(
            {"taken": taken, **refilled.model_dump(mode="json", include={"state", "desired_before", "desired_after"})}
        )
    return asked


def _group(endpoint: str, name: str) -> None:
    ec2, autoscaling = moto_client("ec2", endpoint), moto_client("autoscaling", endpoint)
    ec2.create_launch_template(
        LaunchTemplateName=name, LaunchTemplateData={"ImageId": "ami-12345678", "InstanceType": "p5.48xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": name, "Version": "$Latest"},
        MinSize=0,
        MaxSize=1000,
        DesiredCapacity=START,
        AvailabilityZones=["us-east-1a"],
    )


def _desired(endpoint: str, name: str) -> int:
    [group] = moto_client("autoscaling", endpoint).describe_auto_scaling_groups(AutoScalingGroupNames=[name])[
        "AutoScalingGroups"
    ]
    return int(group["DesiredCapacity"])


def test_relaunches_refilling_one_group_at_once_grow_it_by_every_spare_taken(endpoint: str) -> None:
    # Given an Auto Scaling group at 10, and four workers whose relaunches each took one or two of its spares
    table, group = "refill-race", "p5-refill-race"
    create_incidents_table(moto_client("dynamodb", endpoint), table)
    _group(endpoint, group)

    # When, round after round, the four refill it at the same moment
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(WORKERS)
        with context.Pool(WORKERS) as pool:
            pending = [
                pool.apply_async(_relaunches_refill, (endpoint, table, group, worker, barrier))
                for worker in range(WORKERS)
            ]
            asked = [refill for result in pending for refill in result.get(timeout=600)]

    # Then the group grew by exactly the spares taken: no refill lost to another
    taken = sum(_spares_taken(worker, round_) for worker in range(WORKERS) for round_ in range(ROUNDS))
    assert _desired(endpoint, group) == START + taken
    # And each refill asked from the size the one before left: one after the other, from 10 to the end, no overlap
    assert all(refill["state"] == "asked" for refill in asked)
    assert all(refill["desired_after"] - refill["desired_before"] == refill["taken"] for refill in asked)
    steps = sorted((refill["desired_before"], refill["desired_after"]) for refill in asked)
    assert [before for before, _ in steps] == [START, *(after for _, after in steps[:-1])]
