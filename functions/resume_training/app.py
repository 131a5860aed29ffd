"""ResumeTraining task functions: one handler per task state of statemachines/resume_training.asl.json.

Thin edges: parse the state's input (Powertools parser, pydantic models), call one step of
fault_responder.resume.steps.ResumeSteps (with the clients of the fault's own account and Region), return its payload
as JSON. Errors propagate: the state machine
retries the transient ones (IncidentNotReady, NotificationFailedError, Lambda service errors) and turns
the rest into a page.
"""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import event_parser
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict

from fault_responder.core.observability import count, logger, measure, tracer
from fault_responder.resume.budget import Plan
from fault_responder.resume.checkpoint_now import MoveAsk
from fault_responder.resume.config import ResumeConfig
from fault_responder.resume.fault import Fault
from fault_responder.resume.jobs import Job
from fault_responder.resume.notices import NoticeRequest
from fault_responder.resume.relaunch import Launch
from fault_responder.resume.watch import StopRequest, TaskWatch
from fault_responder.wiring.resume_training import place_of, resume_steps


class _Input(BaseModel):
    # Built on first use: each task function parses one of these, and builds only its own validator.
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True)


class ClaimInput(_Input):
    event: dict[str, Any]
    execution: str


class FaultInput(_Input):
    fault: Fault
    config: ResumeConfig


class QuarantineInput(_Input):
    fault: Fault


class JobInput(FaultInput):
    job: Job


class PlannedJobInput(JobInput):
    plan: Plan


class RelaunchInput(PlannedJobInput):
    execution: str
    stopped: TaskWatch | None = None
    """RelaunchJob: the last check of the stop (when the tasks replaced were told to stop)."""


class RetryInput(PlannedJobInput):
    launch: Launch
    watch: TaskWatch | None = None


class CheckTasksInput(PlannedJobInput):
    want: Literal["STOPPED", "RUNNING"]
    stop: StopRequest | None = None
    launch: Launch | None = None


class NotifyInput(NoticeRequest):
    retry_count: int = 0


def _json(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=ClaimInput)
def claim_fault(event: ClaimInput, context: LambdaContext) -> dict[str, Any]:
    claim = resume_steps(place_of(event.event)).claim(event.event, event.execution)
    logger.info("fault claim", extra={"status": claim.status.value, "reason": claim.reason})
    count("ResumeClaims", "Status", claim.status.value)
    return _json(claim)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=FaultInput)
def check_guards(event: FaultInput, context: LambdaContext) -> dict[str, Any]:
    guards = resume_steps(event.fault.place).check_guards(event.fault, event.config)
    logger.info("guards", extra={"verdict": guards.verdict.value, "impaired": guards.impaired})
    return _json(guards)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=QuarantineInput)
def quarantine_instance(event: QuarantineInput, context: LambdaContext) -> dict[str, Any]:
    return _json(resume_steps(event.fault.place).quarantine(event.fault))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=FaultInput)
def find_jobs(event: FaultInput, context: LambdaContext) -> dict[str, Any]:
    found = resume_steps(event.fault.place).find_jobs(event.fault, event.config)
    logger.info("jobs found", extra={"jobs": [job.job_id for job in found.jobs], "untouched": found.untouched_count})
    return _json(found)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=JobInput)
def plan_job(event: JobInput, context: LambdaContext) -> dict[str, Any]:
    plan = resume_steps(event.fault.place).plan(event.fault, event.config, event.job)
    logger.info("plan", extra={"job": event.job.job_id, "action": plan.action.value, "reason": plan.reason})
    return _json(plan)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=RelaunchInput)
def request_checkpoint(event: RelaunchInput, context: LambdaContext) -> dict[str, Any]:
    steps = resume_steps(event.fault.place)
    plan = steps.request_checkpoint(event.fault, event.config, event.job, event.plan, event.execution)
    _log_checkpoint_now(event.job, plan)
    return _json(plan)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=PlannedJobInput)
def check_checkpoint(event: PlannedJobInput, context: LambdaContext) -> dict[str, Any]:
    plan = resume_steps(event.fault.place).check_checkpoint(event.job, event.plan)
    asked = plan.checkpoint_now
    if asked is not None and asked.state != MoveAsk.ASKED:
        _log_checkpoint_now(event.job, plan)
        count("CheckpointNowRequests", "Outcome", asked.state.value)
    return _json(plan)


def _log_checkpoint_now(job: Job, plan: Plan) -> None:
    asked = plan.checkpoint_now
    if asked is not None:
        extra = {"job": job.job_id, "state": asked.state.value, "request": asked.request_id, "detail": asked.detail}
        logger.info("checkpoint now", extra={**extra, "answered_step": asked.answered_step})


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=PlannedJobInput)
def stop_job(event: PlannedJobInput, context: LambdaContext) -> dict[str, Any]:
    return _json(resume_steps(event.fault.place).stop(event.fault, event.job, event.plan))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=CheckTasksInput)
def check_tasks(event: CheckTasksInput, context: LambdaContext) -> dict[str, Any]:
    steps = resume_steps(event.fault.place)
    if event.want == "STOPPED":
        if event.stop is None:
            raise ValueError("checking for STOPPED needs the stop request")
        return _json(steps.watch_stop(event.fault, event.job, event.plan, event.stop, event.config))
    if event.launch is None:
        raise ValueError("checking for RUNNING needs the launch")
    return _json(steps.watch_start(event.fault, event.job, event.launch, event.config))


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=RelaunchInput)
def relaunch_job(event: RelaunchInput, context: LambdaContext) -> dict[str, Any]:
    launch = resume_steps(event.fault.place).relaunch(
        event.fault, event.config, event.job, event.plan, event.execution, stopped=event.stopped
    )
    spare = launch.spare.state.value if launch.spare is not None else None
    logger.info(
        "relaunch",
        extra={"job": event.job.job_id, "state": launch.state.value, "attempt": launch.attempt, "spare": spare},
    )
    count("ResumeLaunches", "State", launch.state.value)
    if spare is not None and spare != "off":
        # Whether relaunches find warm spares (used / none_free / ...): a pool too small shows here first.
        count("SpareUse", "State", spare)
    return _json(launch)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=RetryInput)
def plan_retry(event: RetryInput, context: LambdaContext) -> dict[str, Any]:
    plan = resume_steps().retry(
        event.fault, event.config, event.job, event.plan, launch=event.launch, watch=event.watch
    )
    logger.info(
        "retry plan", extra={"job": event.job.job_id, "action": plan.action.value, "failure": plan.last_failure}
    )
    return _json(plan)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@event_parser(model=NotifyInput)
def notify(event: NotifyInput, context: LambdaContext) -> dict[str, Any]:
    """Every notice of the workflow, including the approval request (invoked with a task token)."""
    result = resume_steps().notify(event, event.retry_count)
    count("ResumeNotices", "Kind", event.kind.value)
    if recovery := result.get("recovery"):
        # A job training again: how long after the fault, and the work it lost (docs/auto-resume.md, metrics).
        provider, seconds = event.fault.capacity_provider, MetricUnit.Seconds
        measure("FaultToTrainingSeconds", "CapacityProvider", provider, recovery["fault_to_training_seconds"], seconds)
        if recovery["work_lost_seconds"] is not None:
            measure("WorkLostSeconds", "CapacityProvider", provider, recovery["work_lost_seconds"], seconds)
    return result
