"""Template loading and resolution: intrinsics, parameters, conditions and SAM Globals."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.aws import AwsClients
from sandbox.stack import SANDBOX_ALARM_TOPIC_NAME, deploy_stack, with_sandbox_subscriber
from sandbox.template import (
    StackIdentity,
    Template,
    TemplateError,
    check_rules,
    creation_order,
    load_template,
    merge_globals,
    parse_parameter_overrides,
    resolve_parameters,
    rule_violations,
)
from tests.sandbox.conftest import resolver_for

# --- The real template -----------------------------------------------------------------------------


def test_globals_are_merged_into_the_router_function(real_template: Template) -> None:
    # Given the real template with its defaults
    resolver = resolver_for(real_template)

    # When the function's properties are resolved
    properties = resolver.properties("AlertRouterFunction")

    # Then the Globals fill what the function leaves out, and both environments are merged
    assert properties["Runtime"] == "python3.13"
    assert properties["Timeout"] == 60
    assert properties["MemorySize"] == 512
    assert properties["Layers"] == ["<CommonLayer>"]
    variables = properties["Environment"]["Variables"]
    assert variables["POWERTOOLS_SERVICE_NAME"] == "gpu-fault-responder"
    assert variables["INCIDENTS_TABLE"] == "<IncidentsTable>"
    assert variables["ALERT_DLQ_URL"] == "<AlertDLQ>"
    assert properties["Handler"] == "app.lambda_handler"


def test_sub_resolves_pseudo_parameters_and_parameters(real_template: Template) -> None:
    resolver = resolver_for(real_template)

    statements = resolver.properties("AlertRouterRole")["Policies"][0]["PolicyDocument"]["Statement"]

    secrets = next(s for s in statements if s["Sid"] == "ReadNotifierSecrets")["Resource"]
    assert secrets == [
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpu-fault-responder/slack-??????",
        "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpu-fault-responder/pagerduty-??????",
    ]


def test_watching_all_clusters_removes_the_cluster_filter(real_template: Template) -> None:
    resolver = resolver_for(real_template)

    assert resolver.condition("WatchAllClusters") is True
    assert "detail" not in resolver.properties("HealthChangeRule")["EventPattern"]


def test_cluster_arns_override_adds_the_cluster_filter(real_template: Template) -> None:
    arns = "arn:aws:ecs:us-east-1:123456789012:cluster/a, arn:aws:ecs:us-east-1:123456789012:cluster/b"
    resolver = resolver_for(real_template, {"ClusterArns": arns})

    assert resolver.condition("WatchAllClusters") is False
    pattern = resolver.properties("TaskStoppedRule")["EventPattern"]
    assert pattern["detail"]["clusterArn"] == [
        "arn:aws:ecs:us-east-1:123456789012:cluster/a",
        "arn:aws:ecs:us-east-1:123456789012:cluster/b",
    ]
    assert pattern["detail"]["lastStatus"] == ["STOPPED"]


def test_no_value_drops_the_alarm_actions_without_a_topic(real_template: Template) -> None:
    # The GPU alarms reach people through the router only, unless AlarmTopicArn names a topic of the deployer's
    assert "AlarmActions" not in resolver_for(real_template).properties("GpuTemperatureAlarm")
    with_topic = resolver_for(real_template, {"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:pager"})
    assert with_topic.properties("GpuTemperatureAlarm")["AlarmActions"] == ["arn:aws:sns:us-east-1:123456789012:pager"]


def test_own_health_alarms_notify_the_stacks_topic_and_the_deployers(real_template: Template) -> None:
    without = resolver_for(real_template).properties("AlertDLQAlarm")
    with_topic = resolver_for(real_template, {"AlarmTopicArn": "arn:aws:sns:us-east-1:123456789012:pager"})
    [own] = without["AlarmActions"]
    assert with_topic.properties("AlertDLQAlarm")["OKActions"] == [own, "arn:aws:sns:us-east-1:123456789012:pager"]


def test_redrive_policy_resolves_the_dlq_and_receive_count(real_template: Template) -> None:
    properties = resolver_for(real_template, {"AlertMaxReceiveCount": "7"}).properties("AlertQueue")

    assert properties["RedrivePolicy"] == {"deadLetterTargetArn": "<AlertDLQ.Arn>", "maxReceiveCount": "7"}


def test_resources_are_created_after_what_they_reference(real_template: Template) -> None:
    order = creation_order(real_template)

    assert order.index("AlertDLQ") < order.index("AlertQueue")
    assert order.index("CommonLayer") < order.index("AlertRouterFunction")  # via Globals.Layers
    assert order.index("AlertQueue") < order.index("HealthChangeRule")
    assert order.index("AlertRouterFunction") < order.index("AlertRouterLogGroup")


# --- Intrinsics on the fixture template ------------------------------------------------------------


def test_intrinsic_functions_resolve(intrinsics_template: Template) -> None:
    variables = resolver_for(intrinsics_template).properties("Worker")["Environment"]["Variables"]

    assert variables == {
        "STAGE": "dev",
        "SHARED": "from-function",
        "QUEUE_URL": "<Queue>",
        "QUEUE_ARN": "<Queue.Arn>",
        "FIRST_NAME": "alpha",
        "ALL_NAMES": "alpha+beta+gamma",
        "SECOND_PART": "b",
        "SUBSTITUTED": "test-stack-dev-<Queue.QueueName>-${Literal}",
        "WITH_VARIABLES": "3:us-east-1",
        "MODE": "development",
        "BOTH": "no",
        "EITHER": "no",
        "PARTITION": "aws",
        "ACCOUNT": "123456789012",
    }


def test_conditions_follow_the_parameters(intrinsics_template: Template) -> None:
    resolver = resolver_for(intrinsics_template, {"Stage": "prod", "Suffix": "blue"})

    variables = resolver.properties("Worker")["Environment"]["Variables"]

    assert (variables["MODE"], variables["OPTIONAL"], variables["BOTH"], variables["EITHER"]) == (
        "production",
        "blue",
        "yes",
        "yes",
    )
    assert resolver.is_enabled("ProdOnlyQueue")
    assert not resolver_for(intrinsics_template).is_enabled("ProdOnlyQueue")


def test_globals_merge_maps_and_concatenate_lists(intrinsics_template: Template) -> None:
    properties = resolver_for(intrinsics_template).properties("Worker")

    assert properties["Runtime"] == "python3.13"
    assert properties["Timeout"] == 10
    assert properties["Layers"] == ["<SharedLayer>", "arn:aws:lambda:us-east-1:123456789012:layer:extra:1"]
    assert properties["Tags"] == {"team": "gpu", "owner": "me"}


def test_merge_globals_treats_an_intrinsic_as_one_value() -> None:
    merged = merge_globals({"A": {"Ref": "X"}, "B": {"c": 1}}, {"A": {"d": 2}, "B": {"Fn::If": ["C", 1, 2]}})

    assert merged == {"A": {"d": 2}, "B": {"Fn::If": ["C", 1, 2]}}


def test_a_reference_to_a_resource_whose_condition_is_false_is_an_error(tmp_path: Path) -> None:
    template_path = tmp_path / "template.yaml"
    template_path.write_text(
        "Conditions:\n  Never: !Equals [a, b]\n"
        "Resources:\n  Gone:\n    Type: AWS::SQS::Queue\n    Condition: Never\n"
        "  Uses:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName: !Ref Gone\n"
    )
    resolver = resolver_for(load_template(template_path))

    with pytest.raises(TemplateError, match="Condition is false"):
        resolver.properties("Uses")


def test_unsupported_functions_and_unknown_names_are_clear_errors(tmp_path: Path) -> None:
    template_path = tmp_path / "template.yaml"
    template_path.write_text(
        "Resources:\n  Q:\n    Type: AWS::SQS::Queue\n    Properties:\n"
        "      A: !ImportValue shared-thing\n      B: !Ref Missing\n"
    )
    resolver = resolver_for(load_template(template_path))

    with pytest.raises(TemplateError, match="Fn::ImportValue is not supported"):
        resolver.resolve({"Fn::ImportValue": "shared-thing"})
    with pytest.raises(TemplateError, match="Missing: no such parameter or resource"):
        resolver.resolve({"Ref": "Missing"})


def test_circular_dependencies_are_reported(tmp_path: Path) -> None:
    template_path = tmp_path / "template.yaml"
    template_path.write_text(
        "Resources:\n"
        "  A:\n    Type: AWS::SQS::Queue\n    Properties:\n      QueueName: !GetAtt B.QueueName\n"
        "  B:\n    Type: AWS::SQS::Queue\n    DependsOn: A\n"
    )

    with pytest.raises(TemplateError, match="circular dependency between A, B"):
        creation_order(load_template(template_path))


# --- Parameters ------------------------------------------------------------------------------------


def test_parameter_overrides_accept_both_forms() -> None:
    assert parse_parameter_overrides(["A=1", "B=x=y", "ParameterKey=C,ParameterValue=a,b"]) == {
        "A": "1",
        "B": "x=y",
        "C": "a,b",
    }
    with pytest.raises(TemplateError, match="is not Key=Value"):
        parse_parameter_overrides(["NoEquals"])


def test_comma_delimited_lists_are_trimmed(intrinsics_template: Template) -> None:
    assert resolve_parameters(intrinsics_template, {})["Names"] == ["alpha", "beta", "gamma"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"Nope": "1"}, "unknown parameter Nope"),
        ({"Stage": "qa"}, "is not one of dev, prod"),
        ({"Retries": "9"}, "above MaxValue 5"),
        ({"Retries": "three"}, "is not a number"),
        ({"Suffix": "UPPER"}, "does not match AllowedPattern"),
    ],
)
def test_parameters_are_checked_like_cloudformation(
    intrinsics_template: Template, overrides: dict[str, str], message: str
) -> None:
    with pytest.raises(TemplateError, match=message):
        resolve_parameters(intrinsics_template, overrides)


def test_a_parameter_without_default_must_be_given(tmp_path: Path) -> None:
    template_path = tmp_path / "template.yaml"
    template_path.write_text("Parameters:\n  Needed:\n    Type: String\nResources: {}\n")

    with pytest.raises(TemplateError, match="Needed has no default"):
        resolve_parameters(load_template(template_path), {})


def test_loading_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="cannot read template"):
        load_template(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("Resources: [unclosed\n")
    with pytest.raises(TemplateError, match="is not valid YAML"):
        load_template(bad)


# --- Rules -----------------------------------------------------------------------------------------

RULES_TEMPLATE = """
Parameters:
  Stage: {Type: String, Default: dev, AllowedValues: [dev, prod]}
  Pager: {Type: String, Default: ""}
Rules:
  ProdPages:
    RuleCondition: !Equals [!Ref Stage, prod]
    Assertions:
      - Assert: !Not [!Equals [!Ref Pager, ""]]
        AssertDescription: A prod stack must name its Pager.
Resources:
  Queue: {Type: AWS::SQS::Queue}
"""


@pytest.fixture
def rules_template(tmp_path: Path) -> Template:
    template_path = tmp_path / "template.yaml"
    template_path.write_text(RULES_TEMPLATE)
    return load_template(template_path)


IDENTITY = StackIdentity("test-stack")


@pytest.mark.parametrize(
    ("overrides", "refused"),
    [
        ({"Stage": "prod"}, True),
        ({"Stage": "prod", "Pager": "oncall"}, False),
        ({}, False),  # the RuleCondition is false: nothing is asserted
    ],
)
def test_rules_refuse_parameters_with_their_assert_description(
    rules_template: Template, overrides: dict[str, str], refused: bool
) -> None:
    # Given parameters that pass their own constraints
    parameters = resolve_parameters(rules_template, overrides)

    # When the Rules are checked, Then only an assertion whose condition holds and that fails refuses them, with its
    # description
    assert rule_violations(rules_template, IDENTITY, parameters) == (["A prod stack must name its Pager."] * refused)
    if refused:
        with pytest.raises(TemplateError, match="Rules refuse these parameters: A prod stack must name its Pager"):
            check_rules(rules_template, IDENTITY, parameters)
    else:
        check_rules(rules_template, IDENTITY, parameters)


def test_a_rule_may_not_refer_to_a_resource(tmp_path: Path) -> None:
    template_path = tmp_path / "template.yaml"
    template_path.write_text(
        "Rules:\n  R:\n    Assertions:\n      - Assert: !Equals [!Ref Queue, q]\n"
        "Resources:\n  Queue: {Type: AWS::SQS::Queue}\n"
    )
    template = load_template(template_path)

    with pytest.raises(TemplateError, match="Rules may refer to parameters only"):
        check_rules(template, IDENTITY, resolve_parameters(template, {}))


def test_the_sandbox_refuses_a_deploy_the_rules_refuse_before_creating_anything(rules_template: Template) -> None:
    # Given a deploy the template's Rules refuse, and AWS clients that reach nothing (a closed port)
    parameters = resolve_parameters(rules_template, {"Stage": "prod"})
    nowhere = AwsClients("http://127.0.0.1:9", IDENTITY.region)

    # When the sandbox deploys it, Then it is refused with the rule's description, before any AWS call
    with pytest.raises(TemplateError, match="A prod stack must name its Pager"):
        deploy_stack(rules_template, IDENTITY, parameters, nowhere)


def test_cloudformation_refuses_the_real_templates_defaults_and_the_sandbox_names_its_own_on_call_topic(
    real_template: Template,
) -> None:
    # Given the real template's defaults: no one hears the own-health alarms
    defaults = resolve_parameters(real_template, {})
    [description] = rule_violations(real_template, IDENTITY, defaults)
    assert "AlarmTopicArn" in description
    with pytest.raises(TemplateError, match="OwnHealthEmail"):
        check_rules(real_template, IDENTITY, defaults)

    # When the sandbox deploys them, Then it names its example topic as AlarmTopicArn (documented in
    # docs/alarms.md), which the Rules accept, and nothing else changes
    sandboxed = with_sandbox_subscriber(real_template, IDENTITY, defaults)
    assert sandboxed == {**defaults, "AlarmTopicArn": f"arn:aws:sns:us-east-1:123456789012:{SANDBOX_ALARM_TOPIC_NAME}"}
    check_rules(real_template, IDENTITY, sandboxed)


@pytest.mark.parametrize(
    "subscriber",
    [{"OwnHealthEmail": "gpu-oncall@example.com"}, {"OwnHealthPagerDuty": "Enabled"}],
)
def test_a_sandbox_deploy_that_names_a_subscriber_keeps_its_parameters(
    real_template: Template, subscriber: dict[str, str]
) -> None:
    parameters = resolve_parameters(real_template, subscriber)

    assert with_sandbox_subscriber(real_template, IDENTITY, parameters) == parameters
