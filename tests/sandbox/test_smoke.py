"""`make smoke`: every function of the stack, each with its sample, in the world the samples name (events/world.yaml,
sandbox/smoke.py). Here from the sources, in process: `make smoke` itself runs the `sam build` output."""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sandbox.__main__ import main
from sandbox.event_fit import Trigger, check_fit, trigger_of
from sandbox.invoke import failure, prepare_event, prepare_request
from sandbox.session import Sandbox
from sandbox.smoke import load_sample_world, onto_world, seeded
from sandbox.stepfunctions import SharedFunction, forget_warm_caches
from sandbox.template import Template
from tests.sandbox.conftest import REPO_ROOT, TEMPLATE

MAKEFILE = REPO_ROOT / "Makefile"


def _make_variable(name: str) -> str:
    """A `NAME := ...` of the Makefile, its continuation lines joined."""
    match = re.search(rf"^{name} := ((?:.*\\\n)*.*)$", MAKEFILE.read_text(encoding="utf-8"), re.MULTILINE)
    assert match is not None, f"no {name} in the Makefile"
    return " ".join(match.group(1).replace("\\\n", " ").split())


def smoke_invocations() -> list[tuple[str, Path]]:
    """The Makefile's SMOKE_INVOCATIONS, in their order: (function, sample)."""
    items = [item.partition("=") for item in _make_variable("SMOKE_INVOCATIONS").split()]
    return [(function, REPO_ROOT / path) for function, _, path in items]


WORLD = REPO_ROOT / _make_variable("SMOKE_WORLD")


def _load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_make_smoke_invokes_every_function_of_the_template_once_with_a_sample_that_fits(
    real_template: Template,
) -> None:
    # Given the functions of template.yaml (a new one must come with its sample)
    functions = [name for name, r in real_template.resources.items() if r["Type"] == "AWS::Serverless::Function"]

    # When the Makefile's smoke invocations are read
    invocations = smoke_invocations()

    # Then each function is invoked exactly once, with a sample its trigger delivers
    assert sorted(function for function, _ in invocations) == sorted(functions)
    for function, path in invocations:
        check_fit(real_template, function, _load(path), path)


def test_a_samples_ids_are_replaced_by_the_seeded_ones_wherever_they_occur() -> None:
    ids = {"7c2e": "seeded-1", "7c2e9a": "seeded-2", "i-0c4e": "i-seeded"}
    sample = {
        "fault": {"container_instance_arn": "arn:aws:ecs:r:1:container-instance/training/7c2e9a", "xid": 79},
        "job": {"hosts": ["i-0c4e"], "task_ids": ["7c2e"]},
        "7c2e": "a key is left as it is",
    }

    assert onto_world(sample, ids) == {
        "fault": {"container_instance_arn": "arn:aws:ecs:r:1:container-instance/training/seeded-2", "xid": 79},
        "job": {"hosts": ["i-seeded"], "task_ids": ["seeded-1"]},
        "7c2e": "a key is left as it is",
    }


def test_every_id_the_world_replaces_is_one_a_sample_names() -> None:
    samples = "".join(path.read_text(encoding="utf-8") for _, path in smoke_invocations())

    assert [sample for sample in load_sample_world(WORLD).ids if sample not in samples] == []


def test_a_world_file_that_is_not_one_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a build's template (nothing starts before the world file is read) and a world file with a misspelt key
    (tmp_path / "template.yaml").write_text(TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
    world = tmp_path / "world.yaml"
    world.write_text("region: us-west-2\nworld: {}\nid: {}\n", encoding="utf-8")

    # When the smoke is run with it, Then it exits 2 naming the key
    sample = REPO_ROOT / "events" / "schedule" / "sweep.json"
    arguments = ["smoke", f"SweepFunction={sample}", "--world", str(world), "--build-dir", str(tmp_path)]
    assert main(arguments) == 2
    assert "is not a valid world file: id: Extra inputs are not permitted" in capsys.readouterr().err


def _invoke_in_order(template: Template) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]], Any]:
    """Every smoke invocation in order, from the sources, in the seeded world: each function's result, the Slack
    stand-in's channels, and what puts a sample onto the world."""
    sample_world = load_sample_world(WORLD)
    results: dict[str, Any] = {}
    forget_warm_caches()
    with contextlib.ExitStack() as context:
        sandbox = context.enter_context(
            Sandbox(
                template,
                region=sample_world.region,
                parameter_overrides={"TrainingCapacityProviders": "gpu-training"},
            )
        )
        onto = context.enter_context(seeded(sandbox, sample_world))
        for function, path in smoke_invocations():
            spec = sandbox.stack.functions[function]
            trigger = trigger_of(template, function)
            document = onto(_load(path))
            if trigger is Trigger.URL:
                payload = prepare_request(document, sandbox.standins).payload
            else:
                payload = prepare_event(document, spec, sandbox.identity.region).payload
            with SharedFunction(spec, sandbox.function_environment(spec)) as handler:
                invocation = handler.invoke(payload)
            problem = failure(function, trigger, invocation)
            assert problem is None, f"{path.name}: {problem}\n" + "\n".join(invocation.logs[-5:])
            results[function] = invocation.result
        return results, sandbox.standins.slack_channels(), onto


@pytest.mark.sandbox
# A sweep with nothing to send publishes no metric, and Powertools warns of that (on Lambda, in the function's log).
@pytest.mark.filterwarnings("ignore:No application metrics to publish:UserWarning")
def test_in_the_samples_world_each_function_runs_its_normal_path(real_template: Template) -> None:
    # Given the sandbox seeded with events/world.yaml, When every sample of the smoke is invoked in the Makefile's
    # order (each function from its sources, in process)
    results, slack, onto = _invoke_in_order(real_template)
    host, task = onto("i-0c4e8a2f6b1d3e5a7"), onto("ead32d17-b58e-471e-8d12-382ddf38c50c")

    # Then none raised, and each did its work on the seeded world: the fault claimed, past the guards, its
    # instance drained, the job found with the seeded task on the seeded host, the notice in the incident's thread
    assert host != "i-0c4e8a2f6b1d3e5a7" and task != "ead32d17-b58e-471e-8d12-382ddf38c50c"
    assert results["ClaimFaultFunction"]["status"] == "claimed"
    assert results["CheckGuardsFunction"]["verdict"] == "proceed"
    assert results["QuarantineInstanceFunction"] == {"quarantined": True, "status": "DRAINING"}
    [job] = results["FindJobsFunction"]["jobs"]
    assert (job["job_id"], job["hosts"], job["task_ids"]) == ("llm-7b", [host], [task])
    assert results["NotifyFunction"]["threaded"] is True
    [root, *replies] = slack["gpu-alerts"]
    in_thread = [reply["text"] for reply in replies if reply["thread_ts"] == root["ts"]]
    assert in_thread == [f"1 training job(s) found on {host}"]
    # the job planned from the seeded checkpoint, asked to save now (XID 13) and answered by the one naming the request
    assert (results["PlanJobFunction"]["action"], results["PlanJobFunction"]["checkpoint"]["step"]) == ("resume", 200)
    assert results["RequestCheckpointFunction"]["checkpoint_now"]["state"] == "asked"
    assert results["CheckCheckpointFunction"]["checkpoint_now"]["state"] == "answered"
    # its task stopped (the snapshot FindJobs took), seen stopped, relaunched elsewhere; the retry plans attempt 2
    assert results["StopJobFunction"]["stopping"] == 1
    assert (results["CheckTasksFunction"]["state"], results["CheckTasksFunction"]["total"]) == ("done", 1)
    relaunch = results["RelaunchJobFunction"]
    assert (relaunch["state"], relaunch["launched"], relaunch["excluded_hosts"]) == ("started", 1, [host])
    assert results["PlanRetryFunction"]["attempt"] == 2
    # and the sweep and the reconciliation went over the incident and the cluster
    assert results["SweepFunction"]["records"] == 1
    assert (results["ReconcileFunction"]["clusters"], results["ReconcileFunction"]["described"]) == (1, 2)
