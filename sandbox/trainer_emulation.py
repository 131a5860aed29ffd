"""Emulated training jobs for a scenario's `trainers:` (docs/sandbox.md#emulated-trainers): a job that trains while
its tasks run, writes checkpoints on a schedule and answers checkpoint-now requests (docs/checkpoint-contract.md §7),
so a scenario can measure the steps lost when the workflow moves it.

A *run* of a job is one set of its tasks (job-id tag, in the job's cluster) RUNNING in moto's ECS: the tasks running
when the world is seeded are the first run, at the trainer's `start_step`; tasks started later (the workflow's
relaunch, their containers' environment naming `RESUME_FROM`) are a new run from that checkpoint's step. A run
trains while it has all its ranks (as many tasks as the first run had) and every one is RUNNING: one step every
`step_seconds` of `time.monotonic` (the sandbox may move the wall clock on while idle; training progress must not
jump with it). A run whose tasks are all STOPPED has ended and writes nothing more; a step, with the checkpoint it
writes, is done before any of its tasks turns STOPPED, as a container is STOPPED only once its process has exited.

Everything S3 sees is written by the training helper itself (`save_checkpoint`, `CheckpointRequests`), the helper
a job copies into its image, so checkpoints, answers and holds have exactly the shape real jobs give them. Tasks are
read from moto's ECS model, not through DescribeTasks, which would move the emulated task lifecycle on.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

from sandbox import scenario as model
from sandbox.ecs_emulation import EcsEmulation
from sandbox.world import checkpoint_helper

TICK_SECONDS = 0.02
"""How often the trainers look at their tasks and train the steps due."""
HOLD_POLL_SECONDS = 0.2
"""A hold re-reads its request this often (a 304 while the object is unchanged)."""
JOB_ID_TAG = "fault-responder:job-id"
RESUME_FROM_ENV = "RESUME_FROM"
RESUME_ATTEMPT_ENV = "RESUME_ATTEMPT"
_STEP_AT_END = re.compile(r"(\d+)/*$")
"""The step of a checkpoint folder: the number its name ends with (step-000120/, iter_0000120/, checkpoint-120/)."""

OnRun = Callable[["TrainingRun"], None]
"""Told of each run as it starts."""


@dataclass(frozen=True)
class _Task:
    arn: str
    status: str
    launch: tuple[str | None, str | None]
    """(RESUME_FROM, RESUME_ATTEMPT) of its containers' environment: the tasks of one relaunch share them."""


class _Hold:
    """The helper's own `CheckpointRequests.hold()`, waited in a thread of its own so the trainers keep ticking:
    it re-reads the request every HOLD_POLL_SECONDS and ends when the request is withdrawn, its `hold_until` passes,
    or `stop` is requested."""

    def __init__(self, requests: Any, request: Any, stop: Any, name: str) -> None:
        self.stop = stop
        """The helper's StopSignal: requested when the run's tasks stop, as their SIGTERM would."""
        self.ended: str | None = None
        """Why it ended: withdrawn, expired or stopping (the helper's HoldEnd)."""
        self.error: str | None = None
        self._thread = threading.Thread(target=self._wait, args=(requests, request), name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> bool:
        return self._thread.is_alive()

    def end(self) -> None:
        """Stop waiting (within HOLD_POLL_SECONDS) and wait for that."""
        self.stop.request()
        self._thread.join(timeout=5)

    def _wait(self, requests: Any, request: Any) -> None:
        try:
            self.ended = requests.hold(request, stop=self.stop, poll_seconds=HOLD_POLL_SECONDS)
        except Exception as error:  # kept for the run's errors
            self.error = f"{type(error).__name__}: {error}"


@dataclass
class TrainingRun:
    """One run of a job: an item of the `training` collection."""

    job: str
    number: int
    cluster: str
    launch: tuple[str | None, str | None]
    from_step: int
    tasks: list[str] = field(default_factory=list)
    """Task ARNs."""
    step: int = 0
    checkpoints: list[int] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    held: bool = False
    ended: bool = False
    ignored_requests: bool = False
    errors: list[str] = field(default_factory=list)
    requests: Any = None
    """The helper's CheckpointRequests of this run (None: it never looks for requests)."""
    next_step_at: float | None = None
    """When the next step completes (monotonic); None while the run is not training."""
    hold: _Hold | None = None
    hold_ended: str | None = None

    @property
    def training(self) -> bool:
        """Training now: every rank RUNNING, not holding."""
        return self.next_step_at is not None and self.hold is None and not self.ended

    def to_json(self, next_run: TrainingRun | None) -> dict[str, Any]:
        return {
            "job": self.job,
            "run": self.number,
            "cluster": self.cluster,
            "tasks": [arn.rsplit("/", 1)[-1] for arn in self.tasks],
            "resume_from": self.launch[0],
            "from_step": self.from_step,
            "last_step": self.step,
            "ended": self.ended,
            "checkpoints": list(self.checkpoints),
            "answered": list(self.answered),
            "held": self.held,
            "hold_ended": self.hold_ended,
            "ignored_requests": self.ignored_requests,
            "steps_lost": self.step - next_run.from_step if next_run is not None else None,
            "errors": list(self.errors),
        }


class _JobTrainer:
    """One job's trainer: finds its runs among the job's tasks and trains them."""

    def __init__(self, job: model.TrainedJob, s3: Any, emulation: EcsEmulation, helper: ModuleType) -> None:
        self.job = job
        self.settings = job.trainer
        self.runs: list[TrainingRun] = []
        self.errors: list[str] = []
        self._s3 = s3
        self._emulation = emulation
        self._helper = helper
        self._gang = 1

    def begin(self, on_run: OnRun) -> None:
        """The tasks running now (the seeded ones) are the first run, at `start_step`."""
        running = [task for task in self._tasks() if task.status == "RUNNING"]
        self._gang = max(1, len(running))
        if running:
            run = self._run(running[0].launch, self.job.start_step, answered=None)
            run.tasks = [task.arn for task in running]
            run.next_step_at = time.monotonic() + self.settings.step_seconds  # training from now on
            on_run(run)

    def tick(self, on_run: OnRun, *, advance: bool = True) -> None:
        """New runs noticed, finished holds collected, ended runs closed, and (with `advance`) the steps due
        trained."""
        now = time.monotonic()
        tasks = {task.arn: task for task in self._tasks()}
        self._notice_runs(tasks, on_run)
        for run in self.runs:
            if run.hold is not None and not run.hold.waiting:
                self._collect_hold(run)
            if run.ended:
                continue
            try:
                self._step(run, tasks, now, advance=advance)
            except Exception as error:  # an S3 hiccup: recorded, and training goes on
                self._record(run, f"step {run.step}: {type(error).__name__}: {error}")

    def stop_holds(self) -> None:
        """Ends the holds still waiting; one whose run is still training stays unfinished in the report (its
        `hold_ended` null: it was holding when the scenario ended)."""
        for run in self.runs:
            if run.hold is None:
                continue
            run.hold.end()
            if run.ended:
                self._collect_hold(run)
            run.hold = None

    # --- Runs --------------------------------------------------------------------------------------

    def _tasks(self) -> list[_Task]:
        """The job's tasks in its cluster, as moto's ECS model has them (oldest first)."""
        found = []
        for task in list(self._emulation.backend.tasks.get(self.job.cluster, {}).values()):
            tags = {tag.get("key"): tag.get("value") for tag in task.tags}
            if tags.get(JOB_ID_TAG) == self.settings.job:
                found.append(_Task(task.task_arn, task.last_status, _launch(task.overrides)))
        return found

    def _notice_runs(self, tasks: dict[str, _Task], on_run: OnRun) -> None:
        """A RUNNING task no run has joins the newest run when it is a rank of the same launch that run still
        lacks; otherwise it starts a new run, from the checkpoint its RESUME_FROM names."""
        known = {arn for run in self.runs for arn in run.tasks}
        for task in tasks.values():
            if task.status != "RUNNING" or task.arn in known:
                continue
            newest = self.runs[-1] if self.runs else None
            if newest is not None and self._lacks(newest, task):
                newest.tasks.append(task.arn)
            else:
                newest = self._relaunched(task)
                newest.tasks.append(task.arn)
                on_run(newest)
            known.add(task.arn)

    def _lacks(self, run: TrainingRun, task: _Task) -> bool:
        """Whether `task` is a rank `run` still lacks: the ranks of one relaunch come up one by one."""
        return not run.ended and run.launch == task.launch and len(run.tasks) < self._gang

    def _relaunched(self, task: _Task) -> TrainingRun:
        resume_from = task.launch[0]
        if not resume_from:  # "" or unset: from scratch
            return self._run(task.launch, 0, answered=None)
        problems = []
        found = _STEP_AT_END.search(resume_from)
        if found is None:
            problems.append(f"RESUME_FROM {resume_from} names no step: trained from step 0")
        try:
            # The request the checkpoint answered is not answered again (docs/checkpoint-contract.md §7).
            answered = self._helper.answered_request(resume_from, client=self._s3)
        except self._helper.CorruptCheckpointError:
            answered = None  # a checkpoint with another commit marker answers no request by id
        except Exception as error:
            answered = None
            problems.append(f"reading RESUME_FROM {resume_from}: {type(error).__name__}: {error}")
        run = self._run(task.launch, int(found.group(1)) if found else 0, answered=answered)
        for problem in problems:
            self._record(run, problem)
        return run

    def _run(self, launch: tuple[str | None, str | None], step: int, *, answered: str | None) -> TrainingRun:
        run = TrainingRun(self.settings.job, len(self.runs) + 1, self.job.cluster, launch, step, step=step)
        if self.settings.answers_requests:
            run.requests = self._helper.CheckpointRequests(
                self.job.checkpoint_uri, every=self.settings.check_requests_every, answered=answered, client=self._s3
            )
        else:
            run.ignored_requests = True
        self.runs.append(run)
        return run

    # --- Training ----------------------------------------------------------------------------------

    def _step(self, run: TrainingRun, tasks: dict[str, _Task], now: float, *, advance: bool) -> None:
        statuses = [tasks[arn].status if arn in tasks else "STOPPED" for arn in run.tasks]
        if all(status == "STOPPED" for status in statuses):
            run.ended, run.next_step_at = True, None
            self._stop_hold(run)
            return
        if len(run.tasks) < self._gang or any(status != "RUNNING" for status in statuses):
            run.next_step_at = None  # a gang does not train with a rank missing
            self._stop_hold(run)
            return
        if run.hold is not None or not advance:
            return
        if run.next_step_at is None:
            run.next_step_at = now + self.settings.step_seconds
        while run.hold is None and now >= run.next_step_at:
            # Each step due is trained only while every rank still runs as of now: on a loaded machine a tick may
            # come late, and the steps it catches up on must not be written after the workflow stopped the run. A
            # step and its checkpoint are one unit of work: no rank turns STOPPED halfway through its writes.
            with self._emulation.task_statuses_held():
                if not self._all_running(run):
                    run.next_step_at = None
                    return
                run.step += 1
                run.next_step_at += self.settings.step_seconds
                self._boundary(run)

    def _all_running(self, run: TrainingRun) -> bool:
        statuses = {task.arn: task.status for task in self._tasks()}
        return all(statuses.get(arn) == "RUNNING" for arn in run.tasks)

    def _boundary(self, run: TrainingRun) -> None:
        """At the end of a step: answer a pending request (that save is the step's checkpoint, and a hold may
        follow), else save when the schedule says so."""
        request = run.requests.pending(run.step) if run.requests is not None else None
        if request is not None:
            run.requests.answer(run.step, self._files(run.step), request)
            if request.hold_until is not None and request.hold_until > datetime.now(UTC):
                name = f"sandbox-trainer-hold-{self.settings.job}-{run.number}"
                run.hold, run.held = _Hold(run.requests, request, self._helper.StopSignal(), name), True
            # Recorded once holding: whoever sees the answer sees the hold.
            run.checkpoints.append(run.step)
            run.answered.append(request.id)
        elif run.step % self.settings.checkpoint_every == 0:
            self._helper.save_checkpoint(self.job.checkpoint_uri, run.step, self._files(run.step), client=self._s3)
            run.checkpoints.append(run.step)

    def _files(self, step: int) -> dict[str, bytes]:
        return {
            f"shard-{index:05d}.pt": f"{self.settings.job} step {step} shard {index}\n".encode()
            for index in range(self.settings.files_per_checkpoint)
        }

    def _stop_hold(self, run: TrainingRun) -> None:
        if run.hold is not None:
            run.hold.stop.request()  # the hold returns "stopping" within HOLD_POLL_SECONDS; collected then

    def _collect_hold(self, run: TrainingRun) -> None:
        hold, run.hold, run.next_step_at = run.hold, None, None
        if hold is not None:
            run.hold_ended = hold.ended
            if hold.error is not None:
                self._record(run, f"holding at step {run.step}: {hold.error}")

    def _record(self, run: TrainingRun, problem: str) -> None:
        """Kept on the run and the trainer; the same problem again in a row is not repeated (S3 down would
        otherwise add one every tick)."""
        if run.errors[-1:] != [problem]:
            run.errors.append(problem)
            self.errors.append(f"trainer {self.settings.job} run {run.number}: {problem}")


class TrainerEmulation:
    """Every trainer of a scenario, ticking in one background thread from `start()` to `stop()`.

    `start()` forms the first runs from the tasks running then (call it once the world is seeded); `stop()` stops
    the thread and the holds, after a last look at the tasks, so the runs say how things ended.
    """

    def __init__(
        self,
        jobs: Sequence[model.TrainedJob],
        aws: Any,
        emulation: EcsEmulation,
        *,
        tick_seconds: float = TICK_SECONDS,
    ) -> None:
        """`aws`: sandbox.aws.AwsClients (or anything with `client(service)`) on the sandbox's moto."""
        self.tick_seconds = tick_seconds
        self._jobs = jobs
        self._aws = aws
        self._emulation = emulation
        self._trainers: list[_JobTrainer] = []
        self._runs: list[TrainingRun] = []
        """Every job's runs, in the order they started."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: list[str] = []
        """What went wrong in the thread outside any run (each trainer keeps its runs' own)."""
        self.ticks = 0
        """Ticks completed: after waiting for two more, a tick has begun and ended since (what tests wait for)."""

    def start(self) -> TrainerEmulation:
        if not self._jobs:
            return self
        helper = checkpoint_helper()
        s3 = self._aws.client("s3")  # made here: creating a client is not safe from two threads at once
        for job in self._jobs:
            _ensure_bucket(s3, job.checkpoint_uri)
            trainer = _JobTrainer(job, s3, self._emulation, helper)
            trainer.begin(self._runs.append)
            self._trainers.append(trainer)
        self._thread = threading.Thread(target=self._tick, name="sandbox-trainers", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=30)
        self._thread = None
        for trainer in self._trainers:
            self._tick_one(trainer, advance=False)
            trainer.stop_holds()

    def __enter__(self) -> TrainerEmulation:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def runs(self) -> list[dict[str, Any]]:
        """The `training` collection: every run, in the order they started (a snapshot; the thread goes on)."""
        items = []
        for run in list(self._runs):
            later = [other for other in self._runs if other.job == run.job and other.number == run.number + 1]
            items.append(run.to_json(later[0] if later else None))
        return items

    def training(self) -> bool:
        """Whether a run is training now: time passing means steps trained, so a delay cannot pass at once."""
        return any(run.training for run in list(self._runs))

    def problems(self) -> list[str]:
        """Every error the trainers recorded, in order per trainer."""
        return [*self._errors, *(problem for trainer in self._trainers for problem in trainer.errors)]

    def _tick(self) -> None:
        while not self._stop.wait(self.tick_seconds):
            for trainer in self._trainers:
                self._tick_one(trainer, advance=True)
            self.ticks += 1

    def _tick_one(self, trainer: _JobTrainer, *, advance: bool) -> None:
        try:
            trainer.tick(self._runs.append, advance=advance)
        except Exception as error:  # never lost in the thread: reported with the run's warnings
            problem = f"trainer {trainer.settings.job}: {type(error).__name__}: {error}"
            if self._errors[-1:] != [problem]:
                self._errors.append(problem)


def trainers_for(world: model.World, aws: Any, emulation: EcsEmulation) -> TrainerEmulation:
    """The scenario world's trainers (not started)."""
    return TrainerEmulation([world.trained(trainer) for trainer in world.trainers], aws, emulation)


def _launch(overrides: dict[str, Any]) -> tuple[str | None, str | None]:
    """RESUME_FROM and RESUME_ATTEMPT from a task's container overrides (None where unset)."""
    found: dict[str, str] = {}
    for container in overrides.get("containerOverrides") or []:
        for variable in container.get("environment") or []:
            if variable.get("name") in (RESUME_FROM_ENV, RESUME_ATTEMPT_ENV):
                found.setdefault(variable["name"], str(variable.get("value", "")))
    return found.get(RESUME_FROM_ENV), found.get(RESUME_ATTEMPT_ENV)


def _ensure_bucket(s3: Any, uri: str) -> None:
    """The job's bucket, created when the world has none by that name (a job writes where its platform made
    room)."""
    bucket = uri.removeprefix("s3://").split("/", 1)[0]
    if bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=bucket)
