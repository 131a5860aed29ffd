"""A move asks the job for a checkpoint first (docs/auto-resume.md#checkpoint-now-before-a-move): the ResumeTraining
workflow executed through the real definition (see conftest.py), the job played by a thread that uses the training
helper the way a trainer does."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from fault_responder.cli.main import main
from tests.workflow.conftest import (
    ACCOUNT,
    BUCKET,
    CLUSTER,
    CLUSTER_ARN,
    PROVIDER,
    REGION,
    Host,
    World,
    checkpoint_helper,
    environment_of,
)

CKPT = "runs/llm-7b"
CKPT_URI = f"s3://{BUCKET}/{CKPT}/"
REQUEST_KEY = f"{CKPT}/_CHECKPOINT_NOW"
RESTART_APP = "XID_13"
"""Graphics engine exception: NVIDIA's action is to restart the application; the host is sound."""


def _job_on_first_host(world: World) -> str:
    world.checkpoint(CKPT, 100)
    world.checkpoint(CKPT, 200)
    return world.run_job_task(world.hosts[0], "llm-7b", checkpoint_uri=CKPT_URI)


@contextmanager
def trainer(world: World, *, at_step: int, answers: bool = True) -> Iterator[dict[str, Any]]:
    """The job, training on: it looks for a request at every step boundary and, asked, saves `at_step` with the
    request's id and holds there. Yields what it did (`answered`, `requests_seen`)."""
    seen: dict[str, Any] = {"answered": None, "requests_seen": 0}
    stop = threading.Event()

    def train() -> None:
        requests = checkpoint_helper.CheckpointRequests(CKPT_URI, every=1, client=world.s3)
        while not stop.is_set() and seen["answered"] is None:
            request = requests.pending(at_step)
            if request is not None:
                seen["requests_seen"] += 1
                if answers:
                    requests.answer(at_step, {"model.pt": b"w" * 64}, request)
                    seen["answered"] = request.id
            stop.wait(0.05)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        stop.set()
        thread.join(10)


def request_object(world: World) -> dict[str, Any] | None:
    try:
        body = world.s3.get_object(Bucket=BUCKET, Key=REQUEST_KEY)["Body"].read()
    except ClientError:
        return None
    return dict(json.loads(body))


def resumed_text(world: World) -> str:
    """The thread's Resumed reply as people read it (its blocks' text)."""
    [message] = [m for m in world.thread() if m["text"].startswith("Resumed")]
    return json.dumps(message["blocks"], ensure_ascii=False).replace("\\n", "\n")


def test_after_a_restart_app_xid_the_job_saves_on_request_and_is_moved_from_that_step(make_world) -> None:
    # Given a job on a host that reports a RESTART_APP XID, its newest complete checkpoint at step 200, training on
    world = make_world().build()
    old = _job_on_first_host(world)
    faulty = world.hosts[0]
    event = world.fault_event(faulty, reason=RESTART_APP)
    world.alert_pipeline(event)

    # When the workflow runs while the job answers the request it finds at step 257
    with trainer(world, at_step=257) as job:
        execution = world.run(event)

    # Then the job was asked once, answered, and the move resumed it from the answering checkpoint (no step lost)
    assert execution["status"] == "SUCCEEDED", execution
    request = request_object(world)
    assert request is not None and job["answered"] == request["id"]
    assert request["hold_until"] is not None and request["hold_until"] > request["deadline"]
    assert "XID 13" in request["reason"] and "llm-7b" in request["reason"]
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000257/"
    assert world.task(old)["lastStatus"] == "STOPPED"
    # And the host is quarantined, and the thread says the job saved on request and held there
    assert world.instance_status(faulty) == "DRAINING"
    text = resumed_text(world)
    assert f"Resumed llm-7b from step 257 (saved on checkpoint-now request {request['id']} and held there" in text
    assert "Checkpoint now: the job saved step 257" in text and request["id"] in text
    # And the ledger keeps the figures the recovery report reads: training ended at the save it held at
    [attempt] = world.ledger("llm-7b").attempts
    assert (attempt.cause, attempt.checkpoint_now, attempt.work_lost_seconds) == ("XID 13", "answered", 0.0)
    assert attempt.running_at is not None and attempt.training_ended_at is not None
    assert attempt.fault_at is not None and attempt.fault_at < attempt.training_ended_at < attempt.running_at


def test_a_request_the_job_ignores_times_out_and_the_move_falls_back_to_the_newest_checkpoint(make_world) -> None:
    # Given the same fault, a stack that waits 2 s for an answer, and a job that reads requests but never answers
    world = make_world(CheckpointNowSeconds="2").build()
    _job_on_first_host(world)
    event = world.fault_event(world.hosts[0], reason=RESTART_APP)
    world.alert_pipeline(event)

    # When the workflow runs
    with trainer(world, at_step=257, answers=False) as job:
        started = time.monotonic()
        execution = world.run(event)
        took = time.monotonic() - started

    # Then it waited for the deadline, resumed from the newest complete checkpoint (200), withdrew its request,
    # and the thread says the job did not answer
    assert execution["status"] == "SUCCEEDED", execution
    assert job["requests_seen"] >= 1 and job["answered"] is None
    assert took >= 2
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000200/"
    assert request_object(world) is None
    assert "Checkpoint now: no answer to request cn-" in resumed_text(world)
    assert "moved from the newest complete checkpoint instead" in resumed_text(world)


def test_a_move_nobody_answered_counts_the_work_lost_from_the_save_to_when_ecs_told_the_job_to_stop(
    make_world,
) -> None:
    # Given a stack that waits 2 s for an answer, and a job that never answers but saves step 230 during the wait
    world = make_world(CheckpointNowSeconds="2").build()
    old = _job_on_first_host(world)
    event = world.fault_event(world.hosts[0], reason=RESTART_APP)
    world.alert_pipeline(event)
    saved = threading.Timer(0.5, lambda: world.checkpoint(CKPT, 230))

    # When the workflow runs
    saved.start()
    try:
        execution = world.run(event)
    finally:
        saved.join(10)

    # Then the move resumed from that save, and the relaunch was handed when ECS told the old task to stop
    assert execution["status"] == "SUCCEEDED", execution
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000230/"
    told = world.task(old)["stoppingAt"]
    [relaunch] = world.invocations.of("RelaunchJobFunction")
    assert datetime.fromisoformat(relaunch["stopped"]["stopping_at"]) == told
    # And the work lost runs from the save (its manifest's own time) to that moment, in the ledger and the thread
    created = datetime.fromisoformat(manifest_of(world, 230)["created_at"])
    [attempt] = world.ledger("llm-7b").attempts
    assert attempt.training_ended_at == told
    assert attempt.work_lost_seconds == pytest.approx((told - created).total_seconds(), abs=1e-3)
    assert (
        "from the save of step 230 (the manifest's created_at) until ECS told the job to stop (its stoppingAt)"
        in resumed_text(world)
    )


def manifest_of(world: World, step: int) -> dict[str, Any]:
    body = world.s3.get_object(Bucket=BUCKET, Key=f"{CKPT}/step-{step:06d}/_COMPLETE")["Body"].read()
    return dict(json.loads(body))


def test_after_xid_79_nobody_waits_for_a_save_that_cannot_come(make_world) -> None:
    # Given a job on a host whose GPU fell off the bus
    world = make_world().build()
    _job_on_first_host(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    execution = world.run(event)

    # Then no request is written, no wait is made, and the move says nothing of one
    assert execution["status"] == "SUCCEEDED", execution
    assert request_object(world) is None
    states = world.states_entered(execution["executionArn"])
    assert "RequestCheckpoint" in states and "WaitForCheckpoint" not in states
    [asked] = [call["plan"] for call in world.invocations.of("StopJobFunction")]
    assert asked["checkpoint_now"]["state"] == "skipped" and "XID 79" in asked["checkpoint_now"]["detail"]
    assert "Checkpoint now" not in resumed_text(world)


def test_an_operators_pending_request_is_joined_not_replaced(make_world) -> None:
    # Given an operator who asked the job for a checkpoint a moment ago (its request still pending)
    world = make_world().build()
    _job_on_first_host(world)
    now = time.time()
    operator = {
        "format": "fault-responder-checkpoint-request/1",
        "id": "cn-operator-1",
        "requested_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
        "deadline": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + 600)),
        "hold_until": None,
        "reason": "moving it by hand",
        "requested_by": "alice",
    }
    world.s3.put_object(Bucket=BUCKET, Key=REQUEST_KEY, Body=json.dumps(operator).encode())
    event = world.fault_event(world.hosts[0], reason=RESTART_APP)
    world.alert_pipeline(event)

    # When the workflow runs and the job answers the request it finds
    with trainer(world, at_step=230) as job:
        execution = world.run(event)

    # Then the workflow waited for the operator's request (one save answers both) and left it in place
    assert execution["status"] == "SUCCEEDED", execution
    assert job["answered"] == "cn-operator-1"
    assert request_object(world) == operator
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000230/"
    assert "request cn-operator-1 (an operator's, joined)" in resumed_text(world)


def test_without_checkpoint_now_the_same_fault_moves_the_job_at_once_from_its_last_periodic_checkpoint(
    make_world,
) -> None:
    # Given a stack that never asks (CheckpointNowSeconds 0) and the same RESTART_APP fault
    world = make_world(CheckpointNowSeconds="0").build()
    _job_on_first_host(world)
    event = world.fault_event(world.hosts[0], reason=RESTART_APP)
    world.alert_pipeline(event)

    # When the workflow runs while the job would answer
    with trainer(world, at_step=257) as job:
        execution = world.run(event)

    # Then nothing was asked and the job restarts from step 200: the steps since are lost, up to its stop
    assert execution["status"] == "SUCCEEDED", execution
    assert job["requests_seen"] == 0 and request_object(world) is None
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000200/"
    [attempt] = world.ledger("llm-7b").attempts
    assert attempt.checkpoint_now == "skipped" and attempt.work_lost_seconds and attempt.work_lost_seconds > 0
    assert attempt.training_ended_at is not None and attempt.fault_at is not None
    assert attempt.training_ended_at > attempt.fault_at  # it trained on after the RESTART_APP XID, until stopped


# --- A drain nobody's fault explains: a move with warning ----------------------------------------------------------


def drain_event(world: World, host: Host, *, event_id: str, updated_at: str, provider: bool = True) -> dict[str, Any]:
    """What ECS sends while a host drains (one per change of the instance: several per drain)."""
    world.ecs.update_container_instances_state(
        cluster=CLUSTER, containerInstances=[host.container_instance_arn], status="DRAINING"
    )
    detail: dict[str, Any] = {
        "clusterArn": CLUSTER_ARN,
        "containerInstanceArn": host.container_instance_arn,
        "ec2InstanceId": host.ec2_instance_id,
        "status": "DRAINING",
        "agentConnected": True,
        "runningTasksCount": 1,
        "version": 7,
        "updatedAt": updated_at,
    }
    if provider:
        detail["capacityProviderName"] = PROVIDER
    return {
        "version": "0",
        "id": event_id,
        "detail-type": "ECS Container Instance State Change",
        "source": "aws.ecs",
        "account": ACCOUNT,
        "time": updated_at,
        "region": REGION,
        "resources": [host.container_instance_arn],
        "detail": detail,
    }


def standalone(world: World, title: str) -> str:
    """A notice posted as a message of its own (no incident thread), as people read it."""
    [message] = [
        m for m in world.standins.slack_channels()["gpu-alerts"] if m["thread_ts"] is None and title in m["text"]
    ]
    return json.dumps(message["blocks"], ensure_ascii=False).replace("\\n", "\n")


def test_a_manual_drain_moves_the_job_with_a_checkpoint_first_and_loses_no_step(make_world) -> None:
    # Given a job on a host someone sets DRAINING for maintenance (no fault), the event naming no capacity provider
    world = make_world().build()
    old = _job_on_first_host(world)
    drained = world.hosts[0]
    event = drain_event(world, drained, event_id="drain-1", updated_at="2026-12-02T10:00:00Z", provider=False)
    world.alert_pipeline(event)

    # When the workflow runs for it, while the job answers the request it finds at step 312
    with trainer(world, at_step=312) as job:
        execution = world.run(event)

    # Then the job saved on request and restarts from that step elsewhere; the host was not quarantined by us
    assert execution["status"] == "SUCCEEDED", execution
    assert world.outcomes(execution) == {"llm-7b": "resumed"}
    states = world.states_entered(execution["executionArn"])
    assert "AlreadyDraining" in states and "QuarantineInstance" not in states
    assert job["answered"] is not None
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000312/"
    assert new["containerInstanceArn"] != drained.container_instance_arn
    assert world.task(old)["lastStatus"] == "STOPPED" and "DRAINING" in world.task(old)["stoppedReason"]
    record = world.incidents().load(drained.container_instance_arn)
    assert record is None or record.quarantine is None
    # And the notices stand alone (no incident of ours tells the story), saying it was a drain
    found = standalone(world, "training job(s) found on")
    assert "was set DRAINING, not by this stack nor for a GPU fault: moving its training jobs" in found
    resumed = standalone(world, "Resumed llm-7b from step 312")
    assert "(saved on checkpoint-now request cn-" in resumed and "no work lost" in resumed
    assert "Checkpoint now: the job saved step 312" in resumed


def test_the_many_events_of_one_drain_move_the_job_once(make_world) -> None:
    # Given a drained host whose drain ECS announces twice (a second event as a task on it changes)
    world = make_world(CheckpointNowSeconds="0").build()
    _job_on_first_host(world)
    drained = world.hosts[0]
    first = drain_event(world, drained, event_id="drain-1", updated_at="2026-12-02T10:00:00Z")
    second = drain_event(world, drained, event_id="drain-2", updated_at="2026-12-02T10:00:09Z")

    # When both start executions at once
    executions = [world.start(first, "drain-1"), world.start(second, "drain-2")]
    results = [world.wait(arn) for arn in executions]

    # Then one moved the job and the other was already handled: one relaunch
    assert all(r["status"] == "SUCCEEDED" for r in results), results
    ends = sorted(world.states_entered(r["executionArn"])[-1] for r in results)
    assert ends[0] == "AlreadyHandled" and ends[1] != "AlreadyHandled", ends
    assert len(world.relaunches()) == 1
    assert len(world.tasks_of("llm-7b")) == 1


def test_the_drain_of_our_own_quarantine_is_not_a_second_move(make_world) -> None:
    # Given a job moved after XID 79 (the workflow quarantined the host: it is DRAINING by our hand)
    world = make_world().build()
    _job_on_first_host(world)
    faulty = world.hosts[0]
    fault = world.fault_event(faulty)
    world.alert_pipeline(fault)
    assert world.run(fault)["status"] == "SUCCEEDED"
    relaunched = len(world.relaunches())

    # When ECS announces that drain
    execution = world.run(drain_event(world, faulty, event_id="drain-1", updated_at="2026-12-02T10:00:00Z"), "d-1")

    # Then the workflow leaves it: not applicable, nothing stopped or started
    assert execution["status"] == "SUCCEEDED", execution
    assert world.states_entered(execution["executionArn"])[-1] == "NotApplicable"
    assert len(world.relaunches()) == relaunched


# --- An operator's move: `fault-responder move` ---------------------------------------------------------------------


def test_an_operator_moves_one_job_off_a_host_with_a_checkpoint_first_and_the_host_keeps_its_other_tasks(
    make_world, capsys
) -> None:
    # Given two jobs on the first host: llm-7b (training on) and bert
    world = make_world().build()
    old = _job_on_first_host(world)
    host = world.hosts[0]
    world.checkpoint("runs/bert", 50)
    bert = world.run_job_task(host, "bert", checkpoint_uri=f"s3://{BUCKET}/runs/bert/")

    # When an operator moves llm-7b off it, and waits, while the job answers the request it finds at step 412
    with trainer(world, at_step=412) as job:
        argv = ["move", "--state-machine", world.machine_arn, "--cluster", CLUSTER, "--job", "llm-7b"]
        status = main([*argv, "--off", host.ec2_instance_id, "--reason", "ECC errors rising", "--wait", "60"])

    # Then the workflow moved llm-7b from the step it saved on request, never back on that host; bert and the host
    # are untouched (not drained)
    out = capsys.readouterr().out
    assert status == 0, out
    assert f"Moving llm-7b off {host.ec2_instance_id}: arn:aws:states:" in out and "SUCCEEDED: resumed" in out
    assert job["answered"] is not None
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000412/"
    assert new["containerInstanceArn"] != host.container_instance_arn
    assert world.task(old)["lastStatus"] == "STOPPED"
    assert world.task(bert)["lastStatus"] == "RUNNING"
    assert world.instance_status(host) == "ACTIVE"
    # And the notices say who asked and why, on their own
    found = standalone(world, "training job(s) found on")
    assert "Moving llm-7b, asked by fault-responder move (" in found and "ECC errors rising" in found
    assert "not drained; its other tasks stay" in found
    assert "saved on checkpoint-now request cn-" in standalone(world, "Resumed llm-7b from step 412")


def test_a_move_names_a_host_the_job_runs_on(make_world, capsys) -> None:
    # Given a job on the first host only
    world = make_world().build()
    _job_on_first_host(world)
    argv = ["move", "--state-machine", world.machine_arn, "--cluster", CLUSTER]

    # When an operator names another host, or another job
    elsewhere = main([*argv, "--job", "llm-7b", "--off", world.hosts[1].ec2_instance_id])
    other_host = capsys.readouterr().err
    nobody = main([*argv, "--job", "nope", "--off", world.hosts[0].ec2_instance_id])
    no_job = capsys.readouterr().err

    # Then nothing is started, and the error says what runs where
    assert (elsewhere, nobody) == (1, 1)
    assert (
        f"job llm-7b has no task on {world.hosts[1].ec2_instance_id}; it runs on {world.hosts[0].ec2_instance_id}"
        in other_host
    )
    assert "no running task in cluster" in no_job and "fault-responder:job-id=nope" in no_job
    assert world.sfn.list_executions(stateMachineArn=world.machine_arn)["executions"] == []


def test_a_move_on_managed_instances_is_refused_with_what_to_do_instead(make_world, capsys) -> None:
    # Given a job on a Managed Instances provider (no placement by instance id there)
    world = make_world().build(provider_type="MANAGED_INSTANCES")
    _job_on_first_host(world)
    host = world.hosts[0]

    # When an operator moves the job off its host
    argv = ["move", "--state-machine", world.machine_arn, "--cluster", CLUSTER, "--job", "llm-7b"]
    status = main([*argv, "--off", host.ec2_instance_id])

    # Then nothing is started, and the error says to drain the host instead
    assert status == 2
    assert f"drain {host.ec2_instance_id} instead, and the workflow moves its jobs" in capsys.readouterr().err
    assert world.sfn.list_executions(stateMachineArn=world.machine_arn)["executions"] == []
