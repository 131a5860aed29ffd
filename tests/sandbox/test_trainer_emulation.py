"""sandbox/trainer_emulation.py: a scenario's emulated trainer trains while its tasks run, writes its checkpoints with
the training helper, answers checkpoint-now requests (and holds when asked), and starts a new run from RESUME_FROM
when its job is relaunched; the `training` collection says what each run trained and lost.

Each test seeds a world into the sandbox (moto, with the ECS emulation) and acts on it through the AWS APIs while the
trainers tick in their thread; waits are bounded polls for a condition, and assertions are on steps and order.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from fault_responder.resume.checkpoint_now import new_request
from sandbox import scenario as model
from sandbox.ecs_emulation import EcsEmulation
from sandbox.report import Timeline
from sandbox.run import run_scenario
from sandbox.scenario import load_scenario
from sandbox.session import Sandbox
from sandbox.template import load_template
from sandbox.trainer_emulation import TrainerEmulation, trainers_for
from sandbox.world import World, checkpoint_helper, seed_world
from tests.sandbox.conftest import TOY_STACK
from tests.scenarios.conftest import TOY_RESUME, failed

pytestmark = pytest.mark.sandbox

URI = "s3://ckpt/runs/llm-7b/"
CONTROL_URI = "s3://ckpt/runs/control/"
BUCKET = "ckpt"
DEADLINE_SECONDS = 60.0
XID46 = Path(__file__).resolve().parents[2] / "events" / "aws-docs" / "health-change-accelerated-compute-xid46.json"


def world_model(ranks: int = 1, seeded: tuple[int, ...] = (100,), **trainer: Any) -> model.World:
    """Job llm-7b (`ranks` tasks: rank-0 on gpu-a, rank-1 on gpu-c; `seeded` complete checkpoints) trained as
    `trainer` says, and a control job (on gpu-b) that trains on whatever happens to llm-7b: a clock counted in steps."""
    job = {"id": "llm-7b", "checkpoint_uri": URI}
    gang = [
        {"name": f"rank-{rank}", "task_definition": "trainer", "instance": instance, "job": job}
        for rank, instance in enumerate(["gpu-a", "gpu-c"][:ranks])
    ]
    return model.World.model_validate(
        {
            "clusters": [
                {
                    "name": "training",
                    "capacity_providers": [
                        {"name": "gpu-training", "instances": [{"name": "gpu-a"}, {"name": "gpu-b"}, {"name": "gpu-c"}]}
                    ],
                    "task_definitions": [{"family": "trainer", "containers": [{"name": "trainer"}]}],
                    "tasks": [
                        *gang,
                        {
                            "name": "control",
                            "task_definition": "trainer",
                            "instance": "gpu-b",
                            "job": {"id": "control", "checkpoint_uri": CONTROL_URI},
                        },
                    ],
                }
            ],
            "checkpoints": [{"uri": URI, "steps": list(seeded)}],
            "trainers": [
                {"job": "llm-7b", "step_seconds": 0.02, "checkpoint_every": 5, **trainer},
                {"job": "control", "step_seconds": 0.02, "checkpoint_every": 1000},
            ],
        }
    )


class Training:
    """A seeded world with its trainers ticking, and what a test does to it."""

    def __init__(self, sandbox: Sandbox, world: World, trainers: TrainerEmulation) -> None:
        self.sandbox, self.world, self.trainers = sandbox, world, trainers
        self.ecs, self.s3 = sandbox.aws.client("ecs"), sandbox.aws.client("s3")

    def runs(self, job: str = "llm-7b") -> list[dict[str, Any]]:
        return [item for item in self.trainers.runs() if item["job"] == job]

    def run(self, number: int, job: str = "llm-7b") -> dict[str, Any]:
        return self.runs(job)[number - 1]

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while not condition():
            assert time.monotonic() < deadline, f"not within {DEADLINE_SECONDS:g} s: {what}; {self.trainers.runs()}"
            time.sleep(0.01)

    def settle(self) -> None:
        """Wait for a whole tick of the trainers begun after now: they have seen what the test just did."""
        ticks = self.trainers.ticks
        self.wait_for("two ticks", lambda: self.trainers.ticks >= ticks + 2)

    def control_steps(self, steps: int) -> None:
        """Wait until the control job has trained `steps` more steps."""
        start = self.run(1, "control")["last_step"]
        self.wait_for(f"{steps} control steps", lambda: self.run(1, "control")["last_step"] >= start + steps)

    def manifest(self, step: int, uri: str = URI) -> dict[str, Any]:
        folder = checkpoint_helper().checkpoint_folder_uri(uri, step)
        key = folder.removeprefix(f"s3://{BUCKET}/") + "_COMPLETE"
        return dict(json.loads(self.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()))

    def ask(self, *, hold: timedelta | None) -> str:
        """A checkpoint-now request for llm-7b, written as `fault-responder checkpoint-now` writes it."""
        request = new_request(datetime.now(UTC), wait=timedelta(seconds=30), hold=hold, requested_by="a test")
        self.s3.put_object(Bucket=BUCKET, Key="runs/llm-7b/_CHECKPOINT_NOW", Body=request.to_json())
        return request.id

    def stop(self, task: str) -> None:
        self.ecs.stop_task(cluster="training", task=self.world.tasks[task].arn, reason="moved by a test")

    def relaunch(self, resume_from: str) -> str:
        """A new task of llm-7b, started as the workflow starts one: RESUME_FROM in its container's environment."""
        started = self.ecs.run_task(
            cluster="training",
            taskDefinition="trainer",
            overrides={
                "containerOverrides": [
                    {"name": "trainer", "environment": [{"name": "RESUME_FROM", "value": resume_from}]}
                ]
            },
            tags=[
                {"key": "fault-responder:job-id", "value": "llm-7b"},
                {"key": "fault-responder:checkpoint-uri", "value": URI},
            ],
        )["tasks"]
        return str(started[0]["taskArn"].rsplit("/", 1)[-1])


@pytest.fixture
def train() -> Iterator[Callable[..., Training]]:
    """`train(**world_model arguments)`: that world seeded into a sandbox, its trainers started (all stopped at the
    end of the test)."""
    with contextlib.ExitStack() as context:

        def start(**settings: Any) -> Training:
            sandbox = context.enter_context(Sandbox(load_template(TOY_STACK)))
            identity = sandbox.identity
            emulation = context.enter_context(EcsEmulation(account_id=identity.account_id, region=identity.region))
            world_settings = world_model(**settings)
            world = seed_world(world_settings, sandbox.aws, emulation, sandbox.stack)
            trainers = context.enter_context(trainers_for(world_settings, sandbox.aws, emulation))
            return Training(sandbox, world, trainers)

        yield start


@pytest.fixture
def training(train: Callable[..., Training]) -> Training:
    return train()


def test_a_trainer_trains_while_its_task_runs_and_saves_complete_checkpoints_every_n_steps(training: Training) -> None:
    # When the seeded task runs for a while
    training.wait_for("three checkpoints", lambda: len(training.run(1)["checkpoints"]) >= 3)

    # Then it trained on from the newest seeded checkpoint, saving every 5 steps
    run = training.run(1)
    assert (run["from_step"], run["tasks"]) == (100, [training.world.tasks["rank-0"].arn.rsplit("/", 1)[-1]])
    assert run["checkpoints"][:3] == [105, 110, 115]
    assert run["last_step"] >= 115
    assert (run["ended"], run["steps_lost"], run["answered"], run["errors"]) == (False, None, [], [])
    # And each is complete: the helper's manifest, written last, lists every file (and loading verifies them)
    manifest = training.manifest(110)
    assert (manifest["format"], manifest["step"], len(manifest["files"])) == ("fault-responder-checkpoint/1", 110, 2)
    files = checkpoint_helper().load_checkpoint(f"{URI}step-000110/", client=training.s3)
    assert sorted(files) == ["shard-00000.pt", "shard-00001.pt"]

    # And the steps go on with time
    reached = run["last_step"]
    training.wait_for("more steps", lambda: training.run(1)["last_step"] > reached)


def test_a_request_with_a_hold_is_answered_and_the_trainer_trains_no_further_until_it_is_stopped(
    training: Training,
) -> None:
    training.wait_for("a step past the seeded checkpoint", lambda: training.run(1)["last_step"] > 100)

    # When a checkpoint-now request asks for a checkpoint and a hold
    request_id = training.ask(hold=timedelta(seconds=60))

    # Then the next check answers it with a complete checkpoint naming it
    training.wait_for("the answer", lambda: training.run(1)["answered"] == [request_id])
    run = training.run(1)
    answered_step = run["checkpoints"][-1]
    assert training.manifest(answered_step)["answers"] == request_id
    assert run["held"] is True
    # And while another job trains 20 steps, this one holds at the answered step
    training.control_steps(20)
    assert training.run(1)["last_step"] == answered_step

    # When its task is stopped
    training.stop("rank-0")

    # Then the run ends where it held: nothing trained after the answer
    training.wait_for("the run's end", lambda: training.run(1)["ended"])
    run = training.run(1)
    assert (run["last_step"], run["checkpoints"][-1], run["answered"]) == (answered_step, answered_step, [request_id])
    training.trainers.stop()
    assert training.run(1)["hold_ended"] == "stopping"


def test_with_answers_requests_false_the_request_is_never_answered(train: Callable[..., Training]) -> None:
    training = train(answers_requests=False)

    # When a request is written while the job trains
    training.wait_for("a step", lambda: training.run(1)["last_step"] > 100)
    training.ask(hold=timedelta(seconds=60))
    asked_at = training.run(1)["last_step"]

    # Then the job trains on past many request checks (and checkpoints), answering nothing
    training.wait_for("20 more steps", lambda: training.run(1)["last_step"] >= asked_at + 20)
    run = training.run(1)
    assert (run["ignored_requests"], run["answered"], run["held"]) == (True, [], False)
    assert run["checkpoints"] and all("answers" not in training.manifest(step) for step in run["checkpoints"])


def test_a_relaunch_from_a_checkpoint_is_a_second_run_and_the_first_says_what_it_lost(training: Training) -> None:
    training.wait_for("two checkpoints", lambda: len(training.run(1)["checkpoints"]) >= 2)

    # When the workflow stops the job's task and starts it again from its newest checkpoint
    training.stop("rank-0")
    training.wait_for("the first run's end", lambda: training.run(1)["ended"])
    newest = training.run(1)["checkpoints"][-1]
    task = training.relaunch(f"{URI}step-{newest:06d}/")

    # Then a second run trains from that checkpoint's step, in the new task
    training.wait_for(
        "a second run's checkpoint", lambda: len(training.runs()) == 2 and bool(training.run(2)["checkpoints"])
    )
    first, second = training.runs()
    assert (second["run"], second["tasks"], second["from_step"]) == (2, [task], newest)
    assert second["resume_from"] == f"{URI}step-{newest:06d}/"
    assert second["checkpoints"][0] == newest + 5
    assert second["steps_lost"] is None
    # And the first run lost what it trained after that checkpoint
    assert first["ended"] is True
    assert first["last_step"] >= newest
    assert first["steps_lost"] == first["last_step"] - newest


def test_a_stop_waits_for_the_checkpoint_being_written_so_the_run_ends_on_a_whole_one(
    train: Callable[..., Training],
) -> None:
    # Given a job that saves every step, each save many files long: it is writing a checkpoint most of the time
    training = train(step_seconds=0.001, checkpoint_every=1, files_per_checkpoint=40)
    training.wait_for("three checkpoints", lambda: len(training.run(1)["checkpoints"]) >= 3)

    # When its task is stopped, as the workflow stops it, and the checkpoints are read as soon as StopTask returns
    training.stop("rank-0")
    listed = keys(training)

    # Then no folder is half written: the step in flight finished, manifest included, before the task was STOPPED
    folders: dict[str, set[str]] = {}
    for key in listed:
        folder, name = key.rsplit("/", 1)
        folders.setdefault(f"s3://{BUCKET}/{folder}/", set()).add(name)
    half_written = sorted(folder for folder, names in folders.items() if "_COMPLETE" not in names)
    assert half_written == [], f"folders with no manifest once StopTask returned: {half_written}"
    # And that last checkpoint is the run's last: it wrote nothing after the stop
    training.wait_for("the run's end", lambda: training.run(1)["ended"])
    run = training.run(1)
    assert run["checkpoints"][-1] == run["last_step"]
    assert max(folders) == checkpoint_helper().checkpoint_folder_uri(URI, run["last_step"])
    assert keys(training) == listed


def keys(training: Training) -> list[str]:
    """Every key under llm-7b's checkpoint prefix, all pages."""
    pages = training.s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix="runs/llm-7b/")
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_a_gang_missing_a_rank_trains_no_further(train: Callable[..., Training]) -> None:
    # Given a job of two tasks, training
    gang = train(ranks=2)
    assert len(gang.run(1)["tasks"]) == 2
    gang.wait_for("a step", lambda: gang.run(1)["last_step"] > 100)

    # When one rank stops
    gang.stop("rank-0")
    gang.settle()
    stopped_at = gang.run(1)["last_step"]

    # Then the run trains no further while another job trains 20 steps, and has not ended: a rank still runs
    gang.control_steps(20)
    run = gang.run(1)
    assert run["last_step"] == stopped_at
    assert run["ended"] is False

    # And it ends when the last rank stops, where it stood
    gang.stop("rank-1")
    gang.wait_for("the run's end", lambda: gang.run(1)["ended"])
    assert gang.run(1)["last_step"] == run["last_step"]


def test_a_failed_save_is_recorded_and_the_trainer_goes_on(train: Callable[..., Training]) -> None:
    # Given a committed checkpoint already at the step the trainer saves next (it never overwrites one)
    training = train(seeded=(100, 105), start_step=100)

    # When it trains past it
    training.wait_for("two more checkpoints", lambda: len(training.run(1)["checkpoints"]) >= 2)

    # Then the failed save is on the run and among the problems the report shows, and training went on
    run = training.run(1)
    assert run["checkpoints"][:2] == [110, 115]
    assert len(run["errors"]) == 1 and run["errors"][0].startswith("step 105: CheckpointExistsError:")
    assert training.trainers.problems() == [f"trainer llm-7b run 1: {run['errors'][0]}"]


def test_a_run_resumed_from_an_answer_does_not_answer_the_same_request_again(training: Training) -> None:
    # Given a request (no hold) answered by the first run, and still in S3
    request_id = training.ask(hold=None)
    training.wait_for("the answer", lambda: training.run(1)["answered"] == [request_id])
    run = training.run(1)
    [answered_step] = [step for step in run["checkpoints"] if training.manifest(step).get("answers") == request_id]
    assert run["held"] is False

    # When the job is moved and resumes from that answer
    training.stop("rank-0")
    training.wait_for("the first run's end", lambda: training.run(1)["ended"])
    training.relaunch(f"{URI}step-{answered_step:06d}/")

    # Then the second run trains on, checking every step, and answers nothing
    training.wait_for(
        "20 steps of a second run",
        lambda: len(training.runs()) == 2 and training.run(2)["last_step"] >= answered_step + 20,
    )
    second = training.run(2)
    assert (second["from_step"], second["answered"], second["errors"]) == (answered_step, [], [])


@pytest.mark.parametrize(
    ("trainer", "problem"),
    [
        ({"job": "nope"}, "no seeded task carries the job id 'nope' (jobs: control, llm-7b)"),
        ({"job": "llm-7b", "step_seconds": 0}, "greater than 0"),
        ({"job": "llm-7b", "checkpoint_every": 0}, "greater than or equal to 1"),
        ({"job": "llm-7b", "cluster": "elsewhere"}, "job 'llm-7b' has no seeded task in cluster 'elsewhere'"),
        ({"job": "llm-7b", "speed": 2}, "Extra inputs are not permitted"),
    ],
)
def test_a_trainer_must_name_a_seeded_job_and_positive_settings(trainer: dict[str, Any], problem: str) -> None:
    document = world_model().model_dump(by_alias=True, exclude={"trainers"})
    with pytest.raises(ValidationError, match=re.escape(problem)):
        model.World.model_validate({**document, "trainers": [trainer]})


def test_two_trainers_of_one_job_are_refused() -> None:
    document = world_model().model_dump(by_alias=True, exclude={"trainers"})
    with pytest.raises(ValidationError, match="job 'llm-7b' has more than one trainer"):
        model.World.model_validate({**document, "trainers": [{"job": "llm-7b"}, {"job": "llm-7b"}]})


def test_the_yaml_examples_of_the_docs_are_valid_as_written() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs/sandbox.md").read_text(encoding="utf-8")
    section = text.split("## Emulated trainers", 1)[1].split("\n## ", 1)[0]
    trainers, expect = [yaml.safe_load(block) for block in re.findall(r"^```yaml\n(.*?)^```", section, re.S | re.M)]

    document = world_model().model_dump(by_alias=True, exclude={"trainers"})
    world = model.World.model_validate({**document, **trainers["world"]})
    assert world.trained(world.trainers[0]) == model.TrainedJob(world.trainers[0], "training", URI, 200)
    assert [model.Expectation.model_validate(item).select for item in expect["expect"]] == ["training"]


def test_a_scenario_measures_the_steps_lost_when_the_workflow_moves_the_job(tmp_path: Path) -> None:
    # Given the toy workflow's scenario with a trainer for its job, trained half a second before the fault
    document = yaml.safe_load(TOY_RESUME.read_text())
    document["template"] = str(TOY_RESUME.parent / "toy-workflow.yaml")
    document["ecs"] = {"stop_after_describes": 0}
    document["world"]["trainers"] = [{"job": "llm-7b", "step_seconds": 0.02, "checkpoint_every": 5}]
    document["events"][0] |= {"file": str(XID46), "delay_seconds": 0.5}
    document["expect"] = [
        {"select": "training", "where": {"run": 1}, "each": {"ended": True, "steps_lost": {"gte": 0}}},
        {"select": "training", "where": {"run": 2}, "each": {"from_step": {"gte": 200}, "steps_lost": None}},
    ]
    path = tmp_path / "trained.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    out = io.StringIO()

    # When it runs
    result = run_scenario(load_scenario(path), Timeline(out))

    # Then the job trained during the delay, was moved, and its second run resumed from what the workflow chose
    assert result.passed, "\n".join(failed(result))
    first, second = result.report["training"]
    [started] = [task for task in result.report["ecs"]["tasks"] if task["origin"] == "started"]
    assert second["resume_from"] == started["environment"]["trainer"]["RESUME_FROM"]
    assert second["tasks"] == [started["arn"].rsplit("/", 1)[-1]]
    assert second["from_step"] in [200, *first["checkpoints"]]
    assert first["steps_lost"] == first["last_step"] - second["from_step"]
    assert "llm-7b run 1: steps 200 -> " in out.getvalue()
    assert "waited: an execution or a trainer was running" in out.getvalue()
