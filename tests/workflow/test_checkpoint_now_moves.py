"""A move asks the job for a checkpoint first (docs/auto-resume.md#checkpoint-now-before-a-move): the ResumeTraining
workflow executed through the real definition (see conftest.py), the job played by a thread that uses the training
helper the way a trainer does."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from botocore.exceptions import ClientError

from tests.workflow.conftest import BUCKET, World, checkpoint_helper, environment_of

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
    assert "Resumed llm-7b from step 257 (saved after the fault began, answering checkpoint-now" in text
    assert "Checkpoint now: the job saved step 257" in text and request["id"] in text


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

    # Then nothing was asked and the job restarts from step 200: the steps since are lost
    assert execution["status"] == "SUCCEEDED", execution
    assert job["requests_seen"] == 0 and request_object(world) is None
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000200/"
