"""Training auto-resume: watching tasks stop and start, and why an attempt failed."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from fault_responder.resume.config import _Payload
from fault_responder.resume.relaunch import HostsToAvoid, Launch, LaunchState


class TaskState(_Payload):
    """A task as DescribeTasks reports it now; MISSING when ECS no longer knows it."""

    task_arn: str
    last_status: str
    desired_status: str | None = None
    stop_code: str | None = None
    stopped_reason: str | None = None
    host: str | None = None
    stopping_at: datetime | None = None
    """When it left RUNNING (ECS's stoppingAt): the moment ECS told its containers to stop."""
    execution_stopped_at: datetime | None = None
    stopped_at: datetime | None = None

    @property
    def told_to_stop_at(self) -> datetime | None:
        """The first time ECS gives of its stop: stoppingAt, else executionStoppedAt, else stoppedAt (each no
        earlier than the one before)."""
        return self.stopping_at or self.execution_stopped_at or self.stopped_at


class StopRequest(_Payload):
    stopping: int
    requested_at: datetime


class WatchState(StrEnum):
    DONE = "done"
    PENDING = "pending"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


class StoppedTask(_Payload):
    task_arn: str
    host: str | None
    stop_code: str | None
    reason: str | None


class TaskWatch(_Payload):
    state: WatchState
    total: int
    ready: int
    stopped: tuple[StoppedTask, ...] = ()
    hosts: tuple[str, ...] = ()
    misplaced: tuple[StoppedTask, ...] = ()
    """New tasks found on a host to avoid (their reason says which and why); they are stopped."""
    stopping_at: datetime | None = None
    """Watching a stop: when the first of the tasks was told to stop, by ECS's times (TaskState.told_to_stop_at);
    a gang trains no further once one of its tasks stops. None when ECS gave no time for any of them."""


def misplaced_tasks(tasks: Sequence[TaskState], avoid: HostsToAvoid) -> tuple[StoppedTask, ...]:
    """The check after placement: new tasks, not already stopping, that ECS placed on a host to avoid (where a
    placement constraint could not exclude it: Managed Instances, past the expression limit, or a fault newer
    than the RunTask)."""
    return tuple(
        StoppedTask(
            task_arn=task.task_arn,
            host=task.host,
            stop_code=None,
            reason=f"placed on {task.host}, {avoid.why(task.host)}",
        )
        for task in tasks
        if task.host and task.host in avoid and not _stopping(task)
    )


def judge_start(
    tasks: Sequence[TaskState], waited: timedelta, timeout: timedelta, misplaced: Sequence[StoppedTask] = ()
) -> WatchState:
    """New tasks, one poll after RunTask: any of them stopping (or gone), or placed on a host to avoid, fails
    the attempt."""
    if misplaced or any(_stopping(task) for task in tasks):
        return WatchState.FAILED
    if tasks and all(task.last_status == "RUNNING" for task in tasks):
        return WatchState.DONE
    return WatchState.TIMED_OUT if waited >= timeout else WatchState.PENDING


def judge_stop(tasks: Sequence[TaskState], waited: timedelta, timeout: timedelta) -> WatchState:
    """Old tasks after StopTask: a task ECS no longer knows (MISSING) has long been stopped."""
    if all(task.last_status in ("STOPPED", "MISSING") for task in tasks):
        return WatchState.DONE
    return WatchState.TIMED_OUT if waited >= timeout else WatchState.PENDING


def _stopping(task: TaskState) -> bool:
    return task.last_status in ("STOPPED", "MISSING") or task.desired_status == "STOPPED"


def watch_result(
    state: WatchState, tasks: Sequence[TaskState], want_running: bool, misplaced: Sequence[StoppedTask] = ()
) -> TaskWatch:
    ready = sum(task.last_status == ("RUNNING" if want_running else "STOPPED") for task in tasks)
    stopped = tuple(
        StoppedTask(task_arn=t.task_arn, host=t.host, stop_code=t.stop_code, reason=t.stopped_reason)
        for t in tasks
        if want_running and _stopping(t)
    )
    hosts = tuple(sorted({t.host for t in tasks if t.host})) if want_running else ()
    told = [moment for t in tasks if (moment := t.told_to_stop_at) is not None] if not want_running else []
    return TaskWatch(
        state=state,
        total=len(tasks),
        ready=ready,
        stopped=stopped,
        hosts=hosts,
        misplaced=tuple(misplaced),
        stopping_at=min(told, default=None),
    )


def failed_hosts(watch: TaskWatch | None) -> list[str]:
    """The hosts a failed attempt failed on: where its tasks died, and where they were misplaced."""
    if watch is None:
        return []
    return list(dict.fromkeys(task.host for task in (*watch.misplaced, *watch.stopped) if task.host))


def describe_failure(launch: Launch | None, watch: TaskWatch | None, start_timeout: int) -> str:
    """One line saying why an attempt failed, for the ledger and the thread."""
    if launch is not None and launch.state == LaunchState.NO_CAPACITY:
        started = f"{launch.launched} of {launch.expected} tasks started" if launch.launched else "nothing started"
        return f"RunTask could not place the task ({', '.join(launch.failures) or 'no reason given'}); {started}"
    if watch is not None and watch.state == WatchState.FAILED and watch.misplaced:
        first, more = watch.misplaced[0], len(watch.misplaced) - 1
        others = f" (and {more} more task{'s' if more != 1 else ''} on hosts to avoid)" if more else ""
        return f"task {first.task_arn.rsplit('/', 1)[-1]} was {first.reason}{others}; it was stopped"
    if watch is not None and watch.state == WatchState.FAILED and watch.stopped:
        first = watch.stopped[0]
        why = first.reason or first.stop_code or "no reason given"
        where = f" on {first.host}" if first.host else ""
        return f"task {first.task_arn.rsplit('/', 1)[-1]} stopped before it ran{where}: {why}"
    return f"the tasks were not RUNNING within {start_timeout}s"
