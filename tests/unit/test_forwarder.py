"""forwarder.yaml, the member accounts' template: plain CloudFormation (a service-managed StackSet refuses a
Transform), cfn-lint clean; its rules forward what template.yaml's rules read, to the central bus with a role; and the
role the central responder assumes is trusted by that responder's roles alone and may do what the workflow and the
reconciliation sweep call, in its own account, and nothing more.

The template is resolved with the sandbox's resolver for a given account, Region and parameters, so these are the
resources and statements CloudFormation would create for that stack instance."""

from __future__ import annotations

import copy
import importlib.resources
import json
import re
import subprocess
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from localstack.services.events.event_rule_engine import EventPatternCompiler, EventRuleEngine

from sandbox.template import Resolver, StackIdentity, TemplateError, check_rules, load_template, resolve_parameters
from tests.conftest import ROOT, checkout_lock
from tests.unit.test_template_iam import NO_RESOURCE_TYPES

FORWARDER_PATH = ROOT / "forwarder.yaml"
FORWARDER = load_template(FORWARDER_PATH)
FORWARDER_TEXT = FORWARDER_PATH.read_text(encoding="utf-8")
TEMPLATE = load_template(ROOT / "template.yaml")
CFN_LINT = ROOT / ".venv-sam" / "bin" / "cfn-lint"

CENTRAL_ACCOUNT = "111111111111"
CENTRAL_REGION = "us-east-1"
MEMBER = "222222222222"
CENTRAL_STACK = "gpu-fault-responder"
BUS = f"arn:aws:events:{CENTRAL_REGION}:{CENTRAL_ACCOUNT}:event-bus/{CENTRAL_STACK}-organization"
EXTERNAL_ID = "5f0c6a8e-0d7e-11f1-9a3b-0a1b2c3d4e5f"
REQUIRED = {"CentralEventBusArn": BUS, "CentralStackName": CENTRAL_STACK, "ExternalId": EXTERNAL_ID}
RELAUNCH = {
    "CheckpointBuckets": "ckpt,ckpt-eu",
    "TaskDefinitionFamilies": "llm-train,llm-eval",
    "TaskRoleNames": "llm-train-task,ecs/llm-train-execution",
}
FORWARD_RULES = {
    "HealthChangeForwardRule": "HealthChangeRule",
    "InstanceStateChangeForwardRule": "InstanceStateChangeRule",
    "TaskStoppedForwardRule": "TaskStoppedRule",
}


class _Attributes:
    def ref(self, logical_id: str) -> str:
        return f"ref:{logical_id}"

    def get_att(self, logical_id: str, attribute: str) -> str:
        return f"arn:{logical_id}.{attribute}"


def forwarder(account: str = MEMBER, region: str = "eu-west-1", **overrides: str) -> Resolver:
    parameters = resolve_parameters(FORWARDER, {**REQUIRED, **overrides})
    return Resolver(FORWARDER, StackIdentity("member", region, account), parameters, _Attributes())


def central(**overrides: str) -> Resolver:
    parameters = resolve_parameters(TEMPLATE, overrides)
    return Resolver(TEMPLATE, StackIdentity(CENTRAL_STACK, CENTRAL_REGION, CENTRAL_ACCOUNT), parameters, _Attributes())


def created(resolver: Resolver) -> set[str]:
    return {name for name in resolver.template.resources if resolver.is_enabled(name)}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def role_statements(resolver: Resolver) -> list[dict[str, Any]]:
    [policy] = resolver.properties("ResponderRole")["Policies"]
    return list(policy["PolicyDocument"]["Statement"])


def granted(resolver: Resolver) -> dict[str, list[dict[str, Any]]]:
    """Each action the responder role allows -> the statements allowing it."""
    actions: dict[str, list[dict[str, Any]]] = {}
    for statement in role_statements(resolver):
        assert statement["Effect"] == "Allow"
        for action in as_list(statement["Action"]):
            actions.setdefault(action, []).append(statement)
    return actions


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    compiled = EventPatternCompiler().compile_event_pattern(copy.deepcopy(dict(pattern)))  # type: ignore[no-untyped-call]
    return bool(EventRuleEngine().evaluate_pattern_on_event(compiled, copy.deepcopy(dict(event))))  # type: ignore[no-untyped-call]


def sample_events() -> Iterator[dict[str, Any]]:
    """Every EventBridge envelope the repository ships under events/ (ECS, alarms, drills, and what no rule takes),
    and variations of each on the fields the rules filter on (a status, a stop code or reason, an alarm's name)."""
    for path in sorted((ROOT / "events").rglob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        for item in document if isinstance(document, list) else [document]:
            if isinstance(item, dict) and "detail-type" in item and isinstance(item.get("detail"), dict):
                yield item
                yield from _variations(item)


_VARIED: dict[str, list[tuple[str, Any]]] = {
    "status": [("status", value) for value in ("ACTIVE", "DRAINING", "INACTIVE", "REGISTERING")],
    "lastStatus": [("lastStatus", value) for value in ("RUNNING", "STOPPED", "DEPROVISIONING")],
    "stopCode": [("stopCode", value) for value in ("UserInitiated", "SpotInterruption", "TerminationNotice", None)],
    "stoppedReason": [
        ("stoppedReason", value)
        for value in ("Task stopped by user", "Task stopped during instance draining: ci-1", "Essential container")
    ],
    "alarmName": [
        ("alarmName", value)
        for value in (
            f"{CENTRAL_STACK}.gpu-temperature",
            f"{CENTRAL_STACK}.router-errors",
            f"{CENTRAL_STACK}-other.gpu-temperature",
            "gpu-temperature",
        )
    ],
}


def _variations(event: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for source in ("fault-responder.drill", "fault-responder.actions", "aws.ec2"):
        yield {**copy.deepcopy(event), "id": f"{event['id']}/source={source}", "source": source}
    for field, values in _VARIED.items():
        if field not in event["detail"] and not (
            field in ("stopCode", "stoppedReason") and "lastStatus" in event["detail"]
        ):
            continue
        for key, value in values:
            varied = copy.deepcopy(event)
            varied["id"] = f"{event['id']}/{key}={value}"
            if value is None:
                varied["detail"].pop(key, None)
            else:
                varied["detail"][key] = value
            if key == "alarmName" and varied.get("resources"):
                arn = str(varied["resources"][0])
                varied["resources"][0] = (
                    arn[: arn.index(":alarm:") + len(":alarm:")] + value if ":alarm:" in arn else arn
                )
            if key in ("stopCode", "stoppedReason"):
                varied["detail"]["lastStatus"] = "STOPPED"
            yield varied


# --- What it is ----------------------------------------------------------------------------------------------------


def test_it_is_plain_cloudformation_without_a_transform() -> None:
    # A service-managed StackSet refuses a template with a Transform, and SAM's resource types need one
    assert "Transform" not in FORWARDER.body
    assert FORWARDER.body["AWSTemplateFormatVersion"] == "2010-09-09"
    assert not [name for name in FORWARDER.resources if FORWARDER.resource_type(name).startswith("AWS::Serverless::")]
    assert "Globals" not in FORWARDER.body


def test_cfn_lint_finds_nothing() -> None:
    if not (ROOT / ".venv-sam" / ".installed").exists():
        with checkout_lock():
            subprocess.run(["make", "--no-print-directory", ".venv-sam/.installed"], cwd=ROOT, check=True)

    linted = subprocess.run([str(CFN_LINT), str(FORWARDER_PATH)], capture_output=True, text=True, check=False)

    assert (linted.returncode, linted.stdout + linted.stderr) == (0, "")


def test_every_parameter_is_described_grouped_and_labelled() -> None:
    interface = FORWARDER.body["Metadata"]["AWS::CloudFormation::Interface"]
    grouped = [name for group in interface["ParameterGroups"] for name in group["Parameters"]]

    assert sorted(grouped) == sorted(FORWARDER.parameters)
    assert sorted(interface["ParameterLabels"]) == sorted(FORWARDER.parameters)
    assert all(str(spec.get("Description", "")).strip() for spec in FORWARDER.parameters.values())


# --- Forwarding -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("ours", "theirs"), sorted(FORWARD_RULES.items()))
def test_each_rule_forwards_what_the_central_rule_reads_from_every_cluster(ours: str, theirs: str) -> None:
    forwarded = forwarder().properties(ours)
    read = central().properties(theirs)

    assert forwarded["EventBusName"] == "default"
    assert forwarded["EventPattern"] == read["EventPattern"]


def test_the_rules_forward_exactly_the_sample_events_the_central_rules_read() -> None:
    # Given the forwarder's rules and the central stack's alerting rules (the central stack's own alarms aside: a
    # member forwards only its GPU alarms)
    member = forwarder()
    ours = [member.properties(name)["EventPattern"] for name in created(member) if name.endswith("ForwardRule")]
    hub = central()
    theirs = [hub.properties(name)["EventPattern"] for name in (*FORWARD_RULES.values(), "AlarmStateChangeRule")]
    gpu_alarms = {f"{CENTRAL_STACK}.gpu-temperature", f"{CENTRAL_STACK}.gpu-restart-app-xids"}

    # When every sample event is matched against both
    checked = 0
    for event in sample_events():
        forwarded = any(matches(pattern, event) for pattern in ours)
        read = any(matches(pattern, event) for pattern in theirs)
        if event["source"] == "aws.cloudwatch" and event["detail"].get("alarmName") not in gpu_alarms:
            read = False
        # Then a member forwards an event exactly when the central stack would act on it
        assert forwarded == read, (event["detail-type"], event["detail"].get("alarmName"), event["id"])
        checked += forwarded

    assert checked > 30


def test_only_the_gpu_alarms_are_forwarded_not_an_alarm_named_like_the_central_stacks_own_health() -> None:
    pattern = forwarder().properties("GpuAlarmsForwardRule")["EventPattern"]
    alarm = json.loads((ROOT / "events" / "alarm" / "gpu-temperature-alarm.json").read_text(encoding="utf-8"))
    own_health = json.loads((ROOT / "events" / "alarm" / "router-errors-alarm.json").read_text(encoding="utf-8"))

    assert matches(pattern, alarm)
    assert not matches(pattern, own_health)
    assert matches(central().properties("AlarmStateChangeRule")["EventPattern"], own_health)


def test_every_rule_delivers_to_the_central_bus_with_its_role_retries_for_a_day_and_dead_letters() -> None:
    member = forwarder()
    rules = sorted(name for name in created(member) if name.endswith("ForwardRule"))

    assert rules == sorted([*FORWARD_RULES, "GpuAlarmsForwardRule"])
    for name in rules:
        [target] = member.properties(name)["Targets"]
        assert target["Arn"] == BUS, name
        assert target["RoleArn"] == "arn:ForwardRole.Arn", name
        assert target["DeadLetterConfig"] == {"Arn": "arn:ForwardDLQ.Arn"}, name
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400}, name
    [dead_letters] = member.properties("ForwardDLQPolicy")["PolicyDocument"]["Statement"]
    assert dead_letters["Principal"] == {"Service": "events.amazonaws.com"}
    assert sorted(dead_letters["Condition"]["ArnEquals"]["aws:SourceArn"]) == [f"arn:{name}.Arn" for name in rules]


def test_the_forwarding_role_may_put_events_on_the_central_bus_and_nothing_else() -> None:
    role = forwarder().properties("ForwardRole")

    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": MEMBER}}
    [policy] = role["Policies"]
    assert policy["PolicyDocument"]["Statement"] == [
        {"Sid": "PutOnCentralBus", "Effect": "Allow", "Action": "events:PutEvents", "Resource": BUS}
    ]


def test_the_gpu_alarms_are_the_central_stacks_under_its_names_without_actions() -> None:
    member = forwarder()
    hub = central(AlarmTopicArn=f"arn:aws:sns:{CENTRAL_REGION}:{CENTRAL_ACCOUNT}:on-call")

    for name in ("GpuTemperatureAlarm", "GpuRestartAppXidAlarm"):
        ours, theirs = member.properties(name), hub.properties(name)
        assert ours["AlarmName"] == theirs["AlarmName"], name
        assert {key: value for key, value in theirs.items() if not key.endswith("Actions")} == ours, name


def test_gpu_alarms_disabled_leaves_the_alarms_and_their_rule_out() -> None:
    member = forwarder(GpuAlarms="Disabled")

    assert not {"GpuTemperatureAlarm", "GpuRestartAppXidAlarm", "GpuAlarmsForwardRule"} & created(member)
    assert set(FORWARD_RULES) <= created(member)
    arns = member.properties("ForwardDLQPolicy")["PolicyDocument"]["Statement"][0]["Condition"]["ArnEquals"]
    assert "arn:GpuAlarmsForwardRule.Arn" not in arns["aws:SourceArn"]


# --- Where it creates what -----------------------------------------------------------------------------------------

FORWARDING = {*FORWARD_RULES, "GpuAlarmsForwardRule", "ForwardRole", "ForwardDLQ", "ForwardDLQPolicy"}
ALARMS = {"GpuTemperatureAlarm", "GpuRestartAppXidAlarm"}


def test_in_the_central_accounts_own_region_nothing_is_forwarded_the_central_stack_reads_it_itself() -> None:
    here = forwarder(CENTRAL_ACCOUNT, CENTRAL_REGION)
    elsewhere = forwarder(CENTRAL_ACCOUNT, "us-west-2")
    member_same_region = forwarder(MEMBER, CENTRAL_REGION)

    assert created(here) == {"ResponderRole"}
    assert created(elsewhere) >= FORWARDING | ALARMS
    assert created(member_same_region) >= FORWARDING | ALARMS


def test_the_role_and_the_rules_are_deployed_apart_one_role_per_account_rules_in_every_region() -> None:
    rules_only = forwarder(CreateResponderRole="false")
    role_only = forwarder(ForwardEvents="false")

    assert "ResponderRole" not in created(rules_only)
    assert created(rules_only) >= FORWARDING | ALARMS
    assert created(role_only) == {"ResponderRole"}
    assert created(forwarder()) == FORWARDING | ALARMS | {"ResponderRole"}


def test_a_stack_instance_that_would_create_nothing_is_refused_and_one_left_empty_holds_a_placeholder() -> None:
    parameters = resolve_parameters(FORWARDER, {**REQUIRED, "CreateResponderRole": "false", "ForwardEvents": "false"})
    with pytest.raises(TemplateError, match="would do nothing"):
        check_rules(FORWARDER, StackIdentity("member", "eu-west-1", MEMBER), parameters)

    # The central account's own Region, its role made in another Region: CloudFormation needs one resource
    empty = forwarder(CENTRAL_ACCOUNT, CENTRAL_REGION, CreateResponderRole="false")
    assert created(empty) == {"NothingToForwardHere"}
    assert "NothingToForwardHere" not in created(forwarder())


# --- The role the central responder assumes ------------------------------------------------------------------------


def test_the_role_is_assumed_only_by_the_central_stacks_roles_with_its_external_id() -> None:
    role = forwarder(**RELAUNCH).properties("ResponderRole")

    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert role["RoleName"] == "gpu-fault-responder-member"
    assert trust["Effect"] == "Allow"
    assert trust["Action"] == "sts:AssumeRole"
    assert trust["Principal"] == {"AWS": f"arn:aws:iam::{CENTRAL_ACCOUNT}:root"}
    assert trust["Condition"] == {
        "StringEquals": {"sts:ExternalId": EXTERNAL_ID},
        "ArnLike": {"aws:PrincipalArn": f"arn:aws:iam::{CENTRAL_ACCOUNT}:role/{CENTRAL_STACK}/*"},
    }


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CentralEventBusArn", "gpu-fault-responder-organization"),
        ("CentralEventBusArn", f"arn:aws:sqs:{CENTRAL_REGION}:{CENTRAL_ACCOUNT}:queue"),
        ("CentralStackName", "gpu fault responder"),
        ("ExternalId", "x"),
        ("TaskRoleNames", "*"),
        ("TaskRoleNames", "llm-*"),
        ("TaskRoleNames", "arn:aws:iam::222222222222:role/llm-train-task"),
        ("TaskDefinitionFamilies", "llm-*"),
        ("TaskDefinitionFamilies", "llm-train:3"),
        ("CheckpointBuckets", "ckpt*"),
        ("ResponderRoleName", "gpu/fault"),
    ],
)
def test_wildcards_and_wrong_shapes_are_refused_as_parameters(name: str, value: str) -> None:
    with pytest.raises(TemplateError, match=name):
        forwarder(**{name: value})


def test_only_actions_without_resource_types_are_granted_on_every_resource_each_with_a_comment() -> None:
    statements = role_statements(forwarder(**RELAUNCH))
    wildcards = [statement for statement in statements if "*" in as_list(statement["Resource"])]

    assert {statement["Sid"] for statement in wildcards} == {
        "ListClusters",
        "ContainerNames",
        "TaskNetworkInterfaces",
        "SpareGroupSize",
    }
    for statement in wildcards:
        assert set(as_list(statement["Action"])) <= NO_RESOURCE_TYPES, statement["Sid"]
    lines = FORWARDER_TEXT.splitlines()
    for number in [number for number, line in enumerate(lines) if line.strip() == 'Resource: "*"']:
        indent = len(lines[number]) - len(lines[number].lstrip())
        start = next(
            i
            for i in range(number - 1, -1, -1)
            if lines[i].lstrip().startswith("- ") and len(lines[i]) - len(lines[i].lstrip()) == indent - 2
        )
        assert lines[start - 1].strip().startswith("#"), f"forwarder.yaml:{start + 1} has no comment above it"


def test_every_other_resource_is_this_accounts_or_a_named_bucket_family_role_or_alarm() -> None:
    member = forwarder(**RELAUNCH)
    resources = {
        statement["Sid"]: as_list(statement["Resource"])
        for statement in role_statements(member)
        if "*" not in as_list(statement["Resource"])
    }

    ecs = f"arn:aws:ecs:*:{MEMBER}"
    assert resources == {
        "ListClusterInstances": [f"{ecs}:cluster/*"],
        "ReadInstances": [f"{ecs}:container-instance/*"],
        "ReadCapacityProviders": [f"{ecs}:capacity-provider/*"],
        "DrainInstances": [f"{ecs}:container-instance/*"],
        "ReadAndStopTasks": [f"{ecs}:task/*"],
        "RunTasks": ["arn:*:ecs:*:*:task-definition/llm-train:*", "arn:*:ecs:*:*:task-definition/llm-eval:*"],
        "TagRelaunchedTasks": [f"{ecs}:task/*"],
        "PassTaskRoles": ["arn:*:iam::*:role/llm-train-task", "arn:*:iam::*:role/ecs/llm-train-execution"],
        "RefillSpares": [f"arn:aws:autoscaling:*:{MEMBER}:autoScalingGroup:*:autoScalingGroupName/*"],
        "ReadCheckpoints": [
            "arn:*:s3:::ckpt",
            "arn:*:s3:::ckpt-eu",
            "arn:*:s3:::ckpt/*",
            "arn:*:s3:::ckpt-eu/*",
        ],
        "AskForCheckpoint": ["arn:*:s3:::ckpt/*_CHECKPOINT_NOW", "arn:*:s3:::ckpt-eu/*_CHECKPOINT_NOW"],
        "ReadGpuAlarms": [
            f"arn:aws:cloudwatch:*:{MEMBER}:alarm:{CENTRAL_STACK}.gpu-temperature",
            f"arn:aws:cloudwatch:*:{MEMBER}:alarm:{CENTRAL_STACK}.gpu-restart-app-xids",
        ],
    }


def test_what_the_wildcard_account_arns_allow_is_held_to_this_account_and_ecs_tasks() -> None:
    actions = granted(forwarder(**RELAUNCH))

    [running] = actions["ecs:RunTask"]
    assert running["Condition"] == {"ArnLike": {"ecs:cluster": f"arn:aws:ecs:*:{MEMBER}:cluster/*"}}
    [tagging] = actions["ecs:TagResource"]
    assert tagging["Condition"] == {"StringEquals": {"ecs:CreateAction": "RunTask"}}
    [passing] = actions["iam:PassRole"]
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "ecs-tasks.amazonaws.com"}}
    [refill] = actions["autoscaling:SetDesiredCapacity"]
    assert refill["Condition"] == {"StringEquals": {"autoscaling:ResourceTag/fault-responder:refill-spares": "true"}}


def test_without_named_families_roles_or_buckets_nothing_may_be_run_passed_or_read_in_s3() -> None:
    actions = granted(forwarder())

    assert not {"ecs:RunTask", "ecs:TagResource", "iam:PassRole"} & set(actions)
    assert not [action for action in actions if action.startswith("s3:")]


# The AWS calls the reconciliation sweep and the resume workflow make, read from their adapters, as IAM actions.
ADAPTERS = {
    "ecs": ("ecs_health.py", "ecs.py"),
    "ec2": ("ecs.py",),
    "s3": ("s3_checkpoints.py",),
    "autoscaling": ("autoscaling.py",),
    "cloudwatch": ("cloudwatch_alarms.py",),
}
IAM_ACTION_OF = {"s3:ListObjectsV2": "s3:ListBucket"}
IMPLIED = {
    "ecs:TagResource": "RunTask propagates the job's tags onto the tasks it starts",
    "iam:PassRole": "RunTask passes the task definition's task and execution roles",
    "cloudwatch:DescribeAlarmContributors": "called by name only where the SDK has it (an older one has not)",
}


def adapter_calls() -> set[str]:
    calls: set[str] = set()
    for service, files in ADAPTERS.items():
        for name in files:
            text = (ROOT / "layers" / "common" / "fault_responder" / "adapters" / name).read_text(encoding="utf-8")
            operations = re.findall(rf"self\._{service}\.(?!get_paginator\b|meta\b)([a-z0-9_]+)\(", text)
            operations += re.findall(rf"self\._{service}\.get_paginator\(\s*\"([a-z0-9_]+)\"", text)
            if service == "ecs" and name == "ecs.py":
                operations += re.findall(r"self\._paginate\(\s*\"([a-z0-9_]+)\"", text)
            for operation in operations:
                action = f"{service}:" + "".join(part.capitalize() for part in operation.split("_"))
                calls.add(IAM_ACTION_OF.get(action, action))
    return calls


def test_the_role_grants_exactly_what_the_sweep_and_the_workflow_call() -> None:
    calls = adapter_calls()
    actions = set(granted(forwarder(**RELAUNCH)))

    assert {"ecs:ListClusters", "ecs:RunTask", "ecs:UpdateContainerInstancesState", "s3:PutObject"} <= calls
    assert sorted(calls - actions) == []
    assert sorted(actions - calls) == sorted(IMPLIED)


def test_drills_put_only_a_drills_events_on_this_accounts_default_bus_and_only_when_allowed() -> None:
    allowed = granted(forwarder(AllowDrills="true"))

    [putting] = allowed["events:PutEvents"]
    assert putting["Resource"] == f"arn:aws:events:*:{MEMBER}:event-bus/default"
    assert putting["Condition"] == {"StringEquals": {"events:source": "fault-responder.drill"}}
    assert "events:PutEvents" not in granted(forwarder())
    assert set(allowed) - {"events:PutEvents"} == set(granted(forwarder()))


# --- fault-responder accounts: whether this account forwards (AllowForwarderChecks) ---------------------------------

CHECKS = {"events:ListRuleNamesByTarget", "events:DescribeRule"}
FORWARDER_TAG = {"Key": "fault-responder:forwards-to", "Value": CENTRAL_STACK}


def test_forwarder_checks_are_off_by_default_and_on_list_rule_names_and_describe_only_this_templates_rules() -> None:
    off = granted(forwarder())
    on = granted(forwarder(AllowForwarderChecks="true"))

    assert not CHECKS & set(off)
    assert set(on) - CHECKS == set(off)
    [listing] = on["events:ListRuleNamesByTarget"]
    assert (listing["Resource"], listing.get("Condition")) == ("*", None)
    [describing] = on["events:DescribeRule"]
    assert describing["Resource"] == f"arn:aws:events:*:{MEMBER}:rule/*"
    assert describing["Condition"] == {"StringEquals": {"aws:ResourceTag/fault-responder:forwards-to": CENTRAL_STACK}}
    # ... and the rules it may describe are this template's: each carries the tag, whatever the checks
    for resolver in (forwarder(), forwarder(AllowForwarderChecks="true")):
        for rule in [*FORWARD_RULES, "GpuAlarmsForwardRule"]:
            assert FORWARDER_TAG in resolver.properties(rule)["Tags"], rule


def test_listing_rule_names_takes_no_resource_and_describing_a_default_bus_rule_can_be_held_to_its_tags() -> None:
    # The Service Authorization Reference, as cfn-lint carries it
    policies = json.loads(
        (importlib.resources.files("cfnlint.data.AdditionalSpecs") / "Policies.json").read_text(encoding="utf-8")
    )
    events = policies["events"]

    assert events["Actions"]["listrulenamesbytarget"] == {}
    assert "rule-on-default-event-bus" in events["Actions"]["describerule"]["Resources"]
    assert "aws:ResourceTag/${TagKey}" in events["Resources"]["rule-on-default-event-bus"]["ConditionKeys"]


def test_the_checks_grant_exactly_what_the_accounts_command_calls_through_the_role() -> None:
    text = (ROOT / "layers" / "common" / "fault_responder" / "adapters" / "forwarder_rules.py").read_text("utf-8")
    calls = {
        "events:" + "".join(part.capitalize() for part in operation.split("_"))
        for operation in re.findall(r"events\.([a-z_]+)\(", text)
    }

    assert calls == CHECKS
