"""Least privilege in template.yaml: what each function may do, read from the template as deployed.

The template is resolved with the sandbox's CloudFormation-tag-tolerant loader and resolver (conditions,
parameters, Fn::If/Sub/Join/Split), so these are the statements CloudFormation would create for the
given parameters. What SAM's transform adds on top (a generated role with managed policies) is not in
the template; the invariant that keeps it out of the alert router is tested instead (its own role).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from sandbox.template import Resolver, StackIdentity, TemplateError, load_template, resolve_parameters

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_TEXT = (ROOT / "template.yaml").read_text(encoding="utf-8")
ACCOUNT = "123456789012"

TASK_ROLE = f"arn:aws:iam::{ACCOUNT}:role/llm-train-task"
EXECUTION_ROLE = f"arn:aws:iam::{ACCOUNT}:role/ecs/llm-train-execution"
RESUME = {"TrainingCapacityProviders": "p5-training", "CheckpointBuckets": "ckpt"}
RELAUNCH = {
    **RESUME,
    "ResumeTaskDefinitionFamilies": "llm-train,llm-eval",
    "ResumeTaskRoleArns": f"{TASK_ROLE},{EXECUTION_ROLE}",
}
TABLES = {"arn:IncidentsTable.Arn": "IncidentsTable"}

# Actions that have no resource types in the Service Authorization Reference, so "*" is their narrowest
# resource. Anything else with "*" is a grant wider than it has to be.
NO_RESOURCE_TYPES = {
    "ecs:DescribeTaskDefinition",
    "ecs:ListClusters",
    "autoscaling:DescribeAutoScalingGroups",
    "ec2:DescribeNetworkInterfaces",
    "xray:PutTraceSegments",
    "xray:PutTelemetryRecords",
    "xray:GetSamplingRules",
    "xray:GetSamplingTargets",
    "logs:CreateLogDelivery",
    "logs:GetLogDelivery",
    "logs:UpdateLogDelivery",
    "logs:DeleteLogDelivery",
    "logs:ListLogDeliveries",
    "logs:PutResourcePolicy",
    "logs:DescribeResourcePolicies",
    "logs:DescribeLogGroups",
}


class _Attributes:
    def ref(self, logical_id: str) -> str:
        return f"ref:{logical_id}"

    def get_att(self, logical_id: str, attribute: str) -> str:
        return f"arn:{logical_id}.{attribute}"


def stack(**overrides: str) -> Resolver:
    template = load_template(ROOT / "template.yaml")
    return Resolver(template, StackIdentity("test"), resolve_parameters(template, overrides), _Attributes())


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def statements(resolver: Resolver) -> Iterator[tuple[str, dict[str, Any]]]:
    """(logical id, statement) for every policy statement of every resource the parameters create."""
    for logical_id in resolver.template.resources:
        if not resolver.is_enabled(logical_id):
            continue
        resource_type = resolver.template.resource_type(logical_id)
        properties = resolver.properties(logical_id)
        documents: list[Mapping[str, Any]] = []
        if resource_type in ("AWS::Serverless::Function", "AWS::Serverless::StateMachine"):
            # SAM policy templates (LambdaInvokePolicy: {...}) are scoped by SAM; inline statements are ours.
            documents = [policy for policy in properties.get("Policies", []) if "Statement" in policy]
        elif resource_type == "AWS::IAM::Role":
            documents = [policy["PolicyDocument"] for policy in properties.get("Policies", [])]
        elif resource_type == "AWS::IAM::Policy":
            documents = [properties["PolicyDocument"]]
        for document in documents:
            for statement in as_list(document["Statement"]):
                yield logical_id, statement


def granting(resolver: Resolver, action: str, owner: str | None = None) -> list[dict[str, Any]]:
    return [
        statement
        for logical_id, statement in statements(resolver)
        if action in as_list(statement["Action"]) and owner in (None, logical_id)
    ]


def table_actions(resolver: Resolver, owner: str) -> dict[str, set[str]]:
    actions: dict[str, set[str]] = {}
    for logical_id, statement in statements(resolver):
        for resource in as_list(statement["Resource"]):
            if logical_id == owner and resource in TABLES:
                actions.setdefault(TABLES[resource], set()).update(as_list(statement["Action"]))
    return actions


# --- Passing roles ---------------------------------------------------------------------------------


def test_without_named_roles_nothing_may_pass_a_role() -> None:
    assert granting(stack(**RESUME), "iam:PassRole") == []


def test_the_workflow_passes_exactly_the_named_roles_and_only_to_ecs_tasks() -> None:
    [passing] = granting(stack(**RELAUNCH), "iam:PassRole")

    assert passing["Resource"] == [TASK_ROLE, EXECUTION_ROLE]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}


@pytest.mark.parametrize(
    "roles", [f"arn:aws:iam::{ACCOUNT}:role/*", f"arn:aws:iam::{ACCOUNT}:role/train-*", "*", "llm-train-task"]
)
def test_a_role_wildcard_or_bare_name_is_rejected_as_a_parameter(roles: str) -> None:
    with pytest.raises(TemplateError, match="ResumeTaskRoleArns"):
        stack(**RESUME, ResumeTaskRoleArns=roles)


# --- Running tasks ---------------------------------------------------------------------------------


def test_without_named_families_no_task_may_be_run() -> None:
    assert granting(stack(**RESUME), "ecs:RunTask") == []


def test_tasks_may_be_run_only_from_the_named_families_in_this_account_and_regions_clusters() -> None:
    [running] = granting(stack(**RELAUNCH), "ecs:RunTask")

    assert running["Resource"] == [
        "arn:*:ecs:*:*:task-definition/llm-train:*",
        "arn:*:ecs:*:*:task-definition/llm-eval:*",
    ]
    assert running["Condition"] == {"ArnLike": {"ecs:cluster": f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/*"}}


def test_with_watched_clusters_tasks_may_be_run_only_in_those() -> None:
    cluster = f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/gpu"

    [running] = granting(stack(**RELAUNCH, ClusterArns=cluster), "ecs:RunTask")

    assert running["Condition"] == {"ArnEquals": {"ecs:cluster": [cluster]}}


@pytest.mark.parametrize("families", ["*", "llm-*", "task-definition/llm-train", "llm-train:3"])
def test_a_family_wildcard_or_arn_is_rejected_as_a_parameter(families: str) -> None:
    with pytest.raises(TemplateError, match="ResumeTaskDefinitionFamilies"):
        stack(**RESUME, ResumeTaskDefinitionFamilies=families)


# --- The alert router ------------------------------------------------------------------------------


def test_every_function_with_an_sqs_event_has_a_role_of_its_own() -> None:
    # SAM gives a function it makes the role for AWSLambdaSQSQueueExecutionRole (every queue in the account)
    resolver = stack(**RELAUNCH)
    functions = [name for name in resolver.template.resources if resolver.is_enabled(name)]
    with_sqs = [
        name
        for name in functions
        if resolver.template.resource_type(name) == "AWS::Serverless::Function"
        and any(event["Type"] == "SQS" for event in resolver.properties(name).get("Events", {}).values())
    ]

    assert with_sqs == ["AlertRouterFunction"]
    for name in with_sqs:
        properties = resolver.properties(name)
        assert "Policies" not in properties
        assert properties["Role"] == "arn:AlertRouterRole.Arn"


def test_the_router_polls_only_the_alert_queue() -> None:
    resolver = stack()
    for action in ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"):
        assert [s["Resource"] for s in granting(resolver, action)] == ["arn:AlertQueue.Arn"], action


def test_the_router_uses_exactly_these_table_actions_one_statement_per_table() -> None:
    resolver = stack()

    assert table_actions(resolver, "AlertRouterRole") == {
        "IncidentsTable": {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"},
    }


def test_the_router_sends_only_to_the_dlq_and_reads_only_the_two_secrets() -> None:
    resolver = stack()

    assert [s["Resource"] for s in granting(resolver, "sqs:SendMessage", "AlertRouterRole")] == ["arn:AlertDLQ.Arn"]
    [secrets] = granting(resolver, "secretsmanager:GetSecretValue", "AlertRouterRole")
    assert secrets["Resource"] == [
        f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:gpu-fault-responder/slack-??????",
        f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:gpu-fault-responder/pagerduty-??????",
    ]


def test_the_router_and_the_sweep_write_only_their_own_log_groups_and_create_none() -> None:
    resolver = stack()

    assert [s["Resource"] for s in granting(resolver, "logs:PutLogEvents", "AlertRouterLogsPolicy")] == [
        "arn:AlertRouterLogGroup.Arn"
    ]
    assert [s["Resource"] for s in granting(resolver, "logs:PutLogEvents", "SweepLogsPolicy")] == [
        "arn:SweepLogGroup.Arn"
    ]
    assert granting(resolver, "logs:CreateLogGroup") == []


def test_the_sweep_reads_and_writes_the_incidents_table_and_lists_only_its_indexes() -> None:
    resolver = stack()

    assert table_actions(resolver, "SweepRole") == {
        "IncidentsTable": {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    }
    queried = [s["Resource"] for s in granting(resolver, "dynamodb:Query", "SweepRole")]
    assert sorted(queried) == [
        "arn:IncidentsTable.Arn",
        "arn:IncidentsTable.Arn/index/Members",
        "arn:IncidentsTable.Arn/index/Open",
    ]


def test_the_alerting_path_writes_the_table_with_update_item_only_and_queries_its_indexes() -> None:
    # (A group's members, journal and head are written with UpdateItem too: no PutItem, no transaction.)
    resolver = stack()
    for role in ("AlertRouterRole", "SweepRole", "ReconcileRole"):
        assert table_actions(resolver, role)["IncidentsTable"] <= {
            "dynamodb:GetItem",
            "dynamodb:UpdateItem",
            "dynamodb:Query",
        }, role
        queried = {s["Resource"] for s in granting(resolver, "dynamodb:Query", role)}
        assert "arn:IncidentsTable.Arn/index/Members" in queried, role
    assert granting(resolver, "sqs:SendMessage", "SweepRole") == []


# --- The reconciliation sweep -----------------------------------------------------------------------

WATCHED = f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/gpu"


def test_the_reconciliation_lists_and_describes_only_the_watched_clusters_instances() -> None:
    resolver = stack(ClusterArns=WATCHED)

    [listing] = granting(resolver, "ecs:ListContainerInstances", "ReconcileRole")
    [describing] = granting(resolver, "ecs:DescribeContainerInstances", "ReconcileRole")

    assert listing["Resource"] == [WATCHED]
    assert describing["Resource"] == f"arn:aws:ecs:us-east-1:{ACCOUNT}:container-instance/*"
    assert describing["Condition"] == {"ArnEquals": {"ecs:cluster": [WATCHED]}}
    assert granting(resolver, "ecs:ListClusters", "ReconcileRole") == []


def test_watching_every_cluster_the_reconciliation_may_list_them_and_only_this_accounts() -> None:
    resolver = stack()

    [listing] = granting(resolver, "ecs:ListContainerInstances", "ReconcileRole")
    [clusters] = granting(resolver, "ecs:ListClusters", "ReconcileRole")

    assert listing["Resource"] == f"arn:aws:ecs:us-east-1:{ACCOUNT}:cluster/*"
    assert clusters["Resource"] == "*"


def test_the_reconciliation_changes_nothing_in_ecs_and_writes_only_its_log_group() -> None:
    resolver = stack(**RELAUNCH)
    ecs_actions = {
        action
        for logical_id, statement in statements(resolver)
        if logical_id == "ReconcileRole"
        for action in as_list(statement["Action"])
        if action.startswith("ecs:")
    }

    assert ecs_actions == {"ecs:ListContainerInstances", "ecs:DescribeContainerInstances", "ecs:ListClusters"}
    assert table_actions(resolver, "ReconcileRole") == {
        "IncidentsTable": {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    }
    assert [s["Resource"] for s in granting(resolver, "logs:PutLogEvents", "ReconcileLogsPolicy")] == [
        "arn:ReconcileLogGroup.Arn"
    ]
    assert granting(resolver, "sqs:SendMessage", "ReconcileRole") == []


def test_the_reconciliation_reads_only_the_stacks_alarms_and_changes_none() -> None:
    resolver = stack(**RELAUNCH)
    cloudwatch = [
        (logical_id, statement)
        for logical_id, statement in statements(resolver)
        if any(action.startswith("cloudwatch:") for action in as_list(statement["Action"]))
    ]

    assert [logical_id for logical_id, _ in cloudwatch] == ["ReconcileRole"]
    [(_, reading)] = cloudwatch
    assert set(as_list(reading["Action"])) == {
        "cloudwatch:DescribeAlarms",
        "cloudwatch:DescribeAlarmHistory",
        "cloudwatch:DescribeAlarmContributors",
    }
    assert reading["Resource"] == f"arn:aws:cloudwatch:us-east-1:{ACCOUNT}:alarm:test.*"


def test_the_reconciliation_is_told_the_stacks_alarm_prefix_and_its_own_rate() -> None:
    variables = stack(ReconcileRateMinutes="7").properties("ReconcileFunction")["Environment"]["Variables"]

    assert variables["ALARM_NAME_PREFIX"] == "test."
    assert str(variables["RECONCILE_RATE_MINUTES"]) == "7"


# --- The resume functions' table actions -----------------------------------------------------------


@pytest.mark.parametrize(
    ("function", "actions"),
    [
        ("ClaimFaultFunction", {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"}),
        ("CheckGuardsFunction", {"dynamodb:Query"}),
        ("QuarantineInstanceFunction", {"dynamodb:GetItem", "dynamodb:UpdateItem"}),
        ("FindJobsFunction", {"dynamodb:PutItem"}),
        ("PlanJobFunction", {"dynamodb:GetItem"}),
        ("StopJobFunction", {"dynamodb:GetItem"}),
        ("CheckTasksFunction", {"dynamodb:GetItem", "dynamodb:PutItem"}),
        ("RelaunchJobFunction", {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:Query"}),
        ("PlanRetryFunction", {"dynamodb:GetItem", "dynamodb:PutItem"}),
        ("NotifyFunction", {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:PutItem", "dynamodb:Query"}),
    ],
)
def test_each_resume_function_has_only_the_incident_table_actions_its_step_uses(
    function: str, actions: set[str]
) -> None:
    assert table_actions(stack(**RELAUNCH), function) == {"IncidentsTable": actions}


def test_a_checkpoint_now_request_is_the_only_object_the_workflow_may_write_or_delete() -> None:
    # Given the stack with two checkpoint buckets
    resolver = stack(**{**RELAUNCH, "CheckpointBuckets": "ckpt,ckpt-eu"})

    # When the statements that write or delete S3 objects are listed
    writes = [(owner, statement) for owner, statement in statements(resolver) if statement["Action"] != "s3:*"]
    found = {
        owner: sorted(as_list(statement["Resource"]))
        for owner, statement in writes
        if {"s3:PutObject", "s3:DeleteObject"} & set(as_list(statement["Action"]))
    }

    # Then only the two checkpoint-now steps have them, on the request object of each bucket's prefixes
    request_objects = ["arn:*:s3:::ckpt-eu/*_CHECKPOINT_NOW", "arn:*:s3:::ckpt/*_CHECKPOINT_NOW"]
    assert found == {"RequestCheckpointFunction": request_objects, "CheckCheckpointFunction": request_objects}
    assert table_actions(resolver, "RequestCheckpointFunction") == {}
    assert table_actions(resolver, "CheckCheckpointFunction") == {}


# --- Wildcard resources ----------------------------------------------------------------------------


def test_only_actions_without_resource_types_are_granted_on_every_resource() -> None:
    wildcards = [
        (logical_id, statement)
        for logical_id, statement in statements(stack(**RELAUNCH))
        if "*" in as_list(statement["Resource"])
    ]

    assert wildcards, "the template has statements on '*' (X-Ray, log delivery): they must be found here"
    for logical_id, statement in wildcards:
        assert set(as_list(statement["Action"])) <= NO_RESOURCE_TYPES, (logical_id, statement.get("Sid"))


def test_every_statement_on_every_resource_is_preceded_by_a_comment_saying_why() -> None:
    lines = TEMPLATE_TEXT.splitlines()
    wildcards = [number for number, line in enumerate(lines) if line.strip() == 'Resource: "*"']

    assert wildcards
    for number in wildcards:
        indent = len(lines[number]) - len(lines[number].lstrip())
        start = next(
            i
            for i in range(number - 1, -1, -1)
            if lines[i].lstrip().startswith("- ") and len(lines[i]) - len(lines[i].lstrip()) == indent - 2
        )
        assert lines[start - 1].strip().startswith("#"), f"template.yaml:{start + 1} has no comment above it"


# --- Acting from Slack -----------------------------------------------------------------------------


def test_only_the_slack_actions_function_answers_tasks_and_only_the_resume_workflows() -> None:
    resolver = stack(**RESUME)

    for action in ("states:SendTaskSuccess", "states:SendTaskFailure"):
        [statement] = granting(resolver, action)
        assert statement["Resource"] == "ref:ResumeTrainingStateMachine"
        assert granting(resolver, action, "SlackActionsRole") == [statement]


def test_without_the_resume_workflow_no_task_may_be_answered() -> None:
    resolver = stack()

    assert granting(resolver, "states:SendTaskSuccess") == []
    assert granting(resolver, "states:SendTaskFailure") == []


def test_the_slack_actions_function_puts_and_deletes_in_the_incidents_table_and_reads_only_the_slack_secret() -> None:
    resolver = stack(**RESUME)

    assert table_actions(resolver, "SlackActionsRole") == {
        "IncidentsTable": {"dynamodb:PutItem", "dynamodb:DeleteItem"}
    }
    [secrets] = granting(resolver, "secretsmanager:GetSecretValue", "SlackActionsRole")
    assert secrets["Resource"] == f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:gpu-fault-responder/slack-??????"


# --- Incident actions onto the alert queue, and hearing from PagerDuty -------------------------------------------


def test_only_the_two_endpoints_send_actions_to_the_alert_queue() -> None:
    resolver = stack(**RESUME)

    senders = {
        logical_id
        for logical_id, statement in statements(resolver)
        if "sqs:SendMessage" in as_list(statement["Action"]) and "arn:AlertQueue.Arn" in as_list(statement["Resource"])
    }
    assert senders == {"SlackActionsRole", "PagerDutyWebhookRole"}
    for role in senders:
        [sending] = granting(resolver, "sqs:SendMessage", role)
        assert sending["Sid"] == "SendIncidentActions"
        assert sending["Resource"] == "arn:AlertQueue.Arn"
        assert as_list(sending["Action"]) == ["sqs:SendMessage"]


def test_the_pagerduty_webhook_reads_only_the_pagerduty_secret_and_touches_no_table() -> None:
    resolver = stack(**RESUME)

    assert table_actions(resolver, "PagerDutyWebhookRole") == {}
    [secrets] = granting(resolver, "secretsmanager:GetSecretValue", "PagerDutyWebhookRole")
    assert (
        secrets["Resource"] == f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:gpu-fault-responder/pagerduty-??????"
    )
    actions = {action for logical_id, s in statements(resolver) if logical_id == "PagerDutyWebhookRole"
               for action in as_list(s["Action"])}  # fmt: skip
    assert actions == {
        "secretsmanager:GetSecretValue",
        "sqs:SendMessage",
        "xray:PutTraceSegments",
        "xray:PutTelemetryRecords",
    }
    [logs] = [s for logical_id, s in statements(resolver) if logical_id == "PagerDutyWebhookLogsPolicy"]
    assert logs["Resource"] == "arn:PagerDutyWebhookLogGroup.Arn"


def test_the_pagerduty_webhook_has_its_own_role_a_public_url_and_the_queue_to_send_to() -> None:
    resolver = stack()
    properties = resolver.properties("PagerDutyWebhookFunction")

    assert properties["Role"] == "arn:PagerDutyWebhookRole.Arn"
    assert "Policies" not in properties
    assert properties["FunctionUrlConfig"] == {"AuthType": "NONE"}
    assert properties["Environment"]["Variables"]["ALERT_QUEUE_URL"] == "ref:AlertQueue"
    assert (
        resolver.properties("SlackActionsFunction")["Environment"]["Variables"]["ALERT_QUEUE_URL"] == "ref:AlertQueue"
    )
    skipped = {
        skip["id"] for skip in resolver.template.resources["PagerDutyWebhookFunction"]["Metadata"]["checkov"]["skip"]
    }
    assert "CKV_AWS_258" in skipped


def test_the_pagerduty_webhook_url_is_an_output() -> None:
    outputs = load_template(ROOT / "template.yaml").body["Outputs"]

    assert outputs["PagerDutyWebhookUrl"]["Value"] == {"Fn::GetAtt": ["PagerDutyWebhookFunctionUrl", "FunctionUrl"]}


def test_moves_on_drain_can_be_switched_off_and_then_no_rule_sends_drains_to_the_workflow() -> None:
    # Given the stack with MoveJobsOnDrain true (the default), and false
    def drain_rules(**overrides: str) -> list[str]:
        resolver = stack(**RELAUNCH, **overrides)
        return [
            logical_id
            for logical_id, resource in resolver.template.resources.items()
            if resource["Type"] == "AWS::Events::Rule"
            and (condition := resource.get("Condition")) is not None
            and resolver.condition(condition)
            and "ECS Container Instance State Change" in str(resource["Properties"]["EventPattern"])
            and "DRAINING" in str(resource["Properties"]["EventPattern"])
        ]

    # Then a rule sends DRAINING state changes to the workflow only when it is on
    assert drain_rules() == ["PlannedMoveRule"]
    assert drain_rules(MoveJobsOnDrain="false") == []


# --- Warm spares -------------------------------------------------------------------------------------------------


def test_only_the_relaunch_grows_auto_scaling_groups_and_only_those_tagged_for_it() -> None:
    resolver = stack(**RELAUNCH)

    growing = [
        (owner, s) for owner, s in statements(resolver) if "autoscaling:SetDesiredCapacity" in as_list(s["Action"])
    ]
    [(owner, statement)] = growing
    assert owner == "RelaunchJobFunction"
    assert as_list(statement["Action"]) == ["autoscaling:SetDesiredCapacity"]
    assert statement["Resource"].endswith(":autoScalingGroup:*:autoScalingGroupName/*")
    assert statement["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/fault-responder:refill-spares": "true"}}
    finding = granting(resolver, "ecs:ListContainerInstances", "RelaunchJobFunction")
    assert len(finding) == 1 and finding[0]["Resource"].endswith(f":{ACCOUNT}:cluster/*")


@pytest.mark.parametrize(
    ("overrides", "finds", "grows"),
    [({"SpareAttribute": ""}, False, False), ({"RefillSpares": "false"}, True, False)],
)
def test_without_spares_or_their_refill_the_relaunch_has_no_rights_for_them(
    overrides: dict[str, str], finds: bool, grows: bool
) -> None:
    resolver = stack(**RELAUNCH, **overrides)

    assert bool(granting(resolver, "ecs:ListContainerInstances", "RelaunchJobFunction")) is finds
    assert bool(granting(resolver, "autoscaling:SetDesiredCapacity")) is grows
    assert bool(granting(resolver, "autoscaling:DescribeAutoScalingGroups")) is grows


def test_each_other_receiver_kinds_secret_is_read_only_where_the_stack_names_one() -> None:
    # Given a stack that names a Teams secret and leaves the webhook's empty (the default: that kind unused)
    resolver = stack(TeamsSecretName="ops/teams", **RESUME)
    teams = f"arn:aws:secretsmanager:us-east-1:{ACCOUNT}:secret:ops/teams-??????"

    # Then every function that reads Slack's secret to deliver reads that one too, and no other gets it
    readers = {
        logical_id
        for logical_id, s in statements(resolver)
        if "secretsmanager:GetSecretValue" in as_list(s["Action"]) and teams in as_list(s["Resource"])
    }
    assert readers == {"AlertRouterRole", "SweepRole", "ReconcileRole", "NotifyFunction"}
    for logical_id in readers:
        [secrets] = granting(resolver, "secretsmanager:GetSecretValue", logical_id)
        assert len(as_list(secrets["Resource"])) == 3  # Slack's, PagerDuty's, Teams': no webhook secret
    variables = resolver.properties("AlertRouterFunction")["Environment"]["Variables"]
    assert json.loads(variables["RECEIVER_SECRETS"]) == {"teams": "ops/teams", "webhook": ""}
