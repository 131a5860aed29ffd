"""Shared helpers for the scenario runner's tests: paths, and running a scenario in process."""

from __future__ import annotations

from pathlib import Path

from sandbox.report import Timeline
from sandbox.run import RunResult, run_scenario
from sandbox.scenario import load_scenario

REPO_ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = REPO_ROOT / "scenarios"
FIXTURES = Path(__file__).parent / "fixtures"
TOY_RESUME = FIXTURES / "toy-resume.yaml"


def run(path: Path) -> RunResult:
    """A scenario run in this process, printing nothing (what `python -m sandbox run --quiet` does)."""
    return run_scenario(load_scenario(path), Timeline(None))


def failed(result: RunResult) -> list[str]:
    """The expectations that did not hold, with what was found, for an assertion message."""
    return [
        f"{outcome['name']}: {'; '.join(outcome['problems'])}"
        for outcome in result.report["expectations"]
        if not outcome["passed"]
    ]
