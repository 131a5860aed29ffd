"""No secret reaches a log at any level, library DEBUG included (fault_responder.core.logsafety).

The canary runs (tests/unit/log_canary_probe.py, in a fresh interpreter each) read real-looking secrets
from Secrets Manager (moto) the way the functions do and send them to a loopback HTTP server, with the root
logger and every library logger at DEBUG; the whole output is searched for each canary, in the forms a
log line could carry it. The same run without the filters must leak every canary, so a clean run can only
mean the filters worked. The in-process tests pin the urllib3 redaction, which also applies above DEBUG.
"""

from __future__ import annotations

import importlib
import io
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import urllib3
from urllib3.util.retry import Retry

from fault_responder.core import logsafety
from tests.unit import log_canary_probe as probe

ROOT = Path(__file__).resolve().parents[2]


def forms(secret: str) -> set[str]:
    """The ways a log line can carry `secret`: as is, JSON-escaped, slash-escaped, percent-encoded, repr'd."""
    return {
        secret,
        json.dumps(secret)[1:-1],
        secret.replace("/", "\\/"),
        quote(secret, safe=""),
        quote(secret),
        repr(secret)[1:-1],
        repr(secret.encode())[2:-1],
    }


def leaked(output: str) -> dict[str, set[str]]:
    """Each canary found in `output`, with the forms it was found in."""
    canaries = {**probe.CANARIES, **probe.OWN_CANARIES}
    found = {name: {form for form in forms(secret) if form in output} for name, secret in canaries.items()}
    return {name: hits for name, hits in found.items() if hits}


def run_probe(mode: str) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "layers" / "common"), str(ROOT)])}
    return subprocess.run(
        [sys.executable, str(Path(probe.__file__)), mode],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --- Canary runs, each in a fresh interpreter ------------------------------------------------------


@pytest.mark.parametrize("mode", ["filters-first", "logging-first"])
def test_no_canary_reaches_the_logs_with_every_logger_at_debug(mode: str) -> None:
    # Given the filters installed by importing fault_responder.core.observability, before or after logging is
    # configured with the root and every library logger at DEBUG
    # When the canary secrets are fetched and sent over HTTP
    run = run_probe(mode)

    # Then the run did what it claims, libraries logged at DEBUG, and no canary is in any of it
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert f"probe: ok ({mode})" in run.stdout
    output = run.stdout + run.stderr
    assert "botocore.hooks DEBUG" in output and "urllib3.connectionpool DEBUG" in output
    assert f'"POST {logsafety.REDACTED_PATH} HTTP/1.1" 200' in output
    # (and the buttons were pressed: a refused forgery and an approval, which put and took the task token)
    assert "request refused" in output and "press handled" in output
    # (and the PagerDuty webhooks arrived: one queued, one forged and refused)
    assert "webhook queued" in output and "webhook refused" in output
    assert leaked(output) == {}


def test_without_the_filters_the_same_run_leaks_every_canary() -> None:
    # Given the same run with fault_responder never imported
    # When the canary secrets are fetched and sent over HTTP
    run = run_probe("unfiltered")

    # Then every canary shows up in the logs: botocore logs the session token and the secrets' response
    # bodies, urllib3 the webhook's path in its request line, and the X-Ray SDK the URL in its segment
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    output = run.stdout + run.stderr
    assert set(leaked(output)) == set(probe.CANARIES)
    assert f'"POST {probe.WEBHOOK_PATH} HTTP/1.1" 200' in output
    # (the emitter logs the protocol header, then the segment's JSON on the next line)
    sent = output.split("aws_xray_sdk.core.emitters.udp_emitter DEBUG sending: ", 1)[1].splitlines()[1]
    segment = json.loads(sent.rsplit(" to 127.0.0.1:", 1)[0])
    urls = [sub.get("http", {}).get("request", {}).get("url", "") for sub in segment["subsegments"]]
    assert any(url.endswith(probe.WEBHOOK_PATH) for url in urls)


# --- urllib3 redaction, in process -----------------------------------------------------------------


@contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Everything logged anywhere while the block runs: the root and every logger at DEBUG, propagating to
    one handler on the root (other tests may have quietened or detached some loggers), tracebacks included."""
    root = logging.getLogger()
    loggers = [root, *(item for item in logging.Logger.manager.loggerDict.values() if isinstance(item, logging.Logger))]
    saved = [(logger, logger.level, logger.propagate, logger.disabled) for logger in loggers]
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
        logger.propagate = True
        logger.disabled = False
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        for logger, level, propagate, disabled in saved:
            logger.setLevel(level)
            logger.propagate = propagate
            logger.disabled = disabled


class _DropsFirstConnection(BaseHTTPRequestHandler):
    """Closes the first connection without answering (urllib3 retries it), then answers 200."""

    server: Any

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self.server.dropped:
            self.server.dropped = True
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the access log names the path."""


@pytest.fixture
def flaky_server() -> Iterator[str]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _DropsFirstConnection)
    server.dropped = False
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_retried_request_is_logged_as_a_warning_without_its_path(flaky_server: str) -> None:
    # Given a client that retries broken connections, and a server that drops the first one
    pool = urllib3.PoolManager(retries=Retry(total=1, allowed_methods=None))

    # When a webhook is posted
    with captured_logs() as logs:
        response = pool.request("POST", flaky_server + probe.WEBHOOK_PATH, json={"text": "hi"}, timeout=5.0)

    # Then urllib3's WARNING about the retry is there, and the webhook's path is in no record
    assert response.status == 200
    output = logs.getvalue()
    [warning] = [line for line in output.splitlines() if line.startswith("urllib3.connectionpool WARNING Retrying")]
    assert warning.endswith(f": {logsafety.REDACTED_PATH}")
    assert leaked(output) == {}


@pytest.mark.parametrize(
    ("message", "redacted"),
    [
        (
            'https://hooks.slack.com:443 "POST /services/T0/B0/secret HTTP/1.1" 200 2',
            'https://hooks.slack.com:443 "POST /<redacted> HTTP/1.1" 200 2',
        ),
        ("Retry: /services/T0/B0/secret", "Retry: /<redacted>"),
        (
            "Incremented Retry for (url='/services/T0/B0/secret'): Retry(total=0)",
            "Incremented Retry for (url='/<redacted>'): Retry(total=0)",
        ),
        (
            "Failed to parse headers (url=https://hooks.slack.com/services/T0/B0/secret): x",
            "Failed to parse headers (url=https://hooks.slack.com/<redacted> x",
        ),
        (
            "Redirecting http://a.example/x?token=secret -> https://b.example?k=secret",
            "Redirecting http://a.example/<redacted> -> https://b.example/<redacted>",
        ),
        (
            "Starting new HTTPS connection (1): hooks.slack.com:443",
            "Starting new HTTPS connection (1): hooks.slack.com:443",
        ),
    ],
)
def test_urllib3_messages_keep_their_origin_and_lose_their_path(message: str, redacted: str) -> None:
    assert logsafety.redact_url_paths(message) == redacted


def test_a_traceback_on_a_urllib3_record_is_redacted_too() -> None:
    # Given an exception whose text quotes the webhook URL, logged by urllib3 with its traceback
    try:
        raise ValueError(f"cannot parse {probe.WEBHOOK_URL}")
    except ValueError:
        with captured_logs() as logs:
            logging.getLogger("urllib3.connection").warning(
                "Failed to parse headers (url=%s)", probe.WEBHOOK_URL, exc_info=True
            )

    # Then the traceback is in the log line, without the path
    output = logs.getvalue()
    assert "ValueError: cannot parse https://hooks.slack.com/<redacted>" in output
    assert leaked(output) == {}


# --- Installation ----------------------------------------------------------------------------------


def test_importing_the_package_afresh_keeps_one_filter_per_logger() -> None:
    # Given the filters installed once (this module imported logsafety)
    # When the module is imported again, as each sandbox (and each Lambda environment) does
    importlib.reload(logsafety)

    # Then each logger still has exactly one of its filters
    for name in (*logsafety.DROP_DEBUG_LOGGERS, *logsafety.REDACT_URL_LOGGERS):
        marked = [f for f in logging.getLogger(name).filters if getattr(f, "_fault_responder_logsafety", False)]
        assert len(marked) == 1, name


def test_a_traced_function_never_records_request_urls() -> None:
    # Given tracing on (in a Lambda environment), When the package creates its Tracer (in a fresh interpreter:
    # patching is global), Then the X-Ray SDK patched the AWS SDK and not httplib (nor requests), whose patch
    # would put every URL, a webhook's secret path included, into the trace
    probe = (
        "import fault_responder.core.observability\n"
        "from aws_xray_sdk.core import patcher\n"
        "print(sorted(patcher._PATCHED_MODULES))\n"
    )
    environment = {
        **os.environ,
        "LAMBDA_TASK_ROOT": "/var/task",
        "POWERTOOLS_TRACE_DISABLED": "false",
        "AWS_XRAY_SDK_ENABLED": "true",
        "PYTHONPATH": str(ROOT / "layers" / "common"),
    }
    environment.pop("AWS_SAM_LOCAL", None)
    done = subprocess.run(
        [sys.executable, "-c", probe], env=environment, capture_output=True, text=True, timeout=60, check=True
    )
    patched = done.stdout.strip()
    assert "botocore" in patched
    assert "httplib" not in patched and "requests" not in patched
