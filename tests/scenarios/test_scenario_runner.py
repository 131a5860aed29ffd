"""The scenario runner's machinery, against a toy stack of its own (tests/scenarios/fixtures): seeding,
events with overrides and concurrency, the state machine path with Lambda tasks run by handlers in process,
actions on the published approval command, the timeout, the report's shape, and the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from moto.awslambda.exceptions import UnknownFunctionException

from sandbox import run as run_module
from sandbox.__main__ import main
from sandbox.aws import AwsClients
from sandbox.errors import SandboxError
from sandbox.session import Sandbox
from sandbox.statemachine import moto_settings_restored
from sandbox.stepfunctions import LambdaDispatch
from sandbox.template import load_template
from sandbox.world import deep_merge
from tests.scenarios.conftest import FIXTURES, REPO_ROOT, TOY_RESUME, failed, run

pytestmark = pytest.mark.sandbox

XID79 = REPO_ROOT / "events" / "incident-xid79" / "01-impaired-xid79.json"


def toy_scenario(tmp_path: Path, changes: dict[str, Any] | None = None, *, name: str = "toy") -> Path:
    """The toy resume scenario, changed (deep-merged), written where its paths still resolve."""
    document = yaml.safe_load(TOY_RESUME.read_text())
    document["template"] = str(FIXTURES / "toy-workflow.yaml")
    document["events"][0]["file"] = str(XID79)
    document = deep_merge(document, changes or {})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


# --- A whole run -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_run() -> Any:
    return run(TOY_RESUME)


def test_the_toy_scenario_holds(toy_run: Any) -> None:
    assert toy_run.passed, "\n".join(failed(toy_run))


def test_the_report_adds_the_executions_with_their_history(toy_run: Any) -> None:
    [execution] = toy_run.report["executions"]

    assert execution["rule"] == "ResumeRule"
    assert execution["status"] == "SUCCEEDED"
    assert (
        execution["input"]["detail"]["ec2InstanceId"]
        == toy_run.report["world"]["instances"]["gpu-a"]["ec2_instance_id"]
    )
    assert execution["output"]["outcome"] == "resumed"
    history = execution["history"]
    assert history["states_entered"][:3] == ["Claim", "Claimed?", "Config"]
    assert history["lambda_invocations"] == len(toy_run.report["workflow_invocations"]) == 3
    assert history["state_transitions"] == len(history["states_entered"])
    assert [task["state"] for task in history["lambda_tasks"]] == ["Claim", "Relaunch", "Check"]
    # The Wait state is shortened by the stack parameter (PollSeconds: 1), and measured.
    assert 0.9 <= execution["wait_state_seconds"] <= 1.5
    assert 0 < execution["active_seconds"] < execution["wall_seconds"]


def test_the_report_adds_every_task_and_instance_at_the_end(toy_run: Any) -> None:
    ecs = toy_run.report["ecs"]
    world = toy_run.report["world"]

    assert [(i["name"], i["status"], i["capacity_provider"]) for i in ecs["instances"]] == [
        ("gpu-a", "DRAINING", "gpu-training"),
        ("gpu-b", "ACTIVE", "gpu-training"),
    ]
    seeded, started = ecs["tasks"]
    assert (seeded["name"], seeded["origin"], seeded["instance"]) == ("rank-0", "seeded", "gpu-a")
    assert seeded["arn"] == world["tasks"]["rank-0"]["arn"]
    assert seeded["tags"] == {
        "fault-responder:job-id": "llm-7b",
        "fault-responder:checkpoint-uri": "s3://ckpt/runs/llm-7b/",
    }
    assert seeded["environment"] == {"trainer": {"NODE_RANK": "0"}}
    assert seeded["capacity_provider"] == "gpu-training"
    assert (started["name"], started["origin"], started["job_id"], started["instance"]) == (
        None,
        "started",
        "llm-7b",
        "gpu-b",
    )
    assert started["ec2_instance_id"] == world["instances"]["gpu-b"]["ec2_instance_id"]
    assert started["environment"]["trainer"]["RESUME_FROM"] == "s3://ckpt/runs/llm-7b/step-000200/"
    [request] = ecs["run_task_requests"]
    assert request["placementConstraints"][0]["expression"] == (
        f"ec2InstanceId !in ['{world['instances']['gpu-a']['ec2_instance_id']}']"
    )


def test_checkpoints_are_written_by_the_training_helper(toy_run: Any) -> None:
    assert toy_run.report["world"]["checkpoints"] == {
        "s3://ckpt/runs/llm-7b/": ["s3://ckpt/runs/llm-7b/step-000100/", "s3://ckpt/runs/llm-7b/step-000200/"]
    }


def test_the_alert_pipeline_ran_on_the_same_event(toy_run: Any) -> None:
    [batch] = toy_run.report["invocations"]

    assert (batch["function"], batch["batch_size"], batch["error"]) == ("AlertFunction", 1, None)
    assert toy_run.report["events"][0]["matched_rules"] == ["HealthChangeRule", "ResumeRule"]
    assert [target["type"] for target in toy_run.report["events"][0]["targets"]] == ["sqs", "states"]


# --- Seeding ---------------------------------------------------------------------------------------


def test_the_world_is_seeded_as_written(tmp_path: Path) -> None:
    # Given a world with a Managed Instances provider, a DRAINING instance, a stopped task and raw objects
    path = toy_scenario(
        tmp_path,
        {
            "world": {
                "objects": [
                    {"uri": "s3://raw/a/step-000005/.metadata", "size": 3},
                    {"uri": "s3://raw/a/latest_checkpointed_iteration.txt", "body": "5"},
                    {"uri": "s3://raw/a/step-000005/_COMPLETE", "json": {"files": []}},
                ]
            },
            "events": [
                {"file": str(XID79), "instance": "gpu-b", "overrides": {"detail": {"capacityProviderName": "none"}}}
            ],
            "expect": [],
        },
    )
    document = yaml.safe_load(path.read_text())
    cluster = document["world"]["clusters"][0]
    cluster["capacity_providers"].append(
        {
            "name": "gpu-managed",
            "type": "MANAGED_INSTANCES",
            "auto_repair": "DISABLED",
            "instances": [{"name": "gpu-m", "status": "DRAINING"}],
        }
    )
    cluster["tasks"].append(
        {"name": "old", "task_definition": "trainer", "instance": "gpu-m", "last_status": "STOPPED"}
    )
    path.write_text(yaml.safe_dump(document))

    # When it runs (the event names no training provider: only the alert pipeline acts)
    result = run(path)

    # Then the instances, the tasks and the objects are there as written
    ecs = result.report["ecs"]
    assert {i["name"]: (i["status"], i["capacity_provider"]) for i in ecs["instances"]} == {
        "gpu-a": ("ACTIVE", "gpu-training"),
        "gpu-b": ("ACTIVE", "gpu-training"),
        "gpu-m": ("DRAINING", "gpu-managed"),
    }
    assert {t["name"]: (t["last_status"], t["capacity_provider"]) for t in ecs["tasks"]} == {
        "rank-0": ("RUNNING", "gpu-training"),
        "old": ("STOPPED", "gpu-managed"),
    }
    assert result.report["executions"] == []
    assert result.report["events"][0]["matched_rules"] == ["HealthChangeRule"]


def test_a_seeded_incomplete_checkpoint_has_its_files_but_no_manifest(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {
            "world": {
                "checkpoints": [{"uri": "s3://ckpt/other/", "steps": [7], "incomplete": [9], "files_per_step": 3}]
            },
            "expect": [],
        },
    )
    captured: dict[str, list[str]] = {}
    original = run_module.seed_world

    def seed_and_look(*args: Any) -> Any:
        world = original(*args)
        s3: Any = AwsClients(os.environ["AWS_ENDPOINT_URL"], "us-east-1").client("s3")
        captured["keys"] = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="other/")["Contents"]]
        return world

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_module, "seed_world", seed_and_look)
        run(path)

    assert captured["keys"] == [
        "other/step-000007/_COMPLETE",
        "other/step-000007/shard-00000.pt",
        "other/step-000007/shard-00001.pt",
        "other/step-000007/shard-00002.pt",
        "other/step-000009/shard-00000.pt",
        "other/step-000009/shard-00001.pt",
        "other/step-000009/shard-00002.pt",
    ]


# --- Events: concurrency and repeats ----------------------------------------------------------------


def test_two_triggers_at_once_start_two_executions_and_one_acts(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {
            "events": [{"file": str(XID79), "instance": "gpu-a", "concurrently": 2}],
            "expect": [
                {"select": "executions", "count": 2, "each": {"status": "SUCCEEDED"}},
                {
                    "select": "executions",
                    "where": {"history.states_entered": {"contains": "AlreadyHandled"}},
                    "count": 1,
                },
                {"select": "run_task_requests", "count": 1},
            ],
        },
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    assert len(result.report["events"]) == 2
    executions = result.report["executions"]
    last_start = max(datetime.fromisoformat(e["started_at"]) for e in executions)
    first_stop = min(datetime.fromisoformat(e["stopped_at"]) for e in executions)
    assert last_start < first_stop, "the two executions ran at the same time"


def test_a_repeated_event_waits_for_the_first_executions(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {
            "events": [{"file": str(XID79), "instance": "gpu-a", "repeat": 2, "overrides": {"id": "same-fault"}}],
            "expect": [
                {"select": "executions", "where": {"output.outcome": "resumed"}, "count": 1},
                {
                    "select": "executions",
                    "where": {"history.states_entered": {"contains": "AlreadyHandled"}},
                    "count": 1,
                },
            ],
        },
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    first, second = result.report["executions"]
    assert first["stopped_at"] <= second["started_at"]
    assert {event["id"] for event in result.report["events"]} == {"same-fault"}


# --- Actions and the timeout -----------------------------------------------------------------------


def test_approve_presses_the_posted_button_through_the_function_url_after_the_delay(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {
            "parameters": {"Mode": "approve"},
            "actions": [{"action": "approve", "after_seconds": 0.5}],
            "expect": [
                {"select": "executions", "each": {"output.outcome": "resumed", "output.approval.approved": True}}
            ],
        },
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    [action] = result.report["actions"]
    assert action["status"] == 200
    assert action["outcome"].startswith("pressed Approve as") and "after it was posted" in action["outcome"]
    assert result.report["task_tokens"] == {"issued": 1, "exposed": 0}
    [execution] = result.report["executions"]
    assert execution["task_token_wait_seconds"] >= 0.5


def test_without_an_answer_the_approval_times_out(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {
            "parameters": {"Mode": "approve", "ApprovalTimeoutSeconds": 1},
            "expect": [
                {"select": "executions", "each": {"output.outcome": "approval timed out"}},
                {"select": "run_task_requests", "count": 0},
            ],
        },
    )

    result = run(path)

    assert result.passed, "\n".join(failed(result))
    assert result.report["actions"] == []


def test_an_execution_still_running_at_the_timeout_is_stopped_and_fails_the_run(tmp_path: Path) -> None:
    path = toy_scenario(tmp_path, {"parameters": {"PollSeconds": 60}, "timeout_seconds": 2, "expect": []})

    result = run(path)

    assert not result.passed
    [execution] = result.report["executions"]
    assert execution["status"] == "ABORTED"
    [finished, amiss] = result.report["expectations"]
    assert finished["name"] == "every execution finished within the scenario's timeout (2 s)"
    assert finished["passed"] is False
    assert "still running" in result.report["warnings"][0]
    assert amiss["passed"] is False and "still running" in amiss["problems"][0]


def test_a_failed_expectation_fails_the_run_and_says_why(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {"expect": [{"name": "wrong on purpose", "select": "tasks", "where": {"origin": "started"}, "count": 5}]},
    )

    result = run(path)

    assert not result.passed
    assert failed(result) == ["wrong on purpose: 1 selected, expected 5"]


# --- CLI steps -------------------------------------------------------------------------------------


def test_cli_steps_run_against_the_stacks_table_and_are_reported(tmp_path: Path) -> None:
    # Given a silence added, then expired through {{silences.last}}, then listed, and an expire expected to fail
    add = ["silence", "add", "--match", "cluster={{clusters.training.name}}", "--duration", "1h", "--comment", "maint"]
    path = toy_scenario(
        tmp_path,
        {
            "events": [
                {"cli": add},
                {"cli": ["silence", "expire", "{{silences.last}}"]},
                {"cli": ["silence", "list", "--all", "--json"]},
                {"cli": ["silence", "expire", "{{silences.maint}}"], "expect_exit": 1},
            ],
            "expect": [{"select": "cli", "where": {"args.1": "list"}, "each": {"stdout": {"contains": "expired"}}}],
        },
    )

    # When it runs
    result = run(path)

    # Then every step exited as expected, with its arguments filled and its output kept
    assert result.passed, "\n".join(failed(result))
    steps = result.report["cli"]
    silence_id = steps[0]["stdout"].strip()
    assert [step["args"][:3] for step in steps] == [
        ["silence", "add", "--match"],
        ["silence", "expire", silence_id],
        ["silence", "list", "--all"],
        ["silence", "expire", silence_id],
    ]
    assert steps[0]["args"][3] == "cluster=training"
    assert [step["exit_code"] for step in steps] == [0, 0, 0, 1]
    [listed] = json.loads(steps[2]["stdout"])
    assert (listed["id"], listed["state"], listed["comment"]) == (silence_id, "expired", "maint")
    assert "already expired" in steps[3]["stderr"]
    # And the silence is in the stack's IncidentsTable, as the deployed CLI would have put it
    assert [item["sk"] for item in result.report["table"] if item["pk"] == "SILENCE"] == [silence_id]


def test_a_cli_step_that_exits_otherwise_than_expected_fails_the_run_and_says_why(tmp_path: Path) -> None:
    path = toy_scenario(
        tmp_path,
        {"events": [{"cli": ["silence", "expire", "0123456789abcdef"]}, {"cli": ["silence", "list"]}], "expect": []},
    )

    result = run(path)

    assert not result.passed
    assert failed(result) == [
        "every cli step exited as expected: step 1 exited 1, expected 0: "
        "python -m fault_responder.cli: error: no silence with id 0123456789abcdef"
    ]


def test_a_silence_placeholder_before_any_silence_is_an_error(tmp_path: Path) -> None:
    path = toy_scenario(tmp_path, {"events": [{"cli": ["silence", "expire", "{{silences.last}}"]}], "expect": []})

    with pytest.raises(SandboxError, match=r"unknown placeholder \{\{silences.last\}\}"):
        run(path)


# --- The command line ------------------------------------------------------------------------------


def test_run_on_the_command_line_writes_the_report_and_exits_0(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    environment = {name: value for name, value in os.environ.items() if not name.startswith("AWS_")}

    completed = subprocess.run(
        [sys.executable, "-m", "sandbox", "run", str(TOY_RESUME), "--report", str(report_path)],
        cwd=REPO_ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(report_path.read_text())
    assert report["scenario"]["passed"] is True
    assert {"executions", "ecs", "world", "expectations", "workflow_invocations", "actions"} <= set(report)
    assert "execution " in completed.stdout and "Expectations: 7 of 7 held" in completed.stdout
    assert "ECS at the end" in completed.stdout


def test_a_failed_expectation_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toy_scenario(tmp_path, {"expect": [{"select": "tasks", "where": {"origin": "started"}, "count": 5}]})

    assert main(["run", str(path), "--quiet"]) == 1
    assert capsys.readouterr().out == ""


def test_several_scenarios_run_in_one_process_each_judged_on_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a scenario whose expectation cannot hold, then the toy scenario as it is
    failing = toy_scenario(
        tmp_path, {"expect": [{"select": "tasks", "where": {"origin": "started"}, "count": 5}]}, name="five-tasks"
    )
    passing = toy_scenario(tmp_path, name="as-shipped")

    # When both run in one command, quietly
    status = main(["run", str(failing), str(passing), "--quiet"])

    # Then the command fails, and standard error names the failed one (with what it found) and only that one
    err = capsys.readouterr().err
    assert status == 1
    assert f"{failing}: expectations not held: " in err
    assert str(passing) not in err
    assert "1 of 2 scenarios failed" in err


def test_several_scenarios_are_all_read_before_any_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("events: []\n")

    assert main(["run", str(toy_scenario(tmp_path)), str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "", "the valid scenario ran before the invalid one was read"
    assert "is not a valid scenario" in err


def test_a_report_is_of_one_scenario(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = toy_scenario(tmp_path)

    assert main(["run", str(path), str(path), "--report", str(tmp_path / "r.json")]) == 2
    assert "--report writes the report of one scenario" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_an_invalid_scenario_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("events: []\n")

    assert main(["run", str(path)]) == 2
    assert "is not a valid scenario: events: List should have at least 1 item" in capsys.readouterr().err


def test_run_has_its_own_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])

    out = capsys.readouterr().out
    assert "SCENARIO.yaml" in out and "--report" in out


# --- The state machine as deployed -----------------------------------------------------------------


def test_the_real_state_machine_is_deployed_with_the_templates_substitutions() -> None:
    template = load_template(REPO_ROOT / "template.yaml")

    with (
        moto_settings_restored(),
        Sandbox(template, parameter_overrides={"TrainingCapacityProviders": "gpu-training"}) as sandbox,
    ):
        stack = sandbox.stack
        machine = stack.state_machines["ResumeTrainingStateMachine"]
        described = sandbox.aws.client("stepfunctions").describe_state_machine(stateMachineArn=machine.arn)

    assert described["definition"] == machine.definition
    assert "${" not in machine.definition
    for logical_id in ("ClaimFaultFunction", "NotifyFunction", "RelaunchJobFunction"):
        assert stack.functions[logical_id].arn in machine.definition
    [target] = stack.rules["ResumeTrainingRule"].targets
    assert (target.service, target.arn) == ("states", machine.arn)
    assert stack.get_att("ResumeTriggerRole", "Arn") == "arn:aws:iam::123456789012:role/" + stack.ref(
        "ResumeTriggerRole"
    )
    assert stack.get_att("ResumeTrainingLogGroup", "Arn").endswith(
        ":log-group:/aws/vendedlogs/states/gpu-fault-responder-ResumeTraining:*"
    )


def test_replay_says_where_state_machine_targets_are_executed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with moto_settings_restored():
        exit_status = main(["replay", str(XID79), "--quiet", "--parameter-overrides", "TrainingCapacityProviders=gpu"])

    assert exit_status == 2

    assert "ResumeTrainingRule/resume-training (states) (python -m sandbox run executes state machines)" in (
        capsys.readouterr().err
    )


def test_a_lambda_task_naming_a_function_the_stack_lacks_is_not_found() -> None:
    dispatch = LambdaDispatch({})

    with pytest.raises(UnknownFunctionException):
        dispatch._invoke("arn:aws:lambda:us-east-1:123456789012:function:nope", b"{}", {})
