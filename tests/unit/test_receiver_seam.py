"""Receivers are reached through one seam (notification/receivers): nothing outside notification/ and routing/ branches
on a kind of receiver, every kind the routing file may name is registered, and the interface stays small."""

from __future__ import annotations

import ast
import inspect
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import ValidationError

from fault_responder.alerting.service import AlertService
from fault_responder.alerting.store import MemoryInstanceStore, StorePorts
from fault_responder.core.domain import Severity
from fault_responder.incidents import lifecycle
from fault_responder.incidents.record import Delivery
from fault_responder.notification.dryrun import ReceiverCourier, RecordingChannels
from fault_responder.notification.receivers.kind import Capability, ReceiverKind
from fault_responder.notification.receivers.registry import RECEIVER_KINDS, capabilities, describe
from fault_responder.notification.receivers.steps import Step, View
from fault_responder.notification.render.marks import SHORTENED
from fault_responder.routing.router import KINDS, Receiver, Router, RoutingConfig
from tests.conftest import EVENTS, load_event
from tests.unit.test_resume_domain import a_fault

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "common" / "fault_responder"
SEAM = ("notification", "routing")
"""Where kinds are named: their packages and the registry, and the routing file's schema."""
EXCEPTIONS: dict[str, str] = {}
"""Files still allowed to branch on kinds, each with why. None is meant to stay."""


def _one_receiver(node: ast.expr) -> bool:
    """Whether the expression reads as one receiver: `receiver`, `self.receiver`, `receivers[name]`, ..."""
    if isinstance(node, ast.Name):
        return node.id.lower().endswith("receiver")
    if isinstance(node, ast.Attribute):
        return node.attr.lower().endswith("receiver")
    if isinstance(node, ast.Subscript):
        held = node.value
        name = held.id if isinstance(held, ast.Name) else held.attr if isinstance(held, ast.Attribute) else ""
        return name.lower().endswith("receivers")
    if isinstance(node, ast.Call) and node.args:
        return _one_receiver(node.args[0])  # (kind_of(receiver), ...)
    return False


def _about_a_receiver(node: ast.expr) -> bool:
    """Whether the expression says something of a receiver: its kind (`receiver.kind`), or one read through it."""
    return any(
        _one_receiver(inner)
        or (isinstance(inner, ast.Attribute) and inner.attr in ("kind", "key") and _one_receiver(inner.value))
        for inner in ast.walk(node)
        if isinstance(inner, ast.expr)
    )


def _kind_names(node: ast.expr, kinds: frozenset[str]) -> bool:
    return any(
        isinstance(inner, ast.Constant) and isinstance(inner.value, str) and inner.value in kinds
        for inner in ast.walk(node)
    )


def kind_branches(source: str, kinds: frozenset[str]) -> list[tuple[int, str]]:
    """Each place the code asks which kind a receiver is: its target read by a kind's key (`receiver.slack`,
    `getattr(receiver, "pagerduty")`), or its kind compared with a kind's key (`receiver.kind == "slack"`, a match on
    it), with the line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in kinds and _one_receiver(node.value):
            found.append((node.lineno, f".{node.attr} of a receiver"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and _one_receiver(node.args[0])
            and _kind_names(node.args[1], kinds)
        ):
            found.append((node.lineno, f"{node.func.id} of a kind's key"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_kind_names(side, kinds) for side in sides) and any(_about_a_receiver(side) for side in sides):
                found.append((node.lineno, "a receiver's kind compared with a kind's key"))
        elif (
            isinstance(node, ast.Match)
            and _about_a_receiver(node.subject)
            and any(
                _kind_names(case.pattern.value, kinds)
                for case in node.cases
                if isinstance(case.pattern, ast.MatchValue)
            )
        ):
            found.append((node.lineno, "a match on a receiver's kind"))
    return found


def _branches_outside_the_seam() -> dict[str, list[tuple[int, str]]]:
    kinds = frozenset(KINDS)
    found: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.split("/", 1)[0] in SEAM:
            continue
        branches = kind_branches(path.read_text(encoding="utf-8"), kinds)
        if branches:
            found[relative] = branches
    return found


def test_nothing_outside_notification_and_routing_branches_on_a_kind_of_receiver() -> None:
    found = _branches_outside_the_seam()
    unexpected = {path: lines for path, lines in found.items() if path not in EXCEPTIONS}
    assert unexpected == {}, "ask notification/receivers/registry.py (the receiver's kind) instead"
    stale = sorted(set(EXCEPTIONS) - set(found))
    assert not stale, f"no longer branches on kinds: remove from EXCEPTIONS {stale}"


@pytest.mark.parametrize(
    "source",
    [
        "x = receiver.slack.channel",
        "if self.receivers[name].pagerduty is None: pass",
        'channel = "slack" if receiver.slack is not None else "pagerduty"',
        "names = [n for n, receiver in routing.receivers.items() if receiver.pagerduty is not None]",
        'if receiver.kind == "pagerduty": pass',
        'if kind_of(receiver).key in ("slack", "teams"): pass',
        'target = getattr(receiver, "slack")',
        'match receiver.kind:\n    case "slack":\n        pass',
        "told = routing.receivers[name].slack",
    ],
)
def test_the_scan_finds_a_branch_on_a_kind_however_it_is_written(source: str) -> None:
    assert kind_branches(source, frozenset({"slack", "pagerduty"}))


@pytest.mark.parametrize(
    "source",
    [
        'if action.via == "pagerduty": pass',  # where an action came from, not a receiver's kind
        'if service == "slack": pass',  # a secret's service
        "hops = receivers.slack",  # a set of names, not one receiver
        "told = describe(name, receiver)",
    ],
)
def test_the_scan_leaves_alone_what_is_no_branch_on_a_receiver(source: str) -> None:
    assert kind_branches(source, frozenset({"slack", "pagerduty"})) == []


def test_every_kind_the_routing_file_may_name_is_registered_with_its_target_model() -> None:
    assert sorted(RECEIVER_KINDS) == sorted(KINDS)
    for key, kind in RECEIVER_KINDS.items():
        assert kind.key == key
        assert Receiver.model_fields[key].annotation == kind.target | None


def test_the_interface_stays_within_twelve_methods() -> None:
    methods = [name for name, _ in inspect.getmembers(ReceiverKind, inspect.isfunction) if not name.startswith("_")]
    assert 0 < len(methods) <= 12, methods


def test_a_receiver_with_no_kind_or_two_is_refused_naming_every_kind() -> None:
    for receivers in ({"r": {}}, {"r": {"slack": {"channel": "#a"}, "pagerduty": {"service": "s"}}}):
        with pytest.raises(ValidationError) as refused:
            RoutingConfig.model_validate({"receivers": receivers, "routes": [{"name": "all", "receivers": ["r"]}]})
        assert all(f"'{key}'" in str(refused.value) for key in KINDS)
    with pytest.raises(ValidationError, match="opsgenie"):  # a key that is no registered kind (teams now is one)
        Receiver.model_validate({"opsgenie": {"webhook": "ops"}})


def test_each_receiver_says_what_it_can_do_and_how_it_is_named() -> None:
    bot = Receiver.model_validate({"slack": {"channel": "#gpu"}})
    hook = Receiver.model_validate({"slack": {"webhook": "ops"}})
    pager = Receiver.model_validate({"pagerduty": {"service": "gpu-oncall"}})
    assert (bot.kind, hook.kind, pager.kind) == ("slack", "slack", "pagerduty")
    assert {Capability.THREAD, Capability.UPDATE} <= capabilities(bot)
    assert Capability.THREAD not in capabilities(hook) and Capability.UPDATE not in capabilities(hook)
    assert Capability.PAGE in capabilities(pager) and Capability.NEWS not in capabilities(pager)
    assert [describe("a", bot), describe("b", hook), describe("c", pager)] == [
        "a (slack #gpu)",
        "b (slack webhook ops)",
        "c (pagerduty gpu-oncall)",
    ]


def test_a_resume_notice_cut_to_fit_ends_with_the_one_mark_in_slack_and_pagerduty() -> None:
    from fault_responder.resume.notices import Notice, NoticeKind  # noqa: PLC0415
    from tests.notice_renders import render_resume_reply, render_resume_trigger  # noqa: PLC0415

    fault = a_fault()
    notice = Notice(
        key="k", kind=NoticeKind.RESUMED, pagerduty=None, severity=Severity.INFO, title="t" * 5000, text="x" * 5000
    )
    reply = render_resume_reply(notice, fault)
    assert reply.text.endswith(SHORTENED) and reply.blocks[0]["text"]["text"].endswith(SHORTENED)
    page = render_resume_trigger(notice, fault, "k" * 32, fault.impaired_at)
    assert page["payload"]["summary"].endswith(SHORTENED) and len(page["payload"]["summary"]) <= 1024


class _CheckingCourier(ReceiverCourier):
    """Performs every step, having checked that the receiver's kind can do what the step does."""

    performed: list[tuple[str, str]]

    def perform(self, name: str, receiver: Receiver, step: Step, view: View, sent: Delivery) -> Delivery:
        assert step.verb in capabilities(receiver), f"{name} cannot {step.verb}: {step.describe()}"
        self.performed.append((name, step.verb))
        return super().perform(name, receiver, step, view, sent)


def test_each_kind_plans_only_what_it_can_do_through_a_lifecycle_and_a_storm() -> None:
    routing = RoutingConfig.model_validate(
        {
            "receivers": {
                "bot": {"slack": {"channel": "#gpu"}},
                "hook": {"slack": {"webhook": "ops"}},
                "pager": {"pagerduty": {"service": "gpu-oncall"}},
            },
            "routes": [{"name": "all", "receivers": ["bot", "hook", "pager"]}],
            "grouping": {"threshold": 3},
        }
    )
    now = [datetime(1970, 1, 1, tzinfo=UTC)]
    courier = _CheckingCourier(RecordingChannels(), clock=lambda: now[0])
    courier.performed = []
    store = MemoryInstanceStore()
    service = AlertService(
        StorePorts(store, store, store), Router(routing), courier, lifecycle.Settings(), clock=lambda: now[0]
    )
    lifecycle_events = [load_event(f"incident-xid79/{path.name}") for path in sorted(EVENTS.glob("incident-xid79/*"))]
    for raw in [*lifecycle_events, *load_event("noise/storm-xid79.json")]:
        now[0] = max(now[0], datetime.fromisoformat(raw["time"].replace("Z", "+00:00")))
        service.handle(raw)
    now[0] += timedelta(hours=1)
    service.sweep(seconds_left=60.0)
    verbs = {(name, verb) for name, verb in courier.performed}
    assert {("bot", "open"), ("bot", "thread"), ("bot", "update"), ("hook", "open"), ("pager", "open")} <= verbs
    assert ("pager", "resolve") in verbs


PLUGGED = {"teams": ("notification/receivers/teams/", "notification/receivers/registry.py", "routing/router.py")}
"""Each kind plugged in through the channels' generic port, and the only places its code may name it: its package, the
registry and the routing schema (its secret's name reaches the wiring as data, RECEIVER_SECRETS, from template.yaml)."""


def _names_of_kind(source: str, key: str) -> list[int]:
    """Lines whose code (not a docstring or comment) names the kind: its key as a string, an identifier or attribute
    spelled as it (`teams`, `TEAMS`, `TeamsTarget`, ...), or an import of its package."""
    words = {key, key.upper()}
    found: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # a docstring
        if isinstance(node, ast.Constant) and node.value == key:
            found.append(node.lineno)
        elif isinstance(node, ast.Name | ast.Attribute):
            name = node.id if isinstance(node, ast.Name) else node.attr
            if name in words or name.startswith(key.capitalize()):
                found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and f".receivers.{key}" in f".{node.module or ''}":
            found.append(node.lineno)
    return found


def test_a_kind_plugged_in_through_the_port_is_named_only_by_its_package_the_registry_and_the_schema() -> None:
    for key, allowed in PLUGGED.items():
        naming = {
            relative: lines
            for path in sorted(PACKAGE.rglob("*.py"))
            if not (relative := path.relative_to(PACKAGE).as_posix()).startswith(allowed)
            and (lines := _names_of_kind(path.read_text(encoding="utf-8"), key))
        }
        assert naming == {}, f"only {allowed} may name the {key} kind"
        assert key in RECEIVER_KINDS and key in KINDS


def test_the_scan_for_a_kinds_name_finds_code_not_prose() -> None:
    assert _names_of_kind('"""Teams, teams."""\nx = 1  # teams', "teams") == []
    assert _names_of_kind('if kind == "teams": pass', "teams") == [1]
    assert _names_of_kind("from fault_responder.notification.receivers.teams import TEAMS", "teams") == [1]
    assert _names_of_kind("target = TeamsTarget(webhook='a')", "teams") == [1]
