"""The auto-resume part of template.yaml and its state machine: the trigger, the wiring, the invariants
that cfn-lint and statelint do not check."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from localstack.services.events.event_rule_engine import EventPatternCompiler, EventRuleEngine

from sandbox.template import Resolver, StackIdentity, load_template, resolve_parameters

ROOT = Path(__file__).resolve().parents[2]
DEFINITION = json.loads((ROOT / "statemachines" / "resume_training.asl.json").read_text(encoding="utf-8"))
APP = (ROOT / "functions" / "resume_training" / "app.py").read_text(encoding="utf-8")
ENABLED = {
    "TrainingCapacityProviders": "p5-training,p4d-training",
    "CheckpointBuckets": "ckpt",
    "ResumeTaskDefinitionFamilies": "llm-train",
    "ResumeTaskRoleArns": "arn:aws:iam::123456789012:role/llm-train-task",
}
RESUME_RESOURCES = ("ResumeTrainingRule", "ResumeTrainingStateMachine", "ResumeTriggerDLQ", "ClaimFaultFunction")


class _Attributes:
    def ref(self, logical_id: str) -> str:
        return f"ref:{logical_id}"

    def get_att(self, logical_id: str, attribute: str) -> str:
        return f"arn:{logical_id}.{attribute}"


def resolver(**overrides: str) -> Resolver:
    template = load_template(ROOT / "template.yaml")
    return Resolver(template, StackIdentity("test"), resolve_parameters(template, overrides), _Attributes())


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    compiled = EventPatternCompiler().compile_event_pattern(copy.deepcopy(dict(pattern)))  # type: ignore[no-untyped-call]
    return bool(EventRuleEngine().evaluate_pattern_on_event(compiled, copy.deepcopy(dict(event))))  # type: ignore[no-untyped-call]


def health_event(provider: str = "p5-training", **check: str) -> dict[str, Any]:
    return {
        "version": "0",
        "id": "evt",
        "detail-type": "ECS Container Instance Health Change",
        "source": "aws.ecs",
        "account": "123456789012",
        "time": "2026-11-29T10:00:05Z",
        "region": "us-east-1",
        "resources": [],
        "detail": {
            "clusterArn": "arn:aws:ecs:us-east-1:123456789012:cluster/gpu",
            "containerInstanceArn": "arn:aws:ecs:us-east-1:123456789012:container-instance/gpu/ci",
            "capacityProviderName": provider,
            "overallStatus": "IMPAIRED",
            "healthChecks": [{"type": "ACCELERATED_COMPUTE", "status": "IMPAIRED", "statusReason": "XID_79", **check}],
        },
    }


def states(definition: Mapping[str, Any] = DEFINITION) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in definition["States"].items():
        yield name, state
        if state["Type"] == "Map":
            yield from states(state["ItemProcessor"])


# --- The trigger -----------------------------------------------------------------------------------


def test_without_training_capacity_providers_no_auto_resume_resource_exists() -> None:
    stack = resolver()
    assert not any(stack.is_enabled(name) for name in RESUME_RESOURCES)


def test_with_training_capacity_providers_every_auto_resume_resource_exists() -> None:
    stack = resolver(**ENABLED)
    assert all(stack.is_enabled(name) for name in RESUME_RESOURCES)


@pytest.mark.parametrize(
    ("event", "matched"),
    [
        (health_event(), True),
        (health_event("p4d-training"), True),
        (health_event("inference"), False),
        (health_event(status="OK"), False),
        (health_event(type="DAEMON"), False),
    ],
)
def test_the_rule_matches_impaired_gpu_checks_on_training_providers_only(event: dict, matched: bool) -> None:
    pattern = resolver(**ENABLED).properties("ResumeTrainingRule")["EventPattern"]
    assert matches(pattern, event) is matched


def test_the_check_types_are_a_parameter() -> None:
    pattern = resolver(**ENABLED, ResumeCheckTypes="ACCELERATED_COMPUTE,DAEMON").properties("ResumeTrainingRule")
    assert matches(pattern["EventPattern"], health_event(type="DAEMON"))


def test_the_rule_starts_the_state_machine_with_a_role_retries_and_a_dead_letter_queue() -> None:
    [target] = resolver(**ENABLED).properties("ResumeTrainingRule")["Targets"]
    assert target["Arn"] == "ref:ResumeTrainingStateMachine"
    assert target["RoleArn"] == "arn:ResumeTriggerRole.Arn"
    assert target["DeadLetterConfig"] == {"Arn": "arn:ResumeTriggerDLQ.Arn"}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}


# --- The state machine's wiring --------------------------------------------------------------------


def test_every_placeholder_of_the_definition_is_substituted_by_the_template_and_nothing_else() -> None:
    placeholders = set(re.findall(r"\$\{(\w+)\}", json.dumps(DEFINITION)))
    substitutions = resolver(**ENABLED).properties("ResumeTrainingStateMachine")["DefinitionSubstitutions"]
    assert placeholders == set(substitutions)


def test_every_task_function_has_its_handler_and_may_be_invoked_by_the_state_machine() -> None:
    stack = resolver(**ENABLED)
    machine = stack.properties("ResumeTrainingStateMachine")
    invokable = {
        policy["LambdaInvokePolicy"]["FunctionName"] for policy in machine["Policies"] if "LambdaInvokePolicy" in policy
    }
    for value in machine["DefinitionSubstitutions"].values():
        function = value.removeprefix("arn:").removesuffix(".Arn")
        handler = stack.properties(function)["Handler"].split(".", 1)[1]
        assert re.search(rf"^def {handler}\(", APP, re.MULTILINE), function
        assert f"ref:{function}" in invokable


def test_every_lambda_task_retries_lambda_service_errors_and_catches_everything_else() -> None:
    for name, state in states():
        if state["Type"] != "Task":
            continue
        assert state["Resource"].startswith("arn:aws:states:::lambda:invoke"), name
        assert any("Lambda.ServiceException" in retrier["ErrorEquals"] for retrier in state["Retry"]), name
        assert any(catcher["ErrorEquals"] == ["States.ALL"] for catcher in state.get("Catch", [])), name


def test_every_wait_reads_its_duration_from_the_payload_so_parameters_shorten_it() -> None:
    waits = {name: state for name, state in states() if state["Type"] == "Wait"}
    assert waits and all(
        set(state) == {"Type", "SecondsPath", "Next"} | ({"Comment"} & set(state)) for state in waits.values()
    )


def test_the_job_map_concurrency_comes_from_the_config() -> None:
    assert DEFINITION["States"]["ResumeJobs"]["MaxConcurrencyPath"] == "$.config.job_concurrency"


# --- Permissions -----------------------------------------------------------------------------------


def statements(function: str, **overrides: str) -> list[dict[str, Any]]:
    return [
        s for policy in resolver(**ENABLED, **overrides).properties(function)["Policies"] for s in policy["Statement"]
    ]


def test_checkpoint_reads_are_limited_to_the_checkpoint_buckets() -> None:
    [s3] = [s for s in statements("RelaunchJobFunction") if s["Sid"] == "ReadCheckpoints"]
    assert s3["Resource"] == ["arn:*:s3:::ckpt", "arn:*:s3:::ckpt/*"]


def test_ecs_task_actions_are_limited_to_the_watched_clusters_when_some_are_given() -> None:
    cluster = "arn:aws:ecs:us-east-1:123456789012:cluster/gpu"
    [stop] = [s for s in statements("StopJobFunction", ClusterArns=cluster) if s["Sid"] == "StopTasks"]
    assert stop["Condition"] == {"ArnEquals": {"ecs:cluster": [cluster]}}


def test_task_roles_can_only_be_passed_to_ecs_tasks() -> None:
    [passing] = [s for s in statements("RelaunchJobFunction") if s["Action"] == "iam:PassRole"]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}


def test_only_the_claim_function_carries_the_workflow_parameters() -> None:
    stack = resolver(**ENABLED, ResumeMode="approve", ResumePollSeconds="1")
    claim = stack.properties("ClaimFaultFunction")["Environment"]["Variables"]
    assert (claim["RESUME_MODE"], claim["RESUME_POLL_SECONDS"]) == ("approve", "1")
    assert claim["TRAINING_CAPACITY_PROVIDERS"] == "p5-training,p4d-training"
    assert "RESUME_MODE" not in stack.properties("RelaunchJobFunction")["Environment"]["Variables"]
