"""The template's rule patterns, evaluated the way EventBridge evaluates them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from moto.events.models import EventPattern as MotoEventPattern

from sandbox.aws import AwsClients
from sandbox.errors import SandboxError
from sandbox.eventbridge import EventBus, RuleMatcher
from sandbox.stack import RuleSpec, Stack
from sandbox.template import StackIdentity, Template
from tests.sandbox.conftest import aws_docs_event, ecs_event, template_rules, with_detail

CLUSTER_A = "arn:aws:ecs:us-east-1:123456789012:cluster/gpu-a"
CLUSTER_B = "arn:aws:ecs:us-east-1:123456789012:cluster/gpu-b"
OTHER_CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/web"


def matched(template: Template, event: dict[str, Any], **overrides: str) -> list[str]:
    rules = RuleMatcher(template_rules(template, overrides))
    return [rule.logical_id for rule in rules.matching_rules(event)]


def task_stopped(**detail: Any) -> dict[str, Any]:
    return ecs_event(
        "ECS Task State Change",
        {"clusterArn": CLUSTER_A, "lastStatus": "STOPPED", "desiredStatus": "STOPPED", **detail},
    )


def instance_state(status: str, cluster: str = CLUSTER_A) -> dict[str, Any]:
    return ecs_event("ECS Container Instance State Change", {"clusterArn": cluster, "status": status})


# --- HealthChangeRule ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "health-change-accelerated-compute-xid46.json",
        "health-change-agent-connectivity-impaired.json",
        "health-change-container-runtime-ok.json",
        "health-change-daemon-impaired.json",
    ],
)
def test_every_health_change_matches_only_the_health_rule(real_template: Template, name: str) -> None:
    assert matched(real_template, aws_docs_event(name)) == ["HealthChangeRule"]


def test_health_change_from_another_source_does_not_match(real_template: Template) -> None:
    event = {**aws_docs_event("health-change-accelerated-compute-xid46.json"), "source": "fire.drill"}

    assert matched(real_template, event) == []


def test_a_drill_reaches_the_alert_pipeline_and_never_the_resume_workflow(real_template: Template) -> None:
    # Given the fault on a training capacity provider the workflow handles, sent by a drill.
    event = aws_docs_event("health-change-accelerated-compute-xid46.json")
    provider = event["detail"]["capacityProviderName"]
    real = matched(real_template, event, TrainingCapacityProviders=provider, CheckpointBuckets="ckpt")
    drill = matched(
        real_template, {**event, "source": "fault-responder.drill"}, TrainingCapacityProviders=provider,
        CheckpointBuckets="ckpt",
    )  # fmt: skip

    assert real == ["HealthChangeRule", "ResumeTrainingRule"]
    assert drill == ["HealthChangeRule"]


# --- InstanceStateChangeRule -----------------------------------------------------------------------


@pytest.mark.parametrize("status", ["DRAINING", "DEREGISTERING", "INACTIVE", "REGISTRATION_FAILED"])
def test_instance_transitions_that_matter_match(real_template: Template, status: str) -> None:
    assert matched(real_template, instance_state(status)) == ["InstanceStateChangeRule"]


def test_active_resource_updates_do_not_match(real_template: Template) -> None:
    assert matched(real_template, aws_docs_event("instance-state-change-active.json")) == []


# --- TaskStoppedRule: lastStatus AND ($or: stopCode | stoppedReason prefix) ---------------------------


@pytest.mark.parametrize("stop_code", ["SpotInterruption", "TerminationNotice", "InfrastructureHealth"])
def test_tasks_stopped_by_the_infrastructure_match(real_template: Template, stop_code: str) -> None:
    event = task_stopped(stopCode=stop_code, stoppedReason="anything")

    assert matched(real_template, event) == ["TaskStoppedRule"]


def test_the_draining_prefix_alone_matches(real_template: Template) -> None:
    event = task_stopped(
        stopCode="ServiceSchedulerInitiated",
        stoppedReason="Task stopped during instance draining: container instance i-0abc is DRAINING",
    )

    assert matched(real_template, event) == ["TaskStoppedRule"]


@pytest.mark.parametrize(
    "detail",
    [
        {"stopCode": "EssentialContainerExited", "stoppedReason": "Essential container in task exited"},
        # A prefix matches at the start only.
        {"stopCode": "UserInitiated", "stoppedReason": "Manual: Task stopped during instance draining"},
        {"stoppedReason": "task stopped during instance draining"},  # prefix matching is case-sensitive
        {},  # neither branch of $or present
    ],
)
def test_other_stopped_tasks_do_not_match(real_template: Template, detail: dict[str, Any]) -> None:
    assert matched(real_template, task_stopped(**detail)) == []


def test_a_running_task_does_not_match_even_with_an_infrastructure_stop_code(real_template: Template) -> None:
    event = task_stopped(lastStatus="RUNNING", stopCode="SpotInterruption")

    assert matched(real_template, event) == []
    assert matched(real_template, aws_docs_event("task-state-change-ec2-running.json")) == []


# --- ClusterArns override --------------------------------------------------------------------------


def test_cluster_arns_override_filters_every_rule(real_template: Template) -> None:
    only_a = {"ClusterArns": CLUSTER_A}
    health = with_detail(aws_docs_event("health-change-accelerated-compute-xid46.json"), clusterArn=CLUSTER_A)
    stopped = task_stopped(stopCode="SpotInterruption")

    assert matched(real_template, health, **only_a) == ["HealthChangeRule"]
    assert matched(real_template, with_detail(health, clusterArn=OTHER_CLUSTER), **only_a) == []
    assert matched(real_template, instance_state("DRAINING"), **only_a) == ["InstanceStateChangeRule"]
    assert matched(real_template, instance_state("DRAINING", OTHER_CLUSTER), **only_a) == []
    assert matched(real_template, stopped, **only_a) == ["TaskStoppedRule"]
    assert matched(real_template, with_detail(stopped, clusterArn=OTHER_CLUSTER), **only_a) == []


def test_several_cluster_arns_each_match(real_template: Template) -> None:
    both = {"ClusterArns": f"{CLUSTER_A},{CLUSTER_B}"}

    assert matched(real_template, instance_state("DRAINING", CLUSTER_B), **both) == ["InstanceStateChangeRule"]
    assert matched(real_template, instance_state("INACTIVE", CLUSTER_A), **both) == ["InstanceStateChangeRule"]
    assert matched(real_template, instance_state("INACTIVE", OTHER_CLUSTER), **both) == []


# --- EventBridge semantics where moto's own matcher differs ------------------------------------------


def ad_hoc_rule(pattern: dict[str, Any]) -> RuleSpec:
    return RuleSpec.from_properties("AdHocRule", {"EventPattern": pattern}, name="ad-hoc", arn="<AdHocRule>")


def test_a_field_inside_an_array_of_objects_matches_like_eventbridge() -> None:
    # Given a pattern on healthChecks[].status, and an event whose second check is IMPAIRED
    pattern = {"source": ["aws.ecs"], "detail": {"healthChecks": {"status": ["IMPAIRED"]}}}
    event = ecs_event(
        "ECS Container Instance Health Change",
        {"healthChecks": [{"type": "DAEMON", "status": "OK"}, {"type": "ACCELERATED_COMPUTE", "status": "IMPAIRED"}]},
    )
    all_ok = with_detail(event, healthChecks=[{"type": "DAEMON", "status": "OK"}])

    # Then it matches as in EventBridge, which moto's own matcher gets wrong (why the sandbox bypasses it)
    matcher = RuleMatcher([ad_hoc_rule(pattern)])
    assert [rule.logical_id for rule in matcher.matching_rules(event)] == ["AdHocRule"]
    assert matcher.matching_rules(all_ok) == []
    assert MotoEventPattern.load(json.dumps(pattern)).matches_event(event) is False


def test_a_pattern_eventbridge_would_reject_is_an_error() -> None:
    with pytest.raises(SandboxError, match="AdHocRule: EventBridge would reject its EventPattern"):
        RuleMatcher([ad_hoc_rule({"detail": {"status": [{"bogus-op": 1}]}})])


def test_disabled_rules_and_other_buses_are_not_evaluated() -> None:
    everything = {"source": ["aws.ecs"]}
    disabled = RuleSpec.from_properties("Off", {"EventPattern": everything, "State": "DISABLED"}, name="o", arn="o")
    elsewhere = RuleSpec.from_properties(
        "Custom",
        {"EventPattern": everything, "EventBusName": "arn:aws:events:us-east-1:123456789012:event-bus/ops"},
        name="c",
        arn="c",
    )

    assert RuleMatcher([disabled, elsewhere]).matching_rules(instance_state("DRAINING")) == []
    assert [r.logical_id for r in RuleMatcher([elsewhere], bus="ops").matching_rules(instance_state("DRAINING"))] == [
        "Custom"
    ]


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ({"InputPath": "$.detail"}, r"settings the sandbox does not emulate: R/t \(InputPath\)"),
        ({"Arn": "arn:aws:states:us-east-1:123456789012:stateMachine:x"}, r"does not deliver to: R/t \(states\)"),
    ],
)
def test_targets_the_sandbox_cannot_deliver_faithfully_are_refused(
    toy_template: Template, target: dict[str, Any], message: str
) -> None:
    properties = {
        "EventPattern": {"source": ["aws.ecs"]},
        "Targets": [{"Id": "t", "Arn": "arn:aws:sqs:us-east-1:123456789012:q", **target}],
    }
    stack = Stack(
        StackIdentity("test"),
        toy_template,
        {},
        rules={"R": RuleSpec.from_properties("R", properties, name="r", arn="r")},
    )

    with pytest.raises(SandboxError, match=message):
        EventBus.default(stack, AwsClients("http://127.0.0.1:9", "us-east-1"))
