"""`python -m sandbox` as users run it: help, clear errors for bad input, and black-box runs that
write a report."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sandbox.__main__ import main
from sandbox.errors import SandboxError
from sandbox.lambda_runtime import find_runtime_interpreter
from tests.conftest import checkout_lock
from tests.sandbox.conftest import AWS_DOCS_EVENTS, FIXTURES, REPO_ROOT, TEMPLATE, TOY_STACK, toy_event

XID46 = AWS_DOCS_EVENTS / "health-change-accelerated-compute-xid46.json"
INSTANCE_ACTIVE = AWS_DOCS_EVENTS / "instance-state-change-active.json"


def run_sandbox(*args: str | Path, faults: str | None = None) -> subprocess.CompletedProcess[str]:
    environment = {name: value for name, value in os.environ.items() if name != "SANDBOX_FAULTS"}
    if faults is not None:
        environment["SANDBOX_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, "-m", "sandbox", *map(str, args)],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def read_report(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))


# --- Help and bad input (in process: nothing starts before the input is checked) -------------------


def test_help_names_both_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])

    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert "replay" in out
    assert "invoke" in out
    assert "SANDBOX_FAULTS" in out


@pytest.mark.parametrize("command", ["replay", "invoke"])
def test_each_command_has_its_own_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])

    out = capsys.readouterr().out
    assert "--parameter-overrides" in out
    assert "--report" in out


def test_a_missing_event_file_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "nope.json")]) == 2

    assert "cannot read event file" in capsys.readouterr().err


def test_invalid_json_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('{"id": ')

    assert main(["replay", str(broken)]) == 2

    assert f"{broken} is not valid JSON" in capsys.readouterr().err


def test_an_unknown_parameter_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(XID46), "--template", str(TEMPLATE), "--parameter-overrides", "Nope=1"]) == 2

    assert "unknown parameter Nope" in capsys.readouterr().err


def test_invalid_faults_are_a_clear_error(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SANDBOX_FAULTS", '{"slack": [429')

    assert main(["replay", str(XID46), "--template", str(TEMPLATE)]) == 2

    assert "SANDBOX_FAULTS is not valid JSON" in capsys.readouterr().err


def test_invoke_without_a_build_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["invoke", "AlertRouterFunction", str(XID46), "--build-dir", str(tmp_path)]) == 2

    assert "no built template" in capsys.readouterr().err


# --- Black box: replay on the real template ---------------------------------------------------------


def test_replay_writes_a_report_of_the_whole_run(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"

    completed = run_sandbox("replay", XID46, INSTANCE_ACTIVE, "--report", report_path, "--quiet")

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == ""
    report = read_report(report_path)
    assert set(report) >= {
        "events",
        "invocations",
        "requests",
        "dlq",
        "errors",
        "incidents",
        "slack",
        "pagerduty",
        "skipped_resources",
    }
    health, active = report["events"]
    assert (health["id"], health["file"], health["detail_type"]) == (
        "EXAMPLE-46c3-a48a-1bef-EXAMPLE72f3c",
        str(XID46),
        "ECS Container Instance Health Change",
    )
    assert health["matched_rules"] == ["HealthChangeRule"]
    [target] = health["targets"]
    assert (target["rule"], target["target_id"], target["type"], target["delivered"]) == (
        "HealthChangeRule",
        "alert-queue",
        "sqs",
        True,
    )
    assert target["arn"].startswith("arn:aws:sqs:us-east-1:123456789012:gpu-fault-responder-AlertQueue-")
    assert (active["matched_rules"], active["targets"]) == ([], [])
    [invocation] = report["invocations"]
    assert (invocation["function"], invocation["batch_size"]) == ("AlertRouterFunction", 1)
    assert isinstance(invocation["failures"], list)
    assert all({"service", "method", "path", "status", "body", "fault"} <= set(r) for r in report["requests"])
    assert isinstance(report["incidents"], list)
    assert isinstance(report["slack"], dict)
    assert isinstance(report["pagerduty"], list)
    conditional = [s for s in report["skipped_resources"] if s["reason"].startswith("Condition ")]
    not_emulated = [s for s in report["skipped_resources"] if s not in conditional]
    assert {(s["logical_id"], s["type"]) for s in not_emulated} == {
        ("CommonLayer", "AWS::Serverless::LayerVersion"),
        ("AlertQueuePolicy", "AWS::SQS::QueuePolicy"),
        ("AlertRouterRole", "AWS::IAM::Role"),
        ("AlertRouterLogsPolicy", "AWS::IAM::Policy"),
        ("AlertRouterLogGroup", "AWS::Logs::LogGroup"),
        ("AlertDLQAlarm", "AWS::CloudWatch::Alarm"),
        ("RuleTargetDLQAlarm", "AWS::CloudWatch::Alarm"),
        # Not created: the sandbox's functions get an empty DASHBOARD_URL, so their Slack roots link to none.
        ("Dashboard", "AWS::CloudWatch::Dashboard"),
        # The alarms themselves are not evaluated: their state changes are replayed from events/alarm/.
        ("GpuTemperatureAlarm", "AWS::CloudWatch::Alarm"),
        ("GpuRestartAppXidAlarm", "AWS::CloudWatch::Alarm"),
        ("RouterErrorsAlarm", "AWS::CloudWatch::Alarm"),
        ("RouterThrottlesAlarm", "AWS::CloudWatch::Alarm"),
        ("AlertQueueAgeAlarm", "AWS::CloudWatch::Alarm"),
        ("NotificationsFailedAlarm", "AWS::CloudWatch::Alarm"),
        ("ClosurePendingAlarm", "AWS::CloudWatch::Alarm"),
        ("OwnHealthAlarmTopic", "AWS::SNS::Topic"),
        ("OwnHealthAlarmTopicPolicy", "AWS::SNS::TopicPolicy"),
        ("SweepRole", "AWS::IAM::Role"),
        ("SweepLogsPolicy", "AWS::IAM::Policy"),
        ("SweepLogGroup", "AWS::Logs::LogGroup"),
        ("ReconcileRole", "AWS::IAM::Role"),
        ("ReconcileLogsPolicy", "AWS::IAM::Policy"),
        ("ReconcileLogGroup", "AWS::Logs::LogGroup"),
        ("SlackActionsRole", "AWS::IAM::Role"),
        ("SlackActionsLogsPolicy", "AWS::IAM::Policy"),
        ("SlackActionsLogGroup", "AWS::Logs::LogGroup"),
        ("PagerDutyWebhookRole", "AWS::IAM::Role"),
        ("PagerDutyWebhookLogsPolicy", "AWS::IAM::Policy"),
        ("PagerDutyWebhookLogGroup", "AWS::Logs::LogGroup"),
        # Schedules do not fire by themselves in the sandbox: a scenario step runs the sweep or the reconciliation.
        ("SweepFunction.Events.EveryMinute", "Schedule event"),
        ("ReconcileFunction.Events.Schedule", "Schedule event"),
    }
    # Training auto-resume is off by default (TrainingCapacityProviders empty): its resources are not created.
    assert ("ResumeTrainingStateMachine", "Condition ResumeEnabled is false") in {
        (s["logical_id"], s["reason"]) for s in conditional
    }


def test_replay_with_faults_records_them_and_still_completes(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"

    completed = run_sandbox("replay", XID46, "--report", report_path, faults='{"slack": [500], "pagerduty": [500]}')

    assert completed.returncode == 0, completed.stderr
    report = read_report(report_path)
    for service in ("slack", "pagerduty"):
        first = next((r for r in report["requests"] if r["service"] == service), None)
        if first is not None:  # whether and where the router notifies is the router's business
            assert (first["status"], first["fault"]) == (500, True)
    assert any(r["fault"] for r in report["requests"])
    assert "What on-call saw" in completed.stdout
    assert "injected fault" in completed.stdout


def test_replay_honours_the_template_and_parameter_options(tmp_path: Path) -> None:
    events = tmp_path / "burst.json"
    events.write_text(json.dumps([toy_event(n=1), toy_event(fail=True)]))
    report_path = tmp_path / "report.json"

    completed = run_sandbox(
        "replay", events, "--template", TOY_STACK, "--parameter-overrides", "MaxReceiveCount=2", "--report", report_path
    )

    assert completed.returncode == 0, completed.stderr
    report = read_report(report_path)
    assert [len(invocation["message_ids"]) for invocation in report["invocations"]] == [2, 1]
    assert [letter["queue"] for letter in report["dlq"]] == ["ToyDLQ"]


# --- Black box: invoke on a build ------------------------------------------------------------------


@pytest.fixture
def toy_build(tmp_path: Path) -> Path:
    """The toy stack laid out like `sam build` output: a template beside one directory per function."""
    try:
        find_runtime_interpreter("python3.13")
    except SandboxError as missing:
        pytest.skip(str(missing))
    build = tmp_path / "build"
    shutil.copytree(FIXTURES / "toy_function", build / "toy_function")
    shutil.copy(TOY_STACK, build / "template.yaml")
    return build


def test_invoke_runs_a_built_function_in_its_runtime(toy_build: Path, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(toy_event(n=1)))
    report_path = tmp_path / "report.json"

    completed = run_sandbox("invoke", "ToyFunction", event, "--build-dir", toy_build, "--report", report_path)

    assert completed.returncode == 0, completed.stderr
    assert "wrapped in 1 SQS record(s) from ToyQueue" in completed.stdout
    report = read_report(report_path)
    [invocation] = report["invocations"]
    assert invocation["result"] == {"batchItemFailures": []}
    assert json.loads(invocation["logs"][0])["environ"]["AWS_EXECUTION_ENV"] == "AWS_Lambda_python3.13"
    assert report["events"][0]["matched_rules"] == ["ToyRule"]


def test_invoke_exits_non_zero_when_the_function_raises(toy_build: Path, tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps(toy_event(**{"raise": True})))

    completed = run_sandbox("invoke", "ToyFunction", event, "--build-dir", toy_build, "--quiet")

    assert completed.returncode == 1


# --- make demo, as README.md shows it ---------------------------------------------------------------


def test_make_demo_replays_the_incident_as_the_readme_says() -> None:
    # Given the repository as cloned (the demo writes its report into it)
    report_path = REPO_ROOT / "reports" / "demo.json"

    # When README.md's first command runs (alone: the documented commands run it too, into the same report)
    with checkout_lock():
        report_path.unlink(missing_ok=True)
        completed = subprocess.run(
            shlex.split("make demo"), cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, check=False
        )
        report = read_report(report_path) if completed.returncode == 0 else None

    # Then it replays the XID 79 incident, from IMPAIRED to the instance gone, and prints what on-call saw: the
    # Slack thread and the PagerDuty trigger and resolve; and it writes reports/demo.json
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert "What on-call saw" in completed.stdout
    # The incident comes first: its first event within the output's first 10 lines (the set-up is summed up above it)
    first_event = next(n for n, line in enumerate(completed.stdout.splitlines(), 1) if line.startswith("== 1. "))
    assert first_event <= 10, "\n".join(completed.stdout.splitlines()[:first_event])
    assert report is not None
    files = sorted((REPO_ROOT / "events" / "incident-xid79").glob("*.json"))
    assert [Path(event["file"]).resolve() for event in report["events"]] == files
    [channel] = report["slack"].values()
    root, *rest = channel
    assert rest and all(message["thread_ts"] == root["ts"] for message in rest)
    [alert] = report["pagerduty"]
    actions = [entry["action"] for entry in alert["log"]]
    assert (actions[0], actions[-1], alert["status"]) == ("trigger", "resolve", "resolved")
