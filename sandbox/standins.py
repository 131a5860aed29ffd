"""Local HTTP stand-ins for the Slack Web API, Slack incoming webhooks and PagerDuty Events API v2.

One loopback server answers all three the way the real services do for the parts we use: request
validation and error codes, the shape of successful answers, a little state (Slack messages, threads
and edits; PagerDuty alerts by routing key + dedup key) and injected faults. Every request is
recorded in arrival order with its secrets redacted, so tests and the sandbox report can show what
crossed the wire and what on-call would see.

A Teams Workflows webhook is answered at TEAMS_PATH by sandbox/standin_teams.py (its envelope, its Adaptive Cards
against the schema, its size); `teams_webhook_url` is its URL and `teams_messages` what it accepted.

PagerDuty Change Events (`/v2/change/enqueue`, informational: they never open an alert) are validated and
recorded apart from the alerts. The signed webhook's consumer (`/webhook/<endpoint>`) is sandbox/standin_webhook.py.

The other direction, what these services send to the stack: `signed_click` (a button press as Slack signs it, at any
timestamp) and `StandIns.pagerduty_webhook` (a v3 webhook about the newest alert, or the one named by its incident
number or dedup key, as PagerDuty signs it, after changing the alert as a person would have in PagerDuty, at any
`occurred_at`). The sandbox hands both to the function URL in process.

Slack messages keep the metadata they were posted with; conversations.history, conversations.replies and
conversations.list answer from the workspace's state (with `include_all_metadata`), so a client can look for a
message whose post timed out. Faults are injected per service, as a schedule of its next requests: an HTTP status,
Slack's `ok_false`, or a delay (`{"delay": 11}`: the request takes effect, the answer comes late, as when a client's
read times out) answers one request; `{"fail": 500, "times": 8}` answers the next eight so; `{"pass": 2}` lets the
next two through, answered as usual; once the schedule is used up, every request is answered as usual (the service
has recovered). A service can also answer every request late (`{"latency": 11, "faults": [...]}`).

Not emulated: form-encoded chat.* calls, Slack methods other than those above, real rate limiting (inject
429s through `faults`) and payload-size limits.
Lengths are counted in code points; Slack's own counting of some emoji may differ slightly.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import hmac
import ipaddress
import json
import marshal
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode, urlsplit

from sandbox.errors import SandboxError
from sandbox.standin_teams import TEAMS_PATH, TEAMS_QUERY, TeamsChannel
from sandbox.standin_webhook import SANDBOX_WEBHOOK_ENDPOINT, WEBHOOK_RECEIVER_PATH, WebhookConsumer

_T = TypeVar("_T")


def _copied(value: _T) -> _T:
    """A deep copy of what the stand-ins keep (JSON's types, as requests carried them): through `marshal`, several
    times quicker than `copy.deepcopy` for such data (a test reads every message again after each of its runs);
    anything marshal cannot write is copied by `copy.deepcopy`."""
    try:
        # (marshal reads back the bytes it wrote an instant ago, nothing from outside)
        copied: _T = marshal.loads(marshal.dumps(value))  # type: ignore[arg-type]  # nosec B302
        return copied
    except ValueError:
        return copy.deepcopy(value)


Selector = Callable[[Mapping[str, Any]], bool]
"""Which of the kept messages or alerts to return (it reads the stand-ins' own record: it must not change it)."""


def _selected(kept: list[dict[str, Any]], where: Selector | None) -> list[dict[str, Any]]:
    return kept if where is None else [item for item in kept if where(item)]


Fault = int | str | dict[str, float]
"""An HTTP status to answer with, OK_FALSE (Slack's HTTP 200 `ok: false`), or {"delay": seconds}: the request
takes effect and is answered that much later (TIMEOUT is a delay longer than any client waits)."""
Phase = tuple[Fault | None, int]
"""Part of a service's schedule: how its next requests are answered (a fault, or None: as usual), and how many."""
MAX_TIMES = 100_000
"""The most requests one entry of a schedule answers (`times`, `pass`)."""

OK_FALSE = "ok_false"
TIMEOUT = "timeout"
TIMEOUT_SECONDS = 30.0
SLACK_SCOPES = frozenset(
    {"chat:write", "channels:history", "groups:history", "channels:read", "groups:read", "usergroups:read"}
)
ONCALL_GROUP = "S0ONCALL01"
"""The workspace's one user group (usergroups.users.list answers it), for permissions given as a group."""
ONCALL_GROUP_MEMBERS = ("U0ONCALL01", "U0ONCALL02")
SERVICES = ("slack", "pagerduty")
FAULT_SERVICES = (*SERVICES, "teams")
"""The services faults can be injected into (scenario files take SERVICES' only)."""
REDACTED = "***"
DEFAULT_SLACK_TOKEN = "xoxb-sandbox-token"  # nosec B105  # the stand-in's own token, accepted only on loopback
SANDBOX_ROUTING_KEY = "sandboxpagerdutyroutingkey000000"
WEBHOOK_PATH = "/services/T0SANDBOX/B0SANDBOX/sandboxwebhooksecret"
WEBHOOK_CHANNEL = "sandbox-webhook"
"""The channel the sandbox webhook posts to (a real webhook's channel is fixed by the app config)."""

SLACK_SIGNING_SECRET = "sandbox-slack-signing-secret-0123456789"  # nosec B105  # the stand-in's own, loopback only
PAGERDUTY_WEBHOOK_SECRET = "sandbox-pagerduty-webhook-secret-0123456789"  # nosec B105  # the stand-in's own
"""What the PagerDuty stand-in signs its v3 webhooks with (the sandbox puts it in the PagerDuty secret's
`webhook_secrets`)."""
WEBHOOK_KINDS = ("acknowledged", "unacknowledged", "resolved", "reassigned")
"""The v3 webhook events the PagerDuty stand-in sends (`incident.<kind>`)."""
RESPONSE_URL_PATH = "/actions/"
"""Where the stand-in's button presses ask to be answered (a press's response_url): ephemeral replies land here."""

# Slack timestamps are the posting time, unique per channel and increasing (at least 100 µs apart here).
_TS_STEP_MICROS = 100
_CHANNEL_ID = re.compile(r"[CGD][A-Z0-9]{8,}")
_PD_SEVERITIES = ("critical", "error", "warning", "info")
_PD_ACTIONS = ("trigger", "acknowledge", "resolve")
_WEBHOOK_STATUS = {"acknowledged": "acknowledged", "unacknowledged": "triggered", "resolved": "resolved"}
"""The status an incident has once a webhook of this kind happened (a reassignment leaves it as it was)."""


@dataclass
class _Reply:
    status: int
    body: Any
    """A dict or list is sent as JSON, a str as plain text."""
    headers: dict[str, str] = field(default_factory=dict)
    effect: str | None = None
    delay: float = 0.0
    """Seconds to wait before answering (after the request took effect)."""

    def encode(self) -> tuple[bytes, str]:
        if isinstance(self.body, str):
            return self.body.encode(), "text/plain; charset=utf-8"
        return json.dumps(self.body).encode(), "application/json; charset=utf-8"


def _reachable(host: str) -> str:
    """Where a client reaches a server listening on `host`: that address, or loopback for every address (0.0.0.0)."""
    with contextlib.suppress(ValueError):
        if not host or ipaddress.ip_address(host).is_unspecified:
            return "127.0.0.1"
    return host


class StandIns:
    """Slack and PagerDuty on one loopback port; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        slack_token: str = DEFAULT_SLACK_TOKEN,
        pagerduty_routing_keys: set[str] | None = None,
        faults: Mapping[str, Any] | None = None,
        known_channels: set[str] | None = None,
        slack_scopes: frozenset[str] = SLACK_SCOPES,
    ) -> None:
        checked = _checked_faults(faults or {})
        self._faults = {service: _Schedule(checked.get(service, ServiceFaults()).phases) for service in FAULT_SERVICES}
        self._latency = {service: checked.get(service, ServiceFaults()).latency for service in FAULT_SERVICES}
        self._slack = _SlackWorkspace(slack_token, known_channels, slack_scopes)
        self._pagerduty = _PagerDutyEvents(
            {SANDBOX_ROUTING_KEY} if pagerduty_routing_keys is None else pagerduty_routing_keys
        )
        self._lock = threading.Lock()
        self.webhook = WebhookConsumer()
        """The signed webhook's consumer (sandbox/standin_webhook.py): its secrets, and what it accepted."""
        self._requests: list[dict[str, Any]] = []
        self._ephemeral: list[dict[str, Any]] = []
        self._teams = TeamsChannel()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._url_host = "127.0.0.1"

    @staticmethod
    def faults_from_env(environ: Mapping[str, str]) -> dict[str, Any] | None:
        """SANDBOX_FAULTS, e.g. `{"slack": [429, 500, {"delay": 11}], "pagerduty": [{"pass": 1}, {"fail": 500,
        "times": 8}]}` or `{"pagerduty": {"latency": 3}}`; None when unset."""
        raw = environ.get("SANDBOX_FAULTS", "").strip()
        if not raw:
            return None
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise SandboxError(
                f"SANDBOX_FAULTS is not valid JSON ({exc.msg} at character {exc.pos}); "
                'expected e.g. {"slack": [429, 500], "pagerduty": [500]}'
            ) from None
        _checked_faults(parsed)
        return dict(parsed)

    def start(self, host: str = "127.0.0.1", port: int = 0) -> StandIns:
        """Serve on `host`:`port`; by default a free loopback port, which `base_url` names."""
        if self._server is not None:
            raise RuntimeError("the stand-ins are already running")
        server = _Server((host, port), _Handler)
        server.stand_ins = self
        self._url_host = _reachable(host)
        # A short poll interval keeps stop() fast; tests start and stop many of these.
        thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name="sandbox-standins", daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server, self._thread = None, None

    def __enter__(self) -> StandIns:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the stand-ins are not running: call start() first")
        return f"http://{self._url_host}:{self._server.server_port}"

    @property
    def slack_api_url(self) -> str:
        return f"{self.base_url}/api"

    @property
    def slack_webhook_url(self) -> str:
        return f"{self.base_url}{WEBHOOK_PATH}"

    def webhook_url(self, endpoint: str = SANDBOX_WEBHOOK_ENDPOINT) -> str:
        return f"{self.base_url}{WEBHOOK_RECEIVER_PATH}{endpoint}"

    @property
    def pagerduty_url(self) -> str:
        return f"{self.base_url}/v2/enqueue"

    @property
    def pagerduty_change_url(self) -> str:
        return f"{self.base_url}/v2/change/enqueue"

    @property
    def teams_webhook_url(self) -> str:
        """The Teams Workflows webhook's URL, its signature (`sig`) included: the secret."""
        return f"{self.base_url}{TEAMS_PATH}?{TEAMS_QUERY}"

    def teams_messages(self) -> list[dict[str, Any]]:
        """The Teams messages accepted so far, in order: {"at", "size", "cards"}."""
        return self._teams.messages()

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every request so far, in arrival order, faults included, secrets redacted (a copy)."""
        return self.requests_since(0)

    def requests_since(self, start: int, where: Selector | None = None) -> list[dict[str, Any]]:
        """The requests from the `start`th on (0: every one), in arrival order, as `requests` lists them (a copy):
        a test that reads after each step copies what that step sent, not everything before it again; with
        `where`, only those it is true of."""
        with self._lock:
            return _copied(_selected(self._requests[start:], where))

    def request_count(self) -> int:
        """How many requests arrived so far: `requests_since(request_count())` later lists what came after."""
        with self._lock:
            return len(self._requests)

    def rotate_slack_token(self, token: str) -> None:
        """From now on the workspace accepts only `token` (a rotated bot token)."""
        with self._lock:
            self._slack.rotate(token)

    def rotate_routing_keys(self, keys: set[str]) -> None:
        """From now on PagerDuty accepts only these integration keys (one was rotated)."""
        with self._lock:
            self._pagerduty.keys = frozenset(keys)

    def slack_channels(self, where: Selector | None = None) -> dict[str, list[dict[str, Any]]]:
        """Channel name -> its messages (ts, thread_ts, text, blocks, edits), replies included; with `where`, only
        the messages it is true of (a test that looks at a few of thousands copies only those)."""
        with self._lock:
            return self._slack.channels(where)

    def pagerduty_alerts(self, where: Selector | None = None) -> list[dict[str, Any]]:
        """Every alert opened so far, in order, with its status and event log; with `where`, those it is true of."""
        with self._lock:
            return _copied(_selected(self._pagerduty.alerts, where))

    def pagerduty_changes(self) -> list[dict[str, Any]]:
        """Every change event accepted so far, in order (summary, source, custom_details, links)."""
        with self._lock:
            return _copied(self._pagerduty.changes)

    def ephemeral_replies(self) -> list[dict[str, Any]]:
        """Every reply sent to a press's response_url, in order: {"press": id, "text", "response_type"}."""
        with self._lock:
            return _copied(self._ephemeral)

    def response_url(self, press: str) -> str:
        return f"{self.base_url}{RESPONSE_URL_PATH}{press}"

    def buttons(self, action_id: str) -> list[tuple[str, str, str]]:
        """(channel id, message ts, value) of every root message (not a thread reply) whose actions blocks carry a
        button with `action_id`, newest first: what a person could press."""
        with self._lock:
            return self._slack.buttons(action_id)

    def pagerduty_webhook(
        self,
        kind: str,
        *,
        by: str,
        agent: str = "user",
        assignee: str | None = None,
        secret: str | None = PAGERDUTY_WEBHOOK_SECRET,
        occurred_at: datetime | None = None,
        incident: int | None = None,
        dedup_key: str | None = None,
    ) -> tuple[dict[str, str], bytes, dict[str, Any]] | None:
        """A person (agent `user`) or a service (`service`) acted in PagerDuty on an alert: the newest, or PagerDuty's
        incident number `incident` (the alerts in the order they opened, from 1), or the newest with `dedup_key`.
        The alert changes as it would (acknowledged, back to triggered, resolved, reassigned; a resolved alert stays
        resolved), and the v3 webhook PagerDuty then sends is returned as (headers, body, the event), its
        `occurred_at` as given (default now), signed with `secret` (`v1=` HMAC-SHA256 of the body; None: unsigned).
        None when there is no such alert."""
        if kind not in WEBHOOK_KINDS:
            raise ValueError(f"a webhook is one of {', '.join(WEBHOOK_KINDS)}")
        if agent not in ("user", "service"):
            raise ValueError("a webhook's agent is user or service")
        if incident is not None and dedup_key is not None:
            raise ValueError("a webhook names its alert by incident number or by dedup key, not both")
        with self._lock:
            alert = self._pagerduty.find(incident, dedup_key)
            if alert is None:
                return None
            event = self._pagerduty.webhook_event(alert, kind, by, agent, assignee, occurred_at or datetime.now(UTC))
        body = json.dumps({"event": event}).encode()
        headers = {
            "content-type": "application/json; charset=utf-8",
            "user-agent": "PagerDuty-Webhook/V3.0",
            "x-webhook-id": str(event["id"]),
            "x-webhook-subscription": "PSANDBOXWH",
        }
        if secret is not None:
            digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
            headers["x-pagerduty-signature"] = f"v1={digest}"
        return headers, body, event

    def _answer(
        self,
        method: str,
        target: str,
        authorization: str | None,
        content_type: str,
        raw: bytes,
        headers: Mapping[str, str] | None = None,
    ) -> _Reply:
        """Answer one request and record it; the HTTP handler calls this for every request."""
        split = urlsplit(target)
        path = split.path
        service = "pagerduty" if path.startswith("/v2/") else "teams" if path == TEAMS_PATH else "slack"
        if path.startswith(WEBHOOK_RECEIVER_PATH):
            service = "webhook"
        # One lock around answer and record: the order of `requests` is the order of effects.
        with self._lock:
            fault = self._faults[service].next() if service in self._faults else None
            delay = self._latency.get(service, 0.0)
            if isinstance(fault, dict) or fault == TIMEOUT:
                delay = TIMEOUT_SECONDS if fault == TIMEOUT else float(fault["delay"])  # type: ignore[index]
                fault = None
            if isinstance(fault, int | str):
                reply = _fault_reply(service, fault)
            elif method not in ("POST", "GET"):
                reply = _Reply(HTTPStatus.METHOD_NOT_ALLOWED, "method_not_allowed")
            elif service == "webhook":
                reply = _Reply(*self.webhook.receive(path, headers or {}, raw, _parse_json(raw)))
            elif service == "teams":
                answer = self._teams.post(split.query, raw)
                reply = _Reply(answer.status, answer.body, answer.headers)
            else:
                reply = self._route(path, authorization, content_type, raw or split.query.encode())
            reply.delay = delay
            entry = _record(service, method, path, raw or split.query.encode(), reply, fault=fault is not None)
            if delay:
                entry["delay_seconds"] = delay
            self._requests.append(entry)
        return reply

    def _route(self, path: str, authorization: str | None, content_type: str, raw: bytes) -> _Reply:
        if path in ("/api/chat.postMessage", "/api/chat.update"):
            return self._slack.call(path.removeprefix("/api/"), authorization, content_type, raw)
        if path.removeprefix("/api/") in _READ_METHODS:
            return self._slack.read(path.removeprefix("/api/"), authorization, content_type, raw)
        if path.startswith("/api/"):
            return _slack_error("unknown_method")
        if path == WEBHOOK_PATH:
            return self._slack.webhook(raw)
        if path.startswith(RESPONSE_URL_PATH):
            return self._response_url(path.removeprefix(RESPONSE_URL_PATH), raw)
        if path.startswith("/services/"):
            return _Reply(HTTPStatus.NOT_FOUND, "no_service")
        if path == "/v2/enqueue":
            return self._pagerduty.enqueue(raw)
        if path == "/v2/change/enqueue":
            return self._pagerduty.change(raw)
        return _Reply(HTTPStatus.NOT_FOUND, "not_found")

    def _response_url(self, press: str, raw: bytes) -> _Reply:
        # A response_url takes a message payload as JSON (Slack answers 404 "no_text" and the like otherwise).
        body = _parse_json(raw)
        if not isinstance(body, dict) or not isinstance(body.get("text"), str) or not body["text"]:
            return _Reply(HTTPStatus.BAD_REQUEST, "no_text")
        if body.get("response_type", "ephemeral") not in ("ephemeral", "in_channel"):
            return _Reply(HTTPStatus.BAD_REQUEST, "invalid_response_type")
        self._ephemeral.append(
            {"press": press, "text": body["text"], "response_type": body.get("response_type", "ephemeral")}
        )
        return _Reply(HTTPStatus.OK, "ok")


def signed_click(
    *,
    action_id: str,
    value: str,
    user_id: str,
    response_url: str,
    timestamp: int,
    secret: str = SLACK_SIGNING_SECRET,
    user_name: str | None = None,
    channel_id: str = "C0SANDBOX1",
    message_ts: str = "1700000000.000100",
) -> tuple[dict[str, str], bytes]:
    """A button press as Slack sends it: a form-encoded body whose `payload` field is the block_actions JSON,
    signed (v0: hex HMAC-SHA256 of `v0:<timestamp>:<body>` with `secret`). Pass another secret to sign wrongly."""
    payload = {
        "type": "block_actions",
        "user": {"id": user_id, "username": user_name or user_id.lower(), "team_id": "T0SANDBOX"},
        "api_app_id": "A0SANDBOX",
        "container": {"type": "message", "message_ts": message_ts, "channel_id": channel_id},
        "channel": {"id": channel_id, "name": "sandbox"},
        "response_url": response_url,
        "actions": [
            {
                "type": "button",
                "action_id": action_id,
                "block_id": "actions",
                "value": value,
                "action_ts": f"{timestamp}.000200",
            }
        ],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    digest = hmac.new(secret.encode(), b"v0:%d:" % timestamp + body, hashlib.sha256).hexdigest()
    headers = {
        "content-type": "application/x-www-form-urlencoded",
        "x-slack-request-timestamp": str(timestamp),
        "x-slack-signature": f"v0={digest}",
    }
    return headers, body


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Stopping does not wait for open connections: the functions' HTTP clients keep theirs alive (HTTP/1.1,
    # pooled), and a handler thread waits on such a connection for the next request until the client goes.
    block_on_close = False
    stand_ins: StandIns


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    # Keep-alive, like the real APIs: requests.Session reuses the connection between retries.
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes; with Nagle on, each answer waits for a delayed ACK (~40 ms).
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        raw = self.rfile.read(length) if length > 0 else b""
        reply = self.server.stand_ins._answer(
            self.command,
            self.path,
            self.headers.get("Authorization"),
            self.headers.get("Content-Type") or "",
            raw,
            dict(self.headers.items()),
        )
        payload, content_type = reply.encode()
        if reply.delay:
            time.sleep(reply.delay)
        self.send_response(reply.status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.end_headers()
        try:
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client stopped waiting (its read timed out); the request took effect all the same

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the recorded requests are the log."""


@dataclass(frozen=True)
class ServiceFaults:
    """One service's checked faults: its schedule, and the delay of every answer."""

    phases: tuple[Phase, ...] = ()
    latency: float = 0.0


class _Schedule:
    """How a service answers its next requests, phase by phase; once every phase is used up, as usual (recovered)."""

    def __init__(self, phases: tuple[Phase, ...]) -> None:
        self._phases = deque(phases)
        self._used = 0
        """Requests answered by the current (first) phase so far."""

    def next(self) -> Fault | None:
        """The fault to answer the next request with, or None (as usual). Called under the stand-ins' lock."""
        if not self._phases:
            return None
        fault, times = self._phases[0]
        self._used += 1
        if self._used == times:
            self._phases.popleft()
            self._used = 0
        return fault


def _checked_faults(faults: object) -> dict[str, ServiceFaults]:
    if not isinstance(faults, Mapping):
        raise SandboxError('faults must be an object like {"slack": [429, 500], "pagerduty": [500]}')
    checked: dict[str, ServiceFaults] = {}
    for service, value in faults.items():
        if service not in FAULT_SERVICES:
            raise SandboxError(f"faults: unknown service {service!r}; expected one of {', '.join(FAULT_SERVICES)}")
        try:
            checked[service] = service_faults(service, value)
        except ValueError as exc:
            raise SandboxError(f"faults: {service}: {exc}") from None
    return checked


def service_faults(service: str, value: object) -> ServiceFaults:
    """One service's faults: a schedule (a list), or {"latency": seconds, "faults": schedule}. Raises ValueError
    saying what is wrong and what to write (scenario files and SANDBOX_FAULTS take the same)."""
    entries, latency = value, 0.0
    if isinstance(value, Mapping):
        unknown = sorted(str(key) for key in set(value) - {"faults", "latency"})
        if unknown:
            raise ValueError(f"unknown keys {unknown}; an object has faults (a list) and latency (seconds)")
        entries, latency = value.get("faults", []), _seconds(value.get("latency", 0), "latency")
    if not isinstance(entries, list):
        raise ValueError(
            'must be a list, e.g. [429, 500] or [{"pass": 1}, {"fail": 500, "times": 8}], or an object with faults '
            "and latency"
        )
    return ServiceFaults(
        tuple(_phase(service, entry, f"entry {index} of {len(entries)}") for index, entry in enumerate(entries, 1)),
        latency,
    )


def _phase(service: str, entry: object, where: str) -> Phase:
    """One entry of a schedule: a fault (one request), {"fail": fault, "times": n} (the next n requests) or
    {"pass": n} (the next n requests answered as usual)."""
    if isinstance(entry, Mapping) and "pass" in entry:
        if set(entry) != {"pass"}:
            raise ValueError(f'{where} {entry!r}: {{"pass": n}} takes nothing else')
        return None, _times(entry["pass"], f"{where} {entry!r}: pass")
    if isinstance(entry, Mapping) and "fail" in entry:
        unknown = sorted(str(key) for key in set(entry) - {"fail", "times"})
        if unknown:
            raise ValueError(f'{where} {entry!r}: unknown keys {unknown}; write {{"fail": 500, "times": 3}}')
        return _fault(service, entry["fail"], f"{where} {entry!r}: fail", alone=False), _times(
            entry.get("times", 1), f"{where} {entry!r}: times"
        )
    if isinstance(entry, Mapping) and "times" in entry:
        raise ValueError(f'{where} {entry!r}: times goes with fail, e.g. {{"fail": {{"delay": 11}}, "times": 3}}')
    return _fault(service, entry, f"{where} {entry!r}", alone=True), 1


def _fault(service: str, entry: object, where: str, *, alone: bool) -> Fault:
    """A fault; `alone`: an entry of its own (where a repeated fault or a pass may also stand)."""
    if isinstance(entry, Mapping) and set(entry) == {"delay"}:
        return {"delay": _seconds(entry["delay"], f"{where}: delay")}
    if isinstance(entry, int) and not isinstance(entry, bool) and 100 <= entry <= 599:
        return entry
    if isinstance(entry, str) and (entry == TIMEOUT or (entry == OK_FALSE and service == "slack")):
        return entry
    allowed = ["an HTTP status (100-599)", '"timeout"', '{"delay": seconds}']
    allowed += ['"ok_false"'] if service == "slack" else []
    allowed += ['{"fail": fault, "times": n}', '{"pass": n}'] if alone else []
    raise ValueError(f"{where} is not {', '.join(allowed[:-1])} or {allowed[-1]}")


def _times(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TIMES:
        raise ValueError(f"{what} must be a whole number of requests from 1 to {MAX_TIMES}, got {value!r}")
    return value


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 120:
        raise ValueError(f"{what} must be a number of seconds from 0 to 120, got {value!r}")
    return float(value)


def _fault_reply(service: str, fault: int | str) -> _Reply:
    if fault == OK_FALSE:
        return _slack_error("internal_error")
    status = int(fault)
    if status == HTTPStatus.TOO_MANY_REQUESTS:
        body: dict[str, Any] = (
            {"ok": False, "error": "ratelimited"}
            if service == "slack"
            else {"status": "throttled", "message": "Requests for this service are arriving too quickly."}
        )
        return _Reply(status, body, {"Retry-After": "1"})
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "error"
    return _Reply(status, phrase)


def _record(service: str, method: str, path: str, raw: bytes, reply: _Reply, *, fault: bool) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "service": service,
        "at": time.time(),
        "method": method,
        "path": _redacted_path(path),
        "status": int(reply.status),
        "body": _redacted_body(raw),
        "fault": fault,
        "response": _copied(reply.body),
    }
    if reply.effect is not None:
        entry["effect"] = reply.effect
    return entry


def _redacted_path(path: str) -> str:
    # /services/T…/B…/<secret>: the last segment of an incoming-webhook URL is its credential.
    parts = path.split("/")
    if len(parts) > 4 and parts[1] == "services":
        parts[4] = REDACTED
    return "/".join(parts)


def _redacted_body(raw: bytes) -> Any:
    text = raw.decode("utf-8", errors="replace")
    try:
        body = json.loads(text)
    except ValueError:
        form = parse_qs(text) if "=" in text else None
        return {key: values[-1] for key, values in form.items()} if form else text
    if isinstance(body, dict):
        for secret in ("routing_key", "token"):
            if secret in body:
                body[secret] = REDACTED
    return body


_INVALID = object()


def _parse_json(raw: bytes) -> Any:
    """The JSON document in `raw`, or _INVALID (JSON `null` is a document, so None cannot say it)."""
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _INVALID


# --- Slack -----------------------------------------------------------------------------------


def _slack_error(error: str, **extra: Any) -> _Reply:
    # The Web API reports almost every error as HTTP 200 with `ok: false`.
    return _Reply(HTTPStatus.OK, {"ok": False, "error": error, **extra})


_READ_METHODS = ("conversations.history", "conversations.replies", "conversations.list", "usergroups.users.list")
_READ_SCOPES = {
    "conversations.history": "channels:history",
    "conversations.replies": "channels:history",
    "conversations.list": "channels:read",
    "usergroups.users.list": "usergroups:read",
}
_PAGE = 100


class _SlackWorkspace:
    def __init__(self, token: str, known_channels: Iterable[str] | None, scopes: frozenset[str]) -> None:
        self._token = token
        self._scopes = scopes
        self._restricted = known_channels is not None
        self._ids: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._ts_micros = 0
        self._groups: dict[str, tuple[str, ...]] = {ONCALL_GROUP: ONCALL_GROUP_MEMBERS}
        for name in sorted({WEBHOOK_CHANNEL, *(channel.removeprefix("#") for channel in known_channels or ())}):
            self._register(name)

    def call(self, method: str, authorization: str | None, content_type: str, raw: bytes) -> _Reply:
        if not authorization:
            return _slack_error("not_authed")
        if authorization != f"Bearer {self._token}":
            return _slack_error("invalid_auth")
        if not content_type.startswith("application/json"):
            return _slack_error("invalid_form_data")
        body = _parse_json(raw)
        if body is _INVALID:
            return _slack_error("invalid_json")
        if not isinstance(body, dict):
            return _slack_error("json_not_object")
        channel_id = self._resolve(body.get("channel"))
        if channel_id is None:
            return _slack_error("channel_not_found")
        problem = _message_problem(body) or _metadata_problem(body.get("metadata"))
        if problem is not None:
            return _slack_error(problem[0], **problem[1])
        reply = self._post(channel_id, body) if method == "chat.postMessage" else self._update(channel_id, body)
        if reply.body.get("ok") and "charset" not in content_type:
            # What Slack answers to a JSON body sent without `charset=utf-8`.
            reply.body.update(warning="missing_charset", response_metadata={"warnings": ["missing_charset"]})
        return reply

    def rotate(self, token: str) -> None:
        self._token = token

    def read(self, method: str, authorization: str | None, content_type: str, raw: bytes) -> _Reply:
        """conversations.history / .replies / .list, with a form-encoded (or JSON) body or a query string."""
        if not authorization:
            return _slack_error("not_authed")
        if authorization != f"Bearer {self._token}":
            return _slack_error("invalid_auth")
        if _READ_SCOPES[method] not in self._scopes:
            return _slack_error("missing_scope", needed=_READ_SCOPES[method], provided=",".join(sorted(self._scopes)))
        query = _query(raw, content_type)
        if method == "usergroups.users.list":
            group = query.get("usergroup", "")
            if group not in self._groups:
                return _slack_error("no_such_subteam")
            return _Reply(HTTPStatus.OK, {"ok": True, "users": list(self._groups[group])})
        if method == "conversations.list":
            channels = [{"id": channel_id, "name": name, "is_channel": True} for name, channel_id in self._ids.items()]
            return _Reply(HTTPStatus.OK, {"ok": True, "channels": channels, "response_metadata": {"next_cursor": ""}})
        channel_id = query.get("channel", "")
        if channel_id not in self._names:
            return _slack_error("channel_not_found")
        messages = self._messages.get(channel_id, [])
        if method == "conversations.replies":
            root = self._find(channel_id, query.get("ts"))
            if root is None:
                return _slack_error("thread_not_found")
            selected = [m for m in messages if m["ts"] == root["ts"] or m["thread_ts"] == root["ts"]]
        else:
            selected = [m for m in reversed(messages) if not m["thread_ts"]]  # newest first, top level only
        oldest = float(query.get("oldest") or 0)
        selected = [m for m in selected if float(m["ts"]) >= oldest]
        start = int(query.get("cursor") or 0)
        page = selected[start : start + min(int(query.get("limit") or _PAGE), 999)]
        more = start + len(page) < len(selected)
        metadata = query.get("include_all_metadata") in ("true", "1")
        return _Reply(
            HTTPStatus.OK,
            {
                "ok": True,
                "messages": [_as_sent(m, metadata=metadata) for m in page],
                "has_more": more,
                "response_metadata": {"next_cursor": str(start + len(page)) if more else ""},
            },
        )

    def webhook(self, raw: bytes) -> _Reply:
        body = _parse_json(raw)
        if not isinstance(body, dict):
            return _Reply(HTTPStatus.BAD_REQUEST, "invalid_payload")
        problem = _message_problem(body)
        if problem is not None:
            return _Reply(HTTPStatus.BAD_REQUEST, problem[0])
        self._store(self._ids[WEBHOOK_CHANNEL], body, thread_ts=None)
        return _Reply(HTTPStatus.OK, "ok")

    def channels(self, where: Selector | None = None) -> dict[str, list[dict[str, Any]]]:
        return {
            self._names[channel_id]: _copied(_selected(messages, where))
            for channel_id, messages in self._messages.items()
        }

    def buttons(self, action_id: str) -> list[tuple[str, str, str]]:
        found = []
        for channel_id, messages in self._messages.items():
            for message in messages:
                if message["thread_ts"]:
                    continue
                for block in message["blocks"]:
                    if not isinstance(block, dict) or block.get("type") != "actions":
                        continue
                    for element in block.get("elements") or []:
                        value = element.get("value") if isinstance(element, dict) else None
                        if element.get("action_id") == action_id and isinstance(value, str) and value:
                            found.append((channel_id, message["ts"], value))
        return sorted(found, key=lambda button: _ts_key(button[1]), reverse=True)

    def _post(self, channel_id: str, body: dict[str, Any]) -> _Reply:
        thread_ts = body.get("thread_ts")
        if thread_ts is not None:
            parent = self._find(channel_id, thread_ts)
            if parent is None:
                return _slack_error("thread_not_found")
            # Replying to a reply lands in the parent's thread.
            thread_ts = parent["thread_ts"] or parent["ts"]
        message = self._store(channel_id, body, thread_ts=thread_ts)
        return _Reply(
            HTTPStatus.OK, {"ok": True, "channel": channel_id, "ts": message["ts"], "message": _as_sent(message)}
        )

    def _update(self, channel_id: str, body: dict[str, Any]) -> _Reply:
        message = self._find(channel_id, body.get("ts"))
        if message is None:
            return _slack_error("message_not_found")
        message["edits"].append({"text": message["text"], "blocks": message["blocks"]})
        # As in Slack, blocks left out of an update are removed, not kept.
        message["text"], message["blocks"] = body.get("text") or "", body.get("blocks") or []
        return _Reply(
            HTTPStatus.OK,
            {
                "ok": True,
                "channel": channel_id,
                "ts": message["ts"],
                "text": message["text"],
                "message": _as_sent(message),
            },
        )

    def _store(self, channel_id: str, body: dict[str, Any], *, thread_ts: str | None) -> dict[str, Any]:
        self._ts_micros = max(self._ts_micros + _TS_STEP_MICROS, int(time.time() * 1_000_000))
        seconds, micros = divmod(self._ts_micros, 1_000_000)
        message = {
            "ts": f"{seconds}.{micros:06d}",
            "thread_ts": thread_ts,
            "text": body.get("text") or "",
            "blocks": _copied(body.get("blocks") or []),
            "edits": [],
        }
        if isinstance(body.get("metadata"), dict):
            message["metadata"] = _copied(body["metadata"])
        self._messages.setdefault(channel_id, []).append(message)
        return message

    def _find(self, channel_id: str, ts: object) -> dict[str, Any] | None:
        return next((m for m in self._messages.get(channel_id, []) if m["ts"] == ts), None)

    def _resolve(self, channel: object) -> str | None:
        """The channel id for a name (`#gpu-alerts`, `gpu-alerts`) or an id; None if it does not exist."""
        if not isinstance(channel, str) or not channel:
            return None
        if channel in self._names:
            return channel
        name = channel.removeprefix("#")
        if name in self._ids:
            return self._ids[name]
        if self._restricted or _CHANNEL_ID.fullmatch(channel):
            return None
        return self._register(name)

    def _register(self, name: str) -> str:
        channel_id = name if _CHANNEL_ID.fullmatch(name) else f"C0SANDBOX{len(self._ids) + 1}"
        self._ids[name], self._names[channel_id] = channel_id, name
        return channel_id


def _ts_key(ts: str) -> tuple[int, int]:
    seconds, _, micros = ts.partition(".")
    return int(seconds), int(micros or 0)


def _as_sent(message: dict[str, Any], *, metadata: bool = False) -> dict[str, Any]:
    sent = {"type": "message", "bot_id": "B0SANDBOX", "text": message["text"], "ts": message["ts"]}
    if message["blocks"]:
        sent["blocks"] = _copied(message["blocks"])
    if message["thread_ts"]:
        sent["thread_ts"] = message["thread_ts"]
    if metadata and message.get("metadata"):
        sent["metadata"] = _copied(message["metadata"])
    return sent


def _query(raw: bytes, content_type: str) -> dict[str, str]:
    text = raw.decode("utf-8", errors="replace")
    if content_type.startswith("application/json"):
        body = _parse_json(raw)
        return (
            {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in body.items()}
            if isinstance(body, dict)
            else {}
        )
    return {key: values[-1] for key, values in parse_qs(text).items()}


def _metadata_problem(metadata: object) -> tuple[str, dict[str, Any]] | None:
    """Slack's message metadata: an event_type and an event_payload object."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("event_type"), str):
        return "invalid_metadata_format", {}
    if not metadata["event_type"] or not isinstance(metadata.get("event_payload"), dict):
        return "invalid_metadata_format", {}
    return None


def _message_problem(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The Slack error code (and extra answer fields) for a message body, or None if it is valid."""
    text, blocks = body.get("text"), body.get("blocks")
    if text is not None and not isinstance(text, str):
        return "invalid_arguments", {}
    if not text and not blocks:
        return "no_text", {}
    if text and len(text) > 40_000:
        return "msg_too_long", {}
    if blocks is None:
        return None
    if not isinstance(blocks, list):
        return "invalid_blocks_format", {}
    errors = block_errors(blocks)
    if errors:
        return "invalid_blocks", {"errors": errors, "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]}}
    return None


_BlockCheck = Callable[[dict[str, Any], str], list[str]]


def block_errors(blocks: list[Any]) -> list[str]:
    """Block Kit validation for messages, with Slack's error wording and JSON pointers."""
    if len(blocks) > 50:
        return ["must be less than 51 items [json-pointer:/blocks]"]
    errors: list[str] = []
    block_ids: set[str] = set()
    for index, block in enumerate(blocks):
        pointer = f"/blocks/{index}"
        if not isinstance(block, dict):
            errors.append(f"must be an object [json-pointer:{pointer}]")
            continue
        kind = block.get("type")
        check = _BLOCK_CHECKS.get(kind) if isinstance(kind, str) else None
        if check is None:
            errors.append(f"unsupported type {block.get('type')!r} [json-pointer:{pointer}/type]")
            continue
        errors.extend(check(block, pointer))
        block_id = block.get("block_id")
        if block_id is None:
            continue
        if not isinstance(block_id, str) or not 1 <= len(block_id) <= 255:
            errors.append(f"must be 1 to 255 characters [json-pointer:{pointer}/block_id]")
        elif block_id in block_ids:
            errors.append(f"duplicate block_id {block_id!r} [json-pointer:{pointer}/block_id]")
        block_ids.add(str(block_id))
    return errors


def _unknown_keys(obj: dict[str, Any], allowed: set[str], pointer: str) -> list[str]:
    return [f"unsupported property {key!r} [json-pointer:{pointer}/{key}]" for key in obj if key not in allowed]


def _text_errors(obj: Any, pointer: str, limit: int, *, plain_only: bool = False) -> list[str]:
    allowed = {"plain_text": {"type", "text", "emoji"}, "mrkdwn": {"type", "text", "verbatim"}}
    kind = obj.get("type") if isinstance(obj, dict) else None
    if kind not in allowed or (plain_only and kind != "plain_text"):
        expected = "plain_text" if plain_only else "a plain_text or mrkdwn text object"
        return [f"must be {expected} [json-pointer:{pointer}]"]
    errors = _unknown_keys(obj, allowed[kind], pointer)
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        errors.append(f"must be a non-empty string [json-pointer:{pointer}/text]")
    elif len(text) > limit:
        errors.append(f"must be less than {limit + 1} characters [json-pointer:{pointer}/text]")
    return errors


def _items(value: Any, pointer: str, most: int) -> tuple[list[Any], list[str]]:
    if not isinstance(value, list) or not value:
        return [], [f"must be a non-empty array [json-pointer:{pointer}]"]
    if len(value) > most:
        return [], [f"must be less than {most + 1} items [json-pointer:{pointer}]"]
    return value, []


def _header_errors(block: dict[str, Any], pointer: str) -> list[str]:
    return _unknown_keys(block, {"type", "text", "block_id"}, pointer) + _text_errors(
        block.get("text"), f"{pointer}/text", 150, plain_only=True
    )


def _section_errors(block: dict[str, Any], pointer: str) -> list[str]:
    errors = _unknown_keys(block, {"type", "text", "fields", "block_id", "accessory", "expand"}, pointer)
    if "text" not in block and "fields" not in block:
        return [*errors, f"must provide either text or fields [json-pointer:{pointer}]"]
    if "text" in block:
        errors.extend(_text_errors(block["text"], f"{pointer}/text", 3000))
    if "fields" in block:
        fields, problems = _items(block["fields"], f"{pointer}/fields", 10)
        errors.extend(problems)
        for index, item in enumerate(fields):
            errors.extend(_text_errors(item, f"{pointer}/fields/{index}", 2000))
    return errors


def _context_errors(block: dict[str, Any], pointer: str) -> list[str]:
    errors = _unknown_keys(block, {"type", "elements", "block_id"}, pointer)
    elements, problems = _items(block.get("elements"), f"{pointer}/elements", 10)
    errors.extend(problems)
    for index, element in enumerate(elements):
        element_pointer = f"{pointer}/elements/{index}"
        if isinstance(element, dict) and element.get("type") == "image":
            errors.extend(_image_errors(element, element_pointer, {"type", "image_url", "alt_text"}))
        else:
            errors.extend(_text_errors(element, element_pointer, 3000))
    return errors


def _image_errors(obj: dict[str, Any], pointer: str, allowed: set[str]) -> list[str]:
    errors = _unknown_keys(obj, allowed, pointer)
    for key, limit in (("image_url", 3000), ("alt_text", 2000)):
        value = obj.get(key)
        if not isinstance(value, str) or not 1 <= len(value) <= limit:
            errors.append(f"must be 1 to {limit} characters [json-pointer:{pointer}/{key}]")
    return errors


def _image_block_errors(block: dict[str, Any], pointer: str) -> list[str]:
    errors = _image_errors(block, pointer, {"type", "image_url", "alt_text", "title", "block_id"})
    if "title" in block:
        errors.extend(_text_errors(block["title"], f"{pointer}/title", 2000, plain_only=True))
    return errors


def _divider_errors(block: dict[str, Any], pointer: str) -> list[str]:
    return _unknown_keys(block, {"type", "block_id"}, pointer)


def _elements_errors(most: int) -> _BlockCheck:
    """Blocks we never send (rich_text): checked for shape only."""

    def check(block: dict[str, Any], pointer: str) -> list[str]:
        elements, problems = _items(block.get("elements"), f"{pointer}/elements", most)
        problems += [
            f"must be an object [json-pointer:{pointer}/elements/{i}]"
            for i, element in enumerate(elements)
            if not isinstance(element, dict)
        ]
        return problems

    return check


def _actions_errors(block: dict[str, Any], pointer: str) -> list[str]:
    """An actions block: up to 25 elements; buttons (the only element we send) checked as Slack checks them."""
    errors = _unknown_keys(block, {"type", "elements", "block_id"}, pointer)
    elements, problems = _items(block.get("elements"), f"{pointer}/elements", 25)
    errors.extend(problems)
    action_ids: set[str] = set()
    for index, element in enumerate(elements):
        element_pointer = f"{pointer}/elements/{index}"
        if not isinstance(element, dict):
            errors.append(f"must be an object [json-pointer:{element_pointer}]")
        elif element.get("type") != "button":
            continue  # selects, date pickers, ...: never sent, not checked
        else:
            errors.extend(_button_errors(element, element_pointer))
            action_id = element.get("action_id")
            if isinstance(action_id, str) and action_id in action_ids:
                errors.append(f"duplicate action_id {action_id!r} [json-pointer:{element_pointer}/action_id]")
            action_ids.add(str(action_id))
    return errors


def _button_errors(button: dict[str, Any], pointer: str) -> list[str]:
    allowed = {"type", "text", "action_id", "url", "value", "style", "confirm", "accessibility_label"}
    errors = _unknown_keys(button, allowed, pointer) + _text_errors(
        button.get("text"), f"{pointer}/text", 75, plain_only=True
    )
    for key, limit in (("action_id", 255), ("value", 2000), ("url", 3000)):
        value = button.get(key)
        if value is not None and (not isinstance(value, str) or not 1 <= len(value) <= limit):
            errors.append(f"must be 1 to {limit} characters [json-pointer:{pointer}/{key}]")
    if "style" in button and button["style"] not in ("primary", "danger"):
        errors.append(f"must be one of primary, danger [json-pointer:{pointer}/style]")
    return errors


def _markdown_errors(block: dict[str, Any], pointer: str) -> list[str]:
    text = block.get("text")
    if not isinstance(text, str) or not 1 <= len(text) <= 12_000:
        return [f"must be 1 to 12000 characters [json-pointer:{pointer}/text]"]
    return _unknown_keys(block, {"type", "text", "block_id"}, pointer)


_BLOCK_CHECKS: dict[str, _BlockCheck] = {
    "header": _header_errors,
    "section": _section_errors,
    "context": _context_errors,
    "divider": _divider_errors,
    "image": _image_block_errors,
    "actions": _actions_errors,
    "rich_text": _elements_errors(100),
    "markdown": _markdown_errors,
}


# --- PagerDuty -------------------------------------------------------------------------------


def _invalid_event(errors: list[str]) -> _Reply:
    return _Reply(
        HTTPStatus.BAD_REQUEST, {"status": "invalid event", "message": "Event object is invalid", "errors": errors}
    )


class _PagerDutyEvents:
    def __init__(self, routing_keys: Iterable[str]) -> None:
        self.keys = frozenset(routing_keys)
        self.alerts: list[dict[str, Any]] = []
        self.changes: list[dict[str, Any]] = []
        # Follow-up events apply to the open alert of the same routing key + dedup key only.
        self._open: dict[tuple[str, str], dict[str, Any]] = {}

    def enqueue(self, raw: bytes) -> _Reply:
        event = _parse_json(raw)
        if not isinstance(event, dict):
            return _invalid_event(["Event must be a JSON object"])
        errors = event_errors(event, self.keys)
        if errors:
            return _invalid_event(errors)
        action = event["event_action"]
        # Without a dedup key PagerDuty generates one, so every such trigger opens a new alert.
        dedup_key = event.get("dedup_key") or uuid.uuid4().hex
        effect = self._apply(action, event["routing_key"], dedup_key, event)
        body = {"status": "success", "message": "Event processed", "dedup_key": dedup_key}
        return _Reply(HTTPStatus.ACCEPTED, body, effect=effect)

    def change(self, raw: bytes) -> _Reply:
        event = _parse_json(raw)
        if not isinstance(event, dict):
            return _invalid_event(["Event must be a JSON object"])
        errors = change_event_errors(event, self.keys)
        if errors:
            return _invalid_event(errors)
        payload = event["payload"]
        self.changes.append(
            {
                **{name: payload.get(name) for name in ("summary", "source", "timestamp")},
                "custom_details": _copied(payload.get("custom_details")),
                "links": _copied(event.get("links", [])),
            }
        )
        return _Reply(HTTPStatus.ACCEPTED, {"status": "success", "message": "Change event processed"}, effect="change")

    def find(self, incident: int | None, dedup_key: str | None) -> dict[str, Any] | None:
        """The alert PagerDuty shows as incident number `incident`, else the newest with `dedup_key`, else the
        newest; None when there is none."""
        if incident is not None:
            return self.alerts[incident - 1] if 1 <= incident <= len(self.alerts) else None
        return next((a for a in reversed(self.alerts) if dedup_key in (None, a["dedup_key"])), None)

    def webhook_event(
        self, alert: dict[str, Any], kind: str, by: str, agent: str, assignee: str | None, occurred_at: datetime
    ) -> dict[str, Any]:
        """`alert` changed by `by` in PagerDuty, and the v3 webhook event that says so."""
        number = alert["number"]
        incident_id = f"Q0SANDBOX{number:05d}"
        # PagerDuty never reopens a resolved incident: a webhook about it that arrives late changes nothing there.
        if alert["status"] != "resolved":
            alert["status"] = _WEBHOOK_STATUS.get(kind, alert["status"])
        if kind == "resolved":
            for key, open_alert in list(self._open.items()):
                if open_alert is alert:
                    del self._open[key]
        assignees = [assignee or by]
        if kind == "reassigned":
            alert["assignees"] = assignees
        alert["log"].append({"action": kind, "by": by, "agent": agent, "in": "pagerduty"})
        agent_type = "user_reference" if agent == "user" else "service_reference"
        agent_id = "PSANDBOXUSR" if agent == "user" else "PSANDBOXSVC"
        return {
            "id": "01" + uuid.uuid4().hex.upper()[:24],
            "event_type": f"incident.{kind}",
            "resource_type": "incident",
            "occurred_at": occurred_at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "agent": {
                "html_url": f"https://sandbox.pagerduty.com/{'users' if agent == 'user' else 'services'}/{agent_id}",
                "id": agent_id,
                "self": f"https://api.pagerduty.com/{'users' if agent == 'user' else 'services'}/{agent_id}",
                "summary": by,
                "type": agent_type,
            },
            "client": None,
            "data": {
                "id": incident_id,
                "type": "incident",
                "self": f"https://api.pagerduty.com/incidents/{incident_id}",
                "html_url": f"https://sandbox.pagerduty.com/incidents/{incident_id}",
                "number": number,
                "status": _WEBHOOK_STATUS.get(kind, alert["status"]),
                "incident_key": alert["dedup_key"],
                "title": alert.get("summary") or "",
                "urgency": "high",
                "conflicted": False,
                "priority": None,
                "resolve_reason": None,
                "service": {
                    "html_url": "https://sandbox.pagerduty.com/services/PSANDBOXSVC",
                    "id": "PSANDBOXSVC",
                    "self": "https://api.pagerduty.com/services/PSANDBOXSVC",
                    "summary": "gpu-oncall",
                    "type": "service_reference",
                },
                "assignees": [
                    {
                        "html_url": "https://sandbox.pagerduty.com/users/PSANDBOXASG",
                        "id": "PSANDBOXASG",
                        "self": "https://api.pagerduty.com/users/PSANDBOXASG",
                        "summary": name,
                        "type": "user_reference",
                    }
                    for name in (alert.get("assignees") or assignees)
                ],
                "escalation_policy": {
                    "html_url": "https://sandbox.pagerduty.com/escalation_policies/PSANDBOXEP",
                    "id": "PSANDBOXEP",
                    "self": "https://api.pagerduty.com/escalation_policies/PSANDBOXEP",
                    "summary": "GPU on-call",
                    "type": "escalation_policy_reference",
                },
                "teams": [],
            },
        }

    def _apply(self, action: str, routing_key: str, dedup_key: str, event: dict[str, Any]) -> str:
        key = (routing_key, dedup_key)
        alert = self._open.get(key)
        entry = {"action": action}
        if action == "trigger":
            payload = event["payload"]
            entry.update(summary=payload["summary"], severity=payload["severity"])
            if alert is not None:
                alert["log"].append(entry)
                return "appended"
            alert = {
                "number": len(self.alerts) + 1,
                "dedup_key": dedup_key,
                "status": "triggered",
                **{
                    name: payload.get(name) for name in ("summary", "severity", "source", "component", "group", "class")
                },
                "custom_details": _copied(payload.get("custom_details")),
                "links": _copied(event.get("links", [])),
                "log": [entry],
            }
            self._open[key] = alert
            self.alerts.append(alert)
            return "opened"
        # PagerDuty accepts (202) an acknowledge or resolve for no open alert, and drops it.
        if alert is None:
            return "dropped"
        alert["log"].append(entry)
        if action == "acknowledge":
            alert["status"] = "acknowledged"
            return "acknowledged"
        alert["status"] = "resolved"
        del self._open[key]
        return "resolved"


def event_errors(event: dict[str, Any], routing_keys: frozenset[str]) -> list[str]:
    """Events API v2 validation, in PagerDuty's wording where we know it."""
    errors = _routing_key_errors(event.get("routing_key"), routing_keys)
    action = event.get("event_action")
    if action not in _PD_ACTIONS:
        errors.append(f"'event_action' must be one of {', '.join(_PD_ACTIONS)}")
    dedup_key = event.get("dedup_key")
    if dedup_key is not None and (not isinstance(dedup_key, str) or len(dedup_key) > 255):
        errors.append("'dedup_key' must be a string of at most 255 characters")
    if action in ("acknowledge", "resolve") and not dedup_key:
        errors.append("'dedup_key' is missing or blank")
    if action == "trigger":
        errors.extend(_payload_errors(event.get("payload")))
    errors.extend(_context_item_errors(event.get("links"), "links", "href"))
    errors.extend(_context_item_errors(event.get("images"), "images", "src"))
    errors.extend(f"'{name}' must be a string" for name in ("client", "client_url") if _not_str(event, name))
    return errors


def change_event_errors(event: dict[str, Any], routing_keys: frozenset[str]) -> list[str]:
    """Change Events validation: a known routing key and a payload with a summary and a source."""
    errors = _routing_key_errors(event.get("routing_key"), routing_keys)
    payload = event.get("payload")
    if not isinstance(payload, dict):
        return [*errors, "'payload' is missing or blank"]
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary:
        errors.append("'payload.summary' is missing or blank")
    elif len(summary) > 1024:
        errors.append("Length of 'payload.summary' is too long (should be at most 1024 characters)")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("'payload.source' is missing or blank")
    if "timestamp" in payload and not _is_iso8601(payload["timestamp"]):
        errors.append("'payload.timestamp' must be an ISO 8601 timestamp")
    errors.extend(_context_item_errors(event.get("links"), "links", "href"))
    return errors


def _routing_key_errors(routing_key: Any, known: frozenset[str]) -> list[str]:
    if not isinstance(routing_key, str) or not routing_key:
        return ["'routing_key' is missing or blank"]
    if len(routing_key) != 32:
        return ["Length of 'routing_key' is incorrect (should be 32 characters)"]
    return [] if routing_key in known else ["Invalid routing key"]


def _payload_errors(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return ["'payload' is missing or blank"]
    errors = []
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary:
        errors.append("'payload.summary' is missing or blank")
    elif len(summary) > 1024:
        errors.append("Length of 'payload.summary' is too long (should be at most 1024 characters)")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("'payload.source' is missing or blank")
    if payload.get("severity") not in _PD_SEVERITIES:
        errors.append(f"'payload.severity' must be one of {', '.join(_PD_SEVERITIES)}")
    if "timestamp" in payload and not _is_iso8601(payload["timestamp"]):
        errors.append("'payload.timestamp' must be an ISO 8601 timestamp")
    errors.extend(
        f"'payload.{name}' must be a string" for name in ("component", "group", "class") if _not_str(payload, name)
    )
    return errors


def _context_item_errors(items: Any, name: str, required: str) -> list[str]:
    if items is None:
        return []
    if not isinstance(items, list):
        return [f"'{name}' must be an array"]
    errors = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get(required), str) or not item[required]:
            errors.append(f"'{name}[{index}].{required}' is missing or blank")
        elif name == "images" and not item["src"].startswith("https://"):
            errors.append(f"'images[{index}].src' must be served via HTTPS")
    return errors


def _not_str(obj: dict[str, Any], name: str) -> bool:
    return name in obj and not isinstance(obj[name], str)


def _is_iso8601(value: Any) -> bool:
    if not isinstance(value, str):
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True
