"""ResumeTraining, the workflow that resumes checkpointed training jobs after a GPU fault (docs/auto-resume.md).

The source of statemachines/resume_training.asl.json, the definition template.yaml deploys. That JSON is generated
from this file: edit here, then `make workflow` (statemachines/README.md). The states are listed in the order the
JSON lists them; the first of a list is where it starts. Every Task invokes one of the stack's Lambda functions, in
one of three ways:

- `run(function, inputs, into=..., next=..., on_error=...)` does a step of the work: the function's Payload is kept
  at `into`; Lambda's transient errors are retried (and the resume store's write conflicts too, with
  `writes_store=True`; and a function that died mid-step, with `completes_on_retry=True`, for a step whose retry
  completes its work without doing any of it twice); any other error goes to `on_error`, with the error at $.error.
- `notify(kind, inputs, next=..., undelivered=...)` posts or pages a `kind` notice through the Notify function, which
  says at $.told what it sent to whom; it retries until the incident exists and the receivers answer, and if it still
  fails goes on to `undelivered` (by default `next`: the notice was best effort), the error at $.notify_error.
- RequestApproval posts a notice too, then waits for a person to send its task token back.

An input is a path into the state's input, passed under its first field's name ("$.plan.Payload" as "plan"), or a
mapping of names to values (see statemachines/asl.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from statemachines.asl import (
    Input,
    Json,
    catch,
    choice,
    fail,
    fields,
    inline_map,
    invoke,
    machine,
    pass_state,
    retry,
    succeed,
    task,
    wait,
    when,
    when_present,
    when_true,
)

# --- How Tasks retry -------------------------------------------------------------------------------------------------

LAMBDA_ERRORS = retry(
    [
        "Lambda.ServiceException",
        "Lambda.AWSLambdaException",
        "Lambda.SdkClientException",
        "Lambda.TooManyRequestsException",
    ],
    interval=2,
    attempts=6,
)
# The Notify function raises these: the incident is not written yet (the alert pipeline handles the same event), a
# receiver did not answer, or a record it writes changed under it.
INCIDENT_NOT_READY = retry(["IncidentNotReady"], interval=2, attempts=6, jitter=False)
NOTIFICATION_FAILED = retry(["NotificationFailedError"], interval=10, attempts=5)
STORE_CONFLICT = retry(["ResumeStoreConflictError", "ConcurrentUpdateError"], interval=1, attempts=3)
# A function that died mid-step (a timeout or out of memory: Step Functions reports Lambda.Unknown, which only
# States.TaskFailed or States.ALL match) stopped wherever it was. For a step that a retry completes without doing
# anything twice, the retry finishes its work: RelaunchJob (its ledger attempt, spare claims and RunTasks are found
# again, and a spare pool's refill recorded before its Auto Scaling call is completed from that record). Any other
# failure of such a step is retried too, at the cost of two tries before the job is reported failed.
CRASHED = retry(["States.TaskFailed"], interval=2, attempts=2)

NOTIFY_RETRY = [LAMBDA_ERRORS, INCIDENT_NOT_READY, NOTIFICATION_FAILED, STORE_CONFLICT]

# --- The three kinds of Task ------------------------------------------------------------------------------------------


def run(
    function: str,
    inputs: Sequence[Input],
    *,
    into: str,
    next: str,
    on_error: str,
    writes_store: bool = False,
    completes_on_retry: bool = False,
    comment: str | None = None,
) -> Json:
    retries = [LAMBDA_ERRORS, STORE_CONFLICT] if writes_store else [LAMBDA_ERRORS]
    return task(
        invoke(function, fields(inputs)),
        result_selector={"Payload.$": "$.Payload"},
        result_path=into,
        retry=[*retries, CRASHED] if completes_on_retry else retries,
        catch=[catch(on_error, result_path="$.error")],
        next=next,
        comment=comment,
    )


def notice(kind: str, inputs: Sequence[Input], *, with_task_token: bool = False) -> Json:
    """The Notify function's Payload: the notice's kind, which execution and state sends it, and `inputs`."""
    token = {"task_token": "$$.Task.Token"} if with_task_token else {}
    sender = {"execution": "$$.Execution.Id", "state": "$$.State.Name", "retry_count": "$$.State.RetryCount"}
    return fields([{"kind": kind, **token, **sender}, *inputs])


def notify(kind: str, inputs: Sequence[Input], *, next: str, undelivered: str | None = None) -> Json:
    return task(
        invoke("Notify", notice(kind, inputs)),
        result_selector={"title.$": "$.Payload.title", "receivers.$": "$.Payload.receivers"},
        result_path="$.told",
        retry=NOTIFY_RETRY,
        catch=[catch(undelivered or next, result_path="$.notify_error")],
        next=next,
    )


def outcome(name: str, *, told: bool = True, comment: str | None = None) -> Json:
    """The end of one job's branch: what the Map collects for it in $.results."""
    return pass_state(parameters=fields([{"job_id": "$.job.job_id", "outcome": name, "told": told}]), comment=comment)


# --- The workflow -----------------------------------------------------------------------------------------------------

FAULT = ["$.fault", "$.config"]
JOB = [*FAULT, "$.job"]
PLANNED = [*JOB, "$.plan.Payload"]


def workflow() -> Json:
    """Claim the fault, check the guards, quarantine the host, find its jobs and resume each, tell what happened."""
    states = {
        "ClaimFault": task(
            invoke("ClaimFault", fields([{"event": "$", "execution": "$$.Execution.Id"}])),
            output_path="$.Payload",
            retry=[LAMBDA_ERRORS],
            catch=[catch("ClaimFailed")],
            next="ClaimOutcome",
            comment="Conditional write: a duplicate or concurrent trigger of the same fault ends as already handled.",
        ),
        "ClaimFailed": fail(
            "ResumeTraining.ClaimFailed",
            "The fault could not be claimed: see the ClaimFault task failure in the history.",
        ),
        "ClaimOutcome": choice(
            when("$.status", "duplicate", "AlreadyHandled"),
            when("$.status", "not_applicable", "NotApplicable"),
            default="CheckGuards",
        ),
        "AlreadyHandled": succeed(),
        "NotApplicable": succeed(),
        "CheckGuards": run(
            "CheckGuards",
            FAULT,
            into="$.guards",
            next="GuardsVerdict",
            on_error="NotifyFailed",
            comment=(
                "ECS auto-repair enabled: ECS owns recovery."
                " Too many instances of the provider impaired: a human decides."
            ),
        ),
        "GuardsVerdict": choice(
            when("$.guards.Payload.verdict", "ecs_owns_recovery", "NotifyEcsOwnsRecovery"),
            when("$.guards.Payload.verdict", "mass_fault", "PageMassFault"),
            default="ModeAllowsQuarantine",
        ),
        "NotifyEcsOwnsRecovery": notify("ecs_owns_recovery", [*FAULT, "$.guards.Payload"], next="EcsOwnsRecovery"),
        "EcsOwnsRecovery": succeed(),
        "PageMassFault": notify(
            "mass_fault", [*FAULT, "$.guards.Payload"], next="MassFault", undelivered="PagesNotDelivered"
        ),
        "MassFault": succeed(),
        "ModeAllowsQuarantine": choice(
            when("$.fault.fault_class", "planned_drain", "AlreadyDraining"),
            when("$.fault.fault_class", "planned_move", "MoveWithoutDrain"),
            when("$.config.mode", "dry-run", "SkipQuarantine"),
            default="QuarantineInstance",
        ),
        "AlreadyDraining": pass_state(
            result={"Payload": {"quarantined": True, "status": "DRAINING"}},
            result_path="$.quarantine",
            next="FindJobs",
            comment="A planned move: the host is DRAINING already, and the drain is not ours to record.",
        ),
        "MoveWithoutDrain": pass_state(
            result={"Payload": {"quarantined": True, "status": None}},
            result_path="$.quarantine",
            next="FindJobs",
            comment="An operator's move of one job: the host keeps its other tasks, and is not drained.",
        ),
        "SkipQuarantine": pass_state(
            result={"Payload": {"quarantined": False}},
            result_path="$.quarantine",
            next="FindJobs",
            comment="Dry-run changes nothing, not even the drain.",
        ),
        "QuarantineInstance": run(
            "QuarantineInstance",
            ["$.fault"],
            into="$.quarantine",
            next="FindJobs",
            on_error="NotifyFailed",
            writes_store=True,
            comment="Record quarantined_at on the instance state FIRST (drain attribution), then set it DRAINING.",
        ),
        "FindJobs": run(
            "FindJobs",
            FAULT,
            into="$.found",
            next="NotifyJobsFound",
            on_error="NotifyFailed",
            comment=(
                "RUNNING tasks on the instance tagged with a job id and a checkpoint URI;"
                " a job is every task of the cluster with that id."
            ),
        ),
        "NotifyJobsFound": notify("jobs_found", [*FAULT, "$.quarantine.Payload", "$.found.Payload"], next="ResumeJobs"),
        "ResumeJobs": inline_map(
            items_path="$.found.Payload.jobs",
            item_selector=fields(
                [*FAULT, {"job": "$$.Map.Item.Value", "quarantined": "$.quarantine.Payload.quarantined"}]
            ),
            max_concurrency_path="$.config.job_concurrency",
            states=one_job(),
            result_path="$.results",
            catch=[catch("NotifyFailed", result_path="$.error")],
            next="Summarize",
        ),
        "Summarize": pass_state(
            parameters={"pages_not_delivered.$": "States.ArrayContains($.results[*].told, false)"},
            result_path="$.summary",
            next="AllPagesDelivered",
        ),
        "AllPagesDelivered": choice(when("$.summary.pages_not_delivered", True, "PagesNotDelivered"), default="Done"),
        "Done": succeed(),
        "NotifyFailed": notify("failed", [*FAULT, "$.error"], next="ResumeFailed"),
        "ResumeFailed": fail(
            "ResumeTraining.Failed", "A step failed; the failure was paged. See the execution history."
        ),
        "PagesNotDelivered": fail(
            "ResumeTraining.PageNotDelivered",
            "A page could not be delivered after retries: nobody was told. See the execution history.",
        ),
    }
    return machine(
        "GPU Fault Responder: resume checkpointed training jobs after a GPU fault (docs/auto-resume.md).", states
    )


def one_job() -> dict[str, Json]:
    """One job of the faulty host, from its plan to one outcome: ResumeJobs runs these states for each job found."""
    return {
        "PlanJob": run(
            "PlanJob",
            JOB,
            into="$.plan",
            next="Decide",
            on_error="JobFailed",
            comment="Budget and checkpoint: decide without touching anything (dry-run reports this plan).",
        ),
        "Decide": choice(
            when("$.plan.Payload.action", "give_up", "PageGiveUp"),
            when("$.plan.Payload.mode", "dry-run", "ReportDryRun"),
            when("$.plan.Payload.mode", "approve", "RequestApproval"),
            default="IsQuarantined",
        ),
        "ReportDryRun": notify("dry_run", PLANNED, next="JobDryRun"),
        "JobDryRun": outcome("dry_run"),
        "RequestApproval": task(
            invoke("Notify", notice("approval_request", PLANNED, with_task_token=True), wait_for_token=True),
            timeout_path="$.config.approval_timeout_seconds",
            result_path="$.approval",
            retry=NOTIFY_RETRY,
            catch=[
                catch("PageApprovalTimeout", ["States.Timeout"], result_path="$.error"),
                catch("ReportRejected", ["Rejected"], result_path="$.error"),
                catch("JobFailed", result_path="$.error"),
            ],
            next="Approved",
            comment="Posts the approve/reject commands into the incident's thread and waits for a person.",
        ),
        "Approved": choice(when_true("$.approval.approved", "IsQuarantined"), default="ReportNotApproved"),
        "ReportNotApproved": notify("approval_rejected", [*JOB, "$.approval"], next="JobRejected"),
        "ReportRejected": notify("approval_rejected", [*JOB, "$.error"], next="JobRejected"),
        "JobRejected": outcome("rejected"),
        "PageApprovalTimeout": notify(
            "approval_timeout", PLANNED, next="JobApprovalTimedOut", undelivered="PageNotDelivered"
        ),
        "JobApprovalTimedOut": outcome("approval_timed_out"),
        "IsQuarantined": choice(
            when("$.quarantined", True, "RequestCheckpoint"),
            default="QuarantineForJob",
            comment="A job may act (its mode tag) although the stack runs dry-run: drain the faulty host first.",
        ),
        "QuarantineForJob": run(
            "QuarantineInstance",
            ["$.fault"],
            into="$.quarantine",
            next="RequestCheckpoint",
            on_error="JobFailed",
            writes_store=True,
        ),
        "RequestCheckpoint": run(
            "RequestCheckpoint",
            [*PLANNED, {"execution": "$$.Execution.Id"}],
            into="$.plan",
            next="CheckpointAsked",
            on_error="JobFailed",
            comment=(
                "After a fault the job can save through (CheckpointNowFaults): ask it to save now and hold there;"
                " the plan says whether it was asked, and why not."
            ),
        ),
        "CheckpointAsked": choice(
            when("$.plan.Payload.checkpoint_now.state", "asked", "WaitForCheckpoint"), default="StopTasks"
        ),
        "WaitForCheckpoint": wait("$.config.poll_seconds", "CheckCheckpoint"),
        "CheckCheckpoint": run(
            "CheckCheckpoint",
            PLANNED,
            into="$.plan",
            next="CheckpointAsked",
            on_error="JobFailed",
            comment="Answered: resume from it. Past CheckpointNowSeconds: from the newest complete checkpoint.",
        ),
        "StopTasks": run(
            "StopJob",
            PLANNED,
            into="$.stop",
            next="WaitForStop",
            on_error="JobFailed",
            comment=(
                "StopTask each task being replaced (the ones found, or a failed attempt's),"
                " with the fault in the reason."
            ),
        ),
        "WaitForStop": wait("$.config.poll_seconds", "CheckStopped"),
        "CheckStopped": run(
            "CheckTasks",
            [*PLANNED, {"want": "STOPPED"}, "$.stop.Payload"],
            into="$.stopped",
            next="StopOutcome",
            on_error="JobFailed",
        ),
        "StopOutcome": choice(
            when("$.stopped.Payload.state", "done", "Backoff"),
            when("$.stopped.Payload.state", "timed_out", "PageStopTimeout"),
            default="WaitForStop",
        ),
        "PageStopTimeout": notify("stop_timeout", PLANNED, next="JobStopTimedOut", undelivered="PageNotDelivered"),
        "JobStopTimedOut": outcome("stop_timed_out"),
        "Backoff": wait(
            "$.plan.Payload.backoff_seconds",
            "RelaunchJob",
            comment="0 s before the first attempt; doubling before each retry.",
        ),
        "RelaunchJob": run(
            "RelaunchJob",
            [*PLANNED, {"execution": "$$.Execution.Id"}, "$.stopped.Payload"],
            into="$.launch",
            next="SparesRefilled",
            on_error="JobFailed",
            writes_store=True,
            completes_on_retry=True,
            comment=(
                "Record the attempt in the ledger (the work lost ends when ECS told the old tasks to stop), then"
                " RunTask each task (clientToken: job + attempt + task), on warm spares it claims when enough are"
                " free; record, then ask for, the spares' refill."
            ),
        ),
        "SparesRefilled": choice(
            when_present("$.launch.Payload.spare.refill.state", "failed", "PageSpareRefill"),
            default="LaunchOutcome",
            comment="The relaunch took warm spares and the provider could not be grown to replace them.",
        ),
        "PageSpareRefill": notify("spare_refill_failed", [*PLANNED, "$.launch.Payload"], next="LaunchOutcome"),
        "LaunchOutcome": choice(
            when("$.launch.Payload.state", "started", "WaitForStart"),
            when("$.launch.Payload.state", "superseded", "ReportSuperseded"),
            default="NothingToWatch",
        ),
        "ReportSuperseded": notify("superseded", [*JOB, "$.launch.Payload"], next="JobSuperseded"),
        "JobSuperseded": outcome("superseded"),
        "NothingToWatch": pass_state(
            result={"Payload": None},
            result_path="$.watch",
            next="PlanRetry",
            comment="RunTask could not place every task: no start to watch.",
        ),
        "WaitForStart": wait("$.config.poll_seconds", "CheckStarted"),
        "CheckStarted": run(
            "CheckTasks",
            [*PLANNED, {"want": "RUNNING"}, "$.launch.Payload"],
            into="$.watch",
            next="StartOutcome",
            on_error="JobFailed",
        ),
        "StartOutcome": choice(
            when("$.watch.Payload.state", "done", "NotifyResumed"),
            when("$.watch.Payload.state", "pending", "WaitForStart"),
            default="PlanRetry",
        ),
        "PlanRetry": run(
            "PlanRetry",
            [*PLANNED, "$.launch.Payload", "$.watch.Payload"],
            into="$.plan",
            next="RetryOutcome",
            on_error="JobFailed",
            writes_store=True,
            comment="No capacity, an early stop or a start timeout: retry within the budget, or give up.",
        ),
        "RetryOutcome": choice(when("$.plan.Payload.action", "resume", "ReportRetry"), default="PageGiveUp"),
        "ReportRetry": notify("attempt_failed", PLANNED, next="StopTasks"),
        "NotifyResumed": notify("resumed", [*PLANNED, "$.launch.Payload", "$.watch.Payload"], next="JobResumed"),
        "JobResumed": outcome("resumed"),
        "PageGiveUp": notify("give_up", PLANNED, next="JobGaveUp", undelivered="PageNotDelivered"),
        "JobGaveUp": outcome("gave_up"),
        "JobFailed": notify("failed", [*JOB, "$.error"], next="JobFailedOutcome", undelivered="PageNotDelivered"),
        "JobFailedOutcome": outcome("failed"),
        "PageNotDelivered": outcome(
            "page_not_delivered",
            told=False,
            comment="Nobody could be told: the execution fails after the other jobs finish.",
        ),
    }


DEFINITION = workflow()
