"""Every scenario in scenarios/ runs through the real template, state machine and handlers, and every one of
its expectations holds (what `make test` checks; docs/scenarios.md)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sandbox.scenario import load_scenario
from tests.docs.test_documented_commands import RUNNABLE
from tests.scenarios.conftest import REPO_ROOT, SCENARIOS, failed, run

SHIPPED = sorted(SCENARIOS.glob("*.yaml"))
_RUN = [".venv/bin/python", "-m", "sandbox", "run"]


def documented_runs() -> dict[str, str]:
    """Scenario file -> the documentation block that runs it with `python -m sandbox run`, whose exit status
    tests/docs/test_documented_commands.py checks (the block runs under `bash -e`, and nothing in the command may
    hide a failure: no `||`, `&&` or pipe). That status is the run's verdict, built-in expectations included, so a
    scenario run there is not run again here."""
    found: dict[str, str] = {}
    for block in RUNNABLE:
        for command in block.commands:
            words = shlex.split(command, comments=True)  # (as written: no variable set before it)
            if words[: len(_RUN)] != _RUN or {"||", "&&", "|", "|&"} & set(words):
                continue
            for word in words[len(_RUN) :]:
                if word.endswith(".yaml") and (REPO_ROOT / word).is_file():
                    found.setdefault((REPO_ROOT / word).resolve().as_posix(), block.id)
    return found


DOCUMENTED = documented_runs()
RUN_HERE = [path for path in SHIPPED if path.resolve().as_posix() not in DOCUMENTED]
# What issue 3 asks the scenarios to show, at least.
REQUIRED = {
    "single-task-job-resumed",
    "gang-job-resumed",
    "newest-checkpoint-incomplete",
    "no-complete-checkpoint",
    "budget-exhausted",
    "duplicate-triggers",
    "auto-repair-enabled",
    "dry-run",
    "approve-approved",
    "approve-timed-out",
}


def test_the_required_scenarios_are_shipped() -> None:
    assert {path.stem for path in SHIPPED} >= REQUIRED


@pytest.mark.parametrize("path", SHIPPED, ids=[path.stem for path in SHIPPED])
def test_each_scenario_states_its_expectations(path: Path) -> None:
    loaded = load_scenario(path)

    assert loaded.scenario.description
    assert len(loaded.scenario.expect) >= 3


def test_every_shipped_scenario_runs_here_or_in_a_documented_command() -> None:
    # (Each runs once: a scenario the documentation runs, with its exit status checked, is not run again here.)
    assert DOCUMENTED, "no documented `python -m sandbox run` found: the parser is broken"
    assert set(DOCUMENTED) <= {path.resolve().as_posix() for path in SHIPPED}
    assert len(RUN_HERE) + len(DOCUMENTED) == len(SHIPPED)


@pytest.mark.sandbox
@pytest.mark.parametrize("path", RUN_HERE, ids=[path.stem for path in RUN_HERE])
def test_shipped_scenario_holds(path: Path) -> None:
    # Given a shipped scenario; When it runs in the sandbox
    result = run(path)

    # Then every expectation holds, the runner's own among them (sandbox/run.py): every execution it started
    # finished, nothing was amiss (no warning; no task token in any Slack message, ephemeral reply or PagerDuty event;
    # a training scenario started an execution, an approve one issued a token)
    assert result.passed, "\n".join(failed(result))
    assert all(execution["status"] != "RUNNING" for execution in result.report["executions"])
