"""`python -m sandbox standins` (`make standins`): the Slack and PagerDuty stand-ins on a fixed port.

For `sam local invoke` with `--env-vars env.json`, whose SLACK_API_URL and PAGERDUTY_EVENTS_URL point at
`http://host.docker.internal:<port>/...`: the function in its container then posts here instead of to Slack and
PagerDuty. Each request is printed as it arrives, until Ctrl-C. The stand-ins answer as the real services do
(see sandbox/standins.py) and accept one Slack bot token and one PagerDuty routing key, printed at start: the
secrets the invoked function reads must hold those.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping
from typing import Any, TextIO

from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, StandIns

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
CONTAINER_HOST = "host.docker.internal"
"""The name a `sam local invoke` container reaches this machine by (see events/README.md for Linux)."""
_POLL_SECONDS = 0.2


class StopRequest:
    """Set by a signal handler, read by the serving loop. A plain attribute on purpose: a handler runs in the main
    thread between any two bytecodes, so one that took a lock (`threading.Event.set`) while the loop held the same
    lock (inside `Event.wait`) would wait on itself forever. A terminal's Ctrl-C, or `kill` of a `make standins`
    whose make forwards the signal to its child, can deliver the signal twice in a row and hit exactly that."""

    def __init__(self) -> None:
        self.requested = False

    def handle(self, signum: int, frame: object) -> None:
        self.requested = True


def serve(host: str, port: int, out: TextIO, stop: StopRequest) -> None:
    """Serve until `stop` is requested, printing each request as it arrives."""
    stand_ins = StandIns(faults=StandIns.faults_from_env(os.environ)).start(host, port)
    _banner(host, port, out)
    seen = 0
    try:
        while not stop.requested:
            time.sleep(_POLL_SECONDS)  # a signal's handler runs here; the next check sees its flag
            seen = _print_new(stand_ins.requests, seen, out)
    finally:
        stand_ins.stop()
    seen = _print_new(stand_ins.requests, seen, out)
    print(f"stopped after {seen} request(s)", file=out, flush=True)


def serve_until_interrupted(host: str, port: int, out: TextIO) -> int:
    """The command: serve until Ctrl-C or SIGTERM. Either stops it cleanly (exit status 0), even when this
    process was started with SIGINT ignored, as a shell does for a background job."""
    stop = StopRequest()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, stop.handle)
    serve(host, port, out, stop)
    return 0


def _print_new(received: list[dict[str, Any]], seen: int, out: TextIO) -> int:
    for request in received[seen:]:
        print(describe(request), file=out, flush=True)
    return len(received)


def _banner(host: str, port: int, out: TextIO) -> None:
    base = f"http://{CONTAINER_HOST}:{port}"
    lines = [
        f"Slack and PagerDuty stand-ins listening on {host}:{port} (Ctrl-C stops them)",
        f"  SLACK_API_URL={base}/api",
        f"  PAGERDUTY_EVENTS_URL={base}/v2/enqueue   (change events: {base}/v2/change/enqueue)",
        f'  accepted: Slack bot token "{DEFAULT_SLACK_TOKEN}", PagerDuty routing key "{SANDBOX_ROUTING_KEY}"',
    ]
    print("\n".join(lines), file=out, flush=True)


def describe(request: Mapping[str, Any]) -> str:
    """One line per request: service, method, path, status, and what it did or why it failed."""
    head = f"{request['service']:<9} {request['method']} {request['path']} -> {request['status']}"
    if request.get("fault"):
        return f"{head}  (injected fault)"
    raw_body = request.get("body")
    body: Mapping[str, Any] = raw_body if isinstance(raw_body, dict) else {}
    response = request.get("response")
    problem = _problem(response)
    if problem:
        return f"{head}  {problem}"
    if request["service"] == "slack":
        text = str(body.get("text") or "").replace("\n", " ")
        where = body.get("channel") or "webhook"
        thread = f" thread {body['thread_ts']}" if body.get("thread_ts") else ""
        return f"{head}  {request.get('effect') or 'ok'} {where}{thread}: {text[:100]}"
    raw_payload = body.get("payload")
    payload: Mapping[str, Any] = raw_payload if isinstance(raw_payload, dict) else {}
    action = body.get("event_action", "change")
    return f"{head}  {request.get('effect') or action} {body.get('dedup_key') or ''}: {payload.get('summary', '')}"


def _problem(response: Any) -> str | None:
    if isinstance(response, dict):
        if response.get("ok") is False:
            return f"error: {response.get('error')}"
        if response.get("errors"):
            return f"error: {'; '.join(map(str, response['errors']))}"
    if isinstance(response, str) and response not in ("ok",):
        return f"error: {response}"
    return None
