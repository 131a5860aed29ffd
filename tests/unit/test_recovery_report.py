"""The recovery report (fault_responder.resume.recovery, `fault-responder recovery`): per job, the share of a period
it trained and what it lost, by cause, from the resume ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fault_responder.cli.main import main
from fault_responder.resume.budget import AttemptOutcome, Ledger, LedgerAttempt
from fault_responder.resume.recovery import MAX_FAULTS_SHOWN, recovery_report

SINCE = datetime(2026, 12, 1, tzinfo=UTC)
UNTIL = SINCE + timedelta(days=1)


def at(minutes: float) -> datetime:
    return SINCE + timedelta(minutes=minutes)


def attempt(
    number: int,
    fault: str,
    fault_at: datetime | None,
    *,
    cause: str = "XID 79",
    ended: datetime | None = None,
    running: datetime | None = None,
    lost: float | None = 0.0,
    checkpoint_now: str | None = None,
) -> LedgerAttempt:
    return LedgerAttempt(
        number=number,
        step=100 * number,
        checkpoint_uri=None,
        fault_key=fault,
        execution="e",
        started_at=fault_at or at(0),
        outcome=AttemptOutcome.RUNNING if running else AttemptOutcome.FAILED,
        fault_at=fault_at,
        cause=cause if fault_at else None,
        training_ended_at=ended,
        work_lost_seconds=lost,
        checkpoint_now=checkpoint_now,
        running_at=running,
    )


def test_each_fault_costs_its_time_until_training_again_once_and_its_lost_work() -> None:
    # Given a job with an XID 79 at 01:00 that took two attempts (training again at 01:10, 20 minutes of work lost),
    # and a drain at 10:00 whose job saved on request at 10:01 and held (training again at 10:05, nothing lost)
    ledger = Ledger(
        job_key="training/llm-7b",
        attempts=(
            attempt(1, "f1", at(60), lost=1200.0),
            attempt(2, "f1", at(60), running=at(70), lost=1200.0),
            attempt(3, "d1", at(600), cause="DRAINING", ended=at(601), running=at(605), checkpoint_now="answered"),
        ),
    )

    # When the day is reported
    [job] = recovery_report([ledger], SINCE, UNTIL)

    # Then the XID costs 10 min down and 20 min of work; the drain 4 min down (from the save it held at)
    assert job.fault_count == 2 and job.unmeasured_attempts == 0
    assert [(f.cause, f.down_seconds, f.work_lost_seconds, f.attempts) for f in job.faults] == [
        ("XID 79", 600.0, 1200.0, 2),
        ("DRAINING", 240.0, 0.0, 1),
    ]
    assert job.by_cause == {"XID 79": 1800.0, "DRAINING": 240.0}
    assert job.training_ratio == pytest.approx(1 - 2040 / 86400)


def test_a_job_not_training_again_loses_the_rest_of_the_period_and_old_attempts_are_said_not_counted() -> None:
    # Given a give-up at 20:00 (no attempt ran), and an attempt recorded before the report's figures existed
    ledger = Ledger(
        job_key="training/bert",
        attempts=(attempt(1, "old", None), attempt(2, "f2", at(1200), running=None, lost=None)),
    )

    # When the day is reported
    [job] = recovery_report([ledger], SINCE, UNTIL)

    # Then the fault costs the 4 hours left, and the old attempt is counted apart
    [fault] = job.faults
    assert fault.running_at is None and fault.down_seconds == 4 * 3600 and fault.work_lost_seconds == 0
    assert job.unmeasured_attempts == 1
    assert job.training_ratio == pytest.approx(20 / 24)


def test_faults_outside_the_period_are_not_counted_and_jobs_come_worst_first() -> None:
    # Given two jobs, one with a fault the day before, one with a fault today
    before = Ledger(job_key="a/yesterday", attempts=(attempt(1, "f", SINCE - timedelta(hours=2), running=at(-60)),))
    today = Ledger(job_key="b/today", attempts=(attempt(1, "f", at(0), running=at(30)),))
    worse = Ledger(job_key="c/worse", attempts=(attempt(1, "f", at(0), running=at(90)),))

    # When the day is reported
    jobs = recovery_report([before, today, worse], SINCE, UNTIL)

    # Then the earlier fault is not in it, and the job that lost most is first
    assert [job.job_key for job in jobs] == ["c/worse", "b/today"]


def test_a_job_with_many_faults_lists_the_newest_and_counts_them_all() -> None:
    # Given a job that faulted every 10 minutes
    attempts = tuple(attempt(n, f"f{n}", at(10 * n), running=at(10 * n + 1)) for n in range(1, 51))

    # When reported
    [job] = recovery_report([Ledger(job_key="t/flaky", attempts=attempts)], SINCE, UNTIL)

    # Then at most MAX_FAULTS_SHOWN are listed, the newest, and the totals count all 50
    assert job.fault_count == 50 and len(job.faults) == MAX_FAULTS_SHOWN
    assert job.faults[-1].fault_key == "f50" and job.down_seconds == 50 * 60


def test_the_command_reads_a_sandbox_report_and_prints_a_table_or_json(tmp_path: Path, capsys) -> None:
    # Given a sandbox report with one job's ledger
    ledger = Ledger(job_key="training/llm-7b", attempts=(attempt(1, "f1", at(60), running=at(70), lost=300.0),))
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"ledgers": [ledger.model_dump(mode="json")]}), encoding="utf-8")
    period = ["--from", SINCE.isoformat(), "--until", UNTIL.isoformat()]

    # When the command reads it, as a table and as JSON, and for another cluster
    assert main(["recovery", "--report", str(report), *period]) == 0
    table = capsys.readouterr().out
    assert main(["recovery", "--report", str(report), *period, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert main(["recovery", "--report", str(report), *period, "--cluster", "other"]) == 0
    other = capsys.readouterr().out

    # Then the table has the job's ratio, its losses and the fault; the JSON the same figures
    [row] = [line.split() for line in table.splitlines() if line.startswith("training/llm-7b ")]
    assert row == ["training/llm-7b", "99.0%", "10m", "00s", "5m", "00s", "1", "XID", "79", "15m", "00s"]
    assert "XID 79: training again after 10m 00s, 5m 00s of work lost, 1 attempt(s)" in table
    [job] = document["jobs"]
    assert job["training_ratio"] == pytest.approx(1 - 900 / 86400, abs=1e-4)
    assert job["lost_by_cause_seconds"] == {"XID 79": 900.0}
    assert "No job faulted or was moved in the period." in other


def test_a_period_that_ends_before_it_begins_is_refused(tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.json"
    report.write_text("{}", encoding="utf-8")
    assert main(["recovery", "--report", str(report), "--from", UNTIL.isoformat(), "--until", SINCE.isoformat()]) == 2
    assert "the period must end after it begins" in capsys.readouterr().err


def test_a_member_accounts_job_is_of_its_cluster_by_name_in_a_sandbox_report(tmp_path: Path, capsys) -> None:
    # Given a report with a job of the stack's own cluster "training" and one of a member account's (its key begins
    # with that account and Region), and another cluster's
    ledgers = [
        Ledger(job_key=key, attempts=(attempt(1, "f1", at(60), running=at(70)),))
        for key in ("training/llm-7b", "210987654321/eu-west-1/training/llm-70b", "inference/serve")
    ]
    report = tmp_path / "report.json"
    report.write_text(json.dumps({"ledgers": [ledger.model_dump(mode="json") for ledger in ledgers]}), encoding="utf-8")

    # When the report is asked for the cluster "training"
    period = ["--from", SINCE.isoformat(), "--until", UNTIL.isoformat()]
    assert main(["recovery", "--report", str(report), *period, "--cluster", "training", "--json"]) == 0

    # Then both accounts' jobs of that cluster are in it, and the other cluster's is not
    jobs = {job["job"] for job in json.loads(capsys.readouterr().out)["jobs"]}
    assert jobs == {"training/llm-7b", "210987654321/eu-west-1/training/llm-70b"}
