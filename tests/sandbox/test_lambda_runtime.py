"""Running handlers like Lambda: the clean-interpreter harness, partial batch responses, the
in-process runtime's errors, and how `invoke` shapes its event."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sandbox.errors import SandboxError
from sandbox.invoke import prepare_event
from sandbox.lambda_runtime import (
    InProcessFunction,
    Invocation,
    lambda_environment,
    patched_environ,
    run_built_function,
)
from sandbox.sqs_mapping import batch_failures, wrap_in_sqs_event
from sandbox.stack import FunctionSpec, SqsEventSource
from tests.sandbox.conftest import FIXTURES, aws_docs_event, toy_event

SOURCE = SqsEventSource(
    name="Queue",
    queue_logical_id="ToyQueue",
    queue_arn="arn:aws:sqs:us-east-1:123456789012:toy-queue",
    queue_url="http://127.0.0.1:1/123456789012/toy-queue",
    batch_size=10,
    maximum_batching_window_seconds=0,
    report_batch_item_failures=True,
    maximum_concurrency=None,
    enabled=True,
)
TOY = FunctionSpec(
    logical_id="ToyFunction",
    name="toy-fn",
    arn="arn:aws:lambda:us-east-1:123456789012:function:toy-fn",
    runtime="python3.13",
    handler="handler.lambda_handler",
    code_dir=FIXTURES / "toy_function",
    layer_dirs=(),
    timeout_seconds=10,
    memory_size_mb=256,
    environment={"POWERTOOLS_SERVICE_NAME": "toy-service"},
    sqs_sources=(SOURCE,),
)


def sqs_event(*envelopes: dict[str, Any]) -> dict[str, Any]:
    return wrap_in_sqs_event([json.dumps(envelope) for envelope in envelopes], SOURCE, "us-east-1")


def run_in_clean_interpreter(spec: FunctionSpec, event: Any, tmp_path: Path) -> Invocation:
    # The toy handler needs only the standard library: an empty directory stands in for boto3.
    environment = lambda_environment(spec, "us-east-1", {})
    return run_built_function(spec, event, environment, Path(sys.executable), tmp_path)


# --- The clean-interpreter harness (python -m sandbox invoke) ----------------------------------------


def test_the_harness_returns_the_handlers_result_and_logs(tmp_path: Path) -> None:
    event = sqs_event(toy_event(n=1), toy_event(fail=True))

    invocation = run_in_clean_interpreter(TOY, event, tmp_path)

    failed_id = event["Records"][1]["messageId"]
    assert invocation.error is None
    assert invocation.result == {"batchItemFailures": [{"itemIdentifier": failed_id}]}
    view = json.loads(invocation.logs[0])
    assert view["context"]["function_name"] == "toy-fn"
    assert view["environ"]["LAMBDA_TASK_ROOT"] == str(TOY.code_dir)


def test_a_package_missing_from_the_build_fails_as_on_lambda(tmp_path: Path) -> None:
    # isolation.py imports yaml, which this interpreter's site-packages has but the "build" does not.
    spec = dataclasses.replace(TOY, handler="isolation.lambda_handler")

    invocation = run_in_clean_interpreter(spec, {}, tmp_path)

    assert invocation.error == {
        "errorType": "Runtime.ImportModuleError",
        "errorMessage": "Unable to import module 'isolation': No module named 'yaml'",
    }


def test_an_exception_comes_back_in_lambdas_error_shape(tmp_path: Path) -> None:
    invocation = run_in_clean_interpreter(TOY, sqs_event(toy_event(**{"raise": True})), tmp_path)

    assert invocation.error is not None
    assert (invocation.error["errorType"], invocation.error["errorMessage"]) == (
        "RuntimeError",
        "toy handler asked to raise",
    )
    assert invocation.error["requestId"] == invocation.request_id
    assert any("handler.py" in frame for frame in invocation.error["stackTrace"])
    assert any("Traceback" in line for line in invocation.logs)


# --- The in-process runtime ------------------------------------------------------------------------


def test_a_missing_handler_is_a_clear_error() -> None:
    spec = dataclasses.replace(TOY, handler="handler.no_such_function")

    with (
        pytest.raises(SandboxError, match=r"Runtime\.HandlerNotFound: Handler 'no_such_function' missing"),
        InProcessFunction(spec, lambda_environment(spec, "us-east-1", {})),
    ):
        pass


def test_a_handler_running_past_its_timeout_has_timed_out() -> None:
    spec = dataclasses.replace(TOY, timeout_seconds=0)

    with InProcessFunction(spec, lambda_environment(spec, "us-east-1", {})) as function:
        invocation = function.invoke(sqs_event(toy_event(n=1)))

    assert invocation.result is None
    assert invocation.error == {"errorType": "Sandbox.Timedout", "errorMessage": "Task timed out after 0.00 seconds"}


def test_other_threads_read_the_whole_environment_while_invocations_change_it() -> None:
    # Given a thread reading the whole environment as botocore does for every client it creates (the proxies), as
    # moto's interpreter does in an execution's thread while another execution's handler runs
    errors: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        while not done.is_set():
            try:
                urllib.request.getproxies_environment()
                os.environ.copy()
                repr(os.environ)
            except (KeyError, RuntimeError) as exc:
                errors.append(exc)
                return

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # (threads take turns often: the race shows within a few cycles)
    reader = threading.Thread(target=read)
    reader.start()
    try:
        # When invocations set their function's variables and remove them afterwards, many times over
        for _ in range(300):
            with patched_environ({f"SANDBOX_TEST_VARIABLE_{n}": "set" for n in range(20)}):
                pass
    finally:
        done.set()
        reader.join()
        sys.setswitchinterval(switch)

    # Then every read saw a whole environment, and the variables are gone again
    assert errors == []
    assert not [name for name in os.environ if name.startswith("SANDBOX_TEST_VARIABLE_")]


# --- Partial batch responses -----------------------------------------------------------------------


def invocation_with(result: Any = None, error: dict[str, Any] | None = None) -> Invocation:
    return Invocation("ToyFunction", "request", result, error, [], [], 1.0)


@pytest.mark.parametrize(
    ("result", "failed"),
    [
        (None, []),
        ({}, []),
        ({"batchItemFailures": []}, []),
        ({"batchItemFailures": None}, []),
        ({"batchItemFailures": [{"itemIdentifier": "b"}]}, ["b"]),
        ({"batchItemFailures": [{"itemIdentifier": "c"}, {"itemIdentifier": "a"}]}, ["a", "c"]),
    ],
)
def test_valid_responses_fail_only_the_reported_items(result: Any, failed: list[str]) -> None:
    assert batch_failures(invocation_with(result), ["a", "b", "c"], True) == (failed, None)


@pytest.mark.parametrize(
    "result",
    [
        {"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"id": "a"}]},
        {"batchItemFailures": "a"},
        "a string",
    ],
)
def test_invalid_responses_fail_the_whole_batch(result: Any) -> None:
    failed, why = batch_failures(invocation_with(result), ["a", "b"], True)

    assert failed == ["a", "b"]
    assert why is not None
    assert "whole batch" in why


def test_without_report_batch_item_failures_the_response_is_ignored() -> None:
    result = {"batchItemFailures": [{"itemIdentifier": "a"}]}

    assert batch_failures(invocation_with(result), ["a", "b"], False) == ([], None)


def test_an_error_fails_every_message() -> None:
    error = {"errorType": "KeyError", "errorMessage": "'x'"}

    assert batch_failures(invocation_with(error=error), ["a", "b"], True) == (["a", "b"], "KeyError: 'x'")


# --- How invoke shapes the event -------------------------------------------------------------------


def test_an_envelope_for_an_sqs_triggered_function_is_wrapped_in_a_record() -> None:
    envelope = aws_docs_event("health-change-accelerated-compute-xid46.json")

    prepared = prepare_event(envelope, TOY, "us-east-1")

    [record] = prepared.payload["Records"]
    assert json.loads(record["body"]) == envelope
    assert (record["eventSource"], record["eventSourceARN"]) == ("aws:sqs", SOURCE.queue_arn)
    assert prepared.envelopes == [envelope]
    assert "wrapped in 1 SQS record(s) from ToyQueue" in prepared.note


def test_an_sqs_event_is_passed_verbatim() -> None:
    event = sqs_event(toy_event(n=1))

    prepared = prepare_event(event, TOY, "us-east-1")

    assert prepared.payload is event
    assert prepared.envelopes == []


def test_an_envelope_for_a_function_without_an_sqs_trigger_is_passed_verbatim() -> None:
    envelope = aws_docs_event("health-change-accelerated-compute-xid46.json")

    prepared = prepare_event(envelope, dataclasses.replace(TOY, sqs_sources=()), "us-east-1")

    assert prepared.payload is envelope
