"""`python -m fault_responder.cli status`: what is open, what is held back and why, from a sandbox report (the
deployed-stack path runs in scenarios/noise-silence-then-page.yaml, against the sandbox's incidents table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_responder.cli.main import main as cli
from sandbox.replay import load_event_file, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import ROOT

STORM = ROOT / "events" / "noise" / "storm-xid79.json"


@pytest.fixture(scope="module")
def storm_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    with Sandbox(load_template(ROOT / "template.yaml")) as sandbox:
        report = replay(sandbox, [load_event_file(STORM)], Timeline(None))
    path = tmp_path_factory.mktemp("status") / "report.json"
    path.write_text(json.dumps(report, default=str), encoding="utf-8")
    return path


def test_status_lists_the_fleet_incident_and_its_members_held_back(
    storm_report: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the report of a storm of five instances (two paged alone, three in the fleet incident)
    # When status reads it
    assert cli(["status", "--report", str(storm_report)]) == 0
    out = capsys.readouterr().out

    # Then it lists five open incidents, the fleet incident with its five members, and says why the members
    # that joined it are quiet
    assert "Open incidents: 5" in out
    assert "Open fleet incidents: 1" in out
    assert "fleet/gpu-inference/gpu-p5-managed/ACCELERATED_COMPUTE  5 of 5 impaired" in out
    assert out.count("quiet for gpu-oncall: part of fleet incident fleet:") >= 3


def test_status_as_json_says_the_same(storm_report: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(["status", "--report", str(storm_report), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert (len(view["incidents"]), len(view["fleets"])) == (5, 1)
    [fleet] = view["fleets"]
    assert (fleet["members_open"], fleet["members"], fleet["severity"]) == (5, 5, "critical")
    held = [row for row in view["incidents"] if row["fleet_id"] == fleet["id"]]
    assert held and all(row["quiet"] for row in held)
    assert view["silences"] == [] and view["resumes"] == []


def test_a_file_that_is_not_a_report_is_refused_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "not-a-report.json"
    path.write_text("[1, 2]", encoding="utf-8")
    assert cli(["status", "--report", str(path)]) == 2
    assert "is not a sandbox report" in capsys.readouterr().err


def _open_incident(fingerprint: str, **people: object) -> dict[str, object]:
    return {
        "id": f"{fingerprint}@1",
        "fingerprint": fingerprint,
        "status": "OPEN",
        "classification": {"severity": "critical", "title": "XID 79: GPU has fallen off the bus"},
        "phase": "IMPAIRED",
        "opened_at": "2026-08-27T14:03:00+00:00",
        **people,
    }


def test_status_says_who_is_on_it_and_prints_no_control_characters_from_their_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a report: one incident acknowledged from Slack by a name carrying a terminal escape, one reassigned in
    # PagerDuty, one nobody touched
    at = "2026-08-27T14:10:00+00:00"
    report = {
        "incidents": [
            _open_incident("c/a/ACCELERATED_COMPUTE", acknowledged={"by": "eve\x1b[2J", "at": at, "via": "slack"}),
            _open_incident(
                "c/b/ACCELERATED_COMPUTE",
                assigned={"by": "Jane Doe", "at": at, "via": "pagerduty", "note": "to Ana Lopez"},
            ),
            _open_incident("c/c/ACCELERATED_COMPUTE", acknowledged=None),
        ]
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")

    # When status reads it, as text and as JSON
    assert cli(["status", "--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert cli(["status", "--report", str(path), "--json"]) == 0
    view = json.loads(capsys.readouterr().out)

    # Then each says who acknowledged and to whom PagerDuty assigned it, without the escape
    assert "c/a/ACCELERATED_COMPUTE: acknowledged by eve?[2J from Slack at 2026-08-27 14:10Z" in out
    assert "c/b/ACCELERATED_COMPUTE: reassigned in PagerDuty to Ana Lopez by Jane Doe at 2026-08-27 14:10Z" in out
    assert "\x1b" not in out
    assert "c/c/ACCELERATED_COMPUTE:" not in out
    rows = {row["fingerprint"]: row for row in view["incidents"]}
    assert rows["c/a/ACCELERATED_COMPUTE"]["acknowledged"] == {"by": "eve?[2J", "via": "slack", "at": at, "note": None}
    assert rows["c/b/ACCELERATED_COMPUTE"]["assigned"]["note"] == "to Ana Lopez"
    assert rows["c/c/ACCELERATED_COMPUTE"]["acknowledged"] is None


def test_an_organizations_report_lists_each_accounts_incidents_under_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the report of an organization's stack: one incident at home, two in a member account (one of them a fleet
    # incident, whose `where` names the account), one whose account has no name
    member = {"account": "111111111111", "region": "us-west-2", "name": "prod-ml"}
    fleet = {
        **_open_incident("fleet/training/gpu-p5/ACCELERATED_COMPUTE/111111111111/us-west-2"),
        "fleet": {"total": 3, "open": 3},
        "where": member,
    }
    report = {
        "stack": {
            "account_id": "123456789012",
            "region": "us-east-1",
            "parameters": {"OrganizationId": "o-a1b2c3d4e5"},
        },
        "incidents": [
            {**_open_incident("training/a/ACCELERATED_COMPUTE"), "where": member},
            {
                **_open_incident("training/b/ACCELERATED_COMPUTE"),
                "where": {**member, "account": "222222222222", "name": ""},
            },
            {
                **_open_incident("training/c/ACCELERATED_COMPUTE"),
                "where": {"account": "123456789012", "region": "us-east-1", "name": ""},
            },
            fleet,
        ],
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report), encoding="utf-8")

    assert cli(["status", "--report", str(path)]) == 0
    out = capsys.readouterr().out

    # Then the stack's own come first, then each account by id, named where the report names it
    assert "Open incidents: 3, in 3 accounts and Regions\n  123456789012, us-east-1 (this stack's): 1\n" in out
    assert out.index("  prod-ml (111111111111)") < out.index("  222222222222")
    assert "  prod-ml (111111111111), us-west-2: 1\n    SEVERITY" in out
    assert "  222222222222, us-west-2: 1" in out
    assert "Open fleet incidents: 1, in 1 account and Region\n  prod-ml (111111111111), us-west-2: 1\n" in out
