"""Every branch of the ResumeTraining workflow, executed through the real definition (see conftest.py)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import boto3

from fault_responder.adapters.interaction_store import DynamoDBInteractionStore
from fault_responder.events.parse import parse_ecs_event
from fault_responder.resume.budget import AttemptOutcome, LedgerAttempt
from fault_responder.resume.fault import fault_from_event
from fault_responder.resume.jobs import ATTEMPT_TAG, RESUMED_FROM_TAG, job_key
from tests.workflow.conftest import CLUSTER, CLUSTER_ARN, PROVIDER, REGION, Host, World, environment_of, tags_of

CKPT = "runs/llm-7b"
CKPT_URI = f"s3://training-checkpoints/{CKPT}/"


def _resumable(world: World, *, steps: tuple[int, ...] = (100, 200)) -> str:
    for step in steps:
        world.checkpoint(CKPT, step)
    return world.run_job_task(world.hosts[0], "llm-7b", checkpoint_uri=CKPT_URI, environment={"NODE_RANK": "0"})


# --- Resumed ---------------------------------------------------------------------------------------


def test_a_single_task_job_is_resumed_from_its_newest_checkpoint_on_another_host_and_the_drain_is_ours(
    make_world,
) -> None:
    # Given a one-task job on a host that reports XID 79, with complete checkpoints at steps 100 and 200
    world = make_world().build()
    old = _resumable(world)
    faulty = world.hosts[0]
    event = world.fault_event(faulty)
    world.alert_pipeline(event)

    # When the workflow runs for the fault
    execution = world.run(event)

    # Then it succeeds: the old task is STOPPED, one new task RUNNING off the faulty host, resumed from step 200
    assert execution["status"] == "SUCCEEDED", execution
    assert world.task(old)["lastStatus"] == "STOPPED"
    assert "XID 79" in world.task(old)["stoppedReason"] and faulty.ec2_instance_id in world.task(old)["stoppedReason"]
    [new] = world.tasks_of("llm-7b")
    assert new["lastStatus"] == "RUNNING"
    assert new["containerInstanceArn"] != faulty.container_instance_arn
    resume_from = f"{CKPT_URI}step-000200/"
    for container in ("trainer", "metrics"):
        assert environment_of(new, container) | {"RESUME_FROM": resume_from, "RESUME_ATTEMPT": "1"} == (
            environment_of(new, container)
        )
    assert environment_of(new, "trainer")["NODE_RANK"] == "0"
    assert tags_of(new)[ATTEMPT_TAG] == "1" and tags_of(new)[RESUMED_FROM_TAG] == resume_from
    # And the faulty host is DRAINING, the quarantine recorded so the drain is attributed to us
    assert world.instance_status(faulty) == "DRAINING"
    record = world.incidents().load(faulty.container_instance_arn)
    assert record is not None and record.quarantine is not None
    assert "XID 79" in (record.quarantine.reason or "")
    # And one "Resumed" message in the incident's thread, and a PagerDuty change event; no page at all, as the
    # fault was handled (docs/noise.md#quiet-when-handled)
    resumed = [text for text in world.thread_texts() if text.startswith("Resumed llm-7b")]
    assert resumed == ["Resumed llm-7b from step 200, attempt 1 of 3"]
    assert [change["summary"].split(" (")[0] for change in world.changes()][-1] == resumed[0]
    assert world.pages() == []
    # And the ledger holds the running attempt
    [attempt] = world.ledger("llm-7b").attempts
    assert (attempt.number, attempt.step, attempt.outcome) == (1, 200, AttemptOutcome.RUNNING)
    # And when ECS reports the DRAINING that the quarantine caused, the alert pipeline attributes it to us
    world.alert_pipeline(_draining_event(faulty))
    [incident] = world.derived_incidents(faulty.container_instance_arn)
    drain = incident.drain
    assert drain is not None and drain.label.startswith("fault-responder quarantine: XID 79")


def test_a_gang_on_two_hosts_is_restarted_together_never_on_the_faulty_host_and_untagged_tasks_are_left(
    make_world,
) -> None:
    # Given a two-task job on the faulty host and a healthy one, the new tasks needing two polls to start,
    # and a notebook without resume tags on the faulty host
    world = make_world().build(instances=4)
    world.emulation.start_after_describes = 2
    world.checkpoint(CKPT, 300)
    faulty, healthy = world.hosts[0], world.hosts[1]
    old = [
        world.run_job_task(host, "llm-70b", checkpoint_uri=CKPT_URI, environment={"NODE_RANK": str(rank)})
        for rank, host in enumerate((faulty, healthy))
    ]
    notebook = world.run_job_task(faulty, None, family="notebook")
    event = world.fault_event(faulty)
    world.alert_pipeline(event)

    # When the workflow runs
    execution = world.run(event)

    # Then both old tasks are STOPPED and two new ones RUNNING, none on the faulty host
    assert execution["status"] == "SUCCEEDED", execution
    assert [world.task(arn)["lastStatus"] for arn in old] == ["STOPPED", "STOPPED"]
    new = world.tasks_of("llm-70b")
    assert len(new) == 2 and all(task["lastStatus"] == "RUNNING" for task in new)
    assert faulty.container_instance_arn not in {task["containerInstanceArn"] for task in new}
    assert sorted(environment_of(task, "trainer")["NODE_RANK"] for task in new) == ["0", "1"]
    assert {environment_of(task, "metrics")["RESUME_FROM"] for task in new} == {f"{CKPT_URI}step-000300/"}
    # And each RunTask kept the job off the faulty host, with its own deterministic clientToken
    requests = world.relaunches()
    assert [r["placementConstraints"] for r in requests] == [
        [{"type": "memberOf", "expression": f"ec2InstanceId !in ['{faulty.ec2_instance_id}']"}]
    ] * 2
    tokens = [r["clientToken"] for r in requests]
    assert len(set(tokens)) == 2 and all(
        len(token) <= 64 and token.endswith(f"-a1-t{i}") for i, token in enumerate(tokens)
    )
    # And the start was polled until RUNNING
    assert world.states_entered(execution["executionArn"]).count("CheckStarted") == 2
    # And the notebook was left alone, and named in the thread as not touched
    assert world.task(notebook)["lastStatus"] == "RUNNING"
    [found] = [m for m in world.thread() if "training job(s) found" in m["text"]]
    assert notebook.rsplit("/", 1)[-1][:12] in json.dumps(found["blocks"])


def test_an_incomplete_newest_checkpoint_is_skipped_and_the_previous_one_used(make_world) -> None:
    # Given complete checkpoints at 100 and 200 and an interrupted save at 300 (no _COMPLETE)
    world = make_world().build()
    _resumable(world)
    world.checkpoint(CKPT, 300, complete=False)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the job resumes from step 200, and the thread names the skipped folder and why
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_FROM"] == f"{CKPT_URI}step-000200/"
    [resumed] = [m for m in world.thread() if m["text"].startswith("Resumed llm-7b")]
    body = json.dumps(resumed["blocks"])
    assert "step 300: no_marker" in body


def test_no_complete_checkpoint_pages_and_restarts_nothing(make_world) -> None:
    # Given a job whose only checkpoint folder is incomplete, and the default policy (page)
    world = make_world().build()
    world.checkpoint(CKPT, 100, complete=False)
    old = world.run_job_task(world.hosts[0], "llm-7b", checkpoint_uri=CKPT_URI)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then nothing was stopped or started, and a critical page names the reason, per job
    assert world.task(old)["lastStatus"] == "RUNNING"
    assert world.relaunches() == []
    page = _resume_page(world, "llm-7b")
    assert page["severity"] == "critical" and "no complete checkpoint" in page["summary"]
    assert page["custom_details"]["skipped_checkpoints"][0]["reason"] == "no_marker"
    assert any(text.startswith("llm-7b NOT resumed: it has no complete checkpoint") for text in world.thread_texts())


def test_an_exhausted_budget_pages_and_restarts_nothing(make_world) -> None:
    # Given three earlier attempts from step 200 and no progress since (the newest checkpoint is still 200)
    world = make_world().build()
    old = _resumable(world)
    _earlier_attempts(world, step=200)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then nothing restarts and the page carries the attempts as evidence
    assert world.task(old)["lastStatus"] == "RUNNING"
    assert world.relaunches() == []
    page = _resume_page(world, "llm-7b")
    assert "resume budget is exhausted" in page["summary"]
    assert [attempt["number"] for attempt in page["custom_details"]["attempts"]] == [1, 2, 3]


def test_a_progressed_job_gets_a_fresh_budget(make_world) -> None:
    # Given three earlier attempts from step 100, and a newer complete checkpoint at 200 since
    world = make_world().build()
    _resumable(world)
    _earlier_attempts(world, step=100)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then it resumes as attempt 4 of the job, the first of a new budget
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_ATTEMPT"] == "4"
    assert "Resumed llm-7b from step 200, attempt 1 of 3" in world.thread_texts()


def test_a_duplicate_trigger_is_already_handled_and_the_job_is_relaunched_once(make_world) -> None:
    # Given the same fault delivered twice, both executions started at once
    world = make_world().build()
    _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When both run
    first, second = world.start(event, "resume-a"), world.start(event, "resume-b")
    results = [world.wait(first), world.wait(second)]

    # Then both succeed, one of them having ended as already handled, and the job was relaunched once
    assert [r["status"] for r in results] == ["SUCCEEDED", "SUCCEEDED"]
    ends = sorted(world.states_entered(r["executionArn"])[-1] for r in results)
    assert ends[0] == "AlreadyHandled" and ends[1] == "Done"
    assert len(world.relaunches()) == 1
    assert len(world.tasks_of("llm-7b")) == 1


def test_ecs_auto_repair_enabled_means_no_action_and_says_so(make_world) -> None:
    # Given a Managed Instances provider with ECS auto-repair ENABLED
    world = make_world().build(provider_type="MANAGED_INSTANCES", auto_repair="ENABLED")
    old = _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    execution = world.run(event)

    # Then it ends there: no drain, no stop, no relaunch; the thread and PagerDuty (a change event) say why
    assert world.states_entered(execution["executionArn"])[-1] == "EcsOwnsRecovery"
    assert world.instance_status(world.hosts[0]) == "ACTIVE"
    assert world.task(old)["lastStatus"] == "RUNNING" and world.relaunches() == []
    assert any(text.startswith("ECS auto-repair owns recovery") for text in world.thread_texts())
    assert world.changes()[-1]["summary"].startswith("ECS auto-repair owns recovery")


def test_on_managed_instances_with_auto_repair_off_the_drain_alone_keeps_the_job_off_the_faulty_host(
    make_world,
) -> None:
    # Given a Managed Instances provider with ECS auto-repair DISABLED (no ec2InstanceId constraints there)
    world = make_world().build(provider_type="MANAGED_INSTANCES", auto_repair="DISABLED")
    _resumable(world)
    faulty = world.hosts[0]
    event = world.fault_event(faulty)
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the RunTask carried no instance constraint, and the drained host got nothing
    [request] = world.relaunches()
    assert "placementConstraints" not in request
    [new] = world.tasks_of("llm-7b")
    assert new["containerInstanceArn"] != faulty.container_instance_arn


def test_tasks_that_do_not_stop_in_time_page_and_nothing_is_restarted(make_world) -> None:
    # Given the job's task never reaches STOPPED, and a 2-second stop timeout
    world = make_world(ResumeStopTimeoutSeconds="2").build()
    world.emulation.stop_after_describes = 1000
    _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    execution = world.run(event)

    # Then no second copy is started, and it pages
    assert world.outcomes(execution) == {"llm-7b": "stop_timed_out"}
    assert world.relaunches() == []
    assert "its tasks did not stop" in _resume_page(world, "llm-7b")["summary"]


def test_a_mass_fault_stops_auto_resume_and_pages(make_world) -> None:
    # Given 4 instances of which 2 others already faulted within the window (at most 1 may be handled)
    world = make_world().build(instances=4)
    old = _resumable(world)
    for other in world.hosts[1:3]:
        earlier = fault_from_event(parse_ecs_event(world.fault_event(other)), ["ACCELERATED_COMPUTE"])
        assert world.store().claim(earlier, f"earlier-{other.ec2_instance_id}").claimed
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the third fault's workflow runs
    execution = world.run(event, name="third")

    # Then it stops before touching anything and pages once for the mass event, as the provider's fleet incident
    assert world.states_entered(execution["executionArn"])[-1] == "MassFault"
    assert world.instance_status(world.hosts[0]) == "ACTIVE" and world.task(old)["lastStatus"] == "RUNNING"
    [page] = [p for p in world.pages() if p["dedup_key"] == f"fleet/{CLUSTER}/{PROVIDER}/ACCELERATED_COMPUTE"]
    assert page["severity"] == "critical" and page["custom_details"]["guards"]["impaired"] == 3


def test_dry_run_decides_and_reports_but_changes_nothing(make_world) -> None:
    # Given the stack in dry-run mode
    world = make_world(ResumeMode="dry-run").build()
    old = _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then no drain, no stop, no relaunch, no ledger entry; the thread has the decision
    assert world.instance_status(world.hosts[0]) == "ACTIVE"
    assert world.task(old)["lastStatus"] == "RUNNING" and world.relaunches() == []
    assert world.ledger("llm-7b").attempts == ()
    [found] = [m for m in world.thread() if "training job(s) found" in m["text"]]
    assert "Dry run: would set" in json.dumps(found["blocks"])
    assert "Dry run: would resume llm-7b from step 200" in world.thread_texts()
    assert world.changes()[-1]["summary"].startswith("Dry run: would resume llm-7b")


def test_approve_mode_resumes_once_approved_with_the_posted_button(make_world) -> None:
    # Given the stack in approve mode
    world = make_world(ResumeMode="approve").build()
    _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow asks with buttons, and the token their approval id names (kept in the incidents table, as
    # SlackActionsFunction takes it on a press) answers it
    execution = world.start(event)
    ident = _approval_id(world)
    token = DynamoDBInteractionStore(world.deploy.environment["INCIDENTS_TABLE"], world.dynamodb).take_approval(ident)
    assert token is not None
    assert token not in json.dumps(world.standins.slack_channels())
    boto3.client("stepfunctions", region_name=REGION).send_task_success(
        taskToken=token, output=json.dumps({"approved": True})
    )

    # Then the job is resumed
    assert world.wait(execution)["status"] == "SUCCEEDED"
    assert len(world.tasks_of("llm-7b")) == 1 and world.tasks_of("llm-7b")[0]["lastStatus"] == "RUNNING"
    assert "Resumed llm-7b from step 200, attempt 1 of 3" in world.thread_texts()


def test_approve_mode_pages_when_nobody_answers_in_time(make_world) -> None:
    # Given approve mode with a 2-second approval window
    world = make_world(ResumeMode="approve", ApprovalTimeoutSeconds="2").build()
    old = _resumable(world)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When nobody answers
    execution = world.run(event)

    # Then the job is untouched and a page says so
    assert world.outcomes(execution) == {"llm-7b": "approval_timed_out"}
    assert world.task(old)["lastStatus"] == "RUNNING" and world.relaunches() == []
    assert "No approval to resume llm-7b within 2s" in _resume_page(world, "llm-7b")["summary"]


def test_no_capacity_then_success_retries_within_the_budget(make_world) -> None:
    # Given ECS has no GPU capacity for the first RunTask
    world = make_world().build()
    _resumable(world)
    world.emulation.fail_run_tasks(1, "RESOURCE:GPU")
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then attempt 1 failed for capacity and attempt 2 runs, with its own clientToken and RESUME_ATTEMPT
    attempts = world.ledger("llm-7b").attempts
    assert [(a.number, a.outcome) for a in attempts] == [(1, AttemptOutcome.FAILED), (2, AttemptOutcome.RUNNING)]
    assert "RESOURCE:GPU" in (attempts[0].reason or "")
    [new] = world.tasks_of("llm-7b")
    assert environment_of(new, "trainer")["RESUME_ATTEMPT"] == "2"
    assert [r["clientToken"][-6:] for r in world.relaunches()] == ["-a1-t0", "-a2-t0"]
    texts = world.thread_texts()
    assert any(t.startswith("Attempt 1 of llm-7b failed; retrying as attempt 2") for t in texts)
    assert "Resumed llm-7b from step 200, attempt 2 of 3" in texts


def test_a_task_stopping_early_marks_its_host_failed_and_the_retry_avoids_it(make_world) -> None:
    # Given the first relaunched task dies before it runs
    world = make_world().build(instances=4)
    _resumable(world)
    world.emulation.stop_started_tasks_early(1)
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the host it died on joins the faulty one in the exclusion of the retry
    ledger = world.ledger("llm-7b")
    assert ledger.attempts[0].outcome == AttemptOutcome.FAILED and len(ledger.failed_hosts) == 2
    retry = world.relaunches()[-1]
    assert all(host in retry["placementConstraints"][0]["expression"] for host in ledger.failed_hosts)
    [new] = world.tasks_of("llm-7b")
    assert world.ec2_of(new) not in ledger.failed_hosts


def test_a_job_tagged_dry_run_is_only_reported_while_the_stack_resumes(make_world) -> None:
    # Given the stack in auto mode and a job tagged fault-responder:mode=dry-run
    world = make_world().build()
    world.checkpoint(CKPT, 100)
    old = world.run_job_task(
        world.hosts[0], "careful", checkpoint_uri=CKPT_URI, tags={"fault-responder:mode": "dry-run"}
    )
    event = world.fault_event(world.hosts[0])
    world.alert_pipeline(event)

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then that job is untouched (the host is still quarantined: the stack acts)
    assert world.task(old)["lastStatus"] == "RUNNING" and world.relaunches() == []
    assert world.instance_status(world.hosts[0]) == "DRAINING"
    assert "Dry run: would resume careful from step 100" in world.thread_texts()


def test_without_an_incident_the_notices_go_out_standalone(make_world, monkeypatch) -> None:
    # Given the alert pipeline never opened the incident, and no retries left to wait for it
    world = make_world().build()
    monkeypatch.setenv("INCIDENT_WAIT_RETRIES", "0")
    _resumable(world)
    event = world.fault_event(world.hosts[0])

    # When the workflow runs
    assert world.run(event)["status"] == "SUCCEEDED"

    # Then the job is resumed and the notice reached the channel as a message of its own
    messages = world.standins.slack_channels()["gpu-alerts"]
    assert any(
        m["thread_ts"] is None and m["text"].startswith("Training auto-resume · Resumed llm-7b") for m in messages
    )


# --- Helpers ---------------------------------------------------------------------------------------


def _earlier_attempts(world: World, *, step: int, count: int = 3) -> None:
    """Attempts earlier executions made for llm-7b, all from `step`."""
    for number in range(1, count + 1):
        attempt = LedgerAttempt(
            number=0,
            step=step,
            checkpoint_uri=f"{CKPT_URI}step-{step:06d}/",
            fault_key="earlier",
            execution=f"earlier-{number}",
            started_at=datetime(2026, 11, 28, tzinfo=UTC),
            outcome=AttemptOutcome.FAILED,
            reason="RunTask could not place the task",
        )
        world.store().record_attempt(job_key(CLUSTER_ARN, "llm-7b"), attempt, f"earlier-set-{number}")


def _resume_page(world: World, job_id: str) -> dict[str, Any]:
    [page] = [p for p in world.pages() if p["dedup_key"].endswith(f"/resume/{job_id}")]
    return page


def _approval_id(world: World, timeout: float = 20.0) -> str:
    """The approval id on the Approve button of the request in the thread."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in world.standins.slack_channels().get("gpu-alerts", []):
            for block in message["blocks"]:
                for element in block.get("elements", []) if block["type"] == "actions" else []:
                    if element.get("action_id") == "resume_approve":
                        return str(element["value"])
        time.sleep(0.05)
    raise AssertionError("no approval request was posted")


def _draining_event(host: Host) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "evt-draining",
        "detail-type": "ECS Container Instance State Change",
        "source": "aws.ecs",
        "account": "123456789012",
        "time": _now(),
        "region": REGION,
        "resources": [host.container_instance_arn],
        "detail": {
            "clusterArn": CLUSTER_ARN,
            "containerInstanceArn": host.container_instance_arn,
            "ec2InstanceId": host.ec2_instance_id,
            "status": "DRAINING",
            "version": 3,
            "updatedAt": _now(),
        },
    }


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fingerprint(host: Host) -> str:
    return f"{CLUSTER}/{host.container_instance_arn.rsplit('/', 1)[-1]}/ACCELERATED_COMPUTE"
