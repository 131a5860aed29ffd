"""Invoking the functions in Lambda containers: one with a plain `sam local invoke`, as README.md shows it, and the
others through `sam local start-lambda` (warm containers: a function's container is started at its first invoke and
kept), with boto3's Lambda client. Each is judged as the Docker-less smoke judges it (sandbox/invoke.py), and more
strictly: it fails when it raises, when its function URL answers 4xx or 5xx, or when it reports failed SQS records.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess  # nosec B404  # waiting for the sam processes this module starts
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import boto3
from botocore.config import Config

from local.engine import docker_environment
from local.process import LocalError, run, start
from local.stack import FILES_DIR, LocalStack, Planned
from sandbox.aws import FAKE_CREDENTIALS
from sandbox.event_fit import Trigger
from sandbox.serve_standins import describe

# The commands as README.md shows them (tests/docs checks that this file runs them): the function, the event, the
# config file local/stack.py writes, and nothing else.
SAM_LOCAL_INVOKE = "sam local invoke {function} --config-file .aws-sam/local/samconfig.toml -e {event}"
SAM_LOCAL_START_LAMBDA = "sam local start-lambda --config-file .aws-sam/local/samconfig.toml"
_START_LAMBDA_LOG = FILES_DIR / "start-lambda.log"
_START_LAMBDA_SECONDS = 180
_INVOKE_SECONDS = 300


@dataclass
class Outcome:
    function: str
    sample: str
    how: str
    seconds: float
    failure: str | None
    result: Any
    container: str | None = None
    """The id of the Lambda container that answered (SAM CLI logs it when it creates one)."""
    requests: list[str] = field(default_factory=list)

    def line(self) -> str:
        status = "ok  " if self.failure is None else "FAIL"
        counts = _counts(self.requests)
        sent = f"  -> {counts}" if counts else ""
        head = f"{status}  {self.function:<28} {self.sample}  ({self.how}, {self.seconds:.1f} s){sent}"
        return head if self.failure is None else f"{head}\n      {self.failure}"


def sam_environment() -> dict[str, str | None]:
    """sam's environment: the run's daemon, fake credentials (SAM hands the container its own: never the user's)."""
    return {
        **docker_environment(),
        **FAKE_CREDENTIALS,
        "SAM_CLI_TELEMETRY": "0",
        "AWS_PROFILE": None,
        "AWS_DEFAULT_PROFILE": None,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }


def invoke_all(
    stack: LocalStack, plain: list[Planned], warm: list[Planned], *, sam: Path, port: int, out: TextIO
) -> list[Outcome]:
    """`plain` with `sam local invoke`, then `warm` through `sam local start-lambda` (started meanwhile), each in
    turn (their order: the workflow's), printing a line for each as it ends."""
    outcomes = []
    with _start_lambda(sam, port, out) if warm else contextlib.nullcontext(_no_client) as lambda_client:
        for item in [*plain, *warm]:
            seen = stack.sandbox.standins.request_count()
            logged = _START_LAMBDA_LOG.stat().st_size if _START_LAMBDA_LOG.exists() else 0
            outcome = _plain_invoke(item, sam) if item in plain else _warm_invoke(item, lambda_client())
            if item not in plain:
                with _START_LAMBDA_LOG.open(errors="replace") as log:
                    log.seek(logged)
                    outcome.container = _container_id(log.read())
            outcome.requests = [describe(request) for request in stack.sandbox.standins.requests_since(seen)]
            print(outcome.line(), file=out, flush=True)
            outcomes.append(outcome)
    return outcomes


def _plain_invoke(item: Planned, sam: Path) -> Outcome:
    command = shlex.split(SAM_LOCAL_INVOKE.format(function=item.function, event=item.event_file))
    started = time.monotonic()
    completed = run([str(sam), *command[1:]], env=sam_environment(), timeout=_INVOKE_SECONDS, check=False)
    seconds = time.monotonic() - started
    (FILES_DIR / f"{item.function}.log").write_text(completed.stderr)
    container = _container_id(completed.stderr)
    lines = [line for line in completed.stdout.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    failure: str | None
    if completed.returncode != 0 or not lines:
        failure = f"sam local invoke exited {completed.returncode}: {_tail(completed.stderr)}"
    else:
        failure = judge(item, result, result if _is_error(result) else None)
    return Outcome(item.function, str(item.sample), "sam local invoke", seconds, failure, result, container)


def _warm_invoke(item: Planned, client: Any) -> Outcome:
    started = time.monotonic()
    response = client.invoke(FunctionName=item.function, Payload=json.dumps(item.payload).encode())
    seconds = time.monotonic() - started
    body = response["Payload"].read().decode()
    try:
        result = json.loads(body) if body else None
    except json.JSONDecodeError:
        result = body
    # SAM CLI marks an error (X-Amz-Function-Error) only when the runtime's error object has exactly the keys it
    # expects; awslambdaric adds requestId. So an error object is an error, marked or not.
    error = result if _is_error(result) else None
    if error is None and response.get("FunctionError"):
        error = {"errorType": response["FunctionError"], "errorMessage": str(result)[:500]}
    return Outcome(item.function, str(item.sample), "start-lambda", seconds, judge(item, result, error), result)


def _is_error(result: Any) -> bool:
    """Lambda's error object, as the runtime reports an exception the handler raised."""
    return isinstance(result, dict) and {"errorType", "errorMessage"} <= set(result)


def judge(item: Planned, result: Any, error: Mapping[str, Any] | None) -> str | None:
    """Why the invocation failed, or None."""
    if error is not None:
        return f"{item.function} raised {error.get('errorType')}: {str(error.get('errorMessage'))[:500]}"
    if item.trigger is Trigger.URL:
        status = result.get("statusCode") if isinstance(result, dict) else None
        if not isinstance(status, int) or status >= 400:
            body = str(result.get("body", ""))[:200] if isinstance(result, dict) else ""
            return f"{item.function} answered its function URL request with status {status}" + (
                f" ({body})" if body else ""
            )
    failures = result.get("batchItemFailures") if isinstance(result, dict) else None
    if failures:
        ids = ", ".join(str(entry.get("itemIdentifier")) for entry in failures if isinstance(entry, dict))
        return f"{item.function} reported failed SQS records: {ids}"
    return None


@contextlib.contextmanager
def _start_lambda(sam: Path, port: int, out: TextIO) -> Iterator[Callable[[], Any]]:
    """`sam local start-lambda`, started at once and stopped when the block ends (its process group and all); yields
    what gives a Lambda client of it, once it listens."""
    log = _START_LAMBDA_LOG
    log.write_text("")
    command = shlex.split(SAM_LOCAL_START_LAMBDA)
    started = time.monotonic()
    process = start([str(sam), *command[1:]], env=sam_environment(), log=log, own_session=True)
    clients: list[Any] = []

    def client() -> Any:
        if not clients:
            _wait_for_port(port, process, log)
            print(f"local: sam local start-lambda on 127.0.0.1:{port} ({time.monotonic() - started:.1f} s)", file=out)
            clients.append(lambda_client(port))
        return clients[0]

    try:
        yield client
    finally:
        stop_process_group(process)


def _no_client() -> Any:
    raise AssertionError("no function goes through sam local start-lambda")


def lambda_client(port: int) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id=FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(read_timeout=_INVOKE_SECONDS, connect_timeout=10, retries={"max_attempts": 0}),
    )


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + _START_LAMBDA_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise LocalError(f"sam local start-lambda exited {process.returncode}: {_tail(log.read_text())}")
        with socket.socket() as probe:
            probe.settimeout(0.5)
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.25)
    raise LocalError(f"sam local start-lambda did not listen on {port} within {_START_LAMBDA_SECONDS} s")


def stop_process_group(process: subprocess.Popen[bytes], seconds: float = 10) -> None:
    """SIGTERM to the process's group (it was started in a session of its own), SIGKILL after `seconds`."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)  # what it started and left behind


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _container_id(log: str) -> str | None:
    ids = [line.split("SAM_CONTAINER_ID:", 1)[1].strip() for line in log.splitlines() if "SAM_CONTAINER_ID:" in line]
    return ids[-1] if ids else None


def _counts(requests: list[str]) -> str:
    slack = sum(1 for line in requests if line.startswith("slack"))
    pagerduty = len(requests) - slack
    parts = [f"{slack} Slack request(s)" if slack else "", f"{pagerduty} PagerDuty event(s)" if pagerduty else ""]
    return ", ".join(part for part in parts if part)


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])
