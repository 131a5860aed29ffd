"""`make standins` (`python -m sandbox standins`), as events/README.md has users run it for `sam local invoke`:
the stand-ins on a fixed port, each request printed as it arrives, until Ctrl-C."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY
from tests.conftest import checkout_lock
from tests.sandbox.conftest import REPO_ROOT

BANNER = "Slack and PagerDuty stand-ins listening on"


class Server:
    """A stand-ins process whose output lines are read as they come."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    break
                continue
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r}; output so far: {self.seen}")

    def signal_group(self, signum: int) -> None:
        os.killpg(self.process.pid, signum)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.signal_group(signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.signal_group(signal.SIGKILL)
            self.process.wait(timeout=30)
            raise AssertionError(f"the stand-ins did not stop on SIGTERM; output: {self.seen}") from None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return dict(json.loads(response.read()))
    except urllib.error.HTTPError as error:
        return dict(json.loads(error.read()))


@pytest.fixture
def make_standins() -> Iterator[tuple[Server, int]]:
    # A make target of the checkout: it takes its turn with the others (tests/conftest.py: checkout_lock).
    with checkout_lock():
        port = free_port()
        server = Server(["make", "standins", f"STANDINS_PORT={port}"])
        try:
            yield server, port
        finally:
            server.stop()


def test_make_standins_answers_slack_and_pagerduty_and_prints_each_request(make_standins: tuple[Server, int]) -> None:
    # Given `make standins` on a free port (events/README.md runs it on 8765, which env.json names)
    server, port = make_standins
    banner = server.wait_for(BANNER)
    assert f"127.0.0.1:{port}" in banner
    server.wait_for(f'accepted: Slack bot token "{DEFAULT_SLACK_TOKEN}"')
    base = f"http://127.0.0.1:{port}"

    # When a function posts to Slack with the accepted token, triggers PagerDuty, and posts with a wrong token
    slack = post(
        f"{base}/api/chat.postMessage", {"channel": "#gpu-alerts", "text": "XID 79 on i-0abc"}, "xoxb-sandbox-token"
    )
    pagerduty = post(
        f"{base}/v2/enqueue",
        {
            "routing_key": SANDBOX_ROUTING_KEY,
            "event_action": "trigger",
            "dedup_key": "gpu-inference/f957/ACCELERATED_COMPUTE",
            "payload": {"summary": "XID 79: GPU has fallen off the bus", "source": "ecs", "severity": "critical"},
        },
    )
    refused = post(f"{base}/api/chat.postMessage", {"channel": "#gpu-alerts", "text": "x"}, "xoxb-real-token")

    # Then they are answered as Slack and PagerDuty would, and each is printed as it arrives
    assert slack["ok"] is True
    assert pagerduty["status"] == "success"
    assert refused == {"ok": False, "error": "invalid_auth"}
    assert "ok #gpu-alerts: XID 79" in server.wait_for("POST /api/chat.postMessage -> 200")
    assert "opened gpu-inference/f957/ACCELERATED_COMPUTE" in server.wait_for("POST /v2/enqueue -> 202")
    assert "error: invalid_auth" in server.wait_for("POST /api/chat.postMessage -> 200")


@pytest.mark.parametrize("started_in_background", [False, True], ids=["foreground", "sigint-ignored"])
def test_ctrl_c_stops_the_stand_ins_cleanly(started_in_background: bool) -> None:
    # Given the stand-ins started as a command (and, like a shell's background job, possibly with SIGINT ignored)
    command = [sys.executable, "-m", "sandbox", "standins", "--port", str(free_port())]
    if started_in_background:
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    server = Server(command)
    try:
        server.wait_for(BANNER)

        # When Ctrl-C reaches them
        server.signal_group(signal.SIGINT)

        # Then they stop, say so, and exit 0
        assert server.process.wait(timeout=30) == 0
        server.wait_for("stopped after 0 request(s)")
    finally:
        server.stop()


# Python runs a signal's handler in the main thread between any two lines; this runs the stand-ins' own handler
# there at every line of the main thread once it is installed: a second Ctrl-C, or make forwarding the SIGTERM the
# whole process group had just received, may land anywhere, also inside the serving loop's own wait.
_SIGNAL_AT_EVERY_LINE = """
import signal, sys
from sandbox import serve_standins

def at_every_line(frame, event, arg):
    handler = signal.getsignal(signal.SIGTERM)
    if event == "line" and callable(handler):
        handler(signal.SIGTERM, frame)
    return at_every_line

sys.settrace(at_every_line)
sys.exit(serve_standins.serve_until_interrupted("127.0.0.1", 0, sys.stdout))
"""


def test_a_stop_signal_landing_anywhere_in_the_serving_loop_stops_the_stand_ins() -> None:
    # Given the stand-ins whose stop handler runs between every two lines of their main thread
    command = [sys.executable, "-c", _SIGNAL_AT_EVERY_LINE]

    # When they run
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=30, check=False)

    # Then they stop at once, cleanly, instead of waiting on a lock their own loop holds
    assert done.returncode == 0, done.stderr
    assert BANNER in done.stdout
    assert "stopped after 0 request(s)" in done.stdout
