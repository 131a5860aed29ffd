"""No relaunch lands on a host with an open or claimed GPU fault (docs/auto-resume.md#never-on-a-faulting-host),
executed through the real definition (see conftest.py): excluded by the placement constraint on an EC2 provider,
found and stopped after placement on Managed Instances."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from fault_responder.events.parse import parse_ecs_event
from fault_responder.resume.budget import AttemptOutcome
from fault_responder.resume.fault import fault_from_event
from tests.workflow.conftest import ALERT_CHANNEL, Host, World, environment_of

CKPT_URI = "s3://training-checkpoints/runs/llm-7b/"


def _job_on_first_host(world: World) -> str:
    world.checkpoint("runs/llm-7b", 200)
    return world.run_job_task(world.hosts[0], "llm-7b", checkpoint_uri=CKPT_URI)


def _fault_at(world: World, host: Host, at: datetime) -> dict[str, Any]:
    """The host's XID 79 health event, its check IMPAIRED since `at`."""
    event = copy.deepcopy(world.fault_event(host, event_id=f"evt-{host.ec2_instance_id}"))
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    event["time"] = stamp
    event["detail"]["healthChecks"][0].update({"lastStatusChange": stamp, "lastUpdated": stamp})
    return event


def _earlier_open_faults(world: World, hosts: list[Host], now: datetime) -> None:
    """Faults the alert side still has open, begun before the mass-fault window (the guard does not count them)."""
    for host in hosts:
        world.alert_pipeline(_fault_at(world, host, now - timedelta(hours=2)))


def test_on_an_ec2_provider_the_relaunch_excludes_hosts_whose_fault_is_open_on_the_alert_side(make_world) -> None:
    # Given five instances: the job on the first, and two others with GPU faults still open on the alert side
    world = make_world().build(instances=5)
    _job_on_first_host(world)
    faulty, impaired, healthy = world.hosts[0], world.hosts[1:3], world.hosts[3]
    now = datetime.now(UTC)
    _earlier_open_faults(world, impaired, now)
    event = _fault_at(world, faulty, now)
    world.alert_pipeline(event)

    # When the first host's fault is resumed
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the RunTask excluded the faulty host first, then the two impaired ones
    [request] = world.relaunches()
    ids = [host.ec2_instance_id for host in (faulty, *sorted(impaired, key=lambda h: h.ec2_instance_id))]
    expression = "ec2InstanceId !in [" + ", ".join(f"'{i}'" for i in ids) + "]"
    assert request["placementConstraints"] == [{"type": "memberOf", "expression": expression}]
    # And the job runs on the first healthy host (ECS would have placed it on an impaired one without them)
    [new] = world.tasks_of("llm-7b")
    assert world.ec2_of(new) == healthy.ec2_instance_id
    assert [a.outcome for a in world.ledger("llm-7b").attempts] == [AttemptOutcome.RUNNING]


def test_on_an_ec2_provider_the_relaunch_excludes_hosts_with_a_fault_claimed_within_the_window(make_world) -> None:
    # Given two other hosts whose faults the workflow claimed a moment ago, unknown to the alert side, and a
    # threshold that lets three of five be handled (so the job's own fault passes the guard)
    world = make_world(MassFaultThresholdPercent="60").build(instances=5)
    _job_on_first_host(world)
    faulty, impaired, healthy = world.hosts[0], world.hosts[1:3], world.hosts[3]
    now = datetime.now(UTC)
    for host in impaired:
        claimed = fault_from_event(parse_ecs_event(_fault_at(world, host, now)), ["ACCELERATED_COMPUTE"])
        assert world.store().claim(claimed, f"exec-{host.ec2_instance_id}").claimed
    event = _fault_at(world, faulty, now)
    world.alert_pipeline(event)

    # When the first host's fault is resumed
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the RunTask excluded all three faulting hosts, and the job runs on a healthy one
    [request] = world.relaunches()
    expression = request["placementConstraints"][0]["expression"]
    assert all(f"'{host.ec2_instance_id}'" in expression for host in (faulty, *impaired))
    [new] = world.tasks_of("llm-7b")
    assert world.ec2_of(new) == healthy.ec2_instance_id


def test_on_managed_instances_a_task_placed_on_a_faulting_host_is_stopped_and_the_retry_runs_elsewhere(
    make_world,
) -> None:
    # Given a Managed Instances provider (no instance constraints there), the job on the first host, a second
    # host with an open GPU fault, and ECS placing the relaunch on that second host first
    world = make_world().build(instances=4, provider_type="MANAGED_INSTANCES", auto_repair="DISABLED")
    _job_on_first_host(world)
    faulty, impaired, healthy = world.hosts[0], world.hosts[1], world.hosts[3]
    now = datetime.now(UTC)
    _earlier_open_faults(world, [impaired], now)
    world.emulation.place_next_on(impaired.ec2_instance_id)
    world.emulation.place_next_on(healthy.ec2_instance_id)
    event = _fault_at(world, faulty, now)
    world.alert_pipeline(event)

    # When the first host's fault is resumed
    execution = world.run(event)

    # Then attempt 1 failed for its placement, and attempt 2 runs on the healthy host
    assert execution["status"] == "SUCCEEDED", execution
    ledger = world.ledger("llm-7b")
    assert [(a.number, a.outcome) for a in ledger.attempts] == [(1, AttemptOutcome.FAILED), (2, AttemptOutcome.RUNNING)]
    reason = f"was placed on {impaired.ec2_instance_id}, which has an open GPU fault; it was stopped"
    assert reason in (ledger.attempts[0].reason or "")
    # And the misplaced host joined the job's failed hosts
    assert ledger.failed_hosts == (faulty.ec2_instance_id, impaired.ec2_instance_id)
    # And the misplaced task was stopped with that reason, and no RunTask carried an instance constraint
    [misplaced] = [t for t in world.tasks_of("llm-7b", "STOPPED") if world.ec2_of(t) == impaired.ec2_instance_id]
    assert "which has an open GPU fault" in misplaced["stoppedReason"]
    assert all("placementConstraints" not in request for request in world.relaunches())
    [new] = world.tasks_of("llm-7b")
    assert world.ec2_of(new) == healthy.ec2_instance_id and environment_of(new, "trainer")["RESUME_ATTEMPT"] == "2"
    # And Slack is told why attempt 1 failed, through the existing retry path
    assert "ReportRetry" in world.states_entered(execution["executionArn"])
    [told] = [m for m in world.standins.slack_channels()[ALERT_CHANNEL] if m["text"].startswith("Attempt 1 of llm-7b")]
    assert "which has an open GPU fault" in json.dumps(told["blocks"]) and told["thread_ts"] is not None
