"""The stack's parameters as a deployer meets them: described, grouped and labelled, checked by pattern, and the
samconfig environments deploying sensible values. Also: the incidents outlive the stack."""

from __future__ import annotations

import re
import tomllib
from typing import Any

import pytest

from sandbox.template import (
    Resolver,
    StackIdentity,
    TemplateError,
    check_rules,
    load_template,
    parse_parameter_overrides,
    resolve_parameters,
)
from tests.conftest import ROOT

TEMPLATE = load_template(ROOT / "template.yaml")
INTERFACE = TEMPLATE.body["Metadata"]["AWS::CloudFormation::Interface"]
SAMCONFIG = tomllib.loads((ROOT / "samconfig.toml").read_text(encoding="utf-8"))
ENVIRONMENTS = sorted(name for name, value in SAMCONFIG.items() if isinstance(value, dict))


def _overrides(environment: str) -> dict[str, str]:
    raw = SAMCONFIG[environment]["deploy"]["parameters"].get("parameter_overrides", "")
    return parse_parameter_overrides(raw.split())


def test_every_parameter_has_a_description() -> None:
    undescribed = [name for name, spec in TEMPLATE.parameters.items() if not str(spec.get("Description", "")).strip()]

    assert not undescribed, f"parameters without a Description: {undescribed}"


def test_every_parameter_is_in_exactly_one_group_and_has_a_label() -> None:
    # Given the parameters and the console's interface metadata
    declared = set(TEMPLATE.parameters)
    grouped = [name for group in INTERFACE["ParameterGroups"] for name in group["Parameters"]]
    labels = INTERFACE["ParameterLabels"]

    # When they are compared
    missing = sorted(declared - set(grouped))
    twice = sorted({name for name in grouped if grouped.count(name) > 1})
    unknown = sorted(set(grouped) - declared)
    unlabelled = sorted(name for name in declared if not str(labels.get(name, {}).get("default", "")).strip())
    stale_labels = sorted(set(labels) - declared)

    # Then a new parameter must be placed in a group and labelled, and nothing names a parameter that is gone
    assert not missing, f"parameters in no ParameterGroup (add them to Metadata in template.yaml): {missing}"
    assert not twice, f"parameters in more than one ParameterGroup: {twice}"
    assert not unknown, f"ParameterGroups name undeclared parameters: {unknown}"
    assert not unlabelled, f"parameters without a ParameterLabel: {unlabelled}"
    assert not stale_labels, f"ParameterLabels for undeclared parameters: {stale_labels}"
    assert all(str(group["Label"]["default"]).strip() for group in INTERFACE["ParameterGroups"])


CLUSTER = "arn:aws:ecs:us-east-1:123456789012:cluster/gpu-inference"
TOPIC = "arn:aws:sns:us-east-1:123456789012:gpu-oncall-alarms"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ClusterArns", ""),
        ("ClusterArns", CLUSTER),
        ("ClusterArns", f"{CLUSTER},arn:aws-us-gov:ecs:us-gov-west-1:123456789012:cluster/train_2"),
        ("AlarmTopicArn", ""),
        ("AlarmTopicArn", TOPIC),
        ("SlackSecretName", "team/gpu-fault-responder/slack"),
        ("TrainingCapacityProviders", "p5-training,p4d_training"),
        ("CheckpointBuckets", "my-training-checkpoints,ckpt.example"),
        ("OwnHealthEmail", ""),
        ("OwnHealthEmail", "gpu-oncall+alarms@example.co.uk"),
    ],
)
def test_patterns_accept_well_formed_values(name: str, value: str) -> None:
    resolve_parameters(TEMPLATE, {name: value})


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("ClusterArns", "gpu-inference"),  # a name, not an ARN
        ("ClusterArns", f"{CLUSTER},gpu-training"),  # the pattern applies to each value of the list
        ("ClusterArns", TOPIC),
        ("AlarmTopicArn", "gpu-oncall-alarms"),
        ("AlarmTopicArn", CLUSTER),
        ("SlackSecretName", "arn:aws:secretsmanager:us-east-1:123456789012:secret:gpu-fault-responder/slack-AbCdEf"),
        ("TrainingCapacityProviders", "p5 training"),
        ("CheckpointBuckets", "s3://my-training-checkpoints"),
        ("OwnHealthEmail", "gpu-oncall"),  # no domain
        ("OwnHealthEmail", "a@example.com,b@example.com"),  # one address (a list's address for several people)
        ("OwnHealthEmail", "REPLACE-ME<your-email-address>"),  # samconfig's placeholder
    ],
)
def test_patterns_reject_malformed_values(name: str, value: str) -> None:
    with pytest.raises(TemplateError, match="does not match AllowedPattern"):
        resolve_parameters(TEMPLATE, {name: value})


def _deployable(overrides: dict[str, str]) -> None:
    """Accepted as CloudFormation accepts a change set: each parameter's constraints, then the Rules."""
    check_rules(TEMPLATE, StackIdentity("test"), resolve_parameters(TEMPLATE, overrides))


def test_the_default_environment_deploys_at_info_level_once_it_names_who_hears_the_own_health_alarms() -> None:
    # Given the default environment
    default = _overrides("default")

    # Then it deploys at INFO level, and its own-health email is a placeholder that cannot be deployed as it is
    # (the pattern rejects it), while everything else it sets is valid and passes the Rules once it is replaced
    assert default["LogLevel"] == "INFO"
    assert "REPLACE" in default["OwnHealthEmail"]
    with pytest.raises(TemplateError, match="OwnHealthEmail"):
        resolve_parameters(TEMPLATE, default)
    _deployable({**default, "OwnHealthEmail": "gpu-oncall@example.com"})


def test_every_environment_names_its_region() -> None:
    # A deploy without one goes wherever the deployer's AWS configuration points, or fails where it names none;
    # the EventBridge rules must be in the Region of the clusters they watch.
    regions = {name: SAMCONFIG[name].get("global", {}).get("parameters", {}).get("region") for name in ENVIRONMENTS}

    assert {"default", "prod"} <= set(regions)
    unnamed = sorted(
        name for name, region in regions.items() if not re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", region or "")
    )
    assert not unnamed, f"samconfig.toml environments without a Region: {unnamed}"


def test_prod_names_an_alarm_topic_that_must_be_replaced() -> None:
    # Given the prod environment
    prod = _overrides("prod")

    # Then it deploys at INFO level, and its alarm topic placeholder cannot be deployed as it is (CloudFormation
    # rejects it by the same pattern), while everything else it sets is valid; the topic, once replaced, is what
    # hears the own-health alarms, so the Rules accept it
    assert prod["LogLevel"] == "INFO"
    assert "REPLACE" in prod["AlarmTopicArn"]
    with pytest.raises(TemplateError, match="AlarmTopicArn"):
        resolve_parameters(TEMPLATE, prod)
    _deployable({**prod, "AlarmTopicArn": TOPIC})


def test_the_incidents_table_outlives_the_stack() -> None:
    table: dict[str, Any] = TEMPLATE.resources["IncidentsTable"]

    assert (table["DeletionPolicy"], table["UpdateReplacePolicy"]) == ("Retain", "Retain")


class _NoResources:
    def ref(self, logical_id: str) -> Any:
        raise AssertionError(f"a layer's architectures refer to resource {logical_id}")

    def get_att(self, logical_id: str, attribute: str) -> Any:
        raise AssertionError(f"a layer's architectures refer to {logical_id}.{attribute}")


LAYERS = sorted(
    logical_id
    for logical_id, resource in TEMPLATE.resources.items()
    if resource["Type"] in {"AWS::Serverless::LayerVersion", "AWS::Lambda::LayerVersion"}
)


@pytest.mark.parametrize("architecture", TEMPLATE.parameters["Architecture"]["AllowedValues"])
def test_every_layer_is_built_for_an_architecture_it_declares_and_the_functions_run_on(architecture: str) -> None:
    # Given the template resolved for each architecture it allows (sam build reads the layers as resolved)
    resolver = Resolver(
        TEMPLATE, StackIdentity("test"), resolve_parameters(TEMPLATE, {"Architecture": architecture}), _NoResources()
    )

    # When each layer's build architecture and compatible architectures are read, with SAM's defaults (x86_64)
    for logical_id in LAYERS:
        metadata = TEMPLATE.resources[logical_id].get("Metadata", {})
        built = resolver.resolve(metadata.get("BuildArchitecture", "x86_64"))
        compatible = resolver.properties(logical_id).get("CompatibleArchitectures", ["x86_64"])

        # Then it declares what it is built for (else sam build warns), and what the functions run on
        assert built in compatible, f"{logical_id}: BuildArchitecture {built} is not in {compatible}"
        assert architecture in compatible, f"{logical_id}: {architecture} functions cannot use it ({compatible})"
