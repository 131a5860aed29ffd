"""`fault-responder recovery`: per training job, the share of a period it trained (its effective training time
ratio) and what it lost, by cause, from the resume ledger (fault_responder.resume.recovery;
docs/auto-resume.md#the-recovery-report)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from fault_responder.adapters.resume_store import of_cluster
from fault_responder.cli.targets import add_records_target
from fault_responder.core.timefmt import format_duration, iso_utc
from fault_responder.resume.budget import Ledger
from fault_responder.resume.recovery import JobRecovery

DEFAULT_PERIOD = timedelta(days=7)


def add_command(
    commands: Any, duration: Callable[[str], timedelta], moment: Callable[[str], datetime], run: Callable[..., int]
) -> None:
    report = commands.add_parser(
        "recovery",
        help="per training job: the share of a period it trained, and what faults and moves cost it, by cause",
        description=(
            "From the resume ledger: for each job with a fault or a move in the period, the time from each fault to "
            "training again, the work lost (trained after the checkpoint it resumed from), the effective training "
            "time ratio (the share of the period left for training), and the losses by cause. The ratio assumes the "
            "job was meant to train the whole period: start it no earlier than the job."
        ),
    )
    add_records_target(report, stack_help="a deployed stack: its IncidentsTable is read")
    period = report.add_mutually_exclusive_group()
    period.add_argument("--since", type=duration, metavar="DURATION", help="the period up to now: 1d, 7d (default), 4w")
    period.add_argument("--from", dest="start", type=moment, metavar="ISO8601", help="the period's start")
    report.add_argument("--until", type=moment, metavar="ISO8601", help="the period's end (default: now)")
    report.add_argument("--cluster", help="only this cluster's jobs (by name)")
    report.add_argument("--json", action="store_true", help="JSON instead of a table")
    report.set_defaults(run=run)


def period(args: argparse.Namespace, now: datetime) -> tuple[datetime, datetime]:
    until = args.until or now
    since = args.start or until - (args.since or DEFAULT_PERIOD)
    return since, until


def report_ledgers(path: Path, cluster: str | None) -> list[Ledger]:
    """The ledgers a sandbox report carries (its `ledgers` section)."""
    document = json.loads(path.read_text(encoding="utf-8"))
    ledgers = [Ledger.model_validate(item) for item in document.get("ledgers") or []]
    return [ledger for ledger in ledgers if cluster is None or of_cluster(ledger.job_key, cluster)]


def render(jobs: Iterable[JobRecovery], since: datetime, until: datetime, *, as_json: bool) -> str:
    jobs = list(jobs)
    if as_json:
        document = {"since": iso_utc(since), "until": iso_utc(until), "jobs": [_as_json(job) for job in jobs]}
        return json.dumps(document, indent=2) + "\n"
    head = f"Training recovery {iso_utc(since)} to {iso_utc(until)} ({format_duration(until - since)})"
    if not jobs:
        return f"{head}\nNo job faulted or was moved in the period.\n"
    rows = [("JOB", "TRAINING", "DOWN", "WORK LOST", "FAULTS", "LOST BY CAUSE")]
    for job in jobs:
        causes = ", ".join(f"{cause} {_seconds(seconds)}" for cause, seconds in job.by_cause.items())
        rows.append(
            (
                job.job_key,
                f"{job.training_ratio:.1%}",
                _seconds(job.down_seconds),
                _seconds(job.work_lost_seconds),
                str(job.fault_count),
                causes or "-",
            )
        )
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    table = ("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows)
    lines = [head, *table]
    for job in jobs:
        lines.append(f"\n{job.job_key}:")
        for fault in job.faults:
            back = f"training again after {_seconds(fault.down_seconds)}" if fault.running_at else "not training again"
            asked = f", checkpoint now {fault.checkpoint_now}" if fault.checkpoint_now else ""
            spare = (
                ""
                if fault.spare is None or not fault.running_at
                else (", on a warm spare" if fault.spare else ", no spare")
            )
            lines.append(
                f"  {iso_utc(fault.fault_at)} {fault.cause}: {back}{spare}, {_seconds(fault.work_lost_seconds)} of "
                f"work lost, {fault.attempts} attempt(s){asked}"
            )
        if job.fault_count > len(job.faults):
            lines.append(f"  ... and {job.fault_count - len(job.faults)} earlier fault(s), counted above")
        if job.unmeasured_attempts:
            lines.append(f"  ({job.unmeasured_attempts} attempt(s) recorded without the figures: not counted)")
    return "\n".join(lines) + "\n"


def _as_json(job: JobRecovery) -> dict[str, Any]:
    return {
        "job": job.job_key,
        "training_ratio": round(job.training_ratio, 4),
        "period_seconds": job.period_seconds,
        "down_seconds": round(job.down_seconds, 1),
        "work_lost_seconds": round(job.work_lost_seconds, 1),
        "fault_count": job.fault_count,
        "lost_by_cause_seconds": {cause: round(seconds, 1) for cause, seconds in job.by_cause.items()},
        "unmeasured_attempts": job.unmeasured_attempts,
        "faults": [
            {
                "cause": fault.cause,
                "fault_at": iso_utc(fault.fault_at),
                "training_again_at": iso_utc(fault.running_at) if fault.running_at else None,
                "down_seconds": round(fault.down_seconds, 1),
                "work_lost_seconds": round(fault.work_lost_seconds, 1),
                "attempts": fault.attempts,
                "checkpoint_now": fault.checkpoint_now,
                "spare_used": fault.spare,
            }
            for fault in job.faults
        ],
    }


def _seconds(seconds: float) -> str:
    return format_duration(timedelta(seconds=round(seconds)))
