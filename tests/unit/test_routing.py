"""Routing files: validation, first match wins, continue, globs; and `make route`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from fault_responder.core.domain import Severity
from fault_responder.operations.routecheck import main as routecheck
from fault_responder.routing.router import RouteContext, Router, RouteRunbook, RoutingConfig, load_routing, read_yaml
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


# --- Time intervals: mute_time_intervals and active_time_intervals ---------------------------------------

MAINTENANCE_EXAMPLE = ROOT / "docs" / "examples" / "maintenance-windows.yaml"
SATURDAY_3AM_BERLIN = datetime(2026, 11, 7, 2, 0, tzinfo=UTC)
MONDAY_NOON_BERLIN = datetime(2026, 11, 9, 11, 0, tzinfo=UTC)
SUNDAY_NOON_BERLIN = datetime(2026, 11, 8, 11, 0, tzinfo=UTC)


def timed(routes: list[dict[str, Any]]) -> Router:
    return Router(
        RoutingConfig.model_validate(
            {
                "receivers": {"chat": {"slack": {"channel": "#gpu"}}, "pager": {"pagerduty": {"service": "gpu"}}},
                "time_intervals": {
                    "saturday-night": [
                        {"weekdays": ["saturday"], "times": [{"start_time": "00:00", "end_time": "06:00"}]}
                    ],
                    "weekdays": [{"weekdays": ["monday:friday"]}],
                    "november": [{"months": ["november"]}],
                },
                "routes": routes,
            }
        )
    )


def test_a_route_in_a_mute_interval_mutes_its_receivers_and_says_which_interval() -> None:
    router = timed([{"name": "page", "receivers": ["pager", "chat"], "mute_time_intervals": ["saturday-night"]}])

    assert router.muted_receivers(("page",), datetime(2026, 11, 7, 3, 0, tzinfo=UTC)) == {
        "pager": "route page: in mute time interval saturday-night",
        "chat": "route page: in mute time interval saturday-night",
    }
    assert router.muted_receivers(("page",), datetime(2026, 11, 7, 6, 0, tzinfo=UTC)) == {}


def test_a_route_outside_all_its_active_intervals_mutes_its_receivers() -> None:
    router = timed([{"name": "page", "receivers": ["pager"], "active_time_intervals": ["weekdays", "november"]}])

    assert router.muted_receivers(("page",), datetime(2026, 11, 8, 12, 0, tzinfo=UTC)) == {}  # a November Sunday
    assert router.muted_receivers(("page",), datetime(2026, 12, 6, 12, 0, tzinfo=UTC)) == {
        "pager": "route page: outside active time intervals weekdays, november"
    }


def test_a_mute_interval_wins_over_an_active_interval() -> None:
    router = timed(
        [
            {
                "name": "page",
                "receivers": ["pager"],
                "active_time_intervals": ["november"],
                "mute_time_intervals": ["saturday-night"],
            }
        ]
    )

    assert "saturday-night" in router.muted_receivers(("page",), datetime(2026, 11, 7, 3, 0, tzinfo=UTC))["pager"]


def test_a_receiver_is_muted_only_when_every_matched_route_that_lists_it_is_muted() -> None:
    # Given the pager on two routes, one muted on Saturday nights, one never
    router = timed(
        [
            {"name": "page", "receivers": ["pager"], "mute_time_intervals": ["saturday-night"], "continue": True},
            {"name": "also-page", "receivers": ["pager", "chat"]},
            {"name": "chat-weekdays", "receivers": ["chat"], "active_time_intervals": ["weekdays"], "continue": True},
            {"name": "chat-saturday-nights-off", "receivers": ["chat"], "mute_time_intervals": ["saturday-night"]},
        ]
    )
    saturday_night = datetime(2026, 11, 7, 3, 0, tzinfo=UTC)

    # Then through both it is not muted; through the muted one alone it is
    assert router.muted_receivers(("page", "also-page"), saturday_night) == {}
    assert router.muted_receivers(("page",), saturday_night) == {
        "pager": "route page: in mute time interval saturday-night"
    }
    # And when both routes that list it are muted, both reasons are given
    assert router.muted_receivers(("chat-weekdays", "chat-saturday-nights-off"), saturday_night) == {
        "chat": "route chat-weekdays: outside active time intervals weekdays; "
        "route chat-saturday-nights-off: in mute time interval saturday-night"
    }


def test_muted_receivers_refuses_a_route_the_file_does_not_have() -> None:
    router = timed([{"name": "page", "receivers": ["pager"]}])

    with pytest.raises(ValueError, match=r"no routes named \['paeg'\]"):
        router.muted_receivers(("paeg",), SATURDAY_3AM_BERLIN)
    assert router.muted_receivers((), SATURDAY_3AM_BERLIN) == {}


def test_a_route_naming_an_unknown_time_interval_is_rejected_naming_it() -> None:
    with pytest.raises(ValidationError, match=r"route 'page' names unknown mute_time_intervals \['weekend'\]"):
        timed([{"name": "page", "receivers": ["pager"], "mute_time_intervals": ["weekend", "weekdays"]}])
    with pytest.raises(ValidationError, match=r"unknown active_time_intervals \['office'\] \(known: none"):
        config([{"name": "page", "receivers": ["pager"], "active_time_intervals": ["office"]}])


def test_a_bad_time_interval_is_rejected_naming_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "receivers: {chat: {slack: {channel: '#x'}}}\n"
        "time_intervals:\n  maintenance:\n    - weekdays: [saturday, funday]\n"
        "routes: [{name: all, receivers: [chat]}]\n"
    )

    with pytest.raises(ValidationError, match="'funday' is not a weekday") as error:
        load_routing(str(path))
    assert error.value.errors()[0]["loc"] == ("time_intervals", "maintenance", 0, "weekdays", 1)


def test_a_routing_file_reads_unquoted_times_and_ranges_as_written(tmp_path: Path) -> None:
    # Given times and ranges written without quotes, which YAML 1.1 would read as base-60 numbers
    path = tmp_path / "unquoted.yaml"
    path.write_text(
        "receivers: {chat: {slack: {channel: '#x'}}}\n"
        "time_intervals:\n"
        "  nights:\n"
        "    - times: [{start_time: 17:00, end_time: 24:00}]\n"
        "      days_of_month: [1:5]\n"
        "routes: [{name: all, receivers: [chat], mute_time_intervals: [nights], continue: false}]\n"
    )

    [night] = load_routing(str(path)).time_intervals["nights"]

    assert str(night) == "17:00-24:00; days_of_month 1:5; UTC"


def test_the_routing_yaml_reader_resolves_every_other_scalar_as_safe_load_does() -> None:
    text = "a: 12\nb: -0x1F\nc: 1.5e+3\nd: .inf\ne: true\nf: null\ng: 2026-11-07\nh: 1_000\ni: 0o17\nj: '17:00'\n"

    assert read_yaml(text) == yaml.safe_load(text)


def test_the_default_file_stays_valid_and_has_no_time_intervals() -> None:
    routing = load_routing("default.yaml")

    assert routing.time_intervals == {}
    assert Router(routing).muted_receivers(("page-critical-and-error",), SATURDAY_3AM_BERLIN) == {}


def test_the_documented_example_mutes_the_pager_in_the_maintenance_window_and_keeps_slack() -> None:
    router = Router(load_routing(str(MAINTENANCE_EXAMPLE)))
    critical = router.route(context())

    assert critical.receivers == ("gpu-oncall", "gpu-alerts")
    assert router.muted_receivers(critical.routes, SATURDAY_3AM_BERLIN) == {
        "gpu-oncall": "route page-critical-and-error: in mute time interval saturday-maintenance"
    }
    assert router.muted_receivers(critical.routes, MONDAY_NOON_BERLIN) == {}
    warning = router.route(context(severity=Severity.WARNING, fault_class="xid_restart_app"))
    assert router.muted_receivers(warning.routes, MONDAY_NOON_BERLIN) == {}
    assert router.muted_receivers(warning.routes, SUNDAY_NOON_BERLIN) == {
        "gpu-alerts": "route warnings-in-business-hours: outside active time intervals business-hours"
    }


def test_routecheck_lists_the_time_intervals_and_what_they_mute_at_a_given_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    event = str(EVENTS / "incident-xid79" / "01-impaired-xid79.json")

    assert routecheck(["--routing-file", str(MAINTENANCE_EXAMPLE), "--at", "2026-11-07T03:00:00+01:00", event]) == 0
    inside = capsys.readouterr().out
    assert routecheck(["--routing-file", str(MAINTENANCE_EXAMPLE), "--at", "2026-11-09T12:00:00Z", event]) == 0
    outside = capsys.readouterr().out

    assert "  saturday-maintenance: 02:00-06:00; weekdays saturday; Europe/Berlin" in inside
    assert "  route page-critical-and-error is muted during saturday-maintenance" in inside
    assert (
        "    at 2026-11-07T02:00:00Z: gpu-oncall muted "
        "(route page-critical-and-error: in mute time interval saturday-maintenance)"
    ) in inside
    assert "    at 2026-11-09T12:00:00Z: no receiver muted by time intervals" in outside


def test_routecheck_says_nothing_of_time_intervals_when_the_file_has_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert routecheck([str(EVENTS / "incident-xid79" / "01-impaired-xid79.json")]) == 0

    out = capsys.readouterr().out
    assert "time intervals" not in out and " muted" not in out


@pytest.mark.parametrize(("at", "says"), [("2026-11-07T03:00", "no UTC offset"), ("saturday", "not an ISO 8601")])
def test_routecheck_refuses_a_time_it_cannot_place(at: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        routecheck(["--at", at, str(EVENTS / "state" / "draining-manual.json")])

    assert exit_.value.code == 2
    assert says in capsys.readouterr().err


def test_the_example_in_docs_silences_md_is_the_example_file() -> None:
    document = (ROOT / "docs/silences.md").read_text(encoding="utf-8")
    yaml_blocks = [block.split("```", 1)[0] for block in document.split("```yaml\n")[1:]]

    assert MAINTENANCE_EXAMPLE.read_text(encoding="utf-8") in yaml_blocks


def test_routecheck_of_an_organization_routes_by_the_accounts_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given XID 79 in the account 123456789012, a member of the organization whose stack is in 111122223333/us-east-1,
    # named ml-sandbox (the packaged organization.yaml sends the sandbox accounts to Slack only)
    event = EVENTS / "incident-xid79" / "01-impaired-xid79.json"
    names = ["--account-names", "123456789012=ml-sandbox"]
    home = ["--organization", "111122223333/us-east-1", "--routing-file", "organization.yaml"]

    # When the route check handles it as that stack would
    assert routecheck([*home, *names, str(event)]) == 0
    out = capsys.readouterr().out

    # Then its labels name the account and Region, and the route on account_name sends it to Slack only
    assert "account=123456789012, account_name=ml-sandbox, region=us-west-2" in out
    assert "route: sandbox-accounts-post-only -> gpu-alerts (slack #gpu-alerts)" in out

    # And without the names, the same account pages as any other
    assert routecheck([*home, str(event)]) == 0
    assert "route: page-critical-and-error -> gpu-alerts (slack #gpu-alerts), gpu-oncall" in capsys.readouterr().out


def test_routecheck_refuses_an_organization_without_its_home(capsys: pytest.CaptureFixture[str]) -> None:
    event = str(EVENTS / "incident-xid79" / "01-impaired-xid79.json")
    assert routecheck(["--account-names", "123456789012=ml-sandbox", event]) == 2
    assert "--organization ACCOUNT/REGION" in capsys.readouterr().err
