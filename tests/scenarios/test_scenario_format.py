"""The scenario format and the pure parts of the runner: loading, deep-merge, placeholders, pointing an
event at an instance, the expectation matchers, the task commands people are told to run, and the
summary of an execution's history."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.errors import SandboxError
from sandbox.expectations import check, field_matches, matches, pagerduty_requests, slack_messages, values_at
from sandbox.scenario import Expectation, Scenario, load_scenario, moment
from sandbox.statemachine import substitute
from sandbox.stepfunctions import WorkflowInvocation, summarize_execution
from sandbox.template import StackIdentity
from sandbox.world import SeededInstance, SeededTask, World, deep_merge, point_at
from tests.scenarios.conftest import REPO_ROOT, TOY_RESUME

# --- Loading ---------------------------------------------------------------------------------------


def _scenario_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_a_scenario_loads_with_its_defaults() -> None:
    loaded = load_scenario(TOY_RESUME)

    assert loaded.name == "toy-resume"
    assert loaded.scenario.timeout_seconds == 120
    assert loaded.scenario.parameter_overrides() == {"PollSeconds": "1"}
    assert loaded.scenario.world.clusters[0].capacity_providers[0].type == "EC2_AUTOSCALING"


def test_a_misspelt_key_is_an_error_naming_it(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "events: [{file: x.json, instanse: gpu-a}]\n")

    with pytest.raises(SandboxError, match=r"events\.0\.instanse: Extra inputs are not permitted"):
        load_scenario(path)


def test_an_event_step_needs_exactly_one_source(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "events: [{file: x.json, event: {id: x}}]\n")

    with pytest.raises(
        SandboxError, match="give exactly one of file, event, cli, sweep, reconcile, click or pagerduty"
    ):
        load_scenario(path)


def test_a_cli_step_loads_its_arguments_as_text(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "events: [{cli: [silence, expire, 1234567890123456], expect_exit: 1}]\n")

    [step] = load_scenario(path).scenario.events

    assert (step.cli, step.expect_exit, step.file, step.event) == (
        ["silence", "expire", "1234567890123456"],
        1,
        None,
        None,
    )


@pytest.mark.parametrize(
    ("step", "says"),
    [
        (
            "{cli: [silence, list], file: x.json}",
            "give exactly one of file, event, cli, sweep, reconcile, click or pagerduty",
        ),
        ("{cli: []}", "cli needs the command's arguments"),
        ("{cli: [silence, list, --table, t]}", r"names no target \(--table\)"),
        ("{cli: [silence, list, --endpoint-url=http://x, --region, r]}", "--endpoint-url=http://x, --region"),
        ("{cli: [silence, list], instance: gpu-a, repeat: 2}", "a cli step takes no instance, repeat"),
        ("{file: x.json, expect_exit: 1}", "expect_exit is for cli steps"),
        ("{cli: [silence, list], expect_exit: 256}", "less than or equal to 255"),
    ],
)
def test_a_cli_step_that_cannot_run_as_written_is_refused(tmp_path: Path, step: str, says: str) -> None:
    path = _scenario_file(tmp_path, f"events: [{step}]\n")

    with pytest.raises(SandboxError, match=says):
        load_scenario(path)


def test_auto_repair_is_a_managed_instances_setting(tmp_path: Path) -> None:
    path = _scenario_file(
        tmp_path,
        "world: {clusters: [{name: c, capacity_providers: [{name: p, auto_repair: ENABLED}]}]}\n"
        "events: [{file: x.json}]\n",
    )

    with pytest.raises(SandboxError, match="auto_repair is a setting of MANAGED_INSTANCES"):
        load_scenario(path)


def test_parameters_are_given_as_sam_takes_them(tmp_path: Path) -> None:
    path = _scenario_file(tmp_path, "parameters: {A: [p1, p2], B: 1, C: true, D: text}\nevents: [{event: {id: x}}]\n")

    assert load_scenario(path).scenario.parameter_overrides() == {"A": "p1,p2", "B": "1", "C": "true", "D": "text"}


def test_paths_are_found_next_to_the_scenario_then_in_the_repository() -> None:
    loaded = load_scenario(TOY_RESUME)

    assert loaded.find("toy-workflow.yaml") == TOY_RESUME.parent / "toy-workflow.yaml"
    assert loaded.find("events/incident-xid79/01-impaired-xid79.json") == (
        REPO_ROOT / "events/incident-xid79/01-impaired-xid79.json"
    )
    with pytest.raises(SandboxError, match="not found"):
        loaded.find("nope.json")


# --- Events ----------------------------------------------------------------------------------------


def test_overrides_deep_merge_into_the_event() -> None:
    event = {"id": "a", "detail": {"status": "IMPAIRED", "checks": [{"type": "X"}], "keep": 1, "drop": 2}}

    merged = deep_merge(event, {"id": "b", "detail": {"status": "OK", "checks": [], "drop": None, "new": {"n": 1}}})

    assert merged == {"id": "b", "detail": {"status": "OK", "checks": [], "keep": 1, "new": {"n": 1}}}
    assert event["detail"]["drop"] == 2, "the original is left as it was"


INSTANCE = SeededInstance(
    name="gpu-a",
    cluster="training",
    cluster_arn="arn:aws:ecs:us-east-1:123456789012:cluster/training",
    container_instance_arn="arn:aws:ecs:us-east-1:123456789012:container-instance/training/abc",
    ec2_instance_id="i-0123",
    capacity_provider="gpu-training",
    instance_type="p5.48xlarge",
    gpus=8,
)


def test_an_event_is_pointed_at_a_seeded_instance() -> None:
    event = {
        "detail-type": "ECS Container Instance Health Change",
        "account": "111122223333",
        "region": "us-west-2",
        "resources": ["arn:old"],
        "detail": {"clusterArn": "old", "containerInstanceArn": "old", "overallStatus": "IMPAIRED"},
    }

    pointed = point_at(event, INSTANCE, StackIdentity("s"))

    assert (pointed["account"], pointed["region"]) == ("123456789012", "us-east-1")
    assert pointed["resources"] == [INSTANCE.container_instance_arn]
    assert pointed["detail"] == {
        "clusterArn": INSTANCE.cluster_arn,
        "containerInstanceArn": INSTANCE.container_instance_arn,
        "overallStatus": "IMPAIRED",
        "ec2InstanceId": "i-0123",
        "capacityProviderName": "gpu-training",
    }


def test_a_task_event_keeps_its_resources() -> None:
    event = {"detail-type": "ECS Task State Change", "resources": ["task-arn"], "detail": {"taskArn": "t"}}

    pointed = point_at(event, INSTANCE, StackIdentity("s"))

    assert pointed["resources"] == ["task-arn"]
    assert "ec2InstanceId" not in pointed["detail"]
    assert pointed["detail"]["containerInstanceArn"] == INSTANCE.container_instance_arn


def test_placeholders_are_filled_from_the_world() -> None:
    task = SeededTask("rank-0", "training", "arn:aws:ecs:us-east-1:123456789012:task/training/t1", "gpu-a")
    world = World(
        StackIdentity("s"),
        clusters={"training": INSTANCE.cluster_arn},
        instances={"gpu-a": INSTANCE},
        tasks={"rank-0": task},
    )
    now = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)

    filled = world.fill(
        {
            "detail": {"ec2InstanceId": "{{instances.gpu-a.ec2_instance_id}}", "note": "on {{ instances.gpu-a.id }}"},
            "time": "{{now-90s}}",
            "later": ["{{now+2h}}", "{{account}}"],
            "task": ["{{tasks.rank-0.arn}}", "{{tasks.rank-0.id}}"],
        },
        now,
    )

    assert filled == {
        "detail": {"ec2InstanceId": "i-0123", "note": "on abc"},
        "time": "2026-11-29T09:58:30Z",
        "later": ["2026-11-29T12:00:00Z", "123456789012"],
        "task": [task.arn, "t1"],
    }
    with pytest.raises(SandboxError, match=r"unknown placeholder \{\{instances.gpu-z.arn\}\}"):
        world.fill("{{instances.gpu-z.arn}}")


def test_silences_added_by_cli_steps_are_placeholders_by_comment_and_the_last() -> None:
    world = World(StackIdentity("s"))
    with pytest.raises(SandboxError, match=r"unknown placeholder \{\{silences.last\}\}"):
        world.fill("{{silences.last}}")

    world.silences += [("00000000000000a1", "driver rollout"), ("00000000000000b2", "last"), ("00000000000000c3", "x")]
    world.silences.append(("00000000000000d4", "driver rollout"))

    assert world.fill(["{{silences.last}}", "{{ silences.driver rollout }}", "{{silences.x}}"]) == [
        "00000000000000d4",  # the newest, whatever the comments
        "00000000000000d4",  # the newest with that comment
        "00000000000000c3",
    ]


# --- The definition --------------------------------------------------------------------------------


def test_definition_substitutions_are_applied_as_sam_applies_them() -> None:
    definition = '{"A": "${Fn}", "B": "x-${Mode}-y", "C": "${Flag}"}'

    assert substitute("M", definition, {"Fn": "arn:fn", "Mode": "auto", "Flag": True}) == (
        '{"A": "arn:fn", "B": "x-auto-y", "C": "true"}'
    )


def test_a_placeholder_without_a_substitution_is_an_error() -> None:
    with pytest.raises(SandboxError, match=r"uses \$\{Missing\} but DefinitionSubstitutions has no value"):
        substitute("M", '{"A": "${Missing}"}', {})


# --- Expectations ----------------------------------------------------------------------------------

TASK = {
    "name": "rank-0",
    "last_status": "RUNNING",
    "tags": {"fault-responder:attempt": "1"},
    "environment": {"trainer": {"RESUME_FROM": "s3://b/p/step-000200/"}, "metrics": {"RESUME_FROM": "s3://b/p/x/"}},
    "history": ["Claim", "Plan"],
    "seconds": 2.5,
}


@pytest.mark.parametrize(
    ("path", "spec", "expected"),
    [
        ("last_status", "RUNNING", True),
        ("tags.fault-responder:attempt", 1, True),
        ("environment.trainer.RESUME_FROM", {"matches": r"step-0+200/$"}, True),
        ("environment.*.RESUME_FROM", {"contains": "s3://b/p/"}, True),
        ("environment.*.RESUME_FROM", {"contains": "step-000200"}, False),
        ("environment.*.NOT_SET", {"exists": True}, False),
        ("missing", {"exists": False}, True),
        ("missing", {"not": "x"}, True),
        ("history", {"contains": "Plan", "not": {"contains": "Stop"}}, True),
        ("history", {"length": 2}, True),
        ("history.0", "Claim", True),
        ("seconds", {"gte": 2, "lt": 3}, True),
        ("last_status", {"in": ["PENDING", "RUNNING"]}, True),
        ("history", {"any": {"matches": "^Pl"}}, True),
        ("history", {"all": {"matches": "^Cl"}}, False),
    ],
)
def test_matchers(path: str, spec: Any, expected: bool) -> None:
    assert field_matches(TASK, path, spec) is expected


def test_a_missing_field_matches_no_literal() -> None:
    assert matches(values_at(TASK, "nope"), None) is False


def _report(tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"ecs": {"tasks": tasks}}


def test_an_expectation_checks_count_and_each_and_says_what_was_found() -> None:
    stopped = {**TASK, "name": "rank-1", "last_status": "STOPPED"}
    expectation = Expectation(
        select="tasks", where={"tags.fault-responder:attempt": "1"}, count=2, each={"last_status": "RUNNING"}
    )

    [result] = check([expectation], _report([TASK, stopped]))

    assert result["passed"] is False
    assert result["selected"] == 2
    assert result["problems"] == ["rank-1: last_status is 'STOPPED', expected 'RUNNING'"]


def test_without_count_or_each_an_expectation_needs_at_least_one() -> None:
    results = check(
        [Expectation(select="tasks", where={"name": "rank-0"}), Expectation(select="tasks", where={"name": "x"})],
        _report([TASK]),
    )

    assert [result["passed"] for result in results] == [True, False]
    assert results[1]["problems"] == ["0 selected, expected at least 1"]


def test_a_count_range() -> None:
    [result] = check([Expectation.model_validate({"select": "tasks", "count": {"min": 2, "max": 3}})], _report([TASK]))

    assert result["problems"] == ["1 selected, expected 2 to 3"]


def test_slack_messages_know_their_incident_thread() -> None:
    metadata = {"event_type": "gpu_fault_incident", "event_payload": {"id": "gpu/ci/ACCELERATED_COMPUTE@2026"}}
    channels = {
        "gpu-alerts": [
            {"ts": "1.1", "thread_ts": None, "text": "root", "blocks": [], "metadata": metadata},
            {
                "ts": "1.2",
                "thread_ts": "1.1",
                "text": "Resumed",
                "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": "detail"}}],
            },
            {"ts": "1.3", "thread_ts": None, "text": "other", "blocks": []},
        ]
    }

    messages = slack_messages(channels, {"arn:aws:ecs:us-east-1:1:container-instance/gpu/ci": "gpu-a"})

    assert [(m["incident"], m["reply"], m["text"]) for m in messages] == [
        ("gpu-a", False, "root"),
        ("gpu-a", True, "Resumed\ndetail"),
        (None, False, "other"),
    ]


def test_slack_messages_know_their_fleet_incidents_thread() -> None:
    fleet = {"event_type": "gpu_fault_incident", "event_payload": {"id": "fleet:fleet/gpu/p5/ACCELERATED_COMPUTE@2026"}}
    channels = {
        "gpu-alerts": [
            {"ts": "2.1", "thread_ts": None, "text": "fleet root", "blocks": [], "metadata": fleet},
            {"ts": "2.2", "thread_ts": "2.1", "text": "Resumed llm", "blocks": []},
        ]
    }

    messages = slack_messages(channels, {"arn:aws:ecs:us-east-1:1:container-instance/gpu/ci": "gpu-a"})

    assert [(m["fleet"], m["incident"], m["check_type"], m["reply"]) for m in messages] == [
        ("fleet/gpu/p5/ACCELERATED_COMPUTE", None, "ACCELERATED_COMPUTE", False),
        ("fleet/gpu/p5/ACCELERATED_COMPUTE", None, "ACCELERATED_COMPUTE", True),
    ]


def test_pagerduty_requests_tell_alerts_from_change_events() -> None:
    requests = [
        {"service": "slack", "path": "/api/chat.postMessage", "body": {}},
        {
            "service": "pagerduty",
            "path": "/v2/enqueue",
            "status": 202,
            "fault": False,
            "body": {"event_action": "trigger", "dedup_key": "k", "payload": {"summary": "s", "severity": "critical"}},
        },
        {
            "service": "pagerduty",
            "path": "/v2/change/enqueue",
            "status": 202,
            "fault": False,
            "body": {"payload": {"summary": "c"}},
        },
    ]

    assert [(r["kind"], r["action"], r["severity"], r["summary"]) for r in pagerduty_requests(requests)] == [
        ("alert", "trigger", "critical", "s"),
        ("change", "change", None, "c"),
    ]


# --- Execution summaries ---------------------------------------------------------------------------

T0 = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)


def _event(kind: str, seconds: float, **details: Any) -> dict[str, Any]:
    return {"type": kind, "timestamp": T0 + timedelta(seconds=seconds), **details}


def _entered(kind: str, name: str, seconds: float) -> dict[str, Any]:
    return _event(f"{kind}StateEntered", seconds, stateEnteredEventDetails={"name": name})


def _exited(kind: str, name: str, seconds: float) -> dict[str, Any]:
    return _event(f"{kind}StateExited", seconds, stateExitedEventDetails={"name": name})


def _scheduled(seconds: float, function: str = "fn", resource: str = "invoke") -> dict[str, Any]:
    parameters = f'{{"FunctionName": "arn:aws:lambda:us-east-1:123456789012:function:{function}"}}'
    return _event(
        "TaskScheduled",
        seconds,
        taskScheduledEventDetails={"resourceType": "lambda", "resource": resource, "parameters": parameters},
    )


HISTORY = [
    _event("ExecutionStarted", 0),
    _entered("Task", "Claim", 0),
    _scheduled(0.1),
    _event("TaskFailed", 0.2, taskFailedEventDetails={"error": "Boom"}),
    _scheduled(1.2),  # retried after 1 s
    _event("TaskSucceeded", 1.3),
    _exited("Task", "Claim", 1.3),
    _entered("Map", "Jobs", 1.3),
    _entered("Wait", "WaitForStop", 1.4),  # two iterations waiting side by side
    _entered("Wait", "WaitForStop", 1.5),
    _exited("Wait", "WaitForStop", 2.4),
    _exited("Wait", "WaitForStop", 2.5),
    _entered("Task", "Approve", 2.5),
    _scheduled(2.5, resource="invoke.waitForTaskToken"),
    _event("TaskSubmitted", 2.6, taskSubmittedEventDetails={"resource": "invoke.waitForTaskToken"}),
    _event("TaskSucceeded", 4.6),
    _exited("Task", "Approve", 4.6),
    _event("ExecutionSucceeded", 5.0),
]


def test_an_execution_summary_separates_waiting_from_working() -> None:
    described = {
        "name": "e1",
        "executionArn": "arn:e1",
        "stateMachineArn": "arn:sm",
        "status": "SUCCEEDED",
        "startDate": T0,
        "stopDate": T0 + timedelta(seconds=5),
        "input": '{"a": 1}',
        "output": "{}",
    }
    queued = WorkflowInvocation(
        invocation=None, function_name="fn", received_at=T0 + timedelta(seconds=1.25), queued_seconds=0.05
    )  # type: ignore[arg-type]

    summary = summarize_execution("Rule", described, HISTORY, [queued])

    history = summary["history"]
    assert history["states_entered"] == ["Claim", "Jobs", "WaitForStop", "WaitForStop", "Approve"]
    assert (history["lambda_invocations"], history["retries"], history["state_transitions"]) == (3, 1, 6)
    assert [(task["state"], task["attempts"], task["outcome"]) for task in history["lambda_tasks"]] == [
        ("Claim", 2, "succeeded"),
        ("Approve", 1, "succeeded"),
    ]
    assert summary["wall_seconds"] == 5.0
    assert summary["wait_state_seconds"] == 1.1  # 1.4 -> 2.5, the overlap counted once
    assert summary["retry_backoff_seconds"] == 1.0
    assert summary["task_token_wait_seconds"] == 2.0
    assert summary["sandbox_queue_seconds"] == 0.05
    assert summary["active_seconds"] == pytest.approx(5.0 - 1.1 - 1.0 - 2.0 - 0.05)
    assert summary["input"] == {"a": 1}


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("{reconcile: false}", "a reconcile step is `reconcile: true`"),
        ("{reconcile: true, instance: gpu-a}", "a reconcile step takes no instance"),
        (
            "{reconcile: true, sweep: true}",
            "give exactly one of file, event, cli, sweep, reconcile, click or pagerduty",
        ),
    ],
)
def test_a_reconcile_step_is_only_reconcile_true(tmp_path: Path, step: str, says: str) -> None:
    path = _scenario_file(tmp_path, f"events: [{step}]\n")

    with pytest.raises(SandboxError, match=says):
        load_scenario(path)


def test_an_instance_health_check_needs_a_status_and_a_moment_relative_to_now(tmp_path: Path) -> None:
    world = "world: {clusters: [{name: c, capacity_providers: [{name: p, instances: [{name: a, health: [%s]}]}]}]}\n"
    good = _scenario_file(
        tmp_path, world % "{status: IMPAIRED, reason: XID_79, since: now-3m}" + "events: [{reconcile: true}]\n"
    )

    [provider] = load_scenario(good).scenario.world.clusters[0].capacity_providers
    assert provider.instances[0].health[0].type == "ACCELERATED_COMPUTE"

    bad = _scenario_file(tmp_path, world % "{status: IMPAIRED, since: yesterday}" + "events: [{reconcile: true}]\n")
    with pytest.raises(SandboxError, match="since"):
        load_scenario(bad)


# --- Staging the worst day: fault schedules, replayed and late presses, named and late webhooks ---------------------


def test_faults_take_a_schedule_or_the_plain_list_as_before(tmp_path: Path) -> None:
    path = _scenario_file(
        tmp_path,
        "faults:\n"
        "  slack: [429, ok_false]\n"
        "  pagerduty:\n"
        "    - pass: 1\n"
        "    - fail: 500\n"
        "      times: 8\n"
        "    - fail: {delay: 11}\n"
        "    - timeout\n"
        "events: [{sweep: true}]\n",
    )

    faults = load_scenario(path).scenario.faults

    assert faults.slack == [429, "ok_false"]
    assert faults.pagerduty == [{"pass": 1}, {"fail": 500, "times": 8}, {"fail": {"delay": 11}}, "timeout"]


@pytest.mark.parametrize(
    ("faults", "says"),
    [
        (
            "{pagerduty: [{pass: 1}, {fail: 500, times: 0}]}",
            r"faults\.pagerduty: .*entry 2 of 2 .*times must be a whole",
        ),
        ("{pagerduty: [{fail: 500, times: 3, pass: 1}]}", r"faults\.pagerduty: .*\{\"pass\": n\} takes nothing else"),
        ("{pagerduty: [{times: 3}]}", r"faults\.pagerduty: .*times goes with fail"),
        ("{pagerduty: [ok_false]}", r"faults\.pagerduty: .*'ok_false' is not an HTTP status"),
        ("{slack: [{fail: 700}]}", r"faults\.slack: .*fail is not an HTTP status"),
        ("{slack: 500}", r"faults\.slack: .*must be a list"),
        ("{teams: [500]}", r"faults\.teams: Extra inputs"),
    ],
)
def test_a_fault_schedule_that_makes_no_sense_is_refused_saying_where_and_what_to_write(
    tmp_path: Path, faults: str, says: str
) -> None:
    path = _scenario_file(tmp_path, f"faults: {faults}\nevents: [{{sweep: true}}]\n")

    with pytest.raises(SandboxError, match=says):
        load_scenario(path)


def test_a_click_can_be_signed_in_the_past_or_replay_an_earlier_press(tmp_path: Path) -> None:
    path = _scenario_file(
        tmp_path,
        "events:\n"
        "  - click: {button: acknowledge, user: U0ONCALL01, signed_at: now-6m}\n"
        "  - click: {button: resolve, user: U0ONCALL02, signed_at: '2026-04-11T00:49:09Z'}\n"
        "  - click: {replay: true}\n"
        "  - click: {replay: 1}\n",
    )

    past, absolute, latest, first = (step.click for step in load_scenario(path).scenario.events)

    assert past is not None and (past.signed_at, past.replay) == ("now-6m", None)
    assert absolute is not None and absolute.signed_at == "2026-04-11T00:49:09Z"
    assert latest is not None and latest.replay is True and latest.button is None
    assert first is not None and first.replay == 1 and first.replay is not True


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        ("[{click: {replay: true}}]", "step 1 replays the latest press, and no press comes before it"),
        (
            "[{sweep: true}, {click: {replay: 1}}]",
            r"step 2 replays step 1, which is not an earlier press \(a click step",
        ),
        (
            "[{click: {button: resolve, user: U0ONCALL01}}, {click: {replay: 1}}, {click: {replay: 2}}]",
            "step 3 replays step 2, which is not an earlier press",
        ),
        (
            "[{click: {button: resolve, user: U0ONCALL01}}, {click: {replay: 3}},"
            " {click: {button: resolve, user: U0ONCALL02}}]",
            "step 2 replays step 3, which is not an earlier press",
        ),
        ("[{click: {replay: false}}]", "replay is true .* or the number of an earlier click step"),
        ("[{click: {replay: 0}}]", "replay is true .* or the number of an earlier click step"),
        (
            "[{click: {button: resolve, user: U0ONCALL01}}, {click: {replay: true, user: U0ONCALL02, signed: not}}]",
            "a replay sends an earlier press exactly: it takes no signed, user",
        ),
        ("[{click: {user: U0ONCALL01}}]", "a click names its button"),
        ("[{click: {button: resolve, user: U0ONCALL01, signed_at: 6 minutes ago}}]", "'6 minutes ago' is not a moment"),
        ("[{click: {button: resolve, user: U0ONCALL01, signed_at: '2026-04-11T00:49:09'}}]", "with its time zone"),
    ],
)
def test_a_click_that_cannot_be_sent_as_written_is_refused(tmp_path: Path, steps: str, says: str) -> None:
    path = _scenario_file(tmp_path, f"events: {steps}\n")

    with pytest.raises(SandboxError, match=says):
        load_scenario(path)


def test_a_webhook_can_name_its_alert_and_when_it_happened(tmp_path: Path) -> None:
    path = _scenario_file(
        tmp_path,
        "events:\n"
        "  - pagerduty: {webhook: resolved, incident: 1, occurred_at: now-12m}\n"
        "  - pagerduty:\n"
        "      webhook: acknowledged\n"
        "      dedup_key: '{{clusters.gpu.name}}/{{instances.gpu-a.id}}/ACCELERATED_COMPUTE'\n"
        "      occurred_at: '{{instances.gpu-a.health.ACCELERATED_COMPUTE.since}}'\n",
    )

    by_number, by_key = (step.pagerduty for step in load_scenario(path).scenario.events)

    assert by_number is not None and (by_number.incident, by_number.dedup_key, by_number.occurred_at) == (
        1,
        None,
        "now-12m",
    )
    # placeholders are kept as written: filled (and then checked) when the step runs
    assert by_key is not None and by_key.incident is None
    assert by_key.dedup_key == "{{clusters.gpu.name}}/{{instances.gpu-a.id}}/ACCELERATED_COMPUTE"


@pytest.mark.parametrize(
    ("step", "says"),
    [
        ("{webhook: resolved, incident: 0}", r"pagerduty\.incident: Input should be greater than or equal to 1"),
        ("{webhook: resolved, incident: 1, dedup_key: k}", "by incident number or by dedup_key, not both"),
        ("{webhook: resolved, occurred_at: yesterday}", "'yesterday' is not a moment: write now, now-6m"),
        ("{webhook: resolved, occurred_at: now-6 m}", "is not a moment"),
        ("{webhook: resolved, occurred_at: now-9999999d}", "'now-9999999d' is further from now than a date can be"),
        ("{webhook: resolved, dedup_key: ''}", r"pagerduty\.dedup_key: String should have at least 1 character"),
    ],
)
def test_a_webhook_that_cannot_be_sent_as_written_is_refused(tmp_path: Path, step: str, says: str) -> None:
    path = _scenario_file(tmp_path, f"events: [{{pagerduty: {step}}}]\n")

    with pytest.raises(SandboxError, match=says):
        load_scenario(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", datetime(2026, 4, 11, 12, 0, tzinfo=UTC)),
        ("now-6m", datetime(2026, 4, 11, 11, 54, tzinfo=UTC)),
        ("now+90s", datetime(2026, 4, 11, 12, 1, 30, tzinfo=UTC)),
        ("now-1.5h", datetime(2026, 4, 11, 10, 30, tzinfo=UTC)),
        ("now-1d", datetime(2026, 4, 10, 12, 0, tzinfo=UTC)),
        ("2026-04-11T00:49:09Z", datetime(2026, 4, 11, 0, 49, 9, tzinfo=UTC)),
        ("2026-04-11T02:49:09+02:00", datetime(2026, 4, 11, 0, 49, 9, tzinfo=UTC)),
    ],
)
def test_a_moment_is_relative_to_now_or_an_iso_time_with_its_zone(text: str, expected: datetime) -> None:
    assert moment(text, datetime(2026, 4, 11, 12, 0, tzinfo=UTC)) == expected


def test_every_yaml_example_of_the_faults_section_of_the_docs_loads() -> None:
    # Given the YAML examples docs/scenarios.md shows under `faults` (the schedule, a late webhook, replayed presses)
    text = (REPO_ROOT / "docs/scenarios.md").read_text(encoding="utf-8")
    section = text.split("### `faults`", 1)[1].split("\n### ", 1)[0]
    examples = [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)]
    assert len(examples) >= 3

    # When each is read as part of a scenario, Then it is a valid one, as written
    for example in examples:
        Scenario.model_validate({"events": [{"sweep": True}], **example})
