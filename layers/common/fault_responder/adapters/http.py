"""JSON delivery over HTTP: timeouts on every call, bounded retries, errors that carry no secrets.

Slack and PagerDuty both ask clients to retry 429, 5xx and network errors and not to retry other
4xx; Slack also reports errors inside HTTP 200 (`ok: false`), which the caller classifies through
`is_failure`. The retry budget is small on purpose: the SQS queue in front of the router is the
long-term retry, so a destination that stays down should fail the message (and keep the Lambda
short) rather than sleep for minutes.

Every call fits in the invocation: a `Budget` (the Lambda's remaining time, and which services already timed
out in this invocation) caps each timeout and each backoff, refuses a call that cannot finish in time, and
fails fast a service that already kept a call waiting for its whole read timeout, so a slow Slack costs one
timeout per invocation, not one per record, and never holds back PagerDuty.

A read timeout, or a connection dropped after the request went out, leaves the outcome unknown (the
request may have been acted on): a call that is not idempotent (a Slack post) is then not retried here;
the error says `unknown_outcome` and the caller looks for the message before posting it again.

The transport is urllib3, which botocore has already imported by the time a page goes out (requests
would add its own import, about 16 ms of every cold start, for nothing we use).

Webhook URLs, tokens and routing keys are secrets: nothing here logs a URL, a header or a payload,
transport errors (whose messages quote the URL) are reduced to a fixed name (ConnectionError,
ConnectTimeout, ReadTimeout, ConnectionAborted, ...), and urllib3's DEBUG request lines are dropped.

A Retry-After longer than the policy allows is not shortened: the delivery fails as retryable at once, and
the queue's redelivery does the waiting.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlencode

import certifi
import urllib3
from urllib3.exceptions import (
    ConnectTimeoutError,
    HTTPError,
    NewConnectionError,
    ProtocolError,
    ProxyError,
    ReadTimeoutError,
    SSLError,
)

# urllib3's log lines carry URL paths, and a webhook's path is its secret: logsafety redacts them.
from fault_responder.core import logsafety  # noqa: F401 - imported for its log filters
from fault_responder.notification.contract import DeliveryError, LeaseEndingError, fence_left

log = logging.getLogger(__name__)

_MAX_REASON = 200
_MIN_CALL_SECONDS = 0.5
"""Less time than this left for a call: it is not made."""


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 4
    base_delay: float = 0.5
    max_delay: float = 10.0
    connect_timeout: float = 3.05
    read_timeout: float = 10.0
    max_retry_after: float = 30.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if min(self.base_delay, self.max_delay, self.max_retry_after) < 0:
            raise ValueError("delays must not be negative")
        if min(self.connect_timeout, self.read_timeout) <= 0:
            raise ValueError("timeouts must be positive")


DEFAULT_RETRY_POLICY = RetryPolicy()


@dataclass(frozen=True)
class HttpResponse:
    """An answer, read in full."""

    status_code: int
    reason: str
    headers: Mapping[str, str]
    """Case-insensitive (urllib3's HTTPHeaderDict)."""
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError when it is not JSON."""
        return json.loads(self.content)


class _TransportError(Exception):
    """A request that got no answer, under a name that quotes nothing (urllib3's messages quote the URL)."""

    def __init__(self, name: str, *, retryable: bool, unknown_outcome: bool = False, timed_out: bool = False) -> None:
        super().__init__(name)
        self.name = name
        self.retryable = retryable
        self.unknown_outcome = unknown_outcome
        """The request may have reached the server and been acted on."""
        self.timed_out = timed_out
        """The call waited for its whole read timeout."""


class HttpSession:
    """A connection pool for POSTs: certificates verified (certifi's bundle), no redirects, no hidden retries.

    Thread-safe (urllib3's PoolManager is); the notifiers still keep one per thread, so that parallel deliveries
    do not queue for one pooled connection.
    """

    def __init__(self) -> None:
        self._pool = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())

    def post(self, url: str, *, body: bytes, headers: Mapping[str, str], timeout: tuple[float, float]) -> HttpResponse:
        # The last check before the request goes out, after every wait (a retry's sleep, a stall): the call must end
        # before the lease it is made under can pass to another worker (`fenced`), or it is not made.
        fence = fence_left()
        if fence < _MIN_CALL_SECONDS:
            raise _Fenced
        connect = min(timeout[0], fence / 2)
        timeout = (connect, min(timeout[1], fence - connect))
        try:
            response = self._pool.request(
                "POST",
                url,
                body=body,
                headers=dict(headers),
                timeout=urllib3.Timeout(connect=timeout[0], read=timeout[1]),
                # Retries are send_json's, under its budget; a redirect would re-send the payload (and its
                # credentials) somewhere we did not choose.
                retries=False,
                redirect=False,
                preload_content=True,
            )
        except HTTPError as exc:
            raise _transport_error(exc) from None
        return HttpResponse(response.status, response.reason or "", response.headers, response.data or b"")

    def close(self) -> None:
        self._pool.clear()


def _transport_error(exc: HTTPError) -> _TransportError:
    # Order matters: NewConnectionError is a ConnectTimeoutError, and both are raised before anything was sent.
    if isinstance(exc, NewConnectionError):
        return _TransportError("ConnectionError", retryable=True)
    if isinstance(exc, ConnectTimeoutError):
        return _TransportError("ConnectTimeout", retryable=True)
    if isinstance(exc, ReadTimeoutError):
        return _TransportError("ReadTimeout", retryable=True, unknown_outcome=True, timed_out=True)
    if isinstance(exc, ProtocolError):
        # The connection dropped after the request went out, or the answer was cut short.
        return _TransportError("ConnectionAborted", retryable=True, unknown_outcome=True)
    if isinstance(exc, (SSLError, ProxyError)):
        return _TransportError(type(exc).__name__, retryable=True)
    # A URL that cannot be parsed or reached as given (LocationParseError, ...): sending it again will not help.
    return _TransportError(type(exc).__name__, retryable=False)


class _Fenced(Exception):
    """Raised by the transport in place of a request the fence refused (send_json says which service)."""


FailureCheck = Callable[[HttpResponse], tuple[bool, bool, str]]
"""Classifies a 2xx response: (failed, retryable, reason)."""
Signer = Callable[[bytes], Mapping[str, str]]
"""Headers that sign the exact body of one attempt (made again for each attempt, so each carries its own time)."""


class Budget:
    """The time an invocation has left for calls, and the services that already timed out in it.

    Shared by every call of one invocation (threads included); a new invocation gets a new one.
    """

    def __init__(self, seconds: float, *, margin: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._end = clock() + seconds - margin
        self._timed_out: set[str] = set()

    @classmethod
    def unlimited(cls) -> Budget:
        return cls(float("inf"), margin=0.0)

    def remaining(self) -> float:
        return self._end - self._clock()

    def timed_out(self, service: str) -> bool:
        return service in self._timed_out

    def note_timeout(self, service: str) -> None:
        self._timed_out.add(service)

    def refusal(self, service: str, *, retrying: bool = False) -> DeliveryError | None:
        """Why a call to `service` is not made now, if it is not."""
        if service in self._timed_out and not retrying:
            reason = f"{service} timed out earlier in this invocation; left for the redelivery"
            return DeliveryError(service, None, reason, retryable=True)
        if self.remaining() < _MIN_CALL_SECONDS:
            return DeliveryError(service, None, "no time left in this invocation", retryable=True)
        return None


def send_json(
    session: HttpSession,
    url: str,
    payload: dict[str, Any],
    *,
    service: str,
    headers: dict[str, str] | None = None,
    policy: RetryPolicy,
    sleep: Callable[[float], None] = time.sleep,
    is_failure: FailureCheck | None = None,
    budget: Budget | None = None,
    idempotent: bool = True,
    form: bool = False,
    sign: Signer | None = None,
    retryable_statuses: frozenset[int] = frozenset(),
) -> HttpResponse:
    """POST `payload` (JSON, or form-encoded when `form`) and return the accepted response, or raise
    `DeliveryError`. `sign` adds headers made from the body as sent; `retryable_statuses` are 4xx answers retried
    as 429 is."""
    budget = budget or Budget.unlimited()
    attempt = 0
    while True:
        attempt += 1
        # A service that kept another call waiting is not called again in this invocation; a call that is
        # retrying its own timeout is (when it is idempotent), within the budget.
        refusal = budget.refusal(service, retrying=attempt > 1)
        if refusal is not None:
            raise refusal
        outcome = _post_once(
            session,
            url,
            payload,
            headers=headers,
            timeout=(min(policy.connect_timeout, budget.remaining()), min(policy.read_timeout, budget.remaining())),
            service=service,
            is_failure=is_failure,
            form=form,
            sign=sign,
            retryable_statuses=retryable_statuses,
        )
        if isinstance(outcome, HttpResponse):
            return outcome
        error = outcome.error
        if outcome.timed_out:
            budget.note_timeout(service)
        if error.unknown_outcome and not idempotent:
            raise error
        if not error.retryable or attempt >= policy.max_attempts:
            raise error
        if outcome.retry_after is not None and outcome.retry_after > policy.max_retry_after:
            # Retrying sooner than asked keeps us rate limited (Slack may disable apps that do):
            # leave the wait to the queue's redelivery rather than sleep it away in the Lambda.
            reason = f"{error.reason}; Retry-After {outcome.retry_after:g}s exceeds {policy.max_retry_after:g}s"
            raise DeliveryError(service, error.status, reason, retryable=True)
        delay = outcome.retry_after if outcome.retry_after is not None else _backoff(attempt, policy)
        if delay > budget.remaining() - _MIN_CALL_SECONDS:
            raise DeliveryError(service, error.status, f"{error.reason}; no time left to retry", retryable=True)
        log.warning(
            "%s delivery attempt %d/%d failed (%s); retrying in %.2fs",
            service,
            attempt,
            policy.max_attempts,
            error.reason,
            delay,
        )
        sleep(delay)


@dataclass(frozen=True)
class _Failed:
    error: DeliveryError
    retry_after: float | None = None
    timed_out: bool = False


def _post_once(
    session: HttpSession,
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str] | None,
    timeout: tuple[float, float],
    service: str,
    is_failure: FailureCheck | None,
    form: bool,
    sign: Signer | None = None,
    retryable_statuses: frozenset[int] = frozenset(),
) -> HttpResponse | _Failed:
    sent_headers = dict(headers or {})
    if form:
        body = urlencode(payload).encode()
        sent_headers.setdefault("Content-Type", "application/x-www-form-urlencoded")
    else:
        body = json.dumps(payload, allow_nan=False).encode()
        sent_headers.setdefault("Content-Type", "application/json")
    if sign is not None:
        sent_headers.update(sign(body))
    try:
        response = session.post(url, body=body, headers=sent_headers, timeout=timeout)
    except _Fenced:
        reason = "not sent: the delivery lease ends before the call could; left to the next holder"
        raise LeaseEndingError(service, None, reason, retryable=True) from None
    except _TransportError as exc:
        error = DeliveryError(service, None, exc.name, exc.retryable, unknown_outcome=exc.unknown_outcome)
        return _Failed(error, timed_out=exc.timed_out)
    failure = _judge(response, service, is_failure, retryable_statuses)
    if failure is None:
        return response
    return _Failed(failure, _retry_after_seconds(response.headers.get("Retry-After")))


def json_object(response: HttpResponse) -> dict[str, Any] | None:
    """The response body as a JSON object, or None when it is not one."""
    try:
        body = response.json()
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _judge(
    response: HttpResponse,
    service: str,
    is_failure: FailureCheck | None,
    retryable_statuses: frozenset[int] = frozenset(),
) -> DeliveryError | None:
    status = response.status_code
    if 200 <= status < 300:
        if is_failure is None:
            return None
        failed, retryable, reason = is_failure(response)
        return DeliveryError(service, status, reason, retryable) if failed else None
    retryable = status == 429 or status >= 500 or status in retryable_statuses
    return DeliveryError(service, status, _reason(response), retryable)


def _reason(response: HttpResponse) -> str:
    """A short cause from an error body: Slack's `error`, PagerDuty's message and errors, or the text."""
    body = json_object(response)
    if body is not None and isinstance(body.get("error"), str):
        reason = str(body["error"])
    elif body is not None and isinstance(body.get("message"), str):
        errors = body.get("errors")
        reason = str(body["message"]) + (f": {json.dumps(errors)}" if errors else "")
    else:
        reason = " ".join(response.text.split()) or response.reason or f"HTTP {response.status_code}"
    return reason[:_MAX_REASON]


def _backoff(attempt: int, policy: RetryPolicy) -> float:
    # Full jitter: a storm of IMPAIRED events starts many Lambdas at once, and their retries must
    # spread out rather than hit a rate-limited API again in lockstep.
    ceiling = min(policy.max_delay, policy.base_delay * 2 ** (attempt - 1))
    return random.uniform(0.0, ceiling)  # noqa: S311  # nosec B311  # jitter, not cryptography


def _retry_after_seconds(value: str | None) -> float | None:
    """Retry-After as delay-seconds or an HTTP date (RFC 9110 §10.2.3); None when absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        seconds = (moment - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None
