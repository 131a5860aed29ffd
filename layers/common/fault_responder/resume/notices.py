"""Training auto-resume: what people are told, per notice kind (titles, texts, PagerDuty action, evidence)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field

from fault_responder.core.domain import Severity
from fault_responder.core.timefmt import format_duration, iso_utc
from fault_responder.notification.buttons import approval_id
from fault_responder.resume.budget import GiveUpReason, Plan
from fault_responder.resume.checkpoint_now import MoveAsk, MoveCheckpoint
from fault_responder.resume.checkpoints import Checkpoint
from fault_responder.resume.config import EVIDENCE_ITEMS, Mode, ResumeConfig, _clip, _Payload
from fault_responder.resume.fault import PLANNED_MOVE, Fault, Guards, Quarantine
from fault_responder.resume.jobs import FoundJobs, Job
from fault_responder.resume.recovery import TRAINS_ON, StepsLost, steps_lost, work_lost
from fault_responder.resume.relaunch import Launch
from fault_responder.resume.spares import SpareUse, describe_use
from fault_responder.resume.watch import TaskWatch


class NoticeKind(StrEnum):
    ECS_OWNS_RECOVERY = "ecs_owns_recovery"
    MASS_FAULT = "mass_fault"
    JOBS_FOUND = "jobs_found"
    DRY_RUN = "dry_run"
    APPROVAL_REQUEST = "approval_request"
    APPROVAL_REJECTED = "approval_rejected"
    APPROVAL_TIMEOUT = "approval_timeout"
    ATTEMPT_FAILED = "attempt_failed"
    RESUMED = "resumed"
    SUPERSEDED = "superseded"
    GIVE_UP = "give_up"
    STOP_TIMEOUT = "stop_timeout"
    FAILED = "failed"
    SPARE_REFILL_FAILED = "spare_refill_failed"


class PagerDutyAction(StrEnum):
    TRIGGER = "trigger"
    """A page: Events v2 trigger, severity critical, deduplicated per job."""
    CHANGE = "change"
    """Informational: a Change Event, which never pages and needs no resolve."""


class Notice(_Payload):
    kind: NoticeKind
    key: str
    """Stable per execution, state, job and attempt: a retried notify sends nothing twice."""
    title: str
    """One line: the incident timeline entry and the PagerDuty summary."""
    text: str
    """The Slack message body (plain text; the renderer escapes it)."""
    pagerduty: PagerDutyAction | None
    severity: Severity
    job_id: str | None = None
    approval_id: str | None = None
    """An approval request's opaque id, carried by its Approve and Reject buttons; the task token itself stays in
    the incidents table (docs/slack-actions.md), never in a message."""
    details: dict[str, Any] = Field(default_factory=dict)
    """The evidence, for PagerDuty custom_details and the Slack fields."""

    @property
    def pages(self) -> bool:
        return self.pagerduty == PagerDutyAction.TRIGGER

    @property
    def subject(self) -> str:
        """What the notice is about, for its PagerDuty dedup key: the job, else the mass event or the run."""
        if self.kind == NoticeKind.SPARE_REFILL_FAILED:
            return "spare-pool"
        if self.job_id:
            return self.job_id
        return "mass-fault" if self.kind == NoticeKind.MASS_FAULT else "workflow"


@dataclass(frozen=True, slots=True)
class Delivered:
    """Where a notice went."""

    receivers: tuple[str, ...]
    """The receivers told now."""
    threaded: bool
    """False when the notice went out as standalone messages (no incident thread to reply in)."""
    held: tuple[str, ...] = ()
    """The receivers held back (a silence, a maintenance window, an inhibition): the router tells them later."""
    fleet: str | None = None
    """The fleet incident whose thread told it, when the fault's incident belongs to one."""


class NoticeRequest(_Payload):
    """What a Notify state passes: the kind, and whatever the state knows so far."""

    kind: NoticeKind
    execution: str
    state: str
    fault: Fault
    config: ResumeConfig
    guards: Guards | None = None
    quarantine: Quarantine | None = None
    found: FoundJobs | None = None
    job: Job | None = None
    plan: Plan | None = None
    launch: Launch | None = None
    watch: TaskWatch | None = None
    approval: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    task_token: str | None = None


def build_notice(request: NoticeRequest, now: datetime) -> Notice:
    builder = _BUILDERS[request.kind]
    title, text, pagerduty, severity = builder(request, now)
    job = request.job
    return Notice(
        kind=request.kind,
        key=notice_key(request),
        title=_clip(title, 300),
        text=text,
        pagerduty=pagerduty,
        severity=severity,
        job_id=job.job_id if job else None,
        approval_id=_approval_id(request) if request.kind == NoticeKind.APPROVAL_REQUEST else None,
        details=evidence(request, now),
    )


def notice_key(request: NoticeRequest) -> str:
    execution = request.execution.rsplit(":", 1)[-1]
    job = request.job.job_id if request.job else "-"
    attempt = request.launch.attempt if request.launch else (request.plan.attempt if request.plan else 0)
    key = f"{execution}/{request.state}/{job}/{attempt}"
    if request.task_token:
        # A retried approval request waits on a new token: it needs a message of its own, with that token.
        key += "/" + hashlib.sha256(request.task_token.encode()).hexdigest()[:12]
    return key


def pagerduty_dedup_key(fault: Fault, subject: str, *, scope: str = "") -> str:
    """One PagerDuty alert per fault and subject (a job id, the workflow); at most 255 characters. A mass fault is
    one alert for its capacity provider, whichever execution sends it: every execution over the limit triggers
    the same key; `scope` (`<account>/<region>/`) names the account and Region of one that is not the stack's own."""
    if subject == "mass-fault":
        key = f"{scope}{fault.cluster_name}/{fault.capacity_provider}/resume/mass-fault"
    else:
        key = f"{fault.fingerprint}/resume/{subject}"
    if len(key) <= 255:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return f"{key[: 255 - 33]}#{digest}"


_Built = tuple[str, str, PagerDutyAction | None, Severity]


def _ecs_owns_recovery(r: NoticeRequest, now: datetime) -> _Built:
    provider = r.guards.provider.name if r.guards else r.fault.capacity_provider
    title = f"ECS auto-repair owns recovery of {r.fault.host}: no auto-resume"
    text = (
        f"ECS auto-repair is ENABLED on capacity provider {provider}, so ECS drains and replaces {r.fault.host} "
        f"after {r.fault.label}. Training auto-resume takes no action: nothing was drained, stopped or restarted "
        "by GPU Fault Responder. Turn auto-repair off on training capacity providers to let checkpointed jobs "
        "be resumed instead of drained."
    )
    return title, text, PagerDutyAction.CHANGE, Severity.INFO


def _mass_fault(r: NoticeRequest, now: datetime) -> _Built:
    g = r.guards
    if g is None:
        raise ValueError(f"a {r.kind.value} notice needs the guards")
    title = f"Mass GPU fault on {g.provider.name}: auto-resume stopped"
    text = (
        f"{g.impaired} of {g.instances} instances of capacity provider {g.provider.name} went IMPAIRED within "
        f"{r.config.mass_fault_window_minutes} minutes (at most {g.allowed} may be handled at once, "
        f"{r.config.mass_fault_threshold_percent}%). A mass event needs a human: {r.fault.host} was not drained "
        "and no job was stopped or restarted."
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.CRITICAL


def _jobs_found(r: NoticeRequest, now: datetime) -> _Built:
    found = r.found
    if found is None:
        raise ValueError(f"a {r.kind.value} notice needs the jobs found")
    if r.fault.fault_class == PLANNED_MOVE:
        lead = f"{r.fault.title}: off {r.fault.host} (not drained; its other tasks stay)."
    elif r.fault.planned:
        lead = f"{r.fault.host} was set DRAINING, not by this stack nor for a GPU fault: moving its training jobs."
    elif r.quarantine is not None and r.quarantine.quarantined:
        lead = f"Quarantined {r.fault.host} (DRAINING, so nothing new lands there)."
    elif r.config.mode == Mode.DRY_RUN:
        lead = f"Dry run: would set {r.fault.host} DRAINING."
    else:
        lead = f"{r.fault.host} is not drained."
    jobs = "; ".join(
        f"{job.job_id} ({job.task_count} task{'s' if job.task_count != 1 else ''} on {', '.join(job.hosts)}, "
        f"mode {job.mode.value})"
        for job in found.jobs
    )
    lines = [lead, f"Resumable jobs: {jobs}." if found.jobs else "No resumable job runs on it."]
    if found.untouched_count:
        shown = ", ".join(f"{_short_task(t.task_arn)} ({t.group or 'no group'}: {t.note})" for t in found.untouched)
        hidden = found.untouched_count - len(found.untouched)
        more = f" and {hidden} more" if hidden > 0 else ""
        lines.append(f"Not touched: {found.untouched_count} other task(s) on it: {shown}{more}.")
    title = f"{len(found.jobs)} training job(s) found on {r.fault.host}"
    return title, "\n".join(lines), None, Severity.INFO


def _dry_run(r: NoticeRequest, now: datetime) -> _Built:
    job, plan = _job_plan(r)
    title = f"Dry run: would resume {job.job_id} {_from_where(plan)}"
    text = (
        f"Dry run for job {job.job_id}: would stop its {job.task_count} task(s) on {', '.join(job.hosts)} and "
        f"restart them {_from_where(plan)}{_lost(plan.checkpoint, r.fault)} as attempt {plan.in_budget} of "
        f"{plan.max_attempts}, never on {', '.join(plan.excluded_hosts)}. Nothing was changed."
        f"{_skipped_text(plan)}"
    )
    return title, text, PagerDutyAction.CHANGE, Severity.INFO


def _approval_request(r: NoticeRequest, now: datetime) -> _Built:
    job, plan = _job_plan(r)
    title = f"Approval needed to resume {job.job_id} {_from_where(plan)}"
    deadline = format_duration(timedelta(seconds=r.config.approval_timeout_seconds))
    text = (
        f"Job {job.job_id} ran on {r.fault.host} ({r.fault.label}). On approval GPU Fault Responder stops its "
        f"{job.task_count} task(s) and restarts them {_from_where(plan)}{_lost(plan.checkpoint, r.fault)} as "
        f"attempt {plan.in_budget} of {plan.max_attempts}. Approve or reject within {deadline} with the "
        f"buttons below; without an answer it pages.{_skipped_text(plan)}"
    )
    return title, text, None, Severity.WARNING


def _approval_rejected(r: NoticeRequest, now: datetime) -> _Built:
    job = _job(r)
    cause = (r.error or {}).get("Cause") or "no reason given"
    if r.approval is not None:
        cause = str(r.approval.get("reason") or "approved was not true")
    title = f"Resume of {job.job_id} rejected"
    text = f"Resume of job {job.job_id} was rejected ({cause}). Nothing was stopped or restarted."
    return title, _clip(text, 1500), PagerDutyAction.CHANGE, Severity.INFO


def _approval_timeout(r: NoticeRequest, now: datetime) -> _Built:
    job, plan = _job_plan(r)
    waited = format_duration(timedelta(seconds=r.config.approval_timeout_seconds))
    title = f"No approval to resume {job.job_id} within {waited}"
    text = (
        f"Nobody approved resuming job {job.job_id} within {waited}: it was not stopped or restarted and may "
        f"still be stuck on {r.fault.host} ({r.fault.label}). It would have restarted {_from_where(plan)}."
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.CRITICAL


def _attempt_failed(r: NoticeRequest, now: datetime) -> _Built:
    job, plan = _job_plan(r)
    failed = plan.retry_of or 0
    wait = f" in {format_duration(timedelta(seconds=plan.backoff_seconds))}" if plan.backoff_seconds else ""
    title = f"Attempt {failed} of {job.job_id} failed; retrying as attempt {plan.attempt}"
    text = (
        f"Attempt {failed} to resume job {job.job_id} failed: {plan.last_failure}. Its tasks are being stopped; "
        f"retrying{wait} as attempt {plan.in_budget} of {plan.max_attempts}, never on "
        f"{', '.join(plan.excluded_hosts)}."
    )
    return title, text, None, Severity.WARNING


def _resumed(r: NoticeRequest, now: datetime) -> _Built:
    job = _job(r)
    launch, watch = r.launch, r.watch
    if launch is None:
        raise ValueError(f"a {r.kind.value} notice needs the launch")
    hosts = ", ".join(watch.hosts) if watch and watch.hosts else "healthy capacity"
    where = _from_where_checkpoint(launch.checkpoint)
    title = f"Resumed {job.job_id} {where}, attempt {launch.in_budget} of {launch.max_attempts}"
    back = format_duration(max(now - r.fault.impaired_at, timedelta(0)))
    text = (
        f"Resumed {job.job_id} {where}{_moved_lost(r, launch)} on {hosts}, attempt {launch.in_budget} "
        f"of {launch.max_attempts} ({launch.launched} task(s), RESUME_ATTEMPT={launch.attempt}). Back in training "
        f"{back} after the {_what(r.fault)}."
    )
    if r.plan is not None:
        # Folders the plan skipped that are still newer than the checkpoint used (a newer complete one may
        # have appeared while the job stopped).
        used = launch.checkpoint.step if launch.checkpoint else -1
        newer = tuple(folder for folder in r.plan.skipped if folder.step > used)
        text += _skipped_text(r.plan.model_copy(update={"skipped": newer, "skipped_count": len(newer)}))
        text += _checkpoint_now_text(r.plan.checkpoint_now, _moved_steps_lost(r, launch), r.fault)
    if launch.spare is not None and (spare := describe_use(launch.spare)):
        text += f"\n{spare}"
    return title, text, PagerDutyAction.CHANGE, Severity.INFO


def _spare_refill_failed(r: NoticeRequest, now: datetime) -> _Built:
    """A relaunch took warm spares and the provider could not be grown to replace them: the next fault waits."""
    job = _job(r)
    spare = r.launch.spare if r.launch is not None else None
    if spare is None or spare.refill is None:
        raise ValueError(f"a {r.kind.value} notice needs the launch's spare refill")
    provider = r.fault.capacity_provider
    title = f"Warm spares of {provider} not refilled: {_clip(spare.refill.detail or 'no reason given', 200)}"
    left = max(spare.free - len(spare.hosts), 0)
    text = (
        f"Job {job.job_id} moved onto {len(spare.hosts)} warm spare(s) of {provider} after {r.fault.label} on "
        f"{r.fault.host}, and the pool could not be refilled: {spare.refill.detail}. {left} free spare(s) left: "
        "the next fault may wait for a new instance. Grow the Auto Scaling group, or mark more hosts as spares."
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.WARNING


def _checkpoint_now_text(asked: MoveCheckpoint | None, lost: StepsLost | None, fault: Fault) -> str:
    """How the move's request for a checkpoint now ended (nothing when none was asked for); when nobody answered,
    the steps the move lost."""
    if asked is None or asked.state in (MoveAsk.SKIPPED, MoveAsk.ASKED):
        return ""
    waited = format_duration(timedelta(seconds=asked.waited_seconds or 0))
    joined = " (an operator's, joined)" if asked.joined else ""
    if asked.state is MoveAsk.ANSWERED and asked.answered_named is False:
        return (
            f"\nCheckpoint now: step {asked.answered_step} was saved {waited} after request {asked.request_id}"
            f"{joined}, under a commit marker that cannot name a request, so it was taken for the answer by its "
            "time; whether the job held there is not known."
        )
    if asked.state is MoveAsk.ANSWERED:
        return (
            f"\nCheckpoint now: the job saved step {asked.answered_step} {waited} after request {asked.request_id}"
            f"{joined} and held there until it was stopped."
        )
    if asked.state is MoveAsk.TIMED_OUT:
        return (
            f"\nCheckpoint now: no answer to request {asked.request_id}{joined} within {waited}: moved from the "
            f"newest complete checkpoint instead.{_steps_lost_text(lost, fault)}"
        )
    return f"\nCheckpoint now: the request could not be written ({_clip(asked.detail, 300)}): moved without it."


def _steps_lost_text(lost: StepsLost | None, fault: Fault) -> str:
    """The steps a move without an answer lost, saying what the count rests on: the responder sees the job's
    checkpoints, never the step it had reached. Training ends when ECS told the job to stop (its stoppingAt), or,
    where ECS gave no time, when the responder saw it stopped (the relaunch)."""
    if lost is None:
        return ""
    if lost.told_to_stop:
        return _told_to_stop_text(lost)
    ended = "the job was seen stopped" if fault.fault_class in TRAINS_ON else f"the {_what(fault)}"
    trained = format_duration(lost.trained)
    if lost.trained <= timedelta(0):
        return f" Steps lost: none (step {lost.after_step} was saved as the job stopped training)."
    if lost.steps is None or lost.pace_steps is None or lost.pace_time is None:
        return (
            f" Steps lost: not known: every step trained in the {trained} from the save of step {lost.after_step} "
            f"until {ended} (the responder sees the job's checkpoints, not the step it had reached, and no two of "
            "them show its pace)."
        )
    return (
        f" Steps lost: about {lost.steps}, trained in the {trained} from the save of step {lost.after_step} until "
        f"{ended} (an estimate: the responder sees the job's checkpoints, not the step it had reached, and counts "
        f"at their pace, {lost.pace_steps} steps in {format_duration(lost.pace_time)})."
    )


def _told_to_stop_text(lost: StepsLost) -> str:
    """The steps lost until ECS told the job to stop, its times to the tenth of a second where they are that
    precise (the save's own time, ECS's stoppingAt)."""
    if lost.trained <= timedelta(0):
        return f" Steps lost: none (step {lost.after_step} was saved after ECS told the job to stop)."
    trained = _seconds(lost.trained) if lost.saved_to_the_ms else format_duration(lost.trained)
    saved = "the manifest's created_at" if lost.saved_to_the_ms else "S3's time of its commit marker, to the second"
    span = (
        f"trained in the {trained} from the save of step {lost.after_step} ({saved}) until ECS told the job to stop "
        "(its stoppingAt)"
    )
    if lost.steps is None or lost.pace_steps is None or lost.pace_time is None:
        return (
            f" Steps lost: not known: every step {span}; the responder sees the job's checkpoints, not the step it "
            "had reached, and no two of them show its pace."
        )
    return (
        f" Steps lost: about {lost.steps}, {span}: an estimate, as the responder sees the job's checkpoints, not the "
        f"step it had reached, and counts that time at their pace, {lost.pace_steps} steps in "
        f"{_seconds(lost.pace_time)}."
    )


def _seconds(span: timedelta) -> str:
    """`0.9s`, `42.0s`: to the tenth under a minute, where the times compared are that precise; longer, as
    format_duration."""
    return f"{span.total_seconds():.1f}s" if span < timedelta(minutes=1) else format_duration(span)


def _moved_steps_lost(r: NoticeRequest, launch: Launch) -> StepsLost | None:
    """The steps lost, once the job was moved without an answer to its checkpoint-now request (None otherwise)."""
    asked = r.plan.checkpoint_now if r.plan is not None else None
    if asked is None or asked.state is not MoveAsk.TIMED_OUT:
        return None
    return steps_lost(
        launch.checkpoint,
        r.fault,
        earlier_step=asked.before_step,
        earlier_at=asked.before_at,
        stopped_at=launch.stopped_at or launch.launched_at,
        answered=_answered(r),
        told_to_stop=launch.stopped_at is not None and r.fault.fault_class in TRAINS_ON,
    )


def _superseded(r: NoticeRequest, now: datetime) -> _Built:
    job = _job(r)
    launch = r.launch
    by = launch.superseded_by if launch and launch.superseded_by else "another execution"
    title = f"{job.job_id} is being resumed by another execution"
    text = (
        f"The tasks of job {job.job_id} this execution found were already replaced by {by}; "
        "it starts nothing more (one copy of a job)."
    )
    return title, text, None, Severity.INFO


def _give_up(r: NoticeRequest, now: datetime) -> _Built:
    job, plan = _job_plan(r)
    headline = {
        GiveUpReason.INVALID_JOB: "its resume tags are not usable",
        GiveUpReason.NO_CHECKPOINT: "it has no complete checkpoint",
        GiveUpReason.BUDGET_EXHAUSTED: "its resume budget is exhausted",
    }.get(plan.reason or GiveUpReason.INVALID_JOB, "it cannot be resumed")
    title = f"{job.job_id} NOT resumed: {headline}"
    text = (
        f"Job {job.job_id} was not resumed after {r.fault.label} on {r.fault.host}: {plan.detail}. "
        f"Its tasks were left as they are; a human needs to decide.{_skipped_text(plan)}{_attempts_text(plan)}"
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.CRITICAL


def _stop_timeout(r: NoticeRequest, now: datetime) -> _Built:
    job = _job(r)
    title = f"{job.job_id} NOT resumed: its tasks did not stop"
    text = (
        f"The tasks of job {job.job_id} were asked to stop but were not all STOPPED within "
        f"{r.config.stop_timeout_seconds}s, so nothing was restarted (never two copies of a job). "
        f"Check the tasks on {', '.join(job.hosts)}."
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.CRITICAL


def _failed(r: NoticeRequest, now: datetime) -> _Built:
    error = r.error or {}
    what = f"job {r.job.job_id}" if r.job else f"the fault on {r.fault.host}"
    title = f"Auto-resume failed for {what}"
    text = (
        f"Training auto-resume failed for {what} ({r.fault.label}): "
        f"{error.get('Error', 'error')}: {_clip(str(error.get('Cause', '')), 1000)}. "
        "Check the execution history; the job may be stopped and not restarted."
    )
    return title, text, PagerDutyAction.TRIGGER, Severity.CRITICAL


_BUILDERS = {
    NoticeKind.ECS_OWNS_RECOVERY: _ecs_owns_recovery,
    NoticeKind.MASS_FAULT: _mass_fault,
    NoticeKind.JOBS_FOUND: _jobs_found,
    NoticeKind.DRY_RUN: _dry_run,
    NoticeKind.APPROVAL_REQUEST: _approval_request,
    NoticeKind.APPROVAL_REJECTED: _approval_rejected,
    NoticeKind.APPROVAL_TIMEOUT: _approval_timeout,
    NoticeKind.ATTEMPT_FAILED: _attempt_failed,
    NoticeKind.RESUMED: _resumed,
    NoticeKind.SUPERSEDED: _superseded,
    NoticeKind.GIVE_UP: _give_up,
    NoticeKind.STOP_TIMEOUT: _stop_timeout,
    NoticeKind.FAILED: _failed,
    NoticeKind.SPARE_REFILL_FAILED: _spare_refill_failed,
}


def _job(r: NoticeRequest) -> Job:
    if r.job is None:
        raise ValueError(f"a {r.kind.value} notice needs the job")
    return r.job


def _job_plan(r: NoticeRequest) -> tuple[Job, Plan]:
    if r.plan is None:
        raise ValueError(f"a {r.kind.value} notice needs the plan")
    return _job(r), r.plan


def _approval_id(r: NoticeRequest) -> str:
    if not r.task_token:
        raise ValueError("an approval request needs the task token")
    return approval_id(r.task_token)


def _from_where(plan: Plan) -> str:
    if plan.from_scratch:
        return "from scratch (no complete checkpoint; policy restart-from-scratch)"
    return _from_where_checkpoint(plan.checkpoint)


def _from_where_checkpoint(checkpoint: Checkpoint | None) -> str:
    return f"from step {checkpoint.step}" if checkpoint else "from scratch"


def _lost(
    checkpoint: Checkpoint | None, fault: Fault, *, stopped_at: datetime | None = None, answered: str | None = None
) -> str:
    """The work the job loses: what it trained after the checkpoint's save (recovery.work_lost)."""
    lost = work_lost(checkpoint, fault, stopped_at=stopped_at, answered=answered)
    if lost is None or checkpoint is None or checkpoint.saved is None:
        return ""
    if answered is not None and checkpoint.answers == answered:
        return f" (saved on checkpoint-now request {answered} and held there until stopped: no work lost)"
    answering = f", answering checkpoint-now request {checkpoint.answers}" if checkpoint.answers else ""
    if lost == timedelta(0):
        return f" (saved after the {_what(fault)} began{answering}: no work lost)"
    trained_on = stopped_at is not None and fault.fault_class in TRAINS_ON
    ended = "the job was stopped" if trained_on else f"the {_what(fault)}"
    # Under a second (a stop dated by ECS, a save dated by its manifest) is said to the tenth, never as "0s".
    said = _seconds(lost) if lost < timedelta(seconds=1) else format_duration(lost)
    return f" (saved {said} before {ended}{answering}, so about {said} of work lost)"


def _moved_lost(r: NoticeRequest, launch: Launch) -> str:
    """The work lost, once the job was moved: its old tasks were told to stop (ECS's time), or stopped by the
    relaunch."""
    return _lost(launch.checkpoint, r.fault, stopped_at=launch.stopped_at or launch.launched_at, answered=_answered(r))


def _answered(r: NoticeRequest) -> str | None:
    """The id of the request the move asked and the job answered, if it did."""
    asked = r.plan.checkpoint_now if r.plan is not None else None
    return asked.request_id if asked is not None and asked.state is MoveAsk.ANSWERED else None


def _what(fault: Fault) -> str:
    """What started the move, in a sentence: a fault, or a drain (a move with warning)."""
    if fault.fault_class == PLANNED_MOVE:
        return "move"
    return "drain" if fault.planned else "fault"


def recovery(r: NoticeRequest, now: datetime) -> dict[str, Any] | None:
    """A resumed job's recovery figures (PagerDuty's custom details, the metrics): the fault to training again,
    and the work lost; None for other notices."""
    if r.kind is not NoticeKind.RESUMED or r.launch is None:
        return None
    checkpoint = r.launch.checkpoint
    stopped_at = r.launch.stopped_at or r.launch.launched_at
    lost = work_lost(checkpoint, r.fault, stopped_at=stopped_at, answered=_answered(r))
    return {
        "fault_at": iso_utc(r.fault.impaired_at),
        "training_again_at": iso_utc(now),
        "fault_to_training_seconds": round(max((now - r.fault.impaired_at).total_seconds(), 0.0), 1),
        "resumed_from_step": checkpoint.step if checkpoint else None,
        "checkpoint_saved_at": iso_utc(checkpoint.saved) if checkpoint and checkpoint.saved else None,
        "work_lost_seconds": round(lost.total_seconds(), 1) if lost is not None else None,
        "checkpoint_now_request": checkpoint.answers if checkpoint else None,
        "checkpoint_now": _checkpoint_now_figures(
            r.plan.checkpoint_now if r.plan else None, _moved_steps_lost(r, r.launch)
        ),
        "spare": _spare_figures(r.launch.spare),
    }


def _spare_figures(spare: SpareUse | None) -> dict[str, Any] | None:
    if spare is None:
        return None
    return {
        "used": spare.used,
        "state": spare.state.value,
        "hosts": list(spare.hosts[:EVIDENCE_ITEMS]),
        "declared": spare.declared,
        "free": spare.free,
        "refill": spare.refill.model_dump(mode="json") if spare.refill else None,
    }


def _checkpoint_now_figures(asked: MoveCheckpoint | None, lost: StepsLost | None) -> dict[str, Any] | None:
    if asked is None:
        return None
    figures: dict[str, Any] = {
        "state": asked.state.value,
        "request": asked.request_id,
        "answered_step": asked.answered_step,
        "waited_seconds": round(asked.waited_seconds, 1) if asked.waited_seconds is not None else None,
        "detail": _clip(asked.detail, 300) if asked.detail else None,
    }
    if asked.state is MoveAsk.ANSWERED and asked.answered_named is not None:
        figures["answered_named"] = asked.answered_named
    if lost is not None:
        # Only when nobody answered: an estimate (None when the checkpoints show no pace), with what it rests on.
        figures["steps_lost"] = {
            "estimate": lost.steps,
            "after_step": lost.after_step,
            "trained_seconds": round(lost.trained.total_seconds(), 1),
            "pace_steps": lost.pace_steps,
            "pace_seconds": round(lost.pace_time.total_seconds(), 1) if lost.pace_time is not None else None,
        }
        # What the times rest on: the manifest's own time of the save or S3's (whole seconds), and ECS's time of
        # the stop or the relaunch's.
        figures["steps_lost_basis"] = {
            "saved": "manifest_created_at" if lost.saved_to_the_ms else "s3_marker_time",
            "stopped": "ecs_stopping_at" if lost.told_to_stop else "relaunch",
        }
    return figures


def _skipped_text(plan: Plan) -> str:
    if not plan.skipped_count:
        return ""
    shown = "; ".join(f"step {s.step}: {s.reason.value} ({s.detail})" for s in plan.skipped)
    more = f"; and {plan.skipped_count - len(plan.skipped)} more" if plan.skipped_count > len(plan.skipped) else ""
    return f"\nSkipped newer incomplete checkpoints: {shown}{more}."


def _attempts_text(plan: Plan) -> str:
    if not plan.recent_attempts:
        return ""
    shown = "; ".join(
        f"#{a.number} from {'step ' + str(a.step) if a.step is not None else 'scratch'}: {a.outcome.value}"
        + (f" ({a.reason})" if a.reason else "")
        for a in plan.recent_attempts
    )
    return f"\nAttempts since the last progress: {shown}."


def evidence(r: NoticeRequest, now: datetime) -> dict[str, Any]:
    """What an on-call engineer needs without opening the console: fault, job, checkpoint, attempts."""
    fault = r.fault
    details: dict[str, Any] = {
        "fault": {
            "label": fault.label,
            "title": fault.title,
            "status_reason": fault.status_reason,
            "ec2_instance_id": fault.ec2_instance_id,
            "container_instance_arn": fault.container_instance_arn,
            "cluster_arn": fault.cluster_arn,
            "capacity_provider": fault.capacity_provider,
            "impaired_at": iso_utc(fault.impaired_at),
            "incident": fault.fingerprint,
        },
        "execution": r.execution,
    }
    if r.guards is not None:
        details["guards"] = r.guards.model_dump(mode="json")
    if r.job is not None:
        details["job"] = r.job.model_dump(mode="json")
    plan = r.plan
    if plan is not None:
        details["decision"] = {"action": plan.action.value, "reason": plan.reason, "detail": plan.detail}
        details["checkpoint"] = plan.checkpoint.model_dump(mode="json") if plan.checkpoint else None
        details["skipped_checkpoints"] = [s.model_dump(mode="json") for s in plan.skipped]
        details["attempts"] = [a.model_dump(mode="json") for a in plan.recent_attempts]
        details["excluded_hosts"] = list(plan.excluded_hosts)
    if r.launch is not None:
        details["launch"] = r.launch.model_dump(mode="json")
    if r.watch is not None:
        details["tasks"] = r.watch.model_dump(mode="json")
    if (figures := recovery(r, now)) is not None:
        details["recovery"] = figures
    if r.error is not None:
        details["error"] = {"error": r.error.get("Error"), "cause": _clip(str(r.error.get("Cause", "")), 1000)}
    details["at"] = iso_utc(now)
    return details


def _short_task(task_arn: str) -> str:
    return task_arn.rsplit("/", 1)[-1][:12]
