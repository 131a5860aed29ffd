"""Concurrency kept for the alerting path (docs/security.md, "Concurrency"): the router, the sweep and the
reconciliation reserve what they need, whatever else the account runs, and each public function URL is capped so that
a flood of unauthenticated requests (each answered 401, each an invocation) cannot take the account's concurrency."""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from sandbox.template import Resolver, load_template
from tests.conftest import ROOT
from tests.sandbox.conftest import resolver_for

TEMPLATE = load_template(ROOT / "template.yaml")
RESUME = {"TrainingCapacityProviders": "p5-training"}
ALERTING_PATH = ("AlertRouterFunction", "SweepFunction", "ReconcileFunction")
LAMBDA_MINIMUM_UNRESERVED = 100
"""Lambda refuses a reservation that leaves the account less unreserved concurrency than this (its concurrency page)."""


def _functions(resolver: Resolver) -> list[str]:
    return [
        name
        for name, spec in TEMPLATE.resources.items()
        if spec["Type"] == "AWS::Serverless::Function" and resolver.is_enabled(name)
    ]


def _public_endpoints(resolver: Resolver) -> list[str]:
    return [
        name
        for name in _functions(resolver)
        if (resolver.properties(name).get("FunctionUrlConfig") or {}).get("AuthType") == "NONE"
    ]


def _reserved(resolver: Resolver, name: str) -> int | None:
    value: Any = resolver.properties(name).get("ReservedConcurrentExecutions")
    return None if value is None else int(value)


def _period_seconds(schedule: str) -> int:
    found = re.fullmatch(r"rate\((\d+) minutes?\)", schedule)
    assert found, schedule
    return int(found.group(1)) * 60


@pytest.mark.parametrize("router_concurrency", ["2", "10", "50"])
def test_the_router_reserves_what_its_queue_may_drive(router_concurrency: str) -> None:
    # Given the router's most concurrent invocations the queue may drive
    resolver = resolver_for(TEMPLATE, {"RouterMaxConcurrency": router_concurrency})
    [source] = resolver.properties("AlertRouterFunction")["Events"].values()
    maximum = int(source["Properties"]["ScalingConfig"]["MaximumConcurrency"])

    # Then it reserves at least that many (fewer would throttle the queue's own invocations), and no more
    assert _reserved(resolver, "AlertRouterFunction") == maximum == int(router_concurrency)


@pytest.mark.parametrize("name", ["SweepFunction", "ReconcileFunction"])
def test_each_scheduled_function_reserves_the_runs_that_may_overlap_at_its_default_rate(name: str) -> None:
    # Given a scheduled function, its timeout and its schedule with the default parameters
    resolver = resolver_for(TEMPLATE)
    properties = resolver.properties(name)
    [event] = properties["Events"].values()
    period = _period_seconds(event["Properties"]["Schedule"])

    # Then it reserves at least the runs that can be under way at once (one starting as the last may still run)
    assert (_reserved(resolver, name) or 0) >= max(2, math.ceil(int(properties["Timeout"]) / period))


def test_every_public_endpoint_is_capped() -> None:
    # Given every function a public URL (AuthType NONE) invokes, whoever calls it
    resolver = resolver_for(TEMPLATE, RESUME)
    public = _public_endpoints(resolver)

    # Then each is capped at PublicEndpointConcurrency
    assert public == ["SlackActionsFunction", "PagerDutyWebhookFunction"]
    for name in public:
        assert _reserved(resolver, name) == int(TEMPLATE.parameters["PublicEndpointConcurrency"]["Default"]), name


def test_no_reservation_can_stop_a_function() -> None:
    # Lambda runs nothing at all for a function reserved 0: every parameter a reservation takes starts at 1 or more
    for parameter in ("RouterMaxConcurrency", "PublicEndpointConcurrency"):
        assert int(TEMPLATE.parameters[parameter]["MinValue"]) >= 1, parameter


def test_disabled_reserves_nothing_for_accounts_below_lambdas_minimum() -> None:
    # Given an account whose quota leaves too little unreserved concurrency for any reservation
    resolver = resolver_for(TEMPLATE, {**RESUME, "ReservedConcurrency": "Disabled"})

    # Then no function of the stack reserves any
    assert {name: _reserved(resolver, name) for name in _functions(resolver)} == dict.fromkeys(_functions(resolver))


@pytest.mark.parametrize(
    ("overrides", "reserved", "quota"),
    [({}, 16, 116), ({"RouterMaxConcurrency": "50", "PublicEndpointConcurrency": "100"}, 254, 354)],
    ids=["defaults", "largest"],
)
def test_the_reservations_add_up_to_what_docs_security_says(
    overrides: dict[str, str], reserved: int, quota: int
) -> None:
    # Given the stack with auto-resume (whose functions reserve nothing: the workflow's Map caps them)
    resolver = resolver_for(TEMPLATE, {**RESUME, **overrides})

    # When every reservation is added up
    total = sum(_reserved(resolver, name) or 0 for name in _functions(resolver))
    only = {name for name in _functions(resolver) if _reserved(resolver, name)}

    # Then only the alerting path and the public endpoints reserve, as much as docs/security.md says, and the
    # account quota it needs is that plus Lambda's unreserved minimum
    assert only == {*ALERTING_PATH, "SlackActionsFunction", "PagerDutyWebhookFunction"}
    assert (total, total + LAMBDA_MINIMUM_UNRESERVED) == (reserved, quota)
    security = (ROOT / "docs/security.md").read_text(encoding="utf-8")
    assert f"{reserved} in all" in security
    assert f"at least {quota}" in security
