"""The steps a move lost when nobody answered its checkpoint-now request, as the Resumed reply estimates them
(docs/auto-resume.md#checkpoint-now-before-a-move), against the steps the emulated trainer really lost: the
shipped scenario `checkpoint-now-ignored-periodic-saves` run at several paces and checkpoint intervals, the job
a trainer of sandbox/trainer_emulation.py that saves through the training helper and stops training when ECS
tells its task to stop.

The estimate rests on the save's own time (the manifest's `created_at`), ECS's `stoppingAt` and the pace between
two of the job's checkpoints. It is held to the documented tolerance, the steps of one second of training at the
job's pace, not to the sandbox's timing: a busy machine delays a trainer's tick, and a step due just before the
stop may not be trained.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.expectations import collections
from sandbox.report import Timeline
from sandbox.run import run_scenario
from sandbox.scenario import load_scenario
from tests.scenarios.conftest import failed

pytestmark = pytest.mark.sandbox

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "checkpoint-now-ignored-periodic-saves.yaml"
TOLERANCE_SECONDS = 1.0
"""docs/auto-resume.md: within the steps of a second of training at the job's pace."""
_ESTIMATE = re.compile(r"Steps lost: about (\d+), trained in the ")


@pytest.mark.parametrize(
    ("step_seconds", "checkpoint_every"),
    [(0.05, 20), (0.02, 30), (0.1, 7)],
    ids=["20 steps a second, saved every second", "50 a second, every 0.6 s", "10 a second, every 0.7 s"],
)
def test_the_estimate_of_the_steps_lost_is_within_a_second_of_training_of_the_steps_really_lost(
    tmp_path: Path, step_seconds: float, checkpoint_every: int
) -> None:
    # Given the scenario's job, training at another pace and saving at another interval (and so stopped, now and
    # then, just after a save: none lost, which the scenario's own expectation does not allow for)
    document = yaml.safe_load(SCENARIO.read_text(encoding="utf-8"))
    [trainer] = document["world"]["trainers"]
    trainer |= {"step_seconds": step_seconds, "checkpoint_every": checkpoint_every}
    for expectation in document["expect"]:
        if expectation.get("select") == "training" and "steps_lost" in expectation.get("each", {}):
            expectation["each"]["steps_lost"] = {"gte": 0}
    path = tmp_path / SCENARIO.name
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")

    # When it runs: the job ignores the request, and is moved from its newest periodic save
    result = run_scenario(load_scenario(path), Timeline(io.StringIO()))
    assert result.passed, "\n".join(failed(result))

    # Then the reply's estimate is within the steps of a second of training of what the first run really lost
    lost = _really_lost(result.report)
    estimate = _estimate(result.report)
    tolerance = round(TOLERANCE_SECONDS / step_seconds)
    assert abs(estimate - lost) <= tolerance, f"estimated {estimate} steps lost, {lost} were (±{tolerance} allowed)"


def _really_lost(report: dict[str, Any]) -> int:
    """The steps the first run trained past the checkpoint the second run resumed from."""
    [first] = [run for run in report["training"] if run["run"] == 1]
    assert first["ended"] and first["ignored_requests"], first
    return int(first["steps_lost"])


def _estimate(report: dict[str, Any]) -> int:
    [estimate] = [
        int(found[1]) for message in collections(report)["slack"] if (found := _ESTIMATE.search(message["text"]))
    ]
    return estimate
