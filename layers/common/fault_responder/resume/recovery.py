"""The recovery report: per training job, the share of a period it spent training (its effective training time
ratio) and what it lost, by cause (docs/auto-resume.md#the-recovery-report).

A job loses two things at a fault: the time it does not train (from the end of its training to every task of its
new attempt RUNNING), and the work it trained since the checkpoint it resumes from (from that save to the end of its
training). Its training ends at the fault; for a job that trains on after it (a RESTART_APP XID, a drain), at its
stop; for one that saved on the move's request and held, at that save. The
resume ledger records both on each attempt; a fault's attempts share its `fault_key`, so a fault that took three
attempts costs its time once, until the attempt that ran. A fault whose job does not train again by the end of
the period (a give-up, or still waiting) costs the rest of the period.

The ratio assumes the job was meant to train the whole period: pass `--since` no earlier than its start. Pure: no
I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from fault_responder.resume.budget import AttemptOutcome, Ledger, LedgerAttempt
from fault_responder.resume.checkpoints import Checkpoint
from fault_responder.resume.fault import PLANNED_DRAIN, PLANNED_MOVE, Fault

MAX_FAULTS_SHOWN = 20
"""Faults listed per job (the newest); the totals count them all."""


TRAINS_ON = frozenset({"xid_restart_app", PLANNED_DRAIN, PLANNED_MOVE})
"""Fault classes after which the job goes on training until it is stopped (NVIDIA: restart the application; a
drain stops nothing): what it trains after its checkpoint until the stop is lost, not only until the fault."""


def training_ended(
    checkpoint: Checkpoint | None, fault: Fault, *, stopped_at: datetime | None = None, answered: str | None = None
) -> datetime:
    """When the job stopped training usefully: at the fault; for a job that trains on after it (TRAINS_ON), at its
    stop (`stopped_at`, when known); for a job that saved on the move's own request (`answered`) and held there,
    at that save."""
    if checkpoint is not None and checkpoint.saved is not None and answered and checkpoint.answers == answered:
        return checkpoint.saved
    if stopped_at is not None and fault.fault_class in TRAINS_ON:
        return stopped_at
    return fault.impaired_at


def work_lost(
    checkpoint: Checkpoint | None, fault: Fault, *, stopped_at: datetime | None = None, answered: str | None = None
) -> timedelta | None:
    """What a move throws away: trained between the checkpoint's save (its best time: Checkpoint.saved) and the end
    of training (training_ended). None without a checkpoint's time."""
    if checkpoint is None or checkpoint.saved is None:
        return None
    ended = training_ended(checkpoint, fault, stopped_at=stopped_at, answered=answered)
    return max(ended - checkpoint.saved, timedelta(0))


@dataclass(frozen=True, slots=True)
class StepsLost:
    """The steps a move threw away: trained after `after_step` (the checkpoint it resumes from) until the end of
    training. The responder sees no step of a job but its checkpoints', so `steps` is an estimate: the work lost
    (work_lost) at the pace of the job's checkpoints, `pace_steps` in `pace_time` between an earlier complete
    checkpoint and this one; None when they show no pace (no newer checkpoint, or both of one S3 second).

    How close it is depends on the times it rests on: `saved_to_the_ms` when the save's time is the manifest's own
    (Checkpoint.saved_at), not S3's second; `told_to_stop` when training ends at ECS's time of the stop (stoppingAt),
    not at the relaunch that followed it."""

    after_step: int
    trained: timedelta
    steps: int | None
    pace_steps: int | None = None
    pace_time: timedelta | None = None
    saved_to_the_ms: bool = False
    told_to_stop: bool = False


def steps_lost(
    checkpoint: Checkpoint | None,
    fault: Fault,
    *,
    earlier_step: int | None,
    earlier_at: datetime | None,
    stopped_at: datetime | None = None,
    answered: str | None = None,
    told_to_stop: bool = False,
) -> StepsLost | None:
    """The steps lost resuming from `checkpoint`, counted at the pace between it and an earlier complete checkpoint
    of the job (`earlier_step`, saved at `earlier_at`); None without the checkpoint's time. `told_to_stop`: whether
    `stopped_at` is ECS's time of the stop."""
    lost = work_lost(checkpoint, fault, stopped_at=stopped_at, answered=answered)
    if checkpoint is None or checkpoint.saved is None or lost is None:
        return None
    unknown = StepsLost(
        checkpoint.step, lost, None, saved_to_the_ms=checkpoint.saved_at is not None, told_to_stop=told_to_stop
    )
    if earlier_step is None or earlier_at is None:
        return unknown
    pace_steps, pace_time = checkpoint.step - earlier_step, checkpoint.saved - earlier_at
    if pace_steps <= 0 or pace_time <= timedelta(0):
        return unknown
    steps = round(pace_steps * (lost / pace_time))
    return replace(unknown, steps=steps, pace_steps=pace_steps, pace_time=pace_time)


@dataclass(frozen=True, slots=True)
class FaultCost:
    """One fault of a job within the period, and what it cost."""

    fault_key: str
    cause: str
    fault_at: datetime
    running_at: datetime | None
    """When the job trained again; None when it did not within the period."""
    down_seconds: float
    work_lost_seconds: float
    attempts: int
    checkpoint_now: str | None
    spare: bool | None = None
    """Whether the attempt that ran was placed on warm spares (None: not known, or it did not run)."""

    @property
    def lost_seconds(self) -> float:
        return self.down_seconds + self.work_lost_seconds


@dataclass(frozen=True, slots=True)
class JobRecovery:
    job_key: str
    period_seconds: float
    faults: tuple[FaultCost, ...]
    """The newest MAX_FAULTS_SHOWN; `fault_count` says how many there were."""
    fault_count: int
    down_seconds: float
    work_lost_seconds: float
    by_cause: dict[str, float]
    """Seconds lost (down and work) per cause, largest first."""
    unmeasured_attempts: int
    """Attempts in the period recorded without the figures (before the report existed): not counted."""

    @property
    def on_spares(self) -> int:
        """Of the faults shown, those after which the job ran again on warm spares."""
        return sum(1 for fault in self.faults if fault.spare)

    @property
    def training_ratio(self) -> float:
        """The effective training time ratio: the share of the period the job trained, never below 0."""
        if self.period_seconds <= 0:
            return 1.0
        return max(0.0, self.period_seconds - self.down_seconds - self.work_lost_seconds) / self.period_seconds


def recovery_report(ledgers: Iterable[Ledger], since: datetime, until: datetime) -> list[JobRecovery]:
    """Each job with a fault in [since, until), the lowest training ratio first."""
    if until <= since:
        raise ValueError("the period must end after it begins")
    jobs = [job for ledger in ledgers if (job := _job(ledger, since, until)) is not None]
    return sorted(jobs, key=lambda job: (job.training_ratio, job.job_key))


def _job(ledger: Ledger, since: datetime, until: datetime) -> JobRecovery | None:
    by_fault: dict[str, list[LedgerAttempt]] = {}
    unmeasured = 0
    for attempt in ledger.attempts:
        if attempt.fault_at is None:
            unmeasured += since <= attempt.started_at < until
            continue
        if since <= attempt.fault_at < until:
            by_fault.setdefault(attempt.fault_key, []).append(attempt)
    if not by_fault and not unmeasured:
        return None
    costs = sorted((_cost(key, attempts, until) for key, attempts in by_fault.items()), key=lambda c: c.fault_at)
    by_cause: dict[str, float] = {}
    for cost in costs:
        by_cause[cost.cause] = by_cause.get(cost.cause, 0.0) + cost.lost_seconds
    return JobRecovery(
        job_key=ledger.job_key,
        period_seconds=(until - since).total_seconds(),
        faults=tuple(costs[-MAX_FAULTS_SHOWN:]),
        fault_count=len(costs),
        down_seconds=sum(cost.down_seconds for cost in costs),
        work_lost_seconds=sum(cost.work_lost_seconds for cost in costs),
        by_cause=dict(sorted(by_cause.items(), key=lambda item: (-item[1], item[0]))),
        unmeasured_attempts=unmeasured,
    )


def _cost(fault_key: str, attempts: list[LedgerAttempt], until: datetime) -> FaultCost:
    fault_at = min(attempt.fault_at for attempt in attempts if attempt.fault_at is not None)
    ran = [a for a in attempts if a.outcome == AttemptOutcome.RUNNING and a.running_at is not None]
    last = max(ran, key=lambda a: a.number) if ran else attempts[-1]
    running_at = min(last.running_at, until) if ran and last.running_at is not None else None
    down = ((running_at or until) - max(last.training_ended_at or fault_at, fault_at)).total_seconds()
    return FaultCost(
        fault_key=fault_key,
        cause=last.cause or "unknown",
        fault_at=fault_at,
        running_at=running_at,
        down_seconds=max(down, 0.0),
        work_lost_seconds=last.work_lost_seconds or 0.0,
        attempts=len(attempts),
        checkpoint_now=last.checkpoint_now,
        spare=last.spare if ran else None,
    )
