"""No warm spare is claimed twice: relaunches in real parallel processes (a cold ResumeSteps each) race for the same
spares through DynamoDB's conditional transactions, on a moto server that applies each write atomically
(tests/integration/parallel.py)."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

import pytest

from tests.integration.parallel import moto_client
from tests.integration.tables import create_incidents_table

CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:cluster/training"
PROVIDER = "p5-training"
WORKERS = 10


@pytest.fixture
def endpoint(moto_server: str) -> str:
    """The integration tests' moto server (tests/integration/conftest.py): each race uses a table of its own."""
    return moto_server


def _relaunch_claims(
    endpoint: str, table: str, spares: list[str], job: int, tasks: int, barrier: Any
) -> dict[str, Any]:
    """One relaunch in a process of its own: job `job` of `tasks` tasks looks for `spares` (all idle) at once with
    the others, and says what it took."""
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1")
    from fault_responder.adapters.resume_store import DynamoDBResumeStore  # noqa: PLC0415
    from fault_responder.resume.config import ResumeConfig  # noqa: PLC0415
    from fault_responder.resume.fault import ProviderInfo  # noqa: PLC0415
    from fault_responder.resume.jobs import Job, TaskSpec  # noqa: PLC0415
    from fault_responder.resume.relaunch import HostsToAvoid  # noqa: PLC0415
    from fault_responder.resume.spares import SpareHost  # noqa: PLC0415
    from fault_responder.resume.steps import ResumeSteps  # noqa: PLC0415

    class IdleSpares:
        def spare_hosts(self, cluster: str, attribute: str) -> list[SpareHost]:
            return [
                SpareHost(container_instance_arn=f"{cluster}/{host}", ec2_instance_id=host, capacity_provider=PROVIDER)
                for host in spares
            ]

    unused: Any = None
    records = DynamoDBResumeStore(table, moto_client("dynamodb", endpoint))
    steps = ResumeSteps(
        ecs=IdleSpares(),  # type: ignore[arg-type]
        store=records,
        spare_records=records,
        incidents=unused,
        fleets=unused,
        checkpoints=unused,
        notifier=unused,
        config=ResumeConfig(),
    )
    specs = [
        TaskSpec(task_arn=f"task-{job}-{n}", task_definition_arn="trainer:1", capacity_provider_name=PROVIDER)
        for n in range(tasks)
    ]
    the_job = Job(
        job_id=f"job-{job}",
        cluster_arn=CLUSTER_ARN,
        checkpoint_uri="s3://b/j/",
        mode="auto",
        task_count=tasks,
        hosts=(),
    )
    provider = ProviderInfo(name=PROVIDER, type="EC2_AUTOSCALING", auto_repair=None)
    barrier.wait()
    use, held = steps.take_spares(
        the_job, specs, 1, HostsToAvoid(), providers={PROVIDER: provider}, config=ResumeConfig()
    )
    return {"job": job, "state": use.state.value, "hosts": list(use.hosts), "held_by_others": list(held)}


def race(endpoint: str, table: str, spares: list[str], tasks: int) -> list[dict[str, Any]]:
    create_incidents_table(moto_client("dynamodb", endpoint), table)
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(WORKERS)
        with context.Pool(WORKERS) as pool:
            pending = [
                pool.apply_async(_relaunch_claims, (endpoint, table, spares, job, tasks, barrier))
                for job in range(WORKERS)
            ]
            return [result.get(timeout=120) for result in pending]


def test_ten_relaunches_and_one_spare_one_takes_it_the_others_are_placed_as_before(endpoint: str) -> None:
    results = race(endpoint, "one-spare", ["i-spare"], tasks=1)

    used = [result for result in results if result["state"] == "used"]
    assert [result["hosts"] for result in used] == [["i-spare"]]
    others = [result for result in results if result["state"] != "used"]
    assert len(others) == WORKERS - 1
    # The loser knows the spare is held, and keeps its own relaunch off it (unless it read the claims before the
    # winner wrote, in which case it found the spare free and lost the claim: either way it is not placed there).
    assert all(result["state"] == "none_free" for result in others)


def test_gangs_racing_for_a_pool_each_take_a_whole_set_and_no_spare_twice(endpoint: str) -> None:
    spares = [f"i-spare-{n}" for n in range(5)]
    results = race(endpoint, "five-spares", spares, tasks=2)

    taken = [host for result in results if result["state"] == "used" for host in result["hosts"]]
    assert len(taken) == len(set(taken)), f"a spare claimed twice: {taken}"
    gangs = [result for result in results if result["state"] == "used"]
    assert len(gangs) == 2, results  # 5 spares hold two gangs of 2; the fifth alone is no gang
    assert all(len(result["hosts"]) == 2 for result in gangs)
