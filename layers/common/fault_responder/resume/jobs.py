"""Training auto-resume: which tasks form a job (its tags), and what makes a job's tags unusable."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pydantic import Field

from fault_responder.resume.checkpoints import parse_checkpoint_uri
from fault_responder.resume.config import EVIDENCE_ITEMS, MAX_ATTEMPTS_LIMIT, Mode, _Payload

JOB_ID_TAG = "fault-responder:job-id"
CHECKPOINT_URI_TAG = "fault-responder:checkpoint-uri"
MAX_ATTEMPTS_TAG = "fault-responder:max-attempts"
MODE_TAG = "fault-responder:mode"
ATTEMPT_TAG = "fault-responder:attempt"
RESUMED_FROM_TAG = "fault-responder:resumed-from"
MAX_TAGS = 50


class TaskSpec(_Payload):
    """What RunTask needs to start a task again like the original (DescribeTasks has the rest)."""

    task_arn: str
    task_definition_arn: str
    container_instance_arn: str | None = None
    ec2_instance_id: str | None = None
    capacity_provider_name: str | None = None
    launch_type: str | None = None
    group: str | None = None
    started_by: str | None = None
    overrides: dict[str, Any] = Field(default_factory=dict)
    tags: dict[str, str] = Field(default_factory=dict)
    network_configuration: dict[str, Any] | None = None
    enable_execute_command: bool = False

    @property
    def task_id(self) -> str:
        return self.task_arn.rsplit("/", 1)[-1]

    @property
    def host(self) -> str:
        return self.ec2_instance_id or (self.container_instance_arn or "?").rsplit("/", 1)[-1]


class Job(_Payload):
    """A resumable job as found on the faulty instance: every task in the cluster sharing its job id (a gang).

    The task specs themselves are kept in the resume store (a 2,000-GPU gang would not fit in a state's
    256 KB payload); this summary is what travels.
    """

    job_id: str
    cluster_arn: str
    checkpoint_uri: str
    max_attempts: int | None = None
    """From the max-attempts tag; None means the stack default."""
    mode: Mode
    task_count: int
    hosts: tuple[str, ...]
    task_ids: tuple[str, ...] = ()
    """The first few task ids, for the evidence of a page."""
    problems: tuple[str, ...] = ()
    """Why the job's tags cannot be acted on; a job with problems is paged, never touched."""

    @property
    def key(self) -> str:
        return job_key(self.cluster_arn, self.job_id)


def job_key(cluster_arn: str, job_id: str) -> str:
    return f"{cluster_arn.rsplit('/', 1)[-1]}/{job_id}"


class TaskSummary(_Payload):
    """A task on the faulty instance that is not a resumable job: named in the thread, never touched."""

    task_arn: str
    group: str | None
    note: str


class FoundJobs(_Payload):
    jobs: tuple[Job, ...]
    untouched: tuple[TaskSummary, ...]
    untouched_count: int


def is_job_task(tags: Mapping[str, str]) -> bool:
    return bool(tags.get(JOB_ID_TAG)) and bool(tags.get(CHECKPOINT_URI_TAG))


def untouched_summary(spec: TaskSpec) -> TaskSummary:
    if spec.tags.get(JOB_ID_TAG):
        note = f"tagged {JOB_ID_TAG} but not {CHECKPOINT_URI_TAG}"
    else:
        note = f"no {JOB_ID_TAG} / {CHECKPOINT_URI_TAG} tags"
    return TaskSummary(task_arn=spec.task_arn, group=spec.group, note=note)


def group_jobs(tasks: Iterable[TaskSpec]) -> dict[str, list[TaskSpec]]:
    """Tasks by job id, each list in task ARN order (the order fixes each task's index in its clientToken)."""
    jobs: dict[str, list[TaskSpec]] = {}
    for task in sorted(tasks, key=lambda t: t.task_arn):
        if is_job_task(task.tags):
            jobs.setdefault(task.tags[JOB_ID_TAG], []).append(task)
    return jobs


def job_from_tasks(job_id: str, cluster_arn: str, tasks: Sequence[TaskSpec], default_mode: Mode) -> Job:
    """Summarise a gang; disagreeing or malformed tags become problems (paged) rather than guesses."""
    problems: list[str] = []
    checkpoint_uri = _agreed(tasks, CHECKPOINT_URI_TAG, problems) or ""
    if checkpoint_uri:
        try:
            checkpoint_uri = parse_checkpoint_uri(checkpoint_uri).uri
        except ValueError as error:
            problems.append(f"{CHECKPOINT_URI_TAG}: {error}")
    crowded = [task.task_id for task in tasks if len(_relaunch_tag_keys(task.tags)) > MAX_TAGS]
    if crowded:
        # Found now, before anything is stopped: RunTask would refuse the relaunched task.
        problems.append(f"tasks {', '.join(crowded[:EVIDENCE_ITEMS])} have too many tags to add the resume tags")
    max_attempts = _max_attempts(_agreed(tasks, MAX_ATTEMPTS_TAG, problems), problems)
    mode = _mode(_agreed(tasks, MODE_TAG, problems), default_mode, problems)
    return Job(
        job_id=job_id,
        cluster_arn=cluster_arn,
        checkpoint_uri=checkpoint_uri,
        max_attempts=max_attempts,
        mode=mode,
        task_count=len(tasks),
        hosts=tuple(sorted({task.host for task in tasks})),
        task_ids=tuple(task.task_id for task in tasks[:EVIDENCE_ITEMS]),
        problems=tuple(problems),
    )


def _agreed(tasks: Sequence[TaskSpec], tag: str, problems: list[str]) -> str | None:
    values = sorted({task.tags[tag] for task in tasks if tag in task.tags})
    if len(values) > 1:
        problems.append(f"the job's tasks disagree on {tag}: {', '.join(values)}")
        return None
    return values[0] if values else None


def _max_attempts(value: str | None, problems: list[str]) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= MAX_ATTEMPTS_LIMIT:
        problems.append(f"{MAX_ATTEMPTS_TAG} must be a whole number from 1 to {MAX_ATTEMPTS_LIMIT}, got {value!r}")
        return None
    return int(value)


def _mode(value: str | None, default: Mode, problems: list[str]) -> Mode:
    if value is None:
        return default
    try:
        return Mode(value)
    except ValueError:
        # A typo must not fall back to a mode that acts: the job is paged instead.
        problems.append(f"{MODE_TAG} must be one of {', '.join(m.value for m in Mode)}, got {value!r}")
        return Mode.DRY_RUN


def tasks_digest(task_arns: Iterable[str]) -> str:
    """Names a set of tasks: two executions replacing the same tasks collide on it (one copy of a job)."""
    return hashlib.sha256("\n".join(sorted(task_arns)).encode()).hexdigest()[:32]


def _relaunch_tag_keys(original: Mapping[str, str]) -> set[str]:
    """`aws:` tags are ECS's own and cannot be set; the resume tags replace earlier values of themselves."""
    return {key for key in original if not key.lower().startswith("aws:")} | {ATTEMPT_TAG, RESUMED_FROM_TAG}
