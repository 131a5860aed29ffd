"""Training auto-resume: the domain (docs/auto-resume.md).

Everything the ResumeTraining workflow decides is decided here, from plain values: which fault counts, the
guards, which tasks form a job, the attempt budget, the plan per mode and policy, where a relaunch may not
land, the RunTask request (environment overrides, clientToken, tags), and what people are told. No boto3 and
no HTTP: the steps (resume_steps.py) feed these functions from the adapters.

The models are the JSON payloads that travel between the workflow's states. They ignore unknown fields, so an
execution that started before a deploy (an approval can wait for hours) still parses after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from fault_responder.checkpoints import Checkpoint, CheckpointSearch, SkippedFolder, parse_checkpoint_uri
from fault_responder.classify import classify_health_check
from fault_responder.domain import InstanceRef, Severity
from fault_responder.lifecycle import fingerprint
from fault_responder.models.events import HealthChangeEvent
from fault_responder.timefmt import format_duration, iso_utc

JOB_ID_TAG = "fault-responder:job-id"
CHECKPOINT_URI_TAG = "fault-responder:checkpoint-uri"
MAX_ATTEMPTS_TAG = "fault-responder:max-attempts"
MODE_TAG = "fault-responder:mode"
ATTEMPT_TAG = "fault-responder:attempt"
RESUMED_FROM_TAG = "fault-responder:resumed-from"
RESUME_FROM_ENV = "RESUME_FROM"
RESUME_ATTEMPT_ENV = "RESUME_ATTEMPT"

MANAGED_INSTANCES = "MANAGED_INSTANCES"
AUTO_REPAIR_ENABLED = "ENABLED"

MAX_CLIENT_TOKEN = 64
MAX_TAG_VALUE = 256
MAX_TAGS = 50
MAX_STOP_REASON = 255
MAX_EXCLUSION_EXPRESSION = 2000
"""ECS caps a placement constraint expression at 2,000 characters (about 80 instance ids)."""
MAX_ATTEMPTS_LIMIT = 20
MAX_BACKOFF_SECONDS = 900
EVIDENCE_ITEMS = 10
"""Skipped folders, attempts and tasks named in a notice: enough to act on, small enough for PagerDuty."""


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


# --- Configuration -------------------------------------------------------------------------------


class Mode(StrEnum):
    AUTO = "auto"
    DRY_RUN = "dry-run"
    APPROVE = "approve"


class NoCheckpointPolicy(StrEnum):
    PAGE = "page"
    RESTART_FROM_SCRATCH = "restart-from-scratch"


Seconds = Annotated[int, Field(ge=1, le=86_400)]


class ResumeConfig(_Payload):
    """The stack parameters the workflow runs with; Claim reads them once and every later state gets them.

    The Wait states read their durations from here (SecondsPath), so the sandbox shortens the waits by
    parameter and runs the same definition.
    """

    mode: Mode = Mode.AUTO
    capacity_providers: tuple[str, ...] = ()
    """The training capacity providers (the rule matches them too; checked again in code). Empty: any."""
    check_types: tuple[str, ...] = ("ACCELERATED_COMPUTE",)
    max_attempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS_LIMIT)] = 3
    mass_fault_threshold_percent: Annotated[int, Field(ge=1, le=100)] = 20
    mass_fault_window_minutes: Annotated[int, Field(ge=1, le=1440)] = 30
    no_checkpoint_policy: NoCheckpointPolicy = NoCheckpointPolicy.PAGE
    poll_seconds: Seconds = 15
    stop_timeout_seconds: Seconds = 600
    start_timeout_seconds: Seconds = 900
    approval_timeout_seconds: Annotated[int, Field(ge=1, le=604_800)] = 3600
    relaunch_backoff_seconds: Annotated[int, Field(ge=0, le=MAX_BACKOFF_SECONDS)] = 60
    job_concurrency: Annotated[int, Field(ge=1, le=40)] = 4


# --- The fault -----------------------------------------------------------------------------------


class NotResumableError(Exception):
    """The event is not a fault this workflow acts on (the trigger rule is coarse; this is the precise check)."""


class Fault(_Payload):
    event_id: str
    region: str
    account: str
    cluster_arn: str
    container_instance_arn: str
    ec2_instance_id: str | None
    capacity_provider: str
    check_type: str
    status_reason: str | None
    xid: int | None
    title: str
    """e.g. "XID 79: GPU has fallen off the bus"."""
    fault_class: str
    severity: Severity
    impaired_at: datetime
    """The health check's lastStatusChange: with the fingerprint, it names this fault and not a later one."""
    fingerprint: str
    """The incident fingerprint (cluster/container-instance/check-type): the alert pipeline's incident."""

    @property
    def cluster_name(self) -> str:
        return self.cluster_arn.rsplit("/", 1)[-1]

    @property
    def key(self) -> str:
        return f"{self.fingerprint}#{iso_utc(self.impaired_at)}"

    @property
    def label(self) -> str:
        """What the fault is called in texts and stop reasons: "XID 79", or the check type."""
        return f"XID {self.xid}" if self.xid is not None else self.check_type

    @property
    def host(self) -> str:
        return self.ec2_instance_id or self.container_instance_arn.rsplit("/", 1)[-1]

    def instance_ref(self) -> InstanceRef:
        return InstanceRef(
            region=self.region,
            account=self.account,
            cluster_arn=self.cluster_arn,
            container_instance_arn=self.container_instance_arn,
            ec2_instance_id=self.ec2_instance_id,
            capacity_provider=self.capacity_provider,
        )


def fault_from_event(event: HealthChangeEvent, check_types: Collection[str]) -> Fault:
    """The fault an IMPAIRED health event reports, or NotResumableError saying why it is not one.

    EventBridge matches `type` and `status` of `healthChecks` independently across the array's elements, so the
    rule can fire for a DAEMON check that is IMPAIRED next to an ACCELERATED_COMPUTE check that is OK: here both
    must hold on the same element.
    """
    detail = event.detail
    if detail.overall_status != "IMPAIRED":
        raise NotResumableError(f"overall status is {detail.overall_status}, not IMPAIRED")
    if not detail.capacity_provider_name:
        raise NotResumableError("the instance belongs to no capacity provider")
    check = next((c for c in detail.health_checks if c.type in check_types and c.status == "IMPAIRED"), None)
    if check is None:
        raise NotResumableError(f"no health check of type {', '.join(sorted(check_types))} is IMPAIRED")
    instance = InstanceRef(
        region=event.region,
        account=event.account,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=detail.capacity_provider_name,
    )
    classification = classify_health_check(check)
    return Fault(
        event_id=event.id,
        region=event.region,
        account=event.account,
        cluster_arn=detail.cluster_arn,
        container_instance_arn=detail.container_instance_arn,
        ec2_instance_id=detail.ec2_instance_id,
        capacity_provider=detail.capacity_provider_name,
        check_type=check.type,
        status_reason=check.status_reason,
        xid=classification.xid,
        title=classification.title,
        fault_class=classification.fault_class.value,
        severity=classification.severity,
        impaired_at=check.last_status_change or event.time,
        fingerprint=fingerprint(instance, check.type),
    )


class ClaimStatus(StrEnum):
    CLAIMED = "claimed"
    DUPLICATE = "duplicate"
    NOT_APPLICABLE = "not_applicable"


class Claim(_Payload):
    status: ClaimStatus
    reason: str
    fault: Fault | None = None
    config: ResumeConfig


# --- Guards --------------------------------------------------------------------------------------


class GuardVerdict(StrEnum):
    PROCEED = "proceed"
    ECS_OWNS_RECOVERY = "ecs_owns_recovery"
    MASS_FAULT = "mass_fault"


class ProviderInfo(_Payload):
    name: str
    type: str | None
    """EC2_AUTOSCALING, MANAGED_INSTANCES, ... (None when ECS did not say)."""
    auto_repair: str | None
    """managedInstancesProvider.autoRepairConfiguration.actionsStatus; None for providers without auto-repair."""

    @property
    def ecs_owns_recovery(self) -> bool:
        """ECS auto-repair drains and replaces IMPAIRED instances of this provider itself."""
        return (self.auto_repair or "").upper() == AUTO_REPAIR_ENABLED

    @property
    def supports_instance_exclusion(self) -> bool:
        """Managed Instances accepts no ec2InstanceId in placement constraints (ECS_EVENTS.md §5.3)."""
        return self.type != MANAGED_INSTANCES


class Guards(_Payload):
    verdict: GuardVerdict
    provider: ProviderInfo
    impaired: int
    """Distinct instances of the provider with a claimed fault within the window, this one included."""
    instances: int
    allowed: int


def mass_fault_allowance(instances: int, threshold_percent: int) -> int:
    """How many instances of a provider may be faulty at once before it counts as a mass event.

    The share, rounded down, but never less than one: like ECS's own repair limit (at most 20% at a time,
    one at a time below 9 instances), a small provider may still have one fault handled.
    """
    return max(1, instances * threshold_percent // 100)


def judge_guards(provider: ProviderInfo, impaired: int, instances: int, config: ResumeConfig) -> Guards:
    allowed = mass_fault_allowance(instances, config.mass_fault_threshold_percent)
    if provider.ecs_owns_recovery:
        verdict = GuardVerdict.ECS_OWNS_RECOVERY
    elif impaired > allowed:
        verdict = GuardVerdict.MASS_FAULT
    else:
        verdict = GuardVerdict.PROCEED
    return Guards(verdict=verdict, provider=provider, impaired=impaired, instances=instances, allowed=allowed)


def quarantine_reason(fault: Fault) -> str:
    """Recorded on the instance state; the alert pipeline quotes it when it attributes the drain."""
    return f"{fault.label} on {fault.host}; resuming its training jobs"


class Quarantine(_Payload):
    quarantined: bool
    status: str | None = None
    """The container instance status after the drain (DRAINING), or MISSING when it already left."""


# --- Jobs ----------------------------------------------------------------------------------------


class TaskSpec(_Payload):
    """What RunTask needs to start a task again like the original (DescribeTasks has the rest)."""

    task_arn: str
    task_definition_arn: str
    container_instance_arn: str | None = None
    ec2_instance_id: str | None = None
    capacity_provider_name: str | None = None
    launch_type: str | None = None
    group: str | None = None
    started_by: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    network_configuration: dict[str, Any] | None = None
    enable_execute_command: bool = False

    @property
    def task_id(self) -> str:
        return self.task_arn.rsplit("/", 1)[-1]

    @property
    def host(self) -> str:
        return self.ec2_instance_id or (self.container_instance_arn or "?").rsplit("/", 1)[-1]


class Job(_Payload):
    """A resumable job as found on the faulty instance: every task in the cluster sharing its job id (a gang).

    The task specs themselves are kept in the resume store (a 2,000-GPU gang would not fit in a state's
    256 KB payload); this summary is what travels.
    """

    job_id: str
    cluster_arn: str
    checkpoint_uri: str
    max_attempts: int | None = None
    """From the max-attempts tag; None means the stack default."""
    mode: Mode
    task_count: int
    hosts: tuple[str, ...]
    task_ids: tuple[str, ...] = ()
    """The first few task ids, for the evidence of a page."""
    problems: tuple[str, ...] = ()
    """Why the job's tags cannot be acted on; a job with problems is paged, never touched."""

    @property
    def key(self) -> str:
        return job_key(self.cluster_arn, self.job_id)


def job_key(cluster_arn: str, job_id: str) -> str:
    return f"{cluster_arn.rsplit('/', 1)[-1]}/{job_id}"


class TaskSummary(_Payload):
    """A task on the faulty instance that is not a resumable job: named in the thread, never touched."""

    task_arn: str
    group: str | None
    note: str


class FoundJobs(_Payload):
    jobs: tuple[Job, ...]
    untouched: tuple[TaskSummary, ...]
    untouched_count: int


def is_job_task(tags: Mapping[str, str]) -> bool:
    return bool(tags.get(JOB_ID_TAG)) and bool(tags.get(CHECKPOINT_URI_TAG))


def untouched_summary(spec: TaskSpec) -> TaskSummary:
    if spec.tags.get(JOB_ID_TAG):
        note = f"tagged {JOB_ID_TAG} but not {CHECKPOINT_URI_TAG}"
    else:
        note = f"no {JOB_ID_TAG} / {CHECKPOINT_URI_TAG} tags"
    return TaskSummary(task_arn=spec.task_arn, group=spec.group, note=note)


def group_jobs(tasks: Iterable[TaskSpec]) -> dict[str, list[TaskSpec]]:
    """Tasks by job id, each list in task ARN order (the order fixes each task's index in its clientToken)."""
    jobs: dict[str, list[TaskSpec]] = {}
    for task in sorted(tasks, key=lambda t: t.task_arn):
        if is_job_task(task.tags):
            jobs.setdefault(task.tags[JOB_ID_TAG], []).append(task)
    return jobs


def job_from_tasks(job_id: str, cluster_arn: str, tasks: Sequence[TaskSpec], default_mode: Mode) -> Job:
    """Summarise a gang; disagreeing or malformed tags become problems (paged) rather than guesses."""
    problems: list[str] = []
    checkpoint_uri = _agreed(tasks, CHECKPOINT_URI_TAG, problems) or ""
    if checkpoint_uri:
        try:
            checkpoint_uri = parse_checkpoint_uri(checkpoint_uri).uri
        except ValueError as error:
            problems.append(f"{CHECKPOINT_URI_TAG}: {error}")
    crowded = [task.task_id for task in tasks if len(_relaunch_tag_keys(task.tags)) > MAX_TAGS]
    if crowded:
        # Found now, before anything is stopped: RunTask would refuse the relaunched task.
        problems.append(f"tasks {', '.join(crowded[:EVIDENCE_ITEMS])} have too many tags to add the resume tags")
    max_attempts = _max_attempts(_agreed(tasks, MAX_ATTEMPTS_TAG, problems), problems)
    mode = _mode(_agreed(tasks, MODE_TAG, problems), default_mode, problems)
    return Job(
        job_id=job_id,
        cluster_arn=cluster_arn,
        checkpoint_uri=checkpoint_uri,
        max_attempts=max_attempts,
        mode=mode,
        task_count=len(tasks),
        hosts=tuple(sorted({task.host for task in tasks})),
        task_ids=tuple(task.task_id for task in tasks[:EVIDENCE_ITEMS]),
        problems=tuple(problems),
    )


def _agreed(tasks: Sequence[TaskSpec], tag: str, problems: list[str]) -> str | None:
    values = sorted({task.tags[tag] for task in tasks if tag in task.tags})
    if len(values) > 1:
        problems.append(f"the job's tasks disagree on {tag}: {', '.join(values)}")
        return None
    return values[0] if values else None


def _max_attempts(value: str | None, problems: list[str]) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_ATTEMPTS_LIMIT:
        problems.append(f"{MAX_ATTEMPTS_TAG} must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, got {value!r}")
        return None
    return int(value)


def _mode(value: str | None, default: Mode, problems: list[str]) -> Mode:
    if value is None:
        return default
    try:
        return Mode(value)
    except ValueError:
        # A typo must not fall back to a mode that acts: the job is paged instead.
        problems.append(f"{MODE_TAG} must be one of {', '.join(m.value for m in Mode)}, got {value!r}")
        return Mode.DRY_RUN


def tasks_digest(task_arns: Iterable[str]) -> str:
    """Names a set of tasks: two executions replacing the same tasks collide on it (one copy of a job)."""
    return hashlib.sha256("\n".join(sorted(task_arns)).encode()).hexdigest()[:32]


# --- The ledger and the budget -------------------------------------------------------------------


class AttemptOutcome(StrEnum):
    LAUNCHING = "launching"
    RUNNING = "running"
    FAILED = "failed"


class LedgerAttempt(_Payload):
    number: int
    """1, 2, 3, ... for the life of the job id: RESUME_ATTEMPT and the clientToken carry it."""
    step: int | None
    """The checkpoint step it resumed from; None for a restart from scratch."""
    checkpoint_uri: str | None
    fault_key: str
    execution: str
    started_at: datetime
    outcome: AttemptOutcome = AttemptOutcome.LAUNCHING
    reason: str | None = None
    replaces: str | None = None
    """The digest of the task ARNs it replaced (resume.tasks_digest)."""


class Ledger(_Payload):
    job_key: str
    attempts: tuple[LedgerAttempt, ...] = ()
    failed_hosts: tuple[str, ...] = ()
    """Hosts that failed an attempt of this job (the faulty instance first); never placed on again."""

    @property
    def attempt_count(self) -> int:
        return self.attempts[-1].number if self.attempts else 0

    def attempt(self, number: int) -> LedgerAttempt | None:
        return next((a for a in self.attempts if a.number == number), None)


class Budget(_Payload):
    number: int
    """The attempt's number for the life of the job."""
    in_budget: int
    """Its place in the current budget: 1 after progress, else one more than the attempt before."""
    max_attempts: int
    progress: bool

    @property
    def exhausted(self) -> bool:
        return self.in_budget > self.max_attempts


def next_attempt(attempts: Sequence[LedgerAttempt], step: int | None, max_attempts: int) -> Budget:
    """The budget rule: the count resets when an attempt resumes from a higher step than the one before it
    (the job made progress since), and otherwise grows by one per attempt."""
    count = 0
    previous: LedgerAttempt | None = None
    for attempt in attempts:
        count = 1 if previous is None or _step(attempt.step) > _step(previous.step) else count + 1
        previous = attempt
    progress = previous is None or _step(step) > _step(previous.step)
    in_budget = 1 if progress else count + 1
    return Budget(
        number=(attempts[-1].number if attempts else 0) + 1,
        in_budget=in_budget,
        max_attempts=max_attempts,
        progress=progress,
    )


def _step(step: int | None) -> int:
    return -1 if step is None else step


def budget_window(attempts: Sequence[LedgerAttempt]) -> list[LedgerAttempt]:
    """The attempts the current budget counts (since the last progress): the evidence of a give-up page."""
    start = 0
    for index in range(1, len(attempts)):
        if _step(attempts[index].step) > _step(attempts[index - 1].step):
            start = index
    return list(attempts[start:])


class RecordStatus(StrEnum):
    RECORDED = "recorded"
    REUSED = "reused"
    """This execution had already recorded it (a retried Lambda): same number, same clientTokens."""
    SUPERSEDED = "superseded"
    """Another execution already replaced these tasks."""


@dataclass(frozen=True, slots=True)
class RecordResult:
    status: RecordStatus
    attempt: LedgerAttempt | None
    by: str | None = None
    """The execution that replaced the tasks first, when superseded."""


@dataclass(frozen=True, slots=True)
class ClaimResult:
    claimed: bool
    execution: str
    """The execution that holds the claim (this one, or the one that got there first)."""


@dataclass(frozen=True, slots=True)
class RunTaskResult:
    task_arns: tuple[str, ...]
    failures: tuple[str, ...] = ()
    """ECS's failure reasons (RESOURCE:GPU, ...) when it could not place the task."""


# --- The plan ------------------------------------------------------------------------------------


class PlanAction(StrEnum):
    RESUME = "resume"
    GIVE_UP = "give_up"


class GiveUpReason(StrEnum):
    INVALID_JOB = "invalid_job"
    NO_CHECKPOINT = "no_checkpoint"
    BUDGET_EXHAUSTED = "budget_exhausted"


class Plan(_Payload):
    action: PlanAction
    mode: Mode
    reason: GiveUpReason | None = None
    detail: str = ""
    attempt: int = 0
    """The number the next attempt will most likely get (the relaunch records the final one)."""
    in_budget: int = 0
    max_attempts: int
    checkpoint: Checkpoint | None = None
    skipped: tuple[SkippedFolder, ...] = ()
    skipped_count: int = 0
    search_notes: tuple[str, ...] = ()
    from_scratch: bool = False
    excluded_hosts: tuple[str, ...] = ()
    recent_attempts: tuple[LedgerAttempt, ...] = ()
    replaces: int | None = None
    """Whose tasks the next stop and relaunch replace: None for the tasks found, k for attempt k's."""
    backoff_seconds: int = 0
    retries: int = 0
    """Retries this execution made for the job (the backoff doubles with each)."""
    retry_of: int | None = None
    last_failure: str | None = None


def plan_job(
    job: Job,
    fault: Fault,
    config: ResumeConfig,
    ledger: Ledger,
    search: CheckpointSearch | None,
) -> Plan:
    """Decide, without touching anything, whether and how the job is resumed. `search` is None only for a job
    with problems (its checkpoint URI cannot be trusted, so it is not searched)."""
    max_attempts = job.max_attempts or config.max_attempts
    excluded = _excluded_hosts(ledger.failed_hosts, fault)
    evidence = _search_evidence(search)
    common = {
        "mode": job.mode,
        "max_attempts": max_attempts,
        "excluded_hosts": excluded,
        "recent_attempts": tuple(budget_window(ledger.attempts)[-EVIDENCE_ITEMS:]),
        **evidence,
    }
    if job.problems or search is None:
        detail = "; ".join(job.problems) or "the job's checkpoint URI could not be searched"
        return Plan(action=PlanAction.GIVE_UP, reason=GiveUpReason.INVALID_JOB, detail=detail, **common)
    checkpoint = search.checkpoint
    if checkpoint is None and config.no_checkpoint_policy == NoCheckpointPolicy.PAGE:
        detail = f"no complete checkpoint under {search.uri}; policy {NoCheckpointPolicy.PAGE.value}: not restarted"
        return Plan(action=PlanAction.GIVE_UP, reason=GiveUpReason.NO_CHECKPOINT, detail=detail, **common)
    budget = next_attempt(ledger.attempts, checkpoint.step if checkpoint else None, max_attempts)
    if budget.exhausted:
        detail = f"{budget.in_budget - 1} attempts since the job last made progress, the most allowed is {max_attempts}"
        return Plan(action=PlanAction.GIVE_UP, reason=GiveUpReason.BUDGET_EXHAUSTED, detail=detail, **common)
    return Plan(
        action=PlanAction.RESUME,
        attempt=budget.number,
        in_budget=budget.in_budget,
        from_scratch=checkpoint is None,
        **common,
    )


def _excluded_hosts(failed_hosts: Iterable[str], fault: Fault) -> tuple[str, ...]:
    hosts = list(dict.fromkeys([fault.host, *failed_hosts]))
    return tuple(hosts)


def _search_evidence(search: CheckpointSearch | None) -> dict[str, Any]:
    if search is None:
        return {}
    return {
        "checkpoint": search.checkpoint,
        "skipped": search.skipped[:EVIDENCE_ITEMS],
        "skipped_count": len(search.skipped),
        "search_notes": search.notes,
    }


def retry_backoff(base_seconds: int, retry: int) -> int:
    """Seconds before retry number `retry` (1, 2, ...): doubling, capped, so no-capacity waits grow."""
    if base_seconds <= 0:
        return 0
    return int(min(MAX_BACKOFF_SECONDS, base_seconds * 2 ** (retry - 1)))


def plan_retry(
    previous: Plan, fault: Fault, config: ResumeConfig, ledger: Ledger, *, failed_attempt: int, failure: str
) -> Plan:
    """After attempt `failed_attempt` failed (no capacity, an early stop, a start timeout): try again within
    the budget from the same checkpoint, or give up."""
    step = previous.checkpoint.step if previous.checkpoint else None
    budget = next_attempt(ledger.attempts, step, previous.max_attempts)
    excluded = _excluded_hosts(ledger.failed_hosts, fault)
    recent = tuple(budget_window(ledger.attempts)[-EVIDENCE_ITEMS:])
    if budget.exhausted:
        return previous.model_copy(
            update={
                "action": PlanAction.GIVE_UP,
                "reason": GiveUpReason.BUDGET_EXHAUSTED,
                "detail": f"attempt {failed_attempt} failed ({failure}) and the budget of "
                f"{previous.max_attempts} attempts is spent",
                "excluded_hosts": excluded,
                "recent_attempts": recent,
                "last_failure": failure,
            }
        )
    return previous.model_copy(
        update={
            "attempt": budget.number,
            "in_budget": budget.in_budget,
            "excluded_hosts": excluded,
            "recent_attempts": recent,
            "replaces": failed_attempt,
            "backoff_seconds": retry_backoff(config.relaunch_backoff_seconds, previous.retries + 1),
            "retries": previous.retries + 1,
            "retry_of": failed_attempt,
            "last_failure": failure,
        }
    )


# --- Relaunching ---------------------------------------------------------------------------------


def client_token(job_key_value: str, attempt: int, index: int) -> str:
    """RunTask's idempotency token: the same job, attempt and task always give the same token, so a retried
    Lambda gets the task it already started instead of a second copy. At most 64 printable characters."""
    digest = hashlib.sha256(job_key_value.encode()).hexdigest()[:32]
    token = f"fr-{digest}-a{attempt}-t{index}"
    if len(token) > MAX_CLIENT_TOKEN:
        raise ValueError(f"attempt {attempt} / task {index} make a clientToken longer than {MAX_CLIENT_TOKEN}")
    return token


def stop_reason(fault: Fault, job_id: str) -> str:
    """StopTask's reason (shown in the console and the task state change event)."""
    text = f"GPU Fault Responder: {fault.label} on {fault.host}; resuming job {job_id} from its checkpoint"
    return _clip(text, MAX_STOP_REASON)


def placement_exclusion(provider: ProviderInfo | None, hosts: Sequence[str]) -> list[dict[str, str]]:
    """A memberOf constraint that keeps the relaunch off `hosts`, where the capacity provider supports it.

    Managed Instances does not support the ec2InstanceId attribute: there the drain is what keeps the faulty
    host out, and hosts that failed later attempts cannot be excluded (docs/auto-resume.md, Limits).
    """
    if not hosts or (provider is not None and not provider.supports_instance_exclusion):
        return []
    kept: list[str] = []
    # Most recent first: when the list would not fit, the oldest failures are dropped.
    for host in reversed(list(hosts)):
        candidate = _exclusion_expression([host, *kept])
        if len(candidate) > MAX_EXCLUSION_EXPRESSION:
            break
        kept.insert(0, host)
    return [{"type": "memberOf", "expression": _exclusion_expression(kept)}] if kept else []


def _exclusion_expression(hosts: Sequence[str]) -> str:
    return "ec2InstanceId !in [" + ", ".join(f"'{host}'" for host in hosts) + "]"


def resume_environment(checkpoint_uri: str | None, attempt: int) -> dict[str, str]:
    """RESUME_FROM is always set (empty for a fresh start), so a value from an earlier attempt never survives."""
    return {RESUME_FROM_ENV: checkpoint_uri or "", RESUME_ATTEMPT_ENV: str(attempt)}


def with_environment(
    overrides: Mapping[str, Any], container_names: Sequence[str], env: Mapping[str, str]
) -> dict[str, Any]:
    """The task's overrides with `env` set in every container: existing values of those names are replaced,
    every other variable and override (command, cpu, taskRoleArn, ...) is kept as it was."""
    merged: dict[str, Any] = json.loads(json.dumps(dict(overrides)))  # a deep copy of plain JSON
    container_overrides: list[dict[str, Any]] = merged.get("containerOverrides") or []
    by_name = {entry.get("name"): entry for entry in container_overrides}
    for name in container_names:
        entry = by_name.get(name)
        if entry is None:
            entry = {"name": name}
            container_overrides.append(entry)
            by_name[name] = entry
        kept = [item for item in entry.get("environment") or [] if item.get("name") not in env]
        entry["environment"] = [*kept, *({"name": key, "value": value} for key, value in env.items())]
    merged["containerOverrides"] = container_overrides
    return merged


def _relaunch_tag_keys(original: Mapping[str, str]) -> set[str]:
    """`aws:` tags are ECS's own and cannot be set; the resume tags replace earlier values of themselves."""
    return {key for key in original if not key.lower().startswith("aws:")} | {ATTEMPT_TAG, RESUMED_FROM_TAG}


def relaunch_tags(original: Mapping[str, str], attempt: int, resumed_from: str | None) -> list[dict[str, str]]:
    """The original tags plus the attempt and the checkpoint (job_from_tasks has checked they fit)."""
    tags = {key: value for key, value in original.items() if not key.lower().startswith("aws:")}
    tags[ATTEMPT_TAG] = str(attempt)
    tags[RESUMED_FROM_TAG] = _tail(resumed_from or "scratch", MAX_TAG_VALUE)
    if len(tags) > MAX_TAGS:
        raise ValueError(f"the relaunched task would carry {len(tags)} tags, ECS allows {MAX_TAGS}")
    return [{"key": key, "value": value} for key, value in tags.items()]


def build_run_task_request(
    spec: TaskSpec,
    *,
    cluster_arn: str,
    container_names: Sequence[str],
    attempt: int,
    checkpoint_uri: str | None,
    token: str,
    constraints: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """RunTask for one task of the job, started like the original: task definition, overrides, capacity
    provider (or launch type), network, group; plus the resume environment, the tags and the constraints."""
    request: dict[str, Any] = {
        "cluster": cluster_arn,
        "taskDefinition": spec.task_definition_arn,
        "count": 1,
        "clientToken": token,
        "overrides": with_environment(spec.overrides, container_names, resume_environment(checkpoint_uri, attempt)),
        "tags": relaunch_tags(spec.tags, attempt, checkpoint_uri),
    }
    if spec.capacity_provider_name:
        # Managed Instances requires a strategy and no launch type; the provider the task ran on is the one
        # the job asked for (DescribeTasks does not return the original strategy).
        request["capacityProviderStrategy"] = [{"capacityProvider": spec.capacity_provider_name, "weight": 1}]
    elif spec.launch_type:
        request["launchType"] = spec.launch_type
    if spec.network_configuration:
        request["networkConfiguration"] = spec.network_configuration
    if spec.group:
        request["group"] = spec.group
    if spec.started_by:
        request["startedBy"] = spec.started_by
    if spec.enable_execute_command:
        request["enableExecuteCommand"] = True
    if any(key.startswith("aws:ecs:") for key in spec.tags):
        request["enableECSManagedTags"] = True
    if constraints:
        request["placementConstraints"] = [dict(constraint) for constraint in constraints]
    return request


def chosen_checkpoint(planned: Checkpoint | None, fresh: Checkpoint | None) -> Checkpoint | None:
    """The checkpoint a relaunch uses: searched again once the tasks are stopped, so one written while the
    job waited for approval or for its tasks to stop is not lost; never older than the one planned."""
    if fresh is None:
        return planned
    if planned is None or fresh.step >= planned.step:
        return fresh
    return planned


class LaunchState(StrEnum):
    STARTED = "started"
    NO_CAPACITY = "no_capacity"
    SUPERSEDED = "superseded"


class Launch(_Payload):
    state: LaunchState
    attempt: int
    in_budget: int = 0
    max_attempts: int = 0
    launched: int = 0
    expected: int = 0
    failures: tuple[str, ...] = ()
    checkpoint: Checkpoint | None = None
    launched_at: datetime
    superseded_by: str | None = None


class TaskState(_Payload):
    """A task as DescribeTasks reports it now; MISSING when ECS no longer knows it."""

    task_arn: str
    last_status: str
    desired_status: str | None = None
    stop_code: str | None = None
    stopped_reason: str | None = None
    host: str | None = None


class StopRequest(_Payload):
    stopping: int
    requested_at: datetime


class WatchState(StrEnum):
    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


class StoppedTask(_Payload):
    task_arn: str
    host: str | None
    stop_code: str | None
    reason: str | None


class TaskWatch(_Payload):
    state: WatchState
    total: int
    ready: int
    stopped: tuple[StoppedTask, ...] = ()
    hosts: tuple[str, ...] = ()


def judge_start(tasks: Sequence[TaskState], waited: timedelta, timeout: timedelta) -> WatchState:
    """New tasks, one poll after RunTask: any of them stopping (or gone) fails the attempt."""
    if any(_stopping(task) for task in tasks):
        return WatchState.FAILED
    if tasks and all(task.last_status == "RUNNING" for task in tasks):
        return WatchState.DONE
    return WatchState.TIMED_OUT if waited >= timeout else WatchState.PENDING


def judge_stop(tasks: Sequence[TaskState], waited: timedelta, timeout: timedelta) -> WatchState:
    """Old tasks after StopTask: a task ECS no longer knows (MISSING) has long been stopped."""
    if all(task.last_status in ("STOPPED", "MISSING") for task in tasks):
        return WatchState.DONE
    return WatchState.TIMED_OUT if waited >= timeout else WatchState.PENDING


def _stopping(task: TaskState) -> bool:
    return task.last_status in ("STOPPED", "MISSING") or task.desired_status == "STOPPED"


def watch_result(state: WatchState, tasks: Sequence[TaskState], want_running: bool) -> TaskWatch:
    ready = sum(task.last_status == ("RUNNING" if want_running else "STOPPED") for task in tasks)
    stopped = tuple(
        StoppedTask(task_arn=t.task_arn, host=t.host, stop_code=t.stop_code, reason=t.stopped_reason)
        for t in tasks
        if want_running and _stopping(t)
    )
    hosts = tuple(sorted({t.host for t in tasks if t.host})) if want_running else ()
    return TaskWatch(state=state, total=len(tasks), ready=ready, stopped=stopped, hosts=hosts)


def describe_failure(launch: Launch | None, watch: TaskWatch | None, start_timeout: int) -> str:
    """One line saying why an attempt failed, for the ledger and the thread."""
    if launch is not None and launch.state == LaunchState.NO_CAPACITY:
        started = f"{launch.launched} of {launch.expected} tasks started" if launch.launched else "nothing started"
        return f"RunTask could not place the task ({', '.join(launch.failures) or 'no reason given'}); {started}"
    if watch is not None and watch.state == WatchState.FAILED and watch.stopped:
        first = watch.stopped[0]
        why = first.reason or first.stop_code or "no reason given"
        where = f" on {first.host}" if first.host else ""
        return f"task {first.task_arn.rsplit('/', 1)[-1]} stopped before it ran{where}: {why}"
    return f"the tasks were not RUNNING within {start_timeout}s"


# --- Notices -------------------------------------------------------------------------------------


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
    commands: tuple[tuple[str, str], ...] = ()
    """(label, shell command) pairs shown as code blocks: how to approve or reject."""
    details: dict[str, Any] = Field(default_factory=dict)
    """The evidence, for PagerDuty custom_details and the Slack fields."""

    @property
    def pages(self) -> bool:
        return self.pagerduty == PagerDutyAction.TRIGGER

    @property
    def subject(self) -> str:
        """What the notice is about, for its PagerDuty dedup key: the job, else the mass event or the run."""
        if self.job_id:
            return self.job_id
        return "mass-fault" if self.kind == NoticeKind.MASS_FAULT else "workflow"


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
        commands=_approval_commands(request) if request.kind == NoticeKind.APPROVAL_REQUEST else (),
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


def pagerduty_dedup_key(fault: Fault, subject: str) -> str:
    """One PagerDuty alert per fault and subject (a job id, mass-fault, workflow); at most 255 characters."""
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
    assert g is not None
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
    assert found is not None
    if r.quarantine is not None and r.quarantine.quarantined:
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
        f"restart them {_from_where(plan)}{_lost(plan.checkpoint, now)} as attempt {plan.in_budget} of "
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
        f"{job.task_count} task(s) and restarts them {_from_where(plan)}{_lost(plan.checkpoint, now)} as "
        f"attempt {plan.in_budget} of {plan.max_attempts}. Approve or reject within {deadline} with one of the "
        f"commands below; without an answer it pages.{_skipped_text(plan)}"
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
    assert launch is not None
    hosts = ", ".join(watch.hosts) if watch and watch.hosts else "healthy capacity"
    where = _from_where_checkpoint(launch.checkpoint)
    title = f"Resumed {job.job_id} {where}, attempt {launch.in_budget} of {launch.max_attempts}"
    text = (
        f"Resumed {job.job_id} {where}{_lost(launch.checkpoint, now)} on {hosts}, attempt {launch.in_budget} "
        f"of {launch.max_attempts} ({launch.launched} task(s), RESUME_ATTEMPT={launch.attempt})."
    )
    if r.plan is not None:
        # Folders the plan skipped that are still newer than the checkpoint used (a newer complete one may
        # have appeared while the job stopped).
        used = launch.checkpoint.step if launch.checkpoint else -1
        newer = tuple(folder for folder in r.plan.skipped if folder.step > used)
        text += _skipped_text(r.plan.model_copy(update={"skipped": newer, "skipped_count": len(newer)}))
    return title, text, PagerDutyAction.CHANGE, Severity.INFO


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
}


def _job(r: NoticeRequest) -> Job:
    if r.job is None:
        raise ValueError(f"a {r.kind.value} notice needs the job")
    return r.job


def _job_plan(r: NoticeRequest) -> tuple[Job, Plan]:
    if r.plan is None:
        raise ValueError(f"a {r.kind.value} notice needs the plan")
    return _job(r), r.plan


def _approval_commands(r: NoticeRequest) -> tuple[tuple[str, str], ...]:
    if not r.task_token:
        raise ValueError("an approval request needs the task token")
    token = _shell_quote(r.task_token)
    return (
        ("Approve", f"aws stepfunctions send-task-success --task-token {token} --task-output '{{\"approved\": true}}'"),
        ("Reject", f"aws stepfunctions send-task-failure --task-token {token} --error Rejected --cause 'why'"),
    )


def _shell_quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def _from_where(plan: Plan) -> str:
    if plan.from_scratch:
        return "from scratch (no complete checkpoint; policy restart-from-scratch)"
    return _from_where_checkpoint(plan.checkpoint)


def _from_where_checkpoint(checkpoint: Checkpoint | None) -> str:
    return f"from step {checkpoint.step}" if checkpoint else "from scratch"


def _lost(checkpoint: Checkpoint | None, now: datetime) -> str:
    if checkpoint is None or checkpoint.written_at is None:
        return ""
    ago = format_duration(now - checkpoint.written_at)
    return f" (checkpoint written {ago} ago, so about {ago} of work lost)"


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
    if r.error is not None:
        details["error"] = {"error": r.error.get("Error"), "cause": _clip(str(r.error.get("Cause", "")), 1000)}
    details["at"] = iso_utc(now)
    return details


# --- Small helpers -------------------------------------------------------------------------------


def _short_task(task_arn: str) -> str:
    return task_arn.rsplit("/", 1)[-1][:12]


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tail(text: str, limit: int) -> str:
    """The end of a long URI says more (the step folder) than its start."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]
