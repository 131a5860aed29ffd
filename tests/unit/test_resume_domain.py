"""The auto-resume domain: which faults count, guards, jobs, the budget, plans, and the RunTask request."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from fault_responder.events.parse import parse_ecs_event
from fault_responder.resume.budget import (
    AttemptOutcome,
    GiveUpReason,
    Ledger,
    LedgerAttempt,
    PlanAction,
    next_attempt,
    plan_job,
    plan_retry,
    retry_backoff,
)
from fault_responder.resume.checkpoints import Checkpoint, CheckpointSearch, MarkerKind, SkippedFolder
from fault_responder.resume.config import Mode, NoCheckpointPolicy, ResumeConfig
from fault_responder.resume.fault import (
    ClaimedFault,
    Fault,
    GuardVerdict,
    NotResumableError,
    ProviderInfo,
    claim_rank,
    fault_from_event,
    judge_guards,
    mass_fault_allowance,
)
from fault_responder.resume.jobs import (
    ATTEMPT_TAG,
    CHECKPOINT_URI_TAG,
    JOB_ID_TAG,
    MAX_ATTEMPTS_TAG,
    MODE_TAG,
    RESUMED_FROM_TAG,
    Job,
    TaskSpec,
    group_jobs,
    job_from_tasks,
    tasks_digest,
)
from fault_responder.resume.relaunch import (
    MAX_EXCLUSION_EXPRESSION,
    build_run_task_request,
    chosen_checkpoint,
    client_token,
    placement_exclusion,
    relaunch_tags,
    stop_reason,
    with_environment,
)
from fault_responder.resume.watch import TaskState, WatchState, judge_start, judge_stop, watch_result

CLUSTER_ARN = "arn:aws:ecs:us-east-1:123456789012:cluster/gpu-training"
INSTANCE_ARN = "arn:aws:ecs:us-east-1:123456789012:container-instance/gpu-training/ci-faulty"
URI = "s3://ckpt/runs/llm/"
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
CONFIG = ResumeConfig()


def health_event(*checks: dict[str, Any], overall: str = "IMPAIRED", provider: str | None = "p5-training") -> Any:
    return parse_ecs_event(
        {
            "version": "0",
            "id": "evt-1",
            "detail-type": "ECS Container Instance Health Change",
            "source": "aws.ecs",
            "account": "123456789012",
            "time": "2026-11-29T10:00:05Z",
            "region": "us-east-1",
            "resources": [INSTANCE_ARN],
            "detail": {
                "clusterArn": CLUSTER_ARN,
                "containerInstanceArn": INSTANCE_ARN,
                "capacityProviderName": provider,
                "ec2InstanceId": "i-faulty",
                "overallStatus": overall,
                "healthChecks": list(checks),
            },
        }
    )


def check(type_: str = "ACCELERATED_COMPUTE", status: str = "IMPAIRED", reason: str | None = "XID_79") -> dict:
    return {"type": type_, "status": status, "lastStatusChange": "2026-11-29T10:00:00Z", "statusReason": reason}


def a_fault() -> Fault:
    return fault_from_event(health_event(check()), ["ACCELERATED_COMPUTE"])


def task(arn: str = "arn:aws:ecs:us-east-1:123456789012:task/gpu-training/t0", **tags: str) -> TaskSpec:
    return TaskSpec(
        task_arn=arn,
        task_definition_arn="arn:aws:ecs:us-east-1:123456789012:task-definition/trainer:7",
        container_instance_arn=INSTANCE_ARN,
        ec2_instance_id="i-faulty",
        capacity_provider_name="p5-training",
        group="family:trainer",
        tags={JOB_ID_TAG: "llm", CHECKPOINT_URI_TAG: URI, **tags},
    )


def a_job(**changes: Any) -> Job:
    return job_from_tasks("llm", CLUSTER_ARN, [task()], Mode.AUTO).model_copy(update=changes)


def attempt(number: int, step: int | None, outcome: AttemptOutcome = AttemptOutcome.FAILED) -> LedgerAttempt:
    return LedgerAttempt(
        number=number,
        step=step,
        checkpoint_uri=None,
        fault_key="f",
        execution="e",
        started_at=NOW,
        outcome=outcome,
    )


def checkpoint(step: int, written_ago: timedelta = timedelta(minutes=25)) -> Checkpoint:
    return Checkpoint(
        uri=f"{URI}step-{step:06d}/",
        step=step,
        marker=MarkerKind.MANIFEST,
        written_at=NOW - written_ago,
        file_count=2,
        total_bytes=96,
    )


def search(found: Checkpoint | None, *skipped: SkippedFolder) -> CheckpointSearch:
    return CheckpointSearch(
        uri=URI,
        checkpoint=found,
        skipped=skipped,
        folders_seen=len(skipped) + (found is not None),
        folders_ignored=0,
        candidates_examined=len(skipped) + (found is not None),
        unexamined=0,
        tracker_step=None,
        notes=(),
    )


# --- The fault -------------------------------------------------------------------------------------


def test_an_impaired_gpu_check_on_a_training_provider_is_a_fault() -> None:
    # Given an IMPAIRED ACCELERATED_COMPUTE check with XID 79
    event = health_event(check())

    # When it is read
    fault = fault_from_event(event, ["ACCELERATED_COMPUTE"])

    # Then the fault names the incident, the XID and the moment of the transition
    assert fault.fingerprint == "gpu-training/ci-faulty/ACCELERATED_COMPUTE"
    assert (fault.xid, fault.label, fault.host) == (79, "XID 79", "i-faulty")
    assert fault.impaired_at == datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    assert fault.key == "gpu-training/ci-faulty/ACCELERATED_COMPUTE#2026-11-29T10:00:00+00:00"


def test_type_and_status_must_be_impaired_on_the_same_health_check() -> None:
    # Given the GPU check OK and another check IMPAIRED (EventBridge matches the two fields independently)
    event = health_event(check(status="OK"), check(type_="DAEMON", reason="daemon down"))

    # When it is read / Then it is not a fault this workflow acts on
    with pytest.raises(NotResumableError, match="no health check of type ACCELERATED_COMPUTE is IMPAIRED"):
        fault_from_event(event, ["ACCELERATED_COMPUTE"])


@pytest.mark.parametrize(
    ("event", "why"),
    [
        (health_event(check(), overall="OK"), "overall status is OK"),
        (health_event(check(), provider=None), "no capacity provider"),
    ],
)
def test_other_health_events_are_not_faults(event: Any, why: str) -> None:
    with pytest.raises(NotResumableError, match=why):
        fault_from_event(event, ["ACCELERATED_COMPUTE"])


# --- Guards ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("instances", "allowed"), [(0, 1), (4, 1), (8, 1), (10, 2), (100, 20)])
def test_the_mass_fault_allowance_is_the_share_but_at_least_one(instances: int, allowed: int) -> None:
    assert mass_fault_allowance(instances, 20) == allowed


def test_auto_repair_enabled_means_ecs_owns_recovery_whatever_the_count() -> None:
    provider = ProviderInfo(name="mi", type="MANAGED_INSTANCES", auto_repair="ENABLED")
    assert judge_guards(provider, impaired=50, instances=50, config=CONFIG).verdict == GuardVerdict.ECS_OWNS_RECOVERY


def test_more_impaired_instances_than_allowed_is_a_mass_fault() -> None:
    provider = ProviderInfo(name="asg", type="EC2_AUTOSCALING", auto_repair=None)
    assert judge_guards(provider, impaired=2, instances=10, config=CONFIG).verdict == GuardVerdict.PROCEED
    assert judge_guards(provider, impaired=3, instances=10, config=CONFIG).verdict == GuardVerdict.MASS_FAULT


def test_faults_checked_at_once_rank_in_claim_order_so_the_first_claimed_proceed() -> None:
    # Given three faults of one provider of five (one may be handled), claimed a millisecond apart, and each
    # execution checking its guard after all three claims are written
    provider = ProviderInfo(name="asg", type="EC2_AUTOSCALING", auto_repair=None)
    faults = [
        a_fault().model_copy(update={"container_instance_arn": f"{INSTANCE_ARN}-{n}", "fingerprint": f"f{n}"})
        for n in "abc"
    ]
    claims = [
        ClaimedFault(f.container_instance_arn, f.impaired_at, None, f.key, NOW + timedelta(milliseconds=n))
        for n, f in enumerate(faults)
    ]
    # Then each sees all three, and only the first claimed proceeds, in whatever order the claims are read
    for order in (claims, claims[::-1]):
        verdicts = [
            judge_guards(provider, impaired=3, instances=5, config=CONFIG, rank=claim_rank(f, order)).verdict
            for f in faults
        ]
        assert verdicts == [GuardVerdict.PROCEED, GuardVerdict.MASS_FAULT, GuardVerdict.MASS_FAULT]
    # And a claim written before claims had times counts as claimed first
    legacy = ClaimedFault(f"{INSTANCE_ARN}-old", NOW, None, None, None)
    assert claim_rank(faults[0], [legacy, *claims]) == 2
    # And a second fault of an instance already counted does not move it down
    again = ClaimedFault(faults[0].container_instance_arn, NOW, None, "other", NOW - timedelta(seconds=1))
    assert claim_rank(faults[0], [again, *claims]) == 1


# --- Jobs ------------------------------------------------------------------------------------------


def test_tasks_sharing_a_job_id_are_one_job_in_task_arn_order() -> None:
    tasks = [
        task("arn:t/b"),
        task("arn:t/a"),
        task("arn:t/c", **{JOB_ID_TAG: "other"}),
        TaskSpec(task_arn="arn:t/x", task_definition_arn="td"),
    ]
    assert {job: [t.task_arn for t in ts] for job, ts in group_jobs(tasks).items()} == {
        "llm": ["arn:t/a", "arn:t/b"],
        "other": ["arn:t/c"],
    }


def test_a_job_summarises_its_gang() -> None:
    job = job_from_tasks("llm", CLUSTER_ARN, [task("arn:t/a"), task("arn:t/b")], Mode.AUTO)
    assert (job.task_count, job.hosts, job.task_ids, job.problems) == (2, ("i-faulty",), ("a", "b"), ())
    assert job.key == "gpu-training/llm"


@pytest.mark.parametrize(
    ("tags", "problem"),
    [
        ({MAX_ATTEMPTS_TAG: "lots"}, "max-attempts must be a whole number"),
        ({MODE_TAG: "aproove"}, "mode must be one of auto, dry-run, approve"),
        ({CHECKPOINT_URI_TAG: "gs://elsewhere/"}, "must start with s3://"),
    ],
)
def test_malformed_tags_become_problems_not_guesses(tags: dict[str, str], problem: str) -> None:
    job = job_from_tasks("llm", CLUSTER_ARN, [task(**tags)], Mode.AUTO)
    assert any(problem in text for text in job.problems)
    if MODE_TAG in tags:
        assert job.mode == Mode.DRY_RUN  # a typo never falls back to a mode that acts


def test_a_task_without_room_for_the_resume_tags_is_a_problem_found_before_anything_stops() -> None:
    crowded = task(**{f"team:{n}": "x" for n in range(47)})  # 49 tags of its own, the job's two included
    job = job_from_tasks("llm", CLUSTER_ARN, [crowded], Mode.AUTO)
    assert job.problems == ("tasks t0 have too many tags to add the resume tags",)
    assert job_from_tasks("llm", CLUSTER_ARN, [task(**{f"team:{n}": "x" for n in range(46)})], Mode.AUTO).problems == ()


def test_a_gang_disagreeing_on_its_checkpoint_uri_is_a_problem() -> None:
    tasks = [task("arn:t/a"), task("arn:t/b", **{CHECKPOINT_URI_TAG: "s3://ckpt/other/"})]
    assert (
        "disagree on fault-responder:checkpoint-uri" in job_from_tasks("llm", CLUSTER_ARN, tasks, Mode.AUTO).problems[0]
    )


def test_the_mode_tag_overrides_the_stack_mode() -> None:
    assert job_from_tasks("llm", CLUSTER_ARN, [task(**{MODE_TAG: "approve"})], Mode.AUTO).mode == Mode.APPROVE


def test_the_same_tasks_have_the_same_digest_in_any_order() -> None:
    assert tasks_digest(["b", "a"]) == tasks_digest(["a", "b"]) != tasks_digest(["a", "c"])


# --- Budget ----------------------------------------------------------------------------------------


def test_the_first_attempt_is_one_of_the_budget() -> None:
    budget = next_attempt([], 200, 3)
    assert (budget.number, budget.in_budget, budget.progress, budget.exhausted) == (1, 1, True, False)


def test_attempts_without_progress_count_up_to_exhaustion() -> None:
    attempts = [attempt(1, 200), attempt(2, 200), attempt(3, 200)]
    budget = next_attempt(attempts, 200, 3)
    assert (budget.number, budget.in_budget, budget.exhausted) == (4, 4, True)


def test_progress_since_the_last_attempt_resets_the_count() -> None:
    attempts = [attempt(1, 100), attempt(2, 100), attempt(3, 100)]
    budget = next_attempt(attempts, 200, 3)
    assert (budget.number, budget.in_budget, budget.progress) == (4, 1, True)


def test_progress_between_earlier_attempts_resets_the_count_there() -> None:
    # Two attempts from 100, then one from 300 (progress), then one more from 300: the window is the last two
    attempts = [attempt(1, 100), attempt(2, 100), attempt(3, 300), attempt(4, 300)]
    assert next_attempt(attempts, 300, 3).in_budget == 3


def test_a_restart_from_scratch_after_a_checkpoint_is_no_progress() -> None:
    assert next_attempt([attempt(1, 100)], None, 3).in_budget == 2


# --- Plans -----------------------------------------------------------------------------------------


def test_a_job_with_a_checkpoint_and_budget_is_resumed_avoiding_the_faulty_host() -> None:
    plan = plan_job(a_job(), a_fault(), CONFIG, Ledger(job_key="k", failed_hosts=("i-old",)), search(checkpoint(200)))
    assert (plan.action, plan.attempt, plan.in_budget, plan.max_attempts) == (PlanAction.RESUME, 1, 1, 3)
    assert plan.checkpoint is not None and plan.checkpoint.step == 200
    assert plan.excluded_hosts == ("i-faulty", "i-old")


def test_no_checkpoint_with_policy_page_gives_up() -> None:
    plan = plan_job(a_job(), a_fault(), CONFIG, Ledger(job_key="k"), search(None))
    assert (plan.action, plan.reason) == (PlanAction.GIVE_UP, GiveUpReason.NO_CHECKPOINT)


def test_no_checkpoint_with_policy_restart_from_scratch_resumes_from_scratch() -> None:
    config = ResumeConfig(no_checkpoint_policy=NoCheckpointPolicy.RESTART_FROM_SCRATCH)
    plan = plan_job(a_job(), a_fault(), config, Ledger(job_key="k"), search(None))
    assert (plan.action, plan.from_scratch, plan.checkpoint) == (PlanAction.RESUME, True, None)


def test_an_exhausted_budget_gives_up_with_the_attempts_as_evidence() -> None:
    ledger = Ledger(job_key="k", attempts=(attempt(1, 200), attempt(2, 200)))
    plan = plan_job(a_job(max_attempts=2), a_fault(), CONFIG, ledger, search(checkpoint(200)))
    assert (plan.action, plan.reason, plan.max_attempts) == (PlanAction.GIVE_UP, GiveUpReason.BUDGET_EXHAUSTED, 2)
    assert [a.number for a in plan.recent_attempts] == [1, 2]


def test_a_job_with_problems_gives_up_without_a_search() -> None:
    plan = plan_job(a_job(problems=("bad tag",)), a_fault(), CONFIG, Ledger(job_key="k"), None)
    assert (plan.action, plan.reason, plan.detail) == (PlanAction.GIVE_UP, GiveUpReason.INVALID_JOB, "bad tag")


@pytest.mark.parametrize("mode", list(Mode))
def test_the_plan_carries_the_jobs_mode(mode: Mode) -> None:
    plan = plan_job(a_job(mode=mode), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(1)))
    assert (plan.action, plan.mode) == (PlanAction.RESUME, mode)


def test_a_failed_attempt_is_retried_within_the_budget_after_a_backoff() -> None:
    # Given attempt 1 failed (recorded in the ledger)
    first = plan_job(a_job(), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(200)))
    ledger = Ledger(job_key="k", attempts=(attempt(1, 200),), failed_hosts=("i-faulty",))

    # When the retry is planned
    retry = plan_retry(first, a_fault(), CONFIG, ledger, failed_attempt=1, failure="no capacity")

    # Then it is attempt 2 of 3, replacing attempt 1's tasks after the base backoff
    assert (retry.action, retry.attempt, retry.in_budget, retry.replaces) == (PlanAction.RESUME, 2, 2, 1)
    assert (retry.backoff_seconds, retry.retries, retry.last_failure) == (60, 1, "no capacity")


def test_a_failed_last_attempt_gives_up() -> None:
    first = plan_job(a_job(max_attempts=1), a_fault(), CONFIG, Ledger(job_key="k"), search(checkpoint(200)))
    retry = plan_retry(
        first, a_fault(), CONFIG, Ledger(job_key="k", attempts=(attempt(1, 200),)), failed_attempt=1, failure="x"
    )
    assert (retry.action, retry.reason) == (PlanAction.GIVE_UP, GiveUpReason.BUDGET_EXHAUSTED)


@pytest.mark.parametrize(("retry", "seconds"), [(1, 60), (2, 120), (3, 240), (5, 900)])
def test_the_backoff_doubles_up_to_a_cap(retry: int, seconds: int) -> None:
    assert retry_backoff(60, retry) == seconds


# --- Relaunch --------------------------------------------------------------------------------------


def test_the_client_token_is_deterministic_short_and_printable() -> None:
    token = client_token("gpu-training/" + "j" * 500, 12, 255)
    assert token == client_token("gpu-training/" + "j" * 500, 12, 255)
    assert len(token) <= 64 and all(33 <= ord(ch) <= 126 for ch in token)
    assert len({client_token("c/j", a, i) for a in (1, 2) for i in (0, 1)}) == 4


def test_environment_overrides_replace_resume_variables_and_keep_everything_else() -> None:
    # Given overrides with a command, a cpu override and stale RESUME_* values for one container
    overrides = {
        "cpu": "4096",
        "containerOverrides": [
            {
                "name": "trainer",
                "command": ["python", "train.py"],
                "environment": [
                    {"name": "NODE_RANK", "value": "3"},
                    {"name": "RESUME_FROM", "value": "s3://ckpt/old/"},
                    {"name": "RESUME_ATTEMPT", "value": "1"},
                ],
            }
        ],
    }

    # When the resume environment is merged for both containers of the task definition
    merged = with_environment(
        overrides, ["trainer", "metrics"], {"RESUME_FROM": "s3://ckpt/new/", "RESUME_ATTEMPT": "2"}
    )

    # Then every container has the new values, and nothing else changed
    trainer, metrics = merged["containerOverrides"]
    assert merged["cpu"] == "4096" and trainer["command"] == ["python", "train.py"]
    assert trainer["environment"] == [
        {"name": "NODE_RANK", "value": "3"},
        {"name": "RESUME_FROM", "value": "s3://ckpt/new/"},
        {"name": "RESUME_ATTEMPT", "value": "2"},
    ]
    assert metrics == {"name": "metrics", "environment": trainer["environment"][1:]}
    assert overrides["containerOverrides"][0]["environment"][1]["value"] == "s3://ckpt/old/"  # not mutated


def test_placement_excludes_failed_hosts_except_on_managed_instances() -> None:
    hosts = ["i-1", "i-2"]
    asg = ProviderInfo(name="asg", type="EC2_AUTOSCALING", auto_repair=None)
    managed = ProviderInfo(name="mi", type="MANAGED_INSTANCES", auto_repair="DISABLED")
    assert placement_exclusion(asg, hosts) == [{"type": "memberOf", "expression": "ec2InstanceId !in ['i-1', 'i-2']"}]
    assert placement_exclusion(None, hosts)[0]["expression"].endswith("['i-1', 'i-2']")  # EC2 launch type
    assert placement_exclusion(managed, hosts) == []
    assert placement_exclusion(asg, []) == []


def test_a_long_exclusion_keeps_the_first_hosts_within_the_expression_limit() -> None:
    hosts = [f"i-{n:017d}" for n in range(200)]
    [constraint] = placement_exclusion(None, hosts)
    assert len(constraint["expression"]) <= MAX_EXCLUSION_EXPRESSION
    assert hosts[0] in constraint["expression"] and hosts[-1] not in constraint["expression"]


def test_relaunch_tags_keep_the_originals_and_add_the_attempt_and_checkpoint() -> None:
    tags = relaunch_tags({"team": "llm", "aws:ecs:clusterName": "gpu", ATTEMPT_TAG: "1"}, 2, "s3://ckpt/step-2/")
    assert tags == [
        {"key": "team", "value": "llm"},
        {"key": ATTEMPT_TAG, "value": "2"},
        {"key": RESUMED_FROM_TAG, "value": "s3://ckpt/step-2/"},
    ]


def test_the_run_task_request_starts_the_task_like_the_original() -> None:
    spec = task().model_copy(
        update={
            "network_configuration": {"awsvpcConfiguration": {"subnets": ["subnet-1"], "securityGroups": ["sg-1"]}},
            "started_by": "scheduler",
        }
    )
    request = build_run_task_request(
        spec,
        cluster_arn=CLUSTER_ARN,
        container_names=["trainer"],
        attempt=1,
        checkpoint_uri=f"{URI}step-000200/",
        token="fr-x-a1-t0",
        constraints=[{"type": "memberOf", "expression": "ec2InstanceId !in ['i-faulty']"}],
    )
    assert request["capacityProviderStrategy"] == [{"capacityProvider": "p5-training", "weight": 1}]
    assert "launchType" not in request
    assert (request["taskDefinition"], request["group"], request["startedBy"], request["count"]) == (
        spec.task_definition_arn,
        "family:trainer",
        "scheduler",
        1,
    )
    assert request["networkConfiguration"] == spec.network_configuration
    assert request["overrides"]["containerOverrides"][0]["environment"][0] == {
        "name": "RESUME_FROM",
        "value": f"{URI}step-000200/",
    }


def test_a_task_without_a_capacity_provider_keeps_its_launch_type() -> None:
    spec = task().model_copy(update={"capacity_provider_name": None, "launch_type": "EC2"})
    request = build_run_task_request(
        spec, cluster_arn=CLUSTER_ARN, container_names=[], attempt=1, checkpoint_uri=None, token="t", constraints=[]
    )
    assert request["launchType"] == "EC2" and "capacityProviderStrategy" not in request
    assert "placementConstraints" not in request


def test_the_stop_reason_names_the_fault_and_the_host_within_the_limit() -> None:
    reason = stop_reason(a_fault(), "j" * 400)
    assert reason.startswith("GPU Fault Responder: XID 79 on i-faulty") and len(reason) <= 255


@pytest.mark.parametrize(
    ("planned", "fresh", "chosen"),
    [(200, 300, 300), (200, None, 200), (200, 100, 200), (None, 100, 100), (None, None, None)],
)
def test_the_relaunch_uses_the_newest_of_the_planned_and_the_fresh_checkpoint(planned, fresh, chosen) -> None:
    result = chosen_checkpoint(checkpoint(planned) if planned else None, checkpoint(fresh) if fresh else None)
    assert (result.step if result else None) == chosen


# --- Watching tasks --------------------------------------------------------------------------------


def state(last: str, desired: str = "RUNNING") -> TaskState:
    return TaskState(task_arn="t", last_status=last, desired_status=desired)


@pytest.mark.parametrize(
    ("tasks", "waited", "expected"),
    [
        ([state("RUNNING"), state("RUNNING")], 1, WatchState.DONE),
        ([state("RUNNING"), state("PENDING")], 1, WatchState.PENDING),
        ([state("RUNNING"), state("PENDING")], 900, WatchState.TIMED_OUT),
        ([state("RUNNING"), state("RUNNING", desired="STOPPED")], 1, WatchState.FAILED),
        ([state("MISSING")], 1, WatchState.FAILED),
        ([], 1, WatchState.PENDING),
    ],
)
def test_new_tasks_are_judged_running_pending_failed_or_late(tasks, waited, expected) -> None:
    assert judge_start(tasks, timedelta(seconds=waited), timedelta(seconds=900)) == expected


@pytest.mark.parametrize(
    ("tasks", "waited", "expected"),
    [
        ([state("STOPPED"), state("MISSING")], 1, WatchState.DONE),
        ([state("STOPPED"), state("STOPPING")], 1, WatchState.PENDING),
        ([state("STOPPING")], 600, WatchState.TIMED_OUT),
    ],
)
def test_old_tasks_are_judged_stopped_pending_or_late(tasks, waited, expected) -> None:
    assert judge_stop(tasks, timedelta(seconds=waited), timedelta(seconds=600)) == expected


def test_a_stop_is_dated_by_the_first_task_ecs_told_to_stop() -> None:
    # Given a gang of three stopped tasks: one with every time ECS gives, one with only its stoppedAt, one forgotten
    at = datetime(2026, 12, 2, 15, 0, tzinfo=UTC)
    tasks = [
        state("STOPPED").model_copy(
            update={
                "stopping_at": at + timedelta(seconds=2),
                "execution_stopped_at": at + timedelta(seconds=5),
                "stopped_at": at + timedelta(seconds=6),
            }
        ),
        state("STOPPED").model_copy(update={"stopped_at": at + timedelta(seconds=1)}),
        state("MISSING"),
    ]

    # When the stop is watched
    watch = watch_result(WatchState.DONE, tasks, want_running=False)

    # Then it is dated by the first time any of them was told to stop (a gang trains no further without a rank)
    assert [task.told_to_stop_at for task in tasks] == [at + timedelta(seconds=2), at + timedelta(seconds=1), None]
    assert watch.stopping_at == at + timedelta(seconds=1)
    # And without any time of ECS's, the stop is not dated; a start is never dated by it
    assert watch_result(WatchState.DONE, [state("MISSING")], want_running=False).stopping_at is None
    assert watch_result(WatchState.DONE, tasks, want_running=True).stopping_at is None
