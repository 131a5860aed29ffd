"""A warm spare pool's refill is never lost silently (docs/auto-resume.md#warm-spares): the RelaunchJob step dies
around its Auto Scaling call, as a Lambda that timed out does, and the workflow's retry of the step grows the group
once. The ResumeTraining workflow executed through the real definition (see conftest.py), Auto Scaling on moto."""

from __future__ import annotations

import json

import boto3
import pytest

from fault_responder.adapters.autoscaling import AutoScalingAdapter
from tests.workflow.conftest import CLUSTER, PROVIDER, REGION, Host, World, environment_of
from tests.workflow.function_died import FunctionDied

SPARE_ATTRIBUTE = "fault-responder.spare"
GROUP = "p5-training-asg"
CKPT_URI = "s3://training-checkpoints/runs/llm-7b/"


def _pool(world: World) -> tuple[Host, Host]:
    """A job on the first host, the second an idle warm spare, and the provider's Auto Scaling group (desired 3,
    maximum 6; an instance it launches would register only after five minutes, long after the test)."""
    ec2 = boto3.client("ec2", region_name=REGION)
    autoscaling = boto3.client("autoscaling", region_name=REGION)
    ec2.create_launch_template(
        LaunchTemplateName="p5-gpu", LaunchTemplateData={"ImageId": "ami-12345678", "InstanceType": "p5.48xlarge"}
    )
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=GROUP,
        LaunchTemplate={"LaunchTemplateName": "p5-gpu", "Version": "$Latest"},
        MinSize=0,
        MaxSize=6,
        DesiredCapacity=3,
        AvailabilityZones=[f"{REGION}a"],
    )
    world.emulation.seed_auto_scaling(CLUSTER, PROVIDER, GROUP)
    faulty, spare = world.hosts[0], world.hosts[1]
    world.ecs.put_attributes(
        cluster=CLUSTER,
        attributes=[{"name": SPARE_ATTRIBUTE, "value": "true", "targetId": spare.container_instance_arn}],
    )
    world.checkpoint("runs/llm-7b", 200)
    world.run_job_task(faulty, "llm-7b", checkpoint_uri=CKPT_URI)
    return faulty, spare


def _group_size() -> tuple[int, int] | None:
    return AutoScalingAdapter(boto3.client("autoscaling", region_name=REGION)).group_size(GROUP)


@pytest.mark.parametrize("after_the_call", [False, True], ids=["before the call", "after the call"])
def test_a_relaunch_that_dies_around_its_refill_call_is_retried_and_the_pool_is_refilled_once(
    make_world, monkeypatch: pytest.MonkeyPatch, after_the_call: bool
) -> None:
    # Given a job, a warm spare, and a RelaunchJob function that dies at its first SetDesiredCapacity: just before
    # Auto Scaling gets it, or just after Auto Scaling did it (the process ends either way: nothing after runs)
    world = make_world().build()
    faulty, spare = _pool(world)
    calls: list[int] = []
    original = AutoScalingAdapter.set_desired_capacity

    def dies_once(self: AutoScalingAdapter, name: str, desired: int) -> None:
        calls.append(desired)
        if len(calls) == 1 and not after_the_call:
            raise FunctionDied
        original(self, name, desired)
        if len(calls) == 1:
            raise FunctionDied

    monkeypatch.setattr(AutoScalingAdapter, "set_desired_capacity", dies_once)
    event = world.fault_event(faulty)
    world.alert_pipeline(event)

    # When the workflow runs
    execution = world.run(event)

    # Then the step was run again, and the job runs on the spare, started once
    assert execution["status"] == "SUCCEEDED", execution
    assert world.outcomes(execution) == {"llm-7b": "resumed"}
    assert len(world.invocations.of("RelaunchJobFunction")) == 2
    [task] = world.tasks_of("llm-7b")
    assert world.ec2_of(task) == spare.ec2_instance_id
    assert environment_of(task, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000200/"
    [attempt] = world.ledger("llm-7b").attempts
    assert attempt.spare is True
    # And the group was grown by the one spare taken, once: from 3 to 4, neither lost nor grown twice
    assert _group_size() == (4, 6)
    assert calls == ([4] if after_the_call else [4, 4])
    # And the thread says the pool was refilled, by the retry; nothing paged about it
    resumed = _resumed_text(world)
    assert (
        "Pool refill: p5-training-asg asked for 3 → 4 instances (completed by a retry of the step, which stopped "
        "before Auto Scaling answered)."
    ) in resumed
    assert not [page for page in world.pages() if "not refilled" in json.dumps(page)]


def test_without_a_death_the_pool_is_refilled_by_the_first_try(make_world) -> None:
    # Given the same pool, and a RelaunchJob that does not die
    world = make_world().build()
    faulty, _ = _pool(world)
    event = world.fault_event(faulty)
    world.alert_pipeline(event)

    execution = world.run(event)

    # Then one try refilled it, and the thread says so without a retry
    assert execution["status"] == "SUCCEEDED", execution
    assert len(world.invocations.of("RelaunchJobFunction")) == 1
    assert _group_size() == (4, 6)
    resumed = _resumed_text(world)
    assert "Pool refill: p5-training-asg asked for 3 → 4 instances." in resumed


def _resumed_text(world: World) -> str:
    """The thread's Resumed reply as people read it (its blocks' text)."""
    [message] = [m for m in world.thread() if m["text"].startswith("Resumed")]
    return json.dumps(message["blocks"], ensure_ascii=False).replace("\\n", "\n")
