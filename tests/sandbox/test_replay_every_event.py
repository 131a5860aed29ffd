"""Every sample event in events/ replayed through the sandbox, one folder per sandbox, in file order.

Each event must reach exactly the rule events/README.md says it matches, the handler must process it
without an error (malformed ones excepted: those must land in the DLQ, and nothing else may), and
every request the stand-ins received must have been answered with success.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from sandbox.replay import load_event_file, replay
from sandbox.report import Timeline
from sandbox.session import Sandbox
from sandbox.template import load_template
from tests.conftest import EVENTS, ROOT

# sqs/ holds SQS batches; lambda/, function-url/ and schedule/ the inputs of functions no rule feeds (Step Functions
# tasks, function URL requests, scheduled runs): none is an event put on the bus.
NOT_ON_THE_BUS = {"sqs", "lambda", "function-url", "schedule"}
FOLDERS = sorted(p.name for p in EVENTS.iterdir() if p.is_dir() and p.name not in NOT_ON_THE_BUS)
_ROW = re.compile(r"^\| `(?P<file>[^`]+\.json)` \|.*\| (?P<rule>[^|]+) \|$")


def documented_rules() -> dict[str, list[str]]:
    """events/README.md's table: file -> the rules it matches ("none: ..." means none)."""
    rules: dict[str, list[str]] = {}
    for line in (EVENTS / "README.md").read_text(encoding="utf-8").splitlines():
        match = _ROW.match(line.strip())
        if match:
            rule = match["rule"].strip()
            rules[match["file"]] = [] if rule.startswith("none") else [rule.split()[0]]
    return rules


@pytest.fixture(scope="module")
def template() -> Any:
    return load_template(ROOT / "template.yaml")


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_event_in_the_folder_replays_as_documented(folder: str, template: Any) -> None:
    # Given the folder's files in order, and what the README says each one matches
    files = sorted((EVENTS / folder).glob("*.json"))
    expected = documented_rules()
    assert files, f"no events in {folder}"
    # When they are replayed through one sandbox
    with Sandbox(template) as sandbox:
        report = replay(sandbox, [load_event_file(path) for path in files], Timeline(None))
    # Then each event reached the documented rule ...
    by_file = {Path(event["file"]).relative_to(EVENTS).as_posix(): event for event in report["events"]}
    for path in files:
        name = path.relative_to(EVENTS).as_posix()
        assert name in expected, f"{name} is not documented in events/README.md"
        assert by_file[name]["matched_rules"] == expected[name], name
    # ... only malformed events failed, each dead-lettered with a reason, and every delivery succeeded.
    malformed = folder == "malformed"
    delivered = [event["id"] for event in report["events"] if event["matched_rules"]]
    dead = sorted(message["body"]["id"] for message in report["dlq"])
    assert dead == (sorted(delivered) if malformed else [])
    assert sorted(error["event_id"] for error in report["errors"]) == dead
    assert report["warnings"] == []
    assert all(request["status"] in (200, 202) for request in report["requests"])
