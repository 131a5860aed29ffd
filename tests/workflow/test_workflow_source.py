"""The checked-in ASL JSON is exactly what its Python source generates (statemachines/README.md).

template.yaml deploys statemachines/*.asl.json and the other workflow tests execute it, so a JSON edited by hand, or
a source edited without regenerating, would test and deploy something other than what the source says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from statemachines.asl import render
from statemachines.build import ROOT, WORKFLOWS, main, stale


@pytest.mark.parametrize("path", list(WORKFLOWS), ids=[path.name for path in WORKFLOWS])
def test_the_checked_in_json_is_what_its_source_generates(path: Path) -> None:
    # Given a workflow's source and the JSON template.yaml deploys
    # When the source is rendered in memory, Then it is the checked-in file, byte for byte
    problems = stale(path, WORKFLOWS[path])
    assert not problems, (
        "\n".join(problems) + "\nThe JSON is generated: edit the source (statemachines/*.py), then run `make workflow`."
    )
    assert render(WORKFLOWS[path]) == path.read_text(encoding="utf-8")


def test_the_check_names_the_state_a_hand_edit_changed(tmp_path: Path, monkeypatch, capsys) -> None:
    # Given the generated JSON, edited by hand in one state of the Map and one at the top level
    path = ROOT / "statemachines" / "resume_training.asl.json"
    edited = json.loads(render(WORKFLOWS[path]))
    edited["States"]["ResumeJobs"]["ItemProcessor"]["States"]["PlanJob"]["Retry"][0]["MaxAttempts"] = 1
    edited["States"]["NotifyFailed"]["Next"] = "Done"
    hand_edited = tmp_path / path.name
    hand_edited.write_text(json.dumps(edited, indent=2) + "\n", encoding="utf-8")

    # When it is checked, directly and as `python -m statemachines.build --check` would
    problems = stale(hand_edited, WORKFLOWS[path])
    monkeypatch.setitem(WORKFLOWS, hand_edited, WORKFLOWS[path])
    monkeypatch.delitem(WORKFLOWS, path)
    exit_code = main(["--check"])

    # Then both states are named, the check fails, and it says how to regenerate
    assert problems == [f"{hand_edited} differs from its source in: ResumeJobs/PlanJob, NotifyFailed"]
    assert exit_code == 1
    assert "make workflow" in capsys.readouterr().err


def test_the_check_tells_a_reformatted_file_from_a_changed_one(tmp_path: Path) -> None:
    # Given the generated JSON with the same content, written compactly
    path = ROOT / "statemachines" / "resume_training.asl.json"
    reformatted = tmp_path / path.name
    reformatted.write_text(json.dumps(WORKFLOWS[path]), encoding="utf-8")

    # When it is checked, Then it is stale, for its formatting only
    assert stale(reformatted, WORKFLOWS[path]) == [
        f"{reformatted} has the same content as its source, but in another order or formatting"
    ]
