"""Routing files: validation, first match wins, continue, globs; and `make route`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from fault_responder.domain import Severity
from fault_responder.routecheck import main as routecheck
from fault_responder.routing import RouteContext, Router, RouteRunbook, RoutingConfig, load_routing
from tests.conftest import EVENTS, ROOT

DOCUMENTED_RUNBOOKS = ROOT / "docs" / "examples" / "routing-with-runbooks.yaml"


def context(**labels: Any) -> RouteContext:
    base: dict[str, Any] = {
        "kind": "health_impaired",
        "cluster": "gpu-training",
        "capacity_provider": "gpu-p5-managed",
        "check_type": "ACCELERATED_COMPUTE",
        "fault_class": "xid_critical",
        "severity": Severity.CRITICAL,
        "drain_attribution": None,
    }
    return RouteContext(**{**base, **labels})


def config(routes: list[dict[str, Any]], receivers: dict[str, Any] | None = None) -> RoutingConfig:
    receivers = receivers or {
        "chat": {"slack": {"channel": "#gpu"}},
        "training-chat": {"slack": {"webhook": "training"}},
        "pager": {"pagerduty": {"service": "gpu-oncall"}},
    }
    return RoutingConfig.model_validate({"receivers": receivers, "routes": routes})


def test_the_default_file_pages_critical_and_error_and_posts_everything_to_slack() -> None:
    router = Router(load_routing("default.yaml"))
    assert router.route(context()).receivers == ("gpu-alerts", "gpu-oncall")
    assert router.route(context(severity=Severity.ERROR)).receivers == ("gpu-alerts", "gpu-oncall")
    assert router.route(context(severity=Severity.WARNING)).receivers == ("gpu-alerts",)
    assert router.route(context(severity=Severity.INFO)).receivers == ("gpu-alerts",)


def test_the_default_file_does_not_page_for_a_manual_drain() -> None:
    decision = Router(load_routing("default.yaml")).route(
        context(kind="instance_state", severity=Severity.ERROR, drain_attribution="manual_or_scheduled")
    )
    assert decision.routes == ("manual-drains-are-informational",)
    assert decision.receivers == ("gpu-alerts",)


def test_first_match_wins() -> None:
    router = Router(
        config(
            [
                {"name": "critical", "match": {"severity": "critical"}, "receivers": ["pager"]},
                {"name": "all", "receivers": ["chat"]},
            ]
        )
    )
    assert router.route(context()).routes == ("critical",)


def test_continue_lets_later_routes_add_receivers() -> None:
    router = Router(
        config(
            [
                {
                    "name": "training",
                    "match": {"cluster": "gpu-train*"},
                    "receivers": ["training-chat"],
                    "continue": True,
                },
                {
                    "name": "critical",
                    "match": {"severity": ["critical", "error"]},
                    "receivers": ["pager", "training-chat"],
                },
            ]
        )
    )
    decision = router.route(context())
    assert decision.routes == ("training", "critical")
    assert decision.receivers == ("training-chat", "pager")


def test_matchers_are_globs_and_all_must_match() -> None:
    router = Router(
        config(
            [
                {
                    "name": "p5",
                    "match": {"capacity_provider": "gpu-p5-*", "fault_class": "xid_*"},
                    "receivers": ["pager"],
                },
            ]
        )
    )
    assert router.route(context()).receivers == ("pager",)
    assert router.route(context(fault_class="daemon")).receivers == ()


def test_a_missing_label_matches_only_none() -> None:
    router = Router(config([{"name": "ec2", "match": {"capacity_provider": "none"}, "receivers": ["chat"]}]))
    assert router.route(context(capacity_provider=None)).receivers == ("chat",)
    assert router.route(context()).receivers == ()


@pytest.mark.parametrize(
    ("routes", "receivers", "message"),
    [
        ([{"name": "r", "receivers": ["nobody"]}], None, "unknown receivers"),
        ([{"name": "r", "match": {"colour": "red"}, "receivers": ["chat"]}], None, "unknown matcher"),
        ([{"name": "r", "receivers": ["chat"]}, {"name": "r", "receivers": ["chat"]}], None, "unique"),
        ([{"name": "r", "receivers": ["chat"]}], {"chat": {"slack": {"channel": "#a", "webhook": "b"}}}, "exactly one"),
        ([{"name": "r", "receivers": ["chat"]}], {"chat": {}}, "exactly one"),
        ([{"name": "r", "receivers": []}], None, "at least 1"),
    ],
)
def test_an_invalid_routing_file_is_rejected_with_a_clear_reason(
    routes: list[dict[str, Any]], receivers: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        config(routes, receivers)


def test_the_first_matched_route_with_a_runbook_gives_it() -> None:
    router = Router(
        config(
            [
                {"name": "training", "match": {"cluster": "gpu-train*"}, "receivers": ["chat"], "continue": True},
                {
                    "name": "p5",
                    "match": {"capacity_provider": "gpu-p5-*"},
                    "receivers": ["chat"],
                    "continue": True,
                    "runbook": {"url": "https://wiki.example.com/p5"},
                },
                {"name": "all", "receivers": ["pager"], "runbook": {"action": "Call the GPU team."}},
            ]
        )
    )

    decision = router.route(context())

    assert decision.routes == ("training", "p5", "all")
    assert decision.runbook == RouteRunbook(url="https://wiki.example.com/p5")
    assert router.route(context(capacity_provider="other")).runbook == RouteRunbook(action="Call the GPU team.")


def test_a_decision_has_no_runbook_when_no_matched_route_gives_one() -> None:
    router = Router(
        config(
            [
                {"name": "p5", "match": {"capacity_provider": "gpu-p5-*"}, "receivers": ["chat"]},
                {"name": "all", "receivers": ["pager"], "runbook": {"action": "Call the GPU team."}},
            ]
        )
    )

    assert router.route(context()).runbook is None
    assert Router(load_routing("default.yaml")).route(context()).runbook is None


@pytest.mark.parametrize(
    ("runbook", "message"),
    [
        ({"url": "http://wiki.example.com/gpu"}, "routes.0.runbook.url\n.*must be https"),
        ({"url": "https://wiki.example.com/a page"}, "routes.0.runbook.url\n.*no spaces"),
        ({"action": "first line\nsecond line"}, "routes.0.runbook.action\n.*one line"),
        ({}, "routes.0.runbook\n.*needs 'url', 'action' or both"),
        ({"link": "https://wiki.example.com/gpu"}, "routes.0.runbook.link\n.*Extra inputs"),
        ({"url": 42}, "routes.0.runbook.url\n.*valid string"),
    ],
)
def test_a_bad_runbook_is_rejected_naming_the_field(runbook: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config([{"name": "all", "receivers": ["chat"], "runbook": runbook}])


def test_a_routing_file_can_be_loaded_from_a_path(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(
        yaml.safe_dump(
            {"receivers": {"c": {"slack": {"channel": "#x"}}}, "routes": [{"name": "all", "receivers": ["c"]}]}
        )
    )
    assert load_routing(str(path)).routes[0].name == "all"


def test_an_unknown_packaged_routing_file_is_an_error() -> None:
    with pytest.raises(FileNotFoundError):
        load_routing("nope.yaml")


def test_routecheck_explains_a_whole_incident(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in (EVENTS / "incident-xid79").glob("*.json"))
    assert routecheck(files) == 0
    out = capsys.readouterr().out
    assert "open: gpu-inference/" in out
    assert "route: page-critical-and-error -> gpu-alerts (slack #gpu-alerts), gpu-oncall (pagerduty gpu-oncall)" in out
    assert "drain_attribution=ecs_auto_repair" in out
    assert "resolve: gpu-inference/" in out


def test_routecheck_shows_a_manual_drain_reaches_slack_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert routecheck([str(EVENTS / "state" / "draining-manual.json")]) == 0
    out = capsys.readouterr().out
    assert "route: manual-drains-are-informational -> gpu-alerts (slack #gpu-alerts)" in out


def test_routecheck_shows_the_default_runbook(capsys: pytest.CaptureFixture[str]) -> None:
    assert routecheck([str(EVENTS / "incident-xid79" / "01-impaired-xid79.json")]) == 0
    out = capsys.readouterr().out
    assert "    runbook (default): The GPU fell off the bus: ECS replaces the instance if auto-repair is on;" in out
    assert "      link: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html" in out


def test_routecheck_shows_which_route_gave_a_runbook(capsys: pytest.CaptureFixture[str]) -> None:
    events = [str(EVENTS / "incident-xid79" / "01-impaired-xid79.json"), str(EVENTS / "state" / "draining-manual.json")]

    assert routecheck(["--routing-file", str(DOCUMENTED_RUNBOOKS), *events]) == 0

    out = capsys.readouterr().out
    assert "    runbook (from route inference-gpu-hardware): Confirm ECS auto-repair started" in out
    assert "      link: https://wiki.example.com/runbooks/gpu-inference-hardware" in out
    assert "    runbook (from route manual-drains-are-informational): Check the change calendar;" in out
    assert (
        "      link: https://docs.aws.amazon.com/AmazonECS/latest/developerguide/container-instance-draining.html"
        in out
    )


def test_routecheck_refuses_a_bad_runbook_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    routing = yaml.safe_load(DOCUMENTED_RUNBOOKS.read_text(encoding="utf-8"))
    routing["routes"][1]["runbook"]["url"] = "http://wiki.example.com/runbooks/gpu-inference-hardware"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(routing), encoding="utf-8")

    assert routecheck(["--routing-file", str(path), str(EVENTS / "state" / "draining-manual.json")]) == 2

    err = capsys.readouterr().err
    assert "routes.1.runbook.url" in err
    assert "a runbook url must be https://host/..." in err


def test_routecheck_rejects_a_missing_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert routecheck(["does-not-exist.json"]) == 2
    assert "no such event file" in capsys.readouterr().err
