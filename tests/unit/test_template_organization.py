"""template.yaml's organization mode (docs/organization.md): off by default, so a single-account deploy creates and
grants what it did; on (OrganizationId or EnrolledAccounts), the stack owns a bus whose policy admits the
organization's accounts (or the listed ones) and nothing else, its alerting rules read that bus with the same
patterns, its own account's events reach it in one hop, and its roles that will act in member accounts may assume
exactly forwarder.yaml's role, which trusts them and no other role.

The templates are resolved with the sandbox's resolver, so these are the resources, statements and conditions
CloudFormation would create for the given parameters."""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Mapping
from typing import Any

import pytest
from localstack.services.events.event_rule_engine import EventPatternCompiler, EventRuleEngine

from sandbox.template import Resolver, StackIdentity, TemplateError, load_template, resolve_parameters
from tests.conftest import ROOT, load_event
from tests.unit.test_forwarder import sample_events

TEMPLATE = load_template(ROOT / "template.yaml")
FORWARDER = load_template(ROOT / "forwarder.yaml")
STACK = "gpu-fault-responder"
ACCOUNT = "111111111111"
REGION = "us-east-1"
ORGANIZATION = "o-a1b2c3d4e5"
MEMBER = "222222222222"
OUTSIDER = "999999999999"
RESUME = {"TrainingCapacityProviders": "p5-training", "CheckpointBuckets": "ckpt"}
ORGANIZATION_MODE = {"OrganizationId": ORGANIZATION}
ALERTING_RULES = ("HealthChangeRule", "InstanceStateChangeRule", "TaskStoppedRule", "AlarmStateChangeRule")
RESUME_RULES = ("ResumeTrainingRule", "PlannedMoveRule")
ORGANIZATION_RESOURCES = {
    "OrganizationEventBus",
    "OrganizationEventBusPolicy",
    "LocalEventsForwardRule",
    "LocalEventsForwardRole",
}
# The roles that act in member accounts once the sweep and the workflow do: the reconciliation sweep's, and each
# workflow step's that calls ECS, S3 or Auto Scaling (SAM makes a function's role: <Function>Role).
ACTING_ROLES = {"ReconcileRole"}
ACTING_FUNCTIONS = {
    "ClaimFaultFunction",
    "CheckGuardsFunction",
    "QuarantineInstanceFunction",
    "FindJobsFunction",
    "PlanJobFunction",
    "RequestCheckpointFunction",
    "CheckCheckpointFunction",
    "StopJobFunction",
    "CheckTasksFunction",
    "RelaunchJobFunction",
}


class _Attributes:
    def ref(self, logical_id: str) -> str:
        if logical_id == "OrganizationEventBus":
            return f"{STACK}-organization"
        return f"ref:{logical_id}"

    def get_att(self, logical_id: str, attribute: str) -> str:
        if (logical_id, attribute) == ("OrganizationEventBus", "Arn"):
            return f"arn:aws:events:{REGION}:{ACCOUNT}:event-bus/{STACK}-organization"
        return f"arn:{logical_id}.{attribute}"


BUS_ARN = _Attributes().get_att("OrganizationEventBus", "Arn")
ORGANIZATION_OUTPUTS = {
    name for name, output in TEMPLATE.body["Outputs"].items() if output.get("Condition") == "OrganizationMode"
}


def stack(**overrides: str) -> Resolver:
    parameters = resolve_parameters(TEMPLATE, overrides)
    return Resolver(TEMPLATE, StackIdentity(STACK, REGION, ACCOUNT), parameters, _Attributes())


def created(resolver: Resolver) -> set[str]:
    return {name for name in resolver.template.resources if resolver.is_enabled(name)}


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def matches(pattern: Mapping[str, Any], event: Mapping[str, Any]) -> bool:
    compiled = EventPatternCompiler().compile_event_pattern(copy.deepcopy(dict(pattern)))  # type: ignore[no-untyped-call]
    return bool(EventRuleEngine().evaluate_pattern_on_event(compiled, copy.deepcopy(dict(event))))  # type: ignore[no-untyped-call]


def statements_of(resolver: Resolver, logical_id: str) -> list[dict[str, Any]]:
    properties = resolver.properties(logical_id)
    if resolver.template.resource_type(logical_id) == "AWS::Serverless::Function":
        documents = [policy for policy in properties.get("Policies", []) if "Statement" in policy]
    else:
        documents = [policy["PolicyDocument"] for policy in properties.get("Policies", [])]
    return [statement for document in documents for statement in as_list(document["Statement"])]


def assuming(resolver: Resolver) -> dict[str, list[dict[str, Any]]]:
    """Each role or function whose policies allow sts:AssumeRole -> those statements."""
    found: dict[str, list[dict[str, Any]]] = {}
    for logical_id in created(resolver):
        if resolver.template.resource_type(logical_id) not in ("AWS::IAM::Role", "AWS::Serverless::Function"):
            continue
        granting = [s for s in statements_of(resolver, logical_id) if "sts:AssumeRole" in as_list(s["Action"])]
        if granting:
            found[logical_id] = granting
    return found


# --- A bus policy statement, evaluated as IAM evaluates the parts it uses ----------------------------------------


def _principal_admits(principal: Any, account: str) -> bool:
    if principal == "*":
        return True
    named = as_list(principal["AWS"])
    return any(value in (account, f"arn:aws:iam::{account}:root") for value in named)


def bus_policy_admits(statement: Mapping[str, Any], account: str, organization: str | None) -> bool:
    """Whether a PutEvents from `account` (a member of `organization`, or of none) is allowed by the statement."""
    if statement["Effect"] != "Allow" or "events:PutEvents" not in as_list(statement["Action"]):
        return False
    if statement["Resource"] != BUS_ARN or not _principal_admits(statement["Principal"], account):
        return False
    context = {"aws:PrincipalOrgID": organization, "aws:PrincipalAccount": account}
    for operator, keys in (statement.get("Condition") or {}).items():
        if operator != "StringEquals":
            raise AssertionError(f"the evaluator does not know {operator}: extend it before trusting this test")
        for key, values in keys.items():
            if key not in context:
                raise AssertionError(f"the evaluator does not know {key}")
            if context[key] not in as_list(values):
                return False
    return True


def bus_statement(**overrides: str) -> dict[str, Any]:
    policy = stack(**overrides).properties("OrganizationEventBusPolicy")
    assert policy["EventBusName"] == f"{STACK}-organization"
    statement: dict[str, Any] = policy["Statement"]
    return statement


# --- Off by default -------------------------------------------------------------------------------------------------


def test_by_default_a_single_account_stack_has_no_bus_of_its_own_and_reads_the_default_bus() -> None:
    default = stack(**RESUME)

    assert not ORGANIZATION_RESOURCES & created(default)
    for rule in (*ALERTING_RULES, *RESUME_RULES):
        assert default.properties(rule)["EventBusName"] == "default", rule
    assert {
        "OrganizationEventBusArn",
        "CentralStackName",
        "MemberRoleExternalId",
        "MemberRoleName",
    } == ORGANIZATION_OUTPUTS
    assert not default.condition("OrganizationMode")


def test_by_default_nothing_may_assume_a_role_no_role_moves_and_the_router_checks_no_enrollment() -> None:
    default = stack(**RESUME)

    assert assuming(default) == {}
    assert "Path" not in default.properties("ReconcileRole")
    assert not [name for name in ACTING_FUNCTIONS if "RolePath" in default.properties(name)]
    variables = default.properties("AlertRouterFunction")["Environment"]["Variables"]
    assert not {"ORGANIZATION_MODE", "ENROLLED_ACCOUNTS", "ENROLLED_REGIONS", "STACK_ACCOUNT"} & set(variables)


# --- The bus and its policy ------------------------------------------------------------------------------------------


def test_with_an_organization_the_stack_owns_the_bus_and_its_outputs_name_what_the_forwarder_needs() -> None:
    organization = stack(**ORGANIZATION_MODE)

    assert created(organization) >= ORGANIZATION_RESOURCES
    assert organization.properties("OrganizationEventBus") == {"Name": f"{STACK}-organization"}
    outputs = {name: organization.resolve(TEMPLATE.body["Outputs"][name]["Value"]) for name in ORGANIZATION_OUTPUTS}
    assert outputs["OrganizationEventBusArn"] == BUS_ARN
    assert outputs["CentralStackName"] == STACK
    assert outputs["MemberRoleName"] == "gpu-fault-responder-member"
    assert outputs["MemberRoleExternalId"] == StackIdentity(STACK, REGION, ACCOUNT).stack_id.rsplit("/", 1)[1]


def test_the_bus_policy_admits_the_organizations_accounts_and_refuses_an_account_outside_it() -> None:
    statement = bus_statement(**ORGANIZATION_MODE)

    assert statement["Principal"] == "*"
    assert statement["Condition"] == {"StringEquals": {"aws:PrincipalOrgID": ORGANIZATION}}
    assert bus_policy_admits(statement, MEMBER, ORGANIZATION)
    assert not bus_policy_admits(statement, OUTSIDER, "o-zzzzzzzzzz")
    assert not bus_policy_admits(statement, OUTSIDER, None)


def test_with_listed_accounts_the_bus_admits_them_alone_and_with_an_organization_only_while_they_are_in_it() -> None:
    listed = bus_statement(EnrolledAccounts=f"{MEMBER},333333333333")
    both = bus_statement(EnrolledAccounts=MEMBER, **ORGANIZATION_MODE)

    assert listed["Principal"] == {"AWS": [MEMBER, "333333333333"]}
    assert "Condition" not in listed
    assert bus_policy_admits(listed, MEMBER, None)
    assert not bus_policy_admits(listed, OUTSIDER, ORGANIZATION)
    assert bus_policy_admits(both, MEMBER, ORGANIZATION)
    assert not bus_policy_admits(both, MEMBER, "o-zzzzzzzzzz")
    assert not bus_policy_admits(both, "333333333333", ORGANIZATION)


# --- The rules on the bus ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("watched", ["", f"arn:aws:ecs:{REGION}:{ACCOUNT}:cluster/gpu"])
def test_the_alerting_rules_read_the_organization_bus_with_the_same_patterns(watched: str) -> None:
    default = stack(ClusterArns=watched, **RESUME)
    organization = stack(ClusterArns=watched, **RESUME, **ORGANIZATION_MODE)

    for rule in ALERTING_RULES:
        assert organization.properties(rule)["EventBusName"] == f"{STACK}-organization", rule
        assert organization.properties(rule)["EventPattern"] == default.properties(rule)["EventPattern"], rule
        assert organization.properties(rule)["Targets"] == default.properties(rule)["Targets"], rule


def test_the_resume_rules_stay_on_the_default_bus_the_workflow_acting_in_this_account_only() -> None:
    organization = stack(**RESUME, **ORGANIZATION_MODE)

    for rule in RESUME_RULES:
        assert organization.properties(rule)["EventBusName"] == "default", rule


def test_this_accounts_events_reach_the_bus_in_one_hop_exactly_when_an_alerting_rule_reads_them() -> None:
    # Given the rule that forwards this account's own events, and the alerting rules as they read every cluster
    organization = stack(**ORGANIZATION_MODE)
    forwarding = organization.properties("LocalEventsForwardRule")
    patterns = [organization.properties(rule)["EventPattern"] for rule in ALERTING_RULES]

    # Then it is on the default bus, delivers to the organization bus with its role, and forwards a sample event
    # (this stack's alarms included) exactly when an alerting rule would read it there
    assert forwarding["EventBusName"] == "default"
    [target] = forwarding["Targets"]
    assert (target["Arn"], target["RoleArn"]) == (BUS_ARN, "arn:LocalEventsForwardRole.Arn")
    assert target["DeadLetterConfig"] == {"Arn": "arn:RuleTargetDLQ.Arn"}
    checked = 0
    for event in sample_events():
        forwarded = matches(forwarding["EventPattern"], event)
        assert forwarded == any(matches(pattern, event) for pattern in patterns), event["id"]
        checked += forwarded
    assert checked > 30
    # ... and no rule of the organization bus sends to another bus (EventBridge would not deliver a second hop)
    on_the_bus = [rule for rule in created(organization) if rule.endswith("Rule") and rule != "LocalEventsForwardRule"]
    for rule in on_the_bus:
        for target in organization.properties(rule).get("Targets", []):
            assert ":event-bus/" not in str(target["Arn"]), rule


def test_the_local_forwarding_role_may_put_on_the_organization_bus_only_and_may_dead_letter() -> None:
    organization = stack(**ORGANIZATION_MODE)
    role = organization.properties("LocalEventsForwardRole")

    [trust] = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "events.amazonaws.com"}
    assert trust["Condition"] == {"StringEquals": {"aws:SourceAccount": ACCOUNT}}
    assert statements_of(organization, "LocalEventsForwardRole") == [
        {"Sid": "PutOnOrganizationBus", "Effect": "Allow", "Action": "events:PutEvents", "Resource": BUS_ARN}
    ]
    [delivering] = organization.properties("AlertQueuePolicy")["PolicyDocument"]["Statement"]
    assert "arn:LocalEventsForwardRule.Arn" in delivering["Condition"]["ArnEquals"]["aws:SourceArn"]
    [alone] = stack().properties("AlertQueuePolicy")["PolicyDocument"]["Statement"]
    assert len(alone["Condition"]["ArnEquals"]["aws:SourceArn"]) == len(ALERTING_RULES)


# --- Acting in member accounts ---------------------------------------------------------------------------------------

MEMBER_ROLE = f"arn:aws:iam::{MEMBER}:role/gpu-fault-responder-member"


def test_only_the_roles_that_act_in_member_accounts_may_assume_and_only_the_member_role() -> None:
    organization = stack(**RESUME, **ORGANIZATION_MODE)

    grants = assuming(organization)

    assert set(grants) == ACTING_ROLES | ACTING_FUNCTIONS
    for name, statements in grants.items():
        [statement] = statements
        assert statement["Resource"] == "arn:aws:iam::*:role/gpu-fault-responder-member", name
        assert statement["Condition"] == {"StringEquals": {"aws:ResourceOrgID": ORGANIZATION}}, name
        assert fnmatch.fnmatchcase(MEMBER_ROLE, statement["Resource"])


def test_with_listed_accounts_a_role_may_be_assumed_in_those_accounts_only() -> None:
    organization = stack(EnrolledAccounts=f"{MEMBER},333333333333", **RESUME)

    for name, [statement] in assuming(organization).items():
        assert statement["Condition"] == {"StringEquals": {"aws:ResourceAccount": [MEMBER, "333333333333"]}}, name


def _forwarder_trust(**overrides: str) -> dict[str, Any]:
    parameters = resolve_parameters(
        FORWARDER,
        {"CentralEventBusArn": BUS_ARN, "CentralStackName": STACK, "ExternalId": "id-of-the-stack", **overrides},
    )
    resolver = Resolver(FORWARDER, StackIdentity("member", "eu-west-1", MEMBER), parameters, _Attributes())
    [trust] = resolver.properties("ResponderRole")["AssumeRolePolicyDocument"]["Statement"]
    assert resolver.properties("ResponderRole")["RoleName"] == MEMBER_ROLE.rsplit("/", 1)[1]
    return dict(trust)


def test_the_forwarders_role_trusts_the_acting_roles_by_their_path_and_no_other_role_of_the_account() -> None:
    # Given the roles as the central stack creates them in organization mode (a role's ARN carries its path)
    organization = stack(**RESUME, **ORGANIZATION_MODE)
    path = f"/{STACK}/"
    assert organization.properties("ReconcileRole")["Path"] == path
    for name in ACTING_FUNCTIONS:
        assert organization.properties(name)["RolePath"] == path, name
    acting = [f"arn:aws:iam::{ACCOUNT}:role{path}{STACK}-{name}Role-ABCDEF123456" for name in ACTING_FUNCTIONS]
    acting.append(f"arn:aws:iam::{ACCOUNT}:role{path}{STACK}-ReconcileRole-ABCDEF123456")
    others = [
        f"arn:aws:iam::{ACCOUNT}:role/{STACK}-AlertRouterRole-ABCDEF123456",
        f"arn:aws:iam::{ACCOUNT}:role/{STACK}-SweepRole-ABCDEF123456",
        f"arn:aws:iam::{ACCOUNT}:role/other-stack/{STACK}-ReconcileRole-ABCDEF123456",
        f"arn:aws:iam::{OUTSIDER}:role{path}{STACK}-ReconcileRole-ABCDEF123456",
    ]

    # When forwarder.yaml's trust is read with the central stack's outputs
    trust = _forwarder_trust()
    pattern = trust["Condition"]["ArnLike"]["aws:PrincipalArn"]

    # Then every acting role is trusted, and no other role of the central account, and nothing of another account
    assert trust["Principal"] == {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}
    assert all(fnmatch.fnmatchcase(arn, pattern) for arn in acting)
    assert not [arn for arn in others if fnmatch.fnmatchcase(arn, pattern) and f"::{ACCOUNT}:" in arn]
    assert not [arn for arn in others[:3] if fnmatch.fnmatchcase(arn, pattern)]
    assert trust["Condition"]["StringEquals"] == {"sts:ExternalId": "id-of-the-stack"}
    assert "Path" not in organization.properties("AlertRouterRole")
    assert "Path" not in organization.properties("SweepRole")


def test_the_member_role_name_is_one_parameter_on_both_sides() -> None:
    organization = stack(MemberRoleName="gfr-prod-member", **RESUME, **ORGANIZATION_MODE)

    for name, [statement] in assuming(organization).items():
        assert statement["Resource"] == "arn:aws:iam::*:role/gfr-prod-member", name
    assert TEMPLATE.parameters["MemberRoleName"]["Default"] == FORWARDER.parameters["ResponderRoleName"]["Default"]
    assert (
        TEMPLATE.parameters["MemberRoleName"]["AllowedPattern"]
        == FORWARDER.parameters["ResponderRoleName"]["AllowedPattern"]
    )


# --- The router's enrollment ----------------------------------------------------------------------------------------


def test_the_router_is_told_the_enrollment_and_this_stacks_account() -> None:
    variables = stack(EnrolledAccounts=MEMBER, EnrolledRegions="us-west-2,eu-west-1", **ORGANIZATION_MODE).properties(
        "AlertRouterFunction"
    )["Environment"]["Variables"]

    assert variables["ORGANIZATION_MODE"] == "true"
    assert variables["ENROLLED_ACCOUNTS"] == MEMBER
    assert variables["ENROLLED_REGIONS"] == "us-west-2,eu-west-1"
    assert variables["STACK_ACCOUNT"] == ACCOUNT
    every = stack(**ORGANIZATION_MODE).properties("AlertRouterFunction")["Environment"]["Variables"]
    assert (every["ENROLLED_ACCOUNTS"], every["ENROLLED_REGIONS"]) == ("", "")


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("OrganizationId", "r-a1b2"),
        ("OrganizationId", "o-"),
        ("EnrolledAccounts", "12345"),
        ("EnrolledAccounts", f"{MEMBER},*"),
        ("EnrolledRegions", "us-east"),
        ("EnrolledRegions", "*"),
        ("MemberRoleName", "role/with-path"),
    ],
)
def test_malformed_organization_parameters_are_refused(name: str, value: str) -> None:
    with pytest.raises(TemplateError, match=name):
        stack(**{name: value})


def test_the_sweep_and_the_reconciliation_keep_quiet_only_what_the_router_does() -> None:
    # They derive incidents with the router's policy: quiet when handled is for this account's faults there too
    organization = stack(**RESUME, **ORGANIZATION_MODE)

    for function in ("SweepFunction", "ReconcileFunction"):
        variables = organization.properties(function)["Environment"]["Variables"]
        assert (variables["ORGANIZATION_MODE"], variables["STACK_ACCOUNT"]) == ("true", ACCOUNT), function
        assert not {"ORGANIZATION_MODE", "STACK_ACCOUNT"} & set(
            stack(**RESUME).properties(function)["Environment"]["Variables"]
        ), function


def test_the_reconciliation_is_told_the_member_role_and_the_external_id_the_forwarder_requires() -> None:
    organization = stack(EnrolledAccounts=MEMBER, EnrolledRegions="us-west-2", MemberRoleName="gfr-member", **RESUME)
    variables = organization.properties("ReconcileFunction")["Environment"]["Variables"]
    outputs = organization.template.body["Outputs"]

    assert (variables["ENROLLED_ACCOUNTS"], variables["ENROLLED_REGIONS"]) == (MEMBER, "us-west-2")
    assert variables["MEMBER_ROLE_NAME"] == "gfr-member"
    assert variables["MEMBER_ROLE_EXTERNAL_ID"] == organization.resolve(outputs["MemberRoleExternalId"]["Value"])
    assert variables["MEMBER_ROLE_EXTERNAL_ID"] == StackIdentity(STACK, REGION, ACCOUNT).stack_id.split("/")[2]
    single = stack(**RESUME).properties("ReconcileFunction")["Environment"]["Variables"]
    assert not {"ENROLLED_ACCOUNTS", "ENROLLED_REGIONS", "MEMBER_ROLE_NAME", "MEMBER_ROLE_EXTERNAL_ID"} & set(single)


def test_the_other_accounts_training_faults_start_the_workflow_from_the_bus_and_this_accounts_never_twice() -> None:
    # Given a training fault (XID 79 on the training capacity provider) in each account and Region
    organization = stack(**RESUME, **ORGANIZATION_MODE)
    fault = copy.deepcopy(load_event("incident-xid79/01-impaired-xid79.json"))
    fault["detail"]["capacityProviderName"] = "p5-training"
    members = organization.properties("MemberResumeTrainingRule")
    ours = organization.properties("ResumeTrainingRule")

    def from_the_bus(account: str, region: str) -> bool:
        return matches(members["EventPattern"], {**fault, "account": account, "region": region})

    # Then another account's (in any Region), and this account's in another Region, start it from the organization's
    # bus; this account and Region's own start it from the default bus alone (they reach the organization's bus too,
    # through LocalEventsForwardRule, and are left out there: nothing starts twice)
    assert members["EventBusName"] == f"{STACK}-organization"
    assert ours["EventBusName"] == "default"
    assert members["Targets"] == ours["Targets"]
    assert from_the_bus(MEMBER, REGION)
    assert from_the_bus(MEMBER, "eu-west-1")
    assert from_the_bus(ACCOUNT, "eu-west-1")
    assert not from_the_bus(ACCOUNT, REGION)
    assert matches(ours["EventPattern"], {**fault, "account": ACCOUNT, "region": REGION})
    # ... a fault that is not a training one starts nothing, and without the organization's bus there is no such rule
    assert not matches(
        members["EventPattern"],
        {**fault, "account": MEMBER, "detail": {**fault["detail"], "capacityProviderName": "inference"}},
    )
    assert "MemberResumeTrainingRule" not in created(stack(**RESUME))
    assert "MemberResumeTrainingRule" not in created(stack(**ORGANIZATION_MODE))
    [trigger] = organization.properties("ResumeTriggerDLQPolicy")["PolicyDocument"]["Statement"]
    assert trigger["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        "arn:ResumeTrainingRule.Arn",
        "arn:MemberResumeTrainingRule.Arn",
        "arn:PlannedMoveRule.Arn",
        "arn:MemberPlannedMoveRule.Arn",
    ]


def test_the_other_accounts_planned_drains_start_the_workflow_from_the_bus_and_this_accounts_never_twice() -> None:
    # Given a training host set DRAINING (by a person, no fault) in each account and Region
    organization = stack(**RESUME, **ORGANIZATION_MODE)
    drain = copy.deepcopy(load_event("state/draining-manual.json"))
    drain["detail"]["capacityProviderName"] = "p5-training"
    members = organization.properties("MemberPlannedMoveRule")
    ours = organization.properties("PlannedMoveRule")

    def from_the_bus(account: str, region: str, **detail: Any) -> bool:
        event = {**drain, "account": account, "region": region, "detail": {**drain["detail"], **detail}}
        return matches(members["EventPattern"], event)

    # Then another account's (in any Region), and this account's in another Region, start it from the organization's
    # bus, with the targets of the default bus's rule; this account and Region's own start it from the default bus
    # alone (LocalEventsForwardRule brings them to the organization's bus too, where they are left out)
    assert members["EventBusName"] == f"{STACK}-organization"
    assert ours["EventBusName"] == "default"
    assert members["Targets"] == ours["Targets"]
    assert from_the_bus(MEMBER, REGION)
    assert from_the_bus(MEMBER, "eu-west-1")
    assert from_the_bus(ACCOUNT, "eu-west-1")
    assert not from_the_bus(ACCOUNT, REGION)
    assert matches(ours["EventPattern"], {**drain, "account": ACCOUNT, "region": REGION})
    # ... as the default bus's rule does: a drain naming no provider too (the workflow asks ECS there), not another
    # provider's, nor any other status
    no_provider = {key: value for key, value in drain["detail"].items() if key != "capacityProviderName"}
    assert matches(members["EventPattern"], {**drain, "account": MEMBER, "detail": no_provider})
    assert not from_the_bus(MEMBER, REGION, capacityProviderName="inference")
    assert not from_the_bus(MEMBER, REGION, status="ACTIVE")
    # ... and there is no such rule without the organization's bus, without auto-resume, or with moves on drain off
    assert "MemberPlannedMoveRule" not in created(stack(**RESUME))
    assert "MemberPlannedMoveRule" not in created(stack(**ORGANIZATION_MODE))
    assert "MemberPlannedMoveRule" not in created(stack(**RESUME, **ORGANIZATION_MODE, MoveJobsOnDrain="false"))


def test_with_watched_clusters_a_members_drain_starts_the_workflow_only_on_those_clusters() -> None:
    watched = f"arn:aws:ecs:eu-west-1:{MEMBER}:cluster/training"
    members = stack(**RESUME, **ORGANIZATION_MODE, ClusterArns=watched).properties("MemberPlannedMoveRule")
    drain = copy.deepcopy(load_event("state/draining-manual.json"))
    detail = {**drain["detail"], "capacityProviderName": "p5-training", "clusterArn": watched}

    assert matches(members["EventPattern"], {**drain, "account": MEMBER, "region": "eu-west-1", "detail": detail})
    other = {**detail, "clusterArn": f"arn:aws:ecs:eu-west-1:{MEMBER}:cluster/inference"}
    assert not matches(members["EventPattern"], {**drain, "account": MEMBER, "region": "eu-west-1", "detail": other})


# --- Account names ---------------------------------------------------------------------------------------------------

RENDERING = ("AlertRouterFunction", "SweepFunction", "ReconcileFunction", "NotifyFunction")
"""The functions that render pages (the router's three, and the workflow's notices)."""
RENDERING_ROLES = {"AlertRouterRole", "SweepRole", "ReconcileRole", "NotifyFunction"}


def describing_accounts(resolver: Resolver) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for logical_id in created(resolver):
        if resolver.template.resource_type(logical_id) not in ("AWS::IAM::Role", "AWS::Serverless::Function"):
            continue
        granting = [
            s for s in statements_of(resolver, logical_id) if "organizations:DescribeAccount" in as_list(s["Action"])
        ]
        if granting:
            found[logical_id] = granting
    return found


def test_a_single_account_stack_names_no_account_and_may_not_ask_organizations() -> None:
    default = stack(**RESUME, AccountNames=f"{MEMBER}=prod-ml")

    assert describing_accounts(default) == {}
    for function in RENDERING:
        variables = default.properties(function).get("Environment", {}).get("Variables", {})
        assert not {"ACCOUNT_NAMES", "ORGANIZATION_MODE", "STACK_ACCOUNT"} & set(variables), function


def test_the_functions_that_render_are_told_the_names_and_may_describe_the_organizations_accounts_only() -> None:
    names = f"{MEMBER}=prod-ml,333333333333=sandbox ml"
    for overrides, resource in (
        (ORGANIZATION_MODE, f"arn:aws:organizations::*:account/{ORGANIZATION}/*"),
        ({"EnrolledAccounts": MEMBER}, "arn:aws:organizations::*:account/o-*/*"),
    ):
        organization = stack(**RESUME, **overrides, AccountNames=names)
        for function in RENDERING:
            variables = organization.properties(function)["Environment"]["Variables"]
            assert variables["ACCOUNT_NAMES"] == names, function
            assert (variables["ORGANIZATION_MODE"], variables["STACK_ACCOUNT"]) == ("true", ACCOUNT), function
        granted = describing_accounts(organization)
        assert set(granted) == RENDERING_ROLES
        for statements in granted.values():
            assert [(s["Action"], s["Resource"]) for s in statements] == [("organizations:DescribeAccount", resource)]


@pytest.mark.parametrize("value", ["prod-ml", f"{MEMBER}=", f"{MEMBER}=a=b", f"{MEMBER}=a,b", f"{MEMBER}={'x' * 51}"])
def test_malformed_account_names_are_refused(value: str) -> None:
    with pytest.raises(TemplateError, match="AccountNames"):
        stack(AccountNames=value)


QUEUE_POLICIES = ("AWS::SQS::QueuePolicy",)
SETTINGS = {
    "one account": {},
    "resume": RESUME,
    "resume, no moves on drains": {**RESUME, "MoveJobsOnDrain": "false"},
    "organization": ORGANIZATION_MODE,
    "organization, resume": {**RESUME, **ORGANIZATION_MODE},
    "organization, resume, no moves on drains": {**RESUME, **ORGANIZATION_MODE, "MoveJobsOnDrain": "false"},
}


@pytest.mark.parametrize("overrides", SETTINGS.values(), ids=SETTINGS.keys())
def test_every_rule_with_a_dead_letter_queue_may_send_to_it(overrides: dict[str, str]) -> None:
    # Given the stack as these parameters create it
    resolver = stack(**overrides)
    made = created(resolver)
    admitted: dict[str, set[str]] = {}
    for name in made:
        if resolver.template.resource_type(name) not in QUEUE_POLICIES:
            continue
        properties = resolver.properties(name)
        for statement in as_list(properties["PolicyDocument"]["Statement"]):
            if statement.get("Principal") != {"Service": "events.amazonaws.com"}:
                continue
            arns = set(as_list(statement.get("Condition", {}).get("ArnEquals", {}).get("aws:SourceArn", [])))
            for queue in as_list(properties["Queues"]):
                admitted.setdefault(str(queue), set()).update(arns)

    # Then each rule's undeliverable events reach its dead-letter queue: the queue's policy names the rule
    for name in sorted(made):
        if resolver.template.resource_type(name) != "AWS::Events::Rule":
            continue
        for target in resolver.properties(name).get("Targets", []):
            queue = (target.get("DeadLetterConfig") or {}).get("Arn")
            if queue is None:
                continue
            [dlq] = [q for q in made if _Attributes().get_att(q, "Arn") == queue]
            assert f"arn:{name}.Arn" in admitted.get(f"ref:{dlq}", set()), f"{name} cannot dead-letter to {dlq}"
