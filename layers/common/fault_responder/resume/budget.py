"""Training auto-resume: the attempt ledger, the attempt budget, and the plan per mode and policy
(resume, retry, or give up)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from fault_responder.resume.checkpoint_now import MoveCheckpoint
from fault_responder.resume.checkpoints import Checkpoint, CheckpointSearch, SkippedFolder
from fault_responder.resume.config import (
    EVIDENCE_ITEMS,
    MAX_BACKOFF_SECONDS,
    Mode,
    NoCheckpointPolicy,
    ResumeConfig,
    _Payload,
)
from fault_responder.resume.fault import Fault
from fault_responder.resume.jobs import Job


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
    """The digest of the task ARNs it replaced (jobs.tasks_digest)."""
    # What the recovery report reads (fault_responder.resume.recovery); absent on attempts recorded before it.
    fault_at: datetime | None = None
    """When the fault (or the drain) that made the move began."""
    cause: str | None = None
    """What made the move, as people name it: "XID 79", "DRAINING"."""
    training_ended_at: datetime | None = None
    """When the job stopped training usefully (recovery.training_ended): the fault, its stop, or its answer."""
    work_lost_seconds: float | None = None
    """Trained between the checkpoint's save and that end: what the move throws away."""
    checkpoint_now: str | None = None
    """How the move's checkpoint-now request ended (MoveAsk), when one was made."""
    running_at: datetime | None = None
    """When every task of the attempt was seen RUNNING: the job trains again."""
    spare: bool | None = None
    """Whether the attempt ran on warm spares it claimed (resume.spares); None before it ran."""


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
    checkpoint_now: MoveCheckpoint | None = None
    """The move's request for a checkpoint now, once RequestCheckpoint has run (None before, and in dry-run)."""


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
