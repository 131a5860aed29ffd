"""State machine executions in the sandbox: Lambda tasks run by our handlers, waiting, and what happened.

moto's interpreter (docs/sandbox.md#step-functions-without-docker) runs each execution in a thread of the
moto server and calls Lambda over HTTP (`localhost:$MOTO_PORT`, which the sandbox sets). Without Docker
moto's Lambda backend only echoes, so `LambdaDispatch` replaces its `invoke` with one that runs the
function's real handler in process (`SharedFunction`). Executions and the SQS event source mappings run
handlers from several threads; one lock runs one handler at a time, because a handler's environment
variables and captured output are process-wide. Handlers of one execution still interleave with another's
and with the alert pipeline's, at invocation granularity. The interpreter's threads read os.environ outside that
lock (botocore reads the proxy settings whenever the interpreter creates a client for a task), so os.environ reads
the whole environment from one snapshot (sandbox.lambda_runtime): otherwise a variable a finishing handler removes
fails another execution's task with States.Runtime (KeyError), which a Catch turns into a job "failed" or
ClaimFailed, and which fails an uncaught task's execution.

`ExecutionTracker` waits for the executions an event started and summarises each from its history:
the states entered, the Lambda invocations, the state transitions, the wall time and the time spent
waiting (Wait states, Retry back-off, task tokens), which moto spends in real time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from moto.awslambda.exceptions import UnknownFunctionException
from moto.awslambda_simple.models import LambdaSimpleBackend

from sandbox.aws import AwsClients
from sandbox.lambda_runtime import InProcessFunction, Invocation
from sandbox.stack import RuleTarget

# Layer modules that cache clients and settings built from a function's environment. In process,
# functions share them, so they are reset whenever a function with another environment runs next.
_RESET_HOOK_MODULES = (
    "fault_responder.wiring.alert_router",
    "fault_responder.wiring.resume_training",
    "fault_responder.wiring.slack_actions",
    "fault_responder.wiring.pagerduty_webhook",
)
_POLL_SECONDS = 0.05
_STOP_SECONDS = 10.0
"""How long a stopped execution may take to read ABORTED (moto applies a stop at the execution's next step)."""


# --- Running handlers, one at a time -----------------------------------------------------------------


class _Warm:
    """Whose environment the layer's caches were built from (None: nothing cached yet this run)."""

    lock = threading.Lock()
    environment: tuple[tuple[str, str], ...] | None = None


def forget_warm_caches() -> None:
    """Start a run cold: nothing cached from an earlier sandbox (another moto port, other stand-ins)."""
    with _Warm.lock:
        _Warm.environment = None


class SharedFunction(InProcessFunction):
    """An in-process function that runs only while no other handler runs, like one per execution environment.

    Invoking a function whose environment differs from the last one's resets the layer's caches, as a
    separate Lambda execution environment would not share them.
    """

    def invoke(self, event: Any) -> Invocation:
        return self.invoke_queued(event)[0]

    def invoke_queued(self, event: Any) -> tuple[Invocation, float]:
        """The invocation, and the seconds it waited for another handler to finish (a sandbox artifact)."""
        environment = tuple(sorted(self.spec.environment.items()))
        arrived = time.monotonic()
        with _Warm.lock:
            queued = time.monotonic() - arrived
            if _Warm.environment != environment:
                _reset_layer_caches()
                _Warm.environment = environment
            return super().invoke(event), queued


def _reset_layer_caches() -> None:
    for name in _RESET_HOOK_MODULES:
        reset = getattr(sys.modules.get(name), "reset", None)
        if callable(reset):
            reset()


@dataclass(frozen=True)
class WorkflowInvocation:
    """A Lambda invocation made by a state machine task."""

    invocation: Invocation
    function_name: str
    """As the task named it (a name or an ARN)."""
    received_at: datetime
    queued_seconds: float

    def to_json(self) -> dict[str, Any]:
        invocation = self.invocation
        return {
            "function": invocation.function,
            "request_id": invocation.request_id,
            "received_at": self.received_at.isoformat(),
            "queued_ms": round(self.queued_seconds * 1000, 1),
            "error": invocation.error,
            "duration_ms": invocation.duration_ms,
            "logs": invocation.logs,
        }


class LambdaDispatch:
    """While entered, moto's Lambda `Invoke` (no Docker) runs the stack's handlers in process.

    `functions` maps each function's name and ARN to its loaded handler; a function the stack does
    not have answers ResourceNotFoundException, as Lambda would.
    """

    def __init__(
        self,
        functions: Mapping[str, SharedFunction],
        on_invocation: Callable[[WorkflowInvocation], None] | None = None,
    ) -> None:
        self._functions = dict(functions)
        self._on_invocation = on_invocation
        self.invocations: list[WorkflowInvocation] = []
        self._lock = threading.Lock()
        self._original: Any = None

    def __enter__(self) -> LambdaDispatch:
        self._original = LambdaSimpleBackend.invoke
        dispatch = self

        def invoke(
            backend: LambdaSimpleBackend,
            function_name: str,
            qualifier: str | None,
            body: Any,
            headers: Any,
            response_headers: Any,
        ) -> str | bytes | None:
            return dispatch._invoke(function_name, body, response_headers)

        LambdaSimpleBackend.invoke = invoke  # type: ignore[method-assign,assignment]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        LambdaSimpleBackend.invoke = self._original  # type: ignore[method-assign]

    def _invoke(self, function_name: str, body: Any, response_headers: dict[str, str]) -> bytes:
        function = self._functions.get(function_name) or self._functions.get(function_name.rsplit(":", maxsplit=1)[-1])
        if function is None:
            raise UnknownFunctionException(function_name)
        raw = body.decode() if isinstance(body, bytes) else body
        received_at = datetime.now(UTC)
        invocation, queued = function.invoke_queued(json.loads(raw) if raw else {})
        record = WorkflowInvocation(invocation, function_name, received_at, queued)
        with self._lock:
            self.invocations.append(record)
        if self._on_invocation is not None:
            self._on_invocation(record)
        if invocation.error is not None:
            # What Lambda answers for a function error; Step Functions takes the error name from errorType.
            response_headers["x-amz-function-error"] = "Unhandled"
            return json.dumps(invocation.error).encode()
        return json.dumps(invocation.result).encode()


@contextlib.contextmanager
def quiet_interpreter() -> Iterator[None]:
    """moto's interpreter logs every failure a state machine handles itself (a Catch, a Fail state) at ERROR."""
    logger = logging.getLogger("moto.stepfunctions")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


# --- Executions --------------------------------------------------------------------------------------

_WAITING_STATUSES = frozenset({"RUNNING", "PENDING_REDRIVE"})


@dataclass
class TrackedExecution:
    arn: str
    rule: str
    state_machine_arn: str
    status: str = "RUNNING"


@dataclass
class ExecutionTracker:
    """The executions rule targets started, in order; waits for them and summarises them."""

    aws: AwsClients
    executions: list[TrackedExecution] = field(default_factory=list)

    def started(self, execution_arn: str, target: RuleTarget) -> None:
        self.executions.append(TrackedExecution(execution_arn, target.rule_logical_id, target.arn))

    def running(self) -> list[TrackedExecution]:
        sfn = self.aws.client("stepfunctions")
        for execution in self.executions:
            if execution.status in _WAITING_STATUSES:
                execution.status = sfn.describe_execution(executionArn=execution.arn)["status"]
        return [execution for execution in self.executions if execution.status in _WAITING_STATUSES]

    def wait(self, deadline: float, on_tick: Callable[[], None] | None = None) -> list[TrackedExecution]:
        """Poll until every execution has finished or `deadline` (time.monotonic) passes; returns those left."""
        while True:
            if on_tick is not None:
                on_tick()
            left = self.running()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(_POLL_SECONDS)

    def stop(self, executions: Iterable[TrackedExecution], cause: str) -> None:
        sfn = self.aws.client("stepfunctions")
        for execution in executions:
            sfn.stop_execution(executionArn=execution.arn, error="Sandbox.Timeout", cause=cause)
            # moto's interpreter thread takes the stop at its next step: on a loaded machine the execution can
            # still read RUNNING just after StopExecution returned, so wait (boundedly) for it to say ABORTED.
            deadline = time.monotonic() + _STOP_SECONDS
            while True:
                execution.status = sfn.describe_execution(executionArn=execution.arn)["status"]
                if execution.status not in _WAITING_STATUSES or time.monotonic() >= deadline:
                    break
                time.sleep(_POLL_SECONDS)

    def summaries(self, invocations: Sequence[WorkflowInvocation] = ()) -> list[dict[str, Any]]:
        sfn = self.aws.client("stepfunctions")
        unclaimed = list(invocations)
        return [
            summarize_execution(
                execution.rule,
                sfn.describe_execution(executionArn=execution.arn),
                history(sfn, execution.arn),
                unclaimed,
            )
            for execution in self.executions
        ]

    def task_tokens(self) -> list[str]:
        """Every task token the executions handed a task: a `.waitForTaskToken` task's parameter named `task_token`,
        `taskToken` or `token` (what `$$.Task.Token` is passed as)."""
        sfn = self.aws.client("stepfunctions")
        tokens: list[str] = []
        for execution in self.executions:
            for event in history(sfn, execution.arn):
                details = event.get("taskScheduledEventDetails") or {}
                if not str(details.get("resource", "")).endswith(".waitForTaskToken"):
                    continue
                try:
                    parameters = json.loads(details.get("parameters") or "{}")
                except ValueError:
                    continue
                tokens.extend(t for t in _values_of(parameters, _TOKEN_KEYS) if t not in tokens)
        return tokens


_TOKEN_KEYS = frozenset({"task_token", "taskToken", "token"})


def _values_of(value: Any, keys: frozenset[str]) -> Iterator[str]:
    if isinstance(value, dict):
        for name, item in value.items():
            if name in keys and isinstance(item, str) and item:
                yield item
            else:
                yield from _values_of(item, keys)
    elif isinstance(value, list):
        for item in value:
            yield from _values_of(item, keys)


def history(sfn: Any, execution_arn: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for page in sfn.get_paginator("get_execution_history").paginate(executionArn=execution_arn):
        events.extend(page["events"])
    return events


# --- Summaries --------------------------------------------------------------------------------------

_CALLBACK_END = ("TaskSucceeded", "TaskFailed", "TaskTimedOut")
_LAMBDA_END = ("LambdaFunctionSucceeded", "LambdaFunctionFailed", "LambdaFunctionTimedOut")


def summarize_execution(
    rule: str,
    described: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    invocations: list[WorkflowInvocation] | None = None,
) -> dict[str, Any]:
    """An execution as the report shows it (the fields are listed in sandbox.run).

    `invocations` are the workflow's Lambda invocations not yet attributed to an execution: those made
    during this execution's Lambda tasks are taken from it, for the time they queued behind other handlers.
    """
    start = _time(described["startDate"])
    stop = _time(described["stopDate"]) if described.get("stopDate") else _time(events[-1]["timestamp"])
    entered = [e for e in events if e["type"].endswith("StateEntered")]
    lambda_tasks = _lambda_tasks(events)
    retries = sum(max(0, task["attempts"] - 1) for task in lambda_tasks)
    waits = _wait_intervals(events)
    backoffs = _retry_intervals(events)
    callbacks = _callback_intervals(events)
    wall = (stop - start).total_seconds()
    waiting = _union(waits + backoffs + callbacks)
    queued = _queued_seconds(lambda_tasks, invocations if invocations is not None else [])
    return {
        "name": described["name"],
        "arn": described["executionArn"],
        "rule": rule,
        "state_machine_arn": described["stateMachineArn"],
        "status": described["status"],
        "input": _json_or_text(described.get("input")),
        "output": _json_or_text(described.get("output")),
        "error": described.get("error"),
        "cause": described.get("cause"),
        "started_at": start.isoformat(),
        "stopped_at": stop.isoformat(),
        "history": {
            "states_entered": [e["stateEnteredEventDetails"]["name"] for e in entered],
            "state_transitions": len(entered) + retries,
            "lambda_invocations": sum(task["attempts"] for task in lambda_tasks),
            "lambda_tasks": lambda_tasks,
            "retries": retries,
            "events": len(events),
        },
        "wall_seconds": round(wall, 3),
        "wait_state_seconds": round(_union(waits), 3),
        "retry_backoff_seconds": round(_union(backoffs), 3),
        "task_token_wait_seconds": round(_union(callbacks), 3),
        "sandbox_queue_seconds": round(queued, 3),
        "active_seconds": round(max(0.0, wall - waiting - queued), 3),
    }


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _json_or_text(value: str | None) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def _states(events: Sequence[Mapping[str, Any]]) -> list[str | None]:
    """The state each event belongs to: the last state entered before it (moto records events in order)."""
    states: list[str | None] = []
    current: str | None = None
    for event in events:
        if event["type"].endswith("StateEntered"):
            current = str(event["stateEnteredEventDetails"]["name"])
        states.append(current)
    return states


def _lambda_tasks(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per Task state entry that invoked Lambda: the function, attempts, outcome, time taken."""
    tasks: list[dict[str, Any]] = []
    open_tasks: dict[str, dict[str, Any]] = {}
    for event, state in zip(events, _states(events), strict=True):
        kind = event["type"]
        if kind == "TaskStateEntered":
            open_tasks.pop(str(state), None)
        if kind not in ("TaskScheduled", "LambdaFunctionScheduled", *_CALLBACK_END, *_LAMBDA_END) or state is None:
            continue
        if kind in ("TaskScheduled", "LambdaFunctionScheduled"):
            details = event.get("taskScheduledEventDetails") or event.get("lambdaFunctionScheduledEventDetails") or {}
            if kind == "TaskScheduled" and details.get("resourceType") != "lambda":
                continue
            task = open_tasks.get(state)
            if task is None:
                parameters = _json_or_text(details.get("parameters")) or {}
                function = parameters.get("FunctionName") if isinstance(parameters, dict) else details.get("resource")
                task = {
                    "state": state,
                    "function": str(function or details.get("resource")).split(":")[-1],
                    "resource": details.get("resource"),
                    "attempts": 0,
                    "outcome": None,
                    "_start": _time(event["timestamp"]),
                    "_end": _time(event["timestamp"]),
                    "duration_seconds": None,
                }
                open_tasks[state] = task
                tasks.append(task)
            task["attempts"] += 1
        elif state in open_tasks:
            task = open_tasks[state]
            task["outcome"] = kind.removeprefix("Task").removeprefix("LambdaFunction").lower()
            task["_end"] = _time(event["timestamp"])
            task["duration_seconds"] = round((task["_end"] - task["_start"]).total_seconds(), 3)
    return tasks


def _queued_seconds(lambda_tasks: list[dict[str, Any]], invocations: list[WorkflowInvocation]) -> float:
    """Time this execution's Lambda tasks waited for handlers of other executions or of the alert pipeline
    (in AWS they run side by side); each invocation counts for the task it ran within, once."""
    queued = 0.0
    for task in lambda_tasks:
        start, end = task.pop("_start"), task.pop("_end")
        for invocation in list(invocations):
            same_function = invocation.function_name.split(":")[-1] == task["function"]
            if same_function and start <= invocation.received_at <= end:
                queued += invocation.queued_seconds
                invocations.remove(invocation)
    return queued


def _paired(
    events: Sequence[Mapping[str, Any]],
    opens: Callable[[Mapping[str, Any]], str | None],
    closes: Callable[[Mapping[str, Any]], str | None],
) -> list[tuple[datetime, datetime]]:
    """Intervals between an opening event and the next closing event with the same key (first in, first out)."""
    pending: dict[str, list[datetime]] = {}
    intervals: list[tuple[datetime, datetime]] = []
    for event in events:
        moment = _time(event["timestamp"])
        if (key := closes(event)) is not None and pending.get(key):
            intervals.append((pending[key].pop(0), moment))
        if (key := opens(event)) is not None:
            pending.setdefault(key, []).append(moment)
    return intervals


def _wait_intervals(events: Sequence[Mapping[str, Any]]) -> list[tuple[datetime, datetime]]:
    def name(kind: str) -> Callable[[Mapping[str, Any]], str | None]:
        def key(event: Mapping[str, Any]) -> str | None:
            if event["type"] != kind:
                return None
            details = event.get("stateEnteredEventDetails") or event.get("stateExitedEventDetails") or {}
            return str(details.get("name"))

        return key

    return _paired(events, name("WaitStateEntered"), name("WaitStateExited"))


def _retry_intervals(events: Sequence[Mapping[str, Any]]) -> list[tuple[datetime, datetime]]:
    """From a failed attempt to the next attempt of the same state (the Retry's back-off)."""
    intervals: list[tuple[datetime, datetime]] = []
    failed_at: dict[str, datetime] = {}
    for event, state in zip(events, _states(events), strict=True):
        if state is None:
            continue
        if event["type"] in ("TaskFailed", "TaskTimedOut", "LambdaFunctionFailed", "LambdaFunctionTimedOut"):
            failed_at[state] = _time(event["timestamp"])
        elif event["type"] in ("TaskScheduled", "LambdaFunctionScheduled") and state in failed_at:
            intervals.append((failed_at.pop(state), _time(event["timestamp"])))
        elif event["type"].endswith("StateExited"):
            failed_at.pop(state, None)
    return intervals


def _callback_intervals(events: Sequence[Mapping[str, Any]]) -> list[tuple[datetime, datetime]]:
    """From the callback task's start until someone answered or it timed out.

    The start is its TaskStarted, from which Step Functions counts the task's TimeoutSeconds (the token's hand-out, a
    Lambda that posts the request, included: on a loaded machine it can take a good part of a short timeout); a
    history that has no TaskStarted for it starts at the hand-out's end (TaskSubmitted)."""
    intervals: list[tuple[datetime, datetime]] = []
    started: dict[str, datetime] = {}
    submitted: dict[str, datetime] = {}
    for event, state in zip(events, _states(events), strict=True):
        if state is None:
            continue
        if event["type"] == "TaskStarted":
            started[state] = _time(event["timestamp"])
        elif event["type"] == "TaskSubmitted":
            details = event.get("taskSubmittedEventDetails") or {}
            if str(details.get("resource", "")).endswith(".waitForTaskToken"):
                submitted[state] = started.get(state) or _time(event["timestamp"])
        elif event["type"] in _CALLBACK_END and state in submitted:
            intervals.append((submitted.pop(state), _time(event["timestamp"])))
        if event["type"] in (*_CALLBACK_END, *_LAMBDA_END):
            started.pop(state, None)
    return intervals


def _union(intervals: Iterable[tuple[datetime, datetime]]) -> float:
    """Seconds covered by the intervals (overlaps counted once: Map iterations wait side by side)."""
    total = 0.0
    end: datetime | None = None
    for low, high in sorted(intervals):
        if end is None or low > end:
            total += (high - low).total_seconds()
            end = high
        elif high > end:
            total += (high - end).total_seconds()
            end = high
    return total


# --- What people saw -------------------------------------------------------------------------------


def strings_in(value: Any) -> Iterator[str]:
    """Every string inside a JSON value (Slack blocks, PagerDuty bodies), depth first."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)
