"""Where a fault class or an XID becomes what on-call should do, with a link: every default present and sound."""

from __future__ import annotations

import pytest

from fault_responder.core.domain import FaultClass, Runbook
from fault_responder.events.xid import CRITICAL_XIDS, RESTART_APP_XIDS
from fault_responder.routing.router import RouteRunbook
from fault_responder.routing.runbooks import (
    CLASS_RUNBOOKS,
    ECS_GPU_AUTO_REPAIR,
    MAX_ACTION,
    NVIDIA_XID_CATALOG,
    XID_RUNBOOKS,
    check_action,
    check_https_url,
    default_runbook,
    runbook_for,
)
from tests.conftest import ROOT

KNOWN_XIDS = sorted(set(CRITICAL_XIDS) | RESTART_APP_XIDS)
ALL_DEFAULTS = [*XID_RUNBOOKS.values(), *CLASS_RUNBOOKS.values()]
# A default is read on a phone: shorter than what a route may give.
DEFAULT_ACTION_BUDGET = 200


def test_every_xid_the_classifier_knows_has_its_own_runbook_and_no_other() -> None:
    assert sorted(XID_RUNBOOKS) == KNOWN_XIDS


def test_every_fault_class_has_a_runbook() -> None:
    assert set(CLASS_RUNBOOKS) == set(FaultClass)


@pytest.mark.parametrize("runbook", ALL_DEFAULTS, ids=lambda runbook: runbook.link_text)
def test_every_default_is_one_short_line_with_an_https_link(runbook: Runbook) -> None:
    assert check_action(runbook.action) == runbook.action
    assert len(runbook.action) <= DEFAULT_ACTION_BUDGET
    assert check_https_url(runbook.url) == runbook.url
    assert runbook.link_text.strip()


@pytest.mark.parametrize("xid", KNOWN_XIDS)
def test_an_xid_links_to_nvidias_catalog_naming_the_xid(xid: int) -> None:
    runbook = default_runbook(FaultClass.XID_CRITICAL if xid in CRITICAL_XIDS else FaultClass.XID_RESTART_APP, xid)

    assert runbook.url == NVIDIA_XID_CATALOG
    assert runbook.link_text == f"NVIDIA Xid catalog: Xid {xid}"


@pytest.mark.parametrize("xid", sorted(CRITICAL_XIDS))
def test_a_critical_xid_says_what_ecs_does_and_what_is_left_to_a_person(xid: int) -> None:
    action = XID_RUNBOOKS[xid].action

    assert "ECS replaces the instance if auto-repair is on" in action
    assert "otherwise drain and replace it" in action


def test_xid_79_says_the_gpu_fell_off_the_bus() -> None:
    assert XID_RUNBOOKS[79].action == (
        "The GPU fell off the bus: ECS replaces the instance if auto-repair is on; otherwise drain and replace it."
    )


@pytest.mark.parametrize("xid", sorted(RESTART_APP_XIDS))
def test_a_restart_app_xid_restarts_the_task_not_the_instance(xid: int) -> None:
    action = XID_RUNBOOKS[xid].action

    assert "restart the" in action.lower()
    assert "ECS replaces" not in action


def test_an_unknown_xid_gets_the_unknown_xid_line_and_a_link_naming_it() -> None:
    runbook = default_runbook(FaultClass.XID_UNKNOWN, 999)

    assert runbook.action == CLASS_RUNBOOKS[FaultClass.XID_UNKNOWN].action
    assert (runbook.url, runbook.link_text) == (NVIDIA_XID_CATALOG, "NVIDIA Xid catalog: Xid 999")


def test_a_fault_without_an_xid_gets_its_class_runbook() -> None:
    assert default_runbook(FaultClass.GPU_NO_REASON) == CLASS_RUNBOOKS[FaultClass.GPU_NO_REASON]
    assert default_runbook(FaultClass.XID_CRITICAL).url == ECS_GPU_AUTO_REPAIR


def test_a_route_action_replaces_the_line_and_keeps_the_default_link() -> None:
    runbook = runbook_for(FaultClass.XID_CRITICAL, 79, override=RouteRunbook(action="Page the hardware team."))

    assert runbook == Runbook("Page the hardware team.", NVIDIA_XID_CATALOG, "NVIDIA Xid catalog: Xid 79")


def test_a_route_url_replaces_the_link_and_keeps_the_default_line() -> None:
    override = RouteRunbook(url="https://wiki.example.com/gpu/xid-79")

    runbook = runbook_for(FaultClass.XID_CRITICAL, 79, override=override)

    assert runbook == Runbook(
        XID_RUNBOOKS[79].action, "https://wiki.example.com/gpu/xid-79", "Runbook (wiki.example.com)"
    )


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://wiki.example.com/gpu", "must be https"),
        ("https:///no-host", "must be https"),
        ("wiki.example.com/gpu", "must be https"),
        ("javascript:alert(1)", "must be https"),
        ("https://wiki.example.com/a b", "no spaces"),
        ("https://wiki.example.com/\x07", "control characters"),
        ("https://wiki.example.com/" + "a" * 2048, "at most 2048"),
    ],
)
def test_a_link_that_is_not_plain_https_is_refused(url: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_https_url(url)


@pytest.mark.parametrize(
    ("action", "reason"),
    [
        ("", "must say something"),
        ("   ", "must say something"),
        ("one\ntwo", "one line"),
        ("x" * (MAX_ACTION + 1), f"at most {MAX_ACTION}"),
    ],
)
def test_an_action_that_is_not_one_short_line_is_refused(action: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_action(action)


def test_docs_list_every_default_line_and_link() -> None:
    docs = (ROOT / "docs/runbooks.md").read_text(encoding="utf-8")
    critical = {xid: XID_RUNBOOKS[xid].action.split(": ECS replaces the instance")[0] for xid in CRITICAL_XIDS}
    others = [runbook.action for xid, runbook in XID_RUNBOOKS.items() if xid not in CRITICAL_XIDS]

    missing = [
        *(f"XID {xid}" for xid, meaning in critical.items() if f"| {xid} | {meaning} |" not in docs),
        *(action for action in others if " ".join(action.split()) not in " ".join(docs.split())),
        *(
            f"{fault_class}"
            for fault_class, runbook in CLASS_RUNBOOKS.items()
            if f"| `{fault_class}` | {runbook.action} |" not in docs
        ),
        *(runbook.url for runbook in ALL_DEFAULTS if runbook.url not in docs),
    ]
    assert missing == [], "docs/runbooks.md is not what runbooks.py says"
