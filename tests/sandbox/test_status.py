"""`python -m fault_responder.cli status`: what is open, what is held back and why, from a sandbox report (the
deployed-stack path runs in scenarios/noise-silence-then-page.yaml, against the sandbox's incidents table)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fault_responder.cli import main as cli
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
