"""Who hears that the responder itself is broken (docs/alarms.md, "The second path"): the own-health alarms notify
OwnHealthAlarmTopic, and the template's Rules refuse, as CloudFormation does before it creates anything, a deploy in
which that path ends at no one. Every deploy the Rules accept has a subscriber wired, and every deploy with one is
accepted."""

from __future__ import annotations

import itertools
import re

import pytest

from sandbox.template import (
    StackIdentity,
    TemplateError,
    check_rules,
    load_template,
    resolve_parameters,
    rule_violations,
)
from tests.conftest import ROOT
from tests.sandbox.conftest import resolver_for

TEMPLATE = load_template(ROOT / "template.yaml")
GPU_ALARMS = {"GpuTemperatureAlarm", "GpuRestartAppXidAlarm"}
OWN_HEALTH_ALARMS = sorted(
    name
    for name, spec in TEMPLATE.resources.items()
    if spec["Type"] == "AWS::CloudWatch::Alarm" and name not in GPU_ALARMS
)
EMAIL = "gpu-oncall@example.com"
TOPIC = "arn:aws:sns:us-east-1:123456789012:gpu-oncall-alarms"
# With auto-resume, so that its own-health alarms exist too.
RESUME = {"TrainingCapacityProviders": "p5-training"}


def _refusal() -> str:
    [rule] = TEMPLATE.rules.values()
    [assertion] = rule["Assertions"]
    return str(assertion["AssertDescription"])


def _subscribers(overrides: dict[str, str]) -> list[str]:
    """What the second path reaches with these parameters: its subscriptions, and the deployer's topic when every
    own-health alarm notifies it."""
    resolver = resolver_for(TEMPLATE, {**RESUME, **overrides})
    reached = [
        f"{name}: {resolver.properties(name)['Protocol']}"
        for name, spec in TEMPLATE.resources.items()
        if spec["Type"] == "AWS::SNS::Subscription"
        and resolver.is_enabled(name)
        and resolver.properties(name)["TopicArn"] == "<OwnHealthAlarmTopic>"
    ]
    alarms = [name for name in OWN_HEALTH_ALARMS if resolver.is_enabled(name)]
    topic = overrides.get("AlarmTopicArn", "")
    if topic and all(
        topic in resolver.properties(name)[key] for name in alarms for key in ("AlarmActions", "OKActions")
    ):
        reached.append(f"AlarmTopicArn: {topic}")
    return reached


def test_a_deploy_whose_own_health_alarms_reach_no_one_is_refused_saying_what_to_set() -> None:
    # Given the template's defaults, which subscribe no one to the second path
    assert _subscribers({}) == []
    parameters = resolve_parameters(TEMPLATE, RESUME)

    # When they are checked as CloudFormation checks a change set, Then the deploy is refused, with a message that
    # names every parameter that would let it through
    with pytest.raises(TemplateError) as refused:
        check_rules(TEMPLATE, StackIdentity("gpu-fault-responder"), parameters)
    assert _refusal() in str(refused.value)
    for remedy in ("OwnHealthEmail", "OwnHealthPagerDuty=Enabled", "AlarmTopicArn", "docs/alarms.md"):
        assert remedy in _refusal()


@pytest.mark.parametrize(
    "overrides",
    [
        dict(zip(("OwnHealthEmail", "OwnHealthPagerDuty", "AlarmTopicArn"), values, strict=True))
        for values in itertools.product(["", EMAIL], ["Disabled", "Enabled"], ["", TOPIC])
    ],
    ids=lambda overrides: "+".join(f"{k}" for k, v in overrides.items() if v not in ("", "Disabled")) or "none",
)
def test_the_rules_accept_exactly_the_deploys_whose_second_path_reaches_someone(overrides: dict[str, str]) -> None:
    # Given one combination of the three ways to reach on-call
    parameters = resolve_parameters(TEMPLATE, {**RESUME, **overrides})

    # When the Rules are checked and the subscribers wired are read from the resolved resources
    accepted = not rule_violations(TEMPLATE, StackIdentity("gpu-fault-responder"), parameters)
    reached = _subscribers(overrides)

    # Then the deploy is accepted if and only if the second path reaches someone
    assert accepted == bool(reached), reached


def test_the_email_subscription_subscribes_the_address_given_to_the_second_path() -> None:
    # Given an own-health email address, and none
    resolver = resolver_for(TEMPLATE, {"OwnHealthEmail": EMAIL})
    without = resolver_for(TEMPLATE)

    # Then the address is subscribed by email to the own-health topic only when it is given
    assert resolver.is_enabled("OwnHealthEmailSubscription")
    assert resolver.properties("OwnHealthEmailSubscription") == {
        "TopicArn": "<OwnHealthAlarmTopic>",
        "Protocol": "email",
        "Endpoint": EMAIL,
    }
    assert not without.is_enabled("OwnHealthEmailSubscription")


def test_docs_alarms_shows_the_refusal_as_cloudformation_gives_it() -> None:
    # Given docs/alarms.md's text blocks, each with its lines joined
    text = (ROOT / "docs/alarms.md").read_text(encoding="utf-8")
    blocks = [" ".join(block.split()) for block in re.findall(r"```text\n(.*?)```", text, flags=re.DOTALL)]

    # Then one of them is the rule's AssertDescription, word for word
    assert " ".join(_refusal().split()) in blocks
