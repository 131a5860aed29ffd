"""Hostile but deliverable input: every mutated envelope is processed or rejected with a reason, nothing else.

`make fuzz N=10000` runs the same through the real router at scale; here hypothesis drives the mutations,
one envelope per invocation, against one sandbox (moto, the stand-ins, the AlertRouterFunction in process).
"""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox.fuzz import FUNCTION, extreme_times_and_numbers, fuzzed_bodies
from sandbox.lambda_runtime import InProcessFunction
from sandbox.report import collect_dead_letters
from sandbox.session import Sandbox
from sandbox.sqs_mapping import wrap_in_sqs_event
from sandbox.template import load_template
from tests.conftest import ROOT, load_event


@pytest.fixture(scope="module")
def router() -> Iterator[tuple[Sandbox, InProcessFunction]]:
    with Sandbox(load_template(ROOT / "template.yaml")) as sandbox:
        spec = sandbox.stack.functions[FUNCTION]
        with InProcessFunction(spec, sandbox.function_environment(spec)) as function:
            yield sandbox, function


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32))
def test_any_mutated_envelope_is_processed_or_rejected_with_a_reason(
    router: tuple[Sandbox, InProcessFunction], seed: int
) -> None:
    sandbox, function = router
    [body] = fuzzed_bodies(1, random.Random(seed))
    source = sandbox.stack.functions[FUNCTION].sqs_sources[0]
    # When the router gets it (first receive)
    invocation = function.invoke(wrap_in_sqs_event([body], source, sandbox.identity.region))
    # Then the record does not fail (a failure would be retried: with healthy stand-ins, that is a crash) ...
    assert invocation.error is None, invocation.error
    result: dict[str, Any] = invocation.result or {}
    assert not result.get("batchItemFailures"), (body[:300], invocation.errors)
    # ... and anything it dead-lettered says why and which event
    for letter in collect_dead_letters(sandbox.stack, sandbox.aws):
        assert letter["message_attributes"]["reason"]
        assert letter["message_attributes"]["event_id"]


def test_the_fuzz_command_reports_no_crash_and_a_reason_for_every_dead_letter() -> None:
    # The command on its own sandbox, in its own process (one sandbox at a time per process)
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "fuzz", "--count", "100", "--seed", "3"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "crashed (would be retried): 0" in done.stdout
    assert "without a reason: 0" in done.stdout


def test_sandbox_replay_and_its_report_survive_hostile_events(tmp_path: Path) -> None:
    # Given mutated envelopes (the ones that are still JSON objects) in one event file
    rng = random.Random(5)
    events = []
    for body in fuzzed_bodies(400, rng):
        try:
            document = json.loads(body)
        except (ValueError, RecursionError):
            continue
        if isinstance(document, dict):
            events.append(document)
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(events[:120]))
    report = tmp_path / "report.json"
    # When they are replayed from the command line, printing the timeline
    done = subprocess.run(
        [sys.executable, "-m", "sandbox", "replay", str(path), "--report", str(report)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    # Then the run completes, prints, and writes a report that reads back
    assert done.returncode == 0, done.stderr[-3000:]
    assert "What on-call saw" in done.stdout
    written = json.loads(report.read_text())
    assert len(written["events"]) == 120


def test_the_extreme_mutation_reaches_every_time_and_number_of_an_event() -> None:
    # Given the XID 79 Health Change and AWS's state change (a version, a count-like number, times in the envelope
    # and in the detail)
    health = load_event("incident-xid79/01-impaired-xid79.json")
    state = load_event("aws-docs/instance-state-change-active.json")

    # When the extreme mutation is applied to each, from many seeds
    reached: dict[str, set[str]] = {"time": set(), "lastStatusChange": set(), "version": set(), "updatedAt": set()}
    for seed in range(200):
        rng = random.Random(seed)
        for event in (
            extreme_times_and_numbers(copy.deepcopy(health), rng),
            extreme_times_and_numbers(copy.deepcopy(state), rng),
        ):
            detail = event["detail"]
            values = {"time": event["time"], "version": detail.get("version"), "updatedAt": detail.get("updatedAt")}
            if "healthChecks" in detail:
                values["lastStatusChange"] = detail["healthChecks"][0]["lastStatusChange"]
            for name, value in values.items():
                if value is not None:
                    reached[name].add(json.dumps(value))

    # Then each of them took Go's zero time or a number too large to store, and far-future times, at some seed
    for name in ("time", "lastStatusChange", "updatedAt"):
        assert '"0001-01-01T00:00:00Z"' in reached[name], name
        assert '"9999-12-31T23:59:59Z"' in reached[name], name
    versions = [json.loads(value) for value in reached["version"]]
    assert any(version >= 10**38 for version in versions) and any(version < 0 for version in versions)
