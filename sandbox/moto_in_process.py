"""This process's AWS calls answered by moto's app directly, without a socket (`Sandbox(calls_over_http=False)`).

Every boto3 client in the sandbox's process (the sandbox's own, and the functions' it runs in process) points at the
moto server. Over HTTP each call costs a connection, a thread of the server and both sides of HTTP, which is about
half of what a call costs; and the sandbox makes dozens of calls per event. ``answered_in_process`` hands a request for
the server's address to the same WSGI application the server runs (the same moto state, the same one-DynamoDB-
request-at-a-time middleware), in the calling thread. Requests to anything else, and every request from another
process (a built function in its own interpreter, the parallel workers of tests/integration), still go over HTTP.

A request of a JSON protocol (DynamoDB, SQS, Secrets Manager, Step Functions, EventBridge, ECS...: a POST to `/`
that names its action in `X-Amz-Target`) is handed to the handler moto's server would route it to, found once per
service through the server's own dispatcher (the service from the request's signature, as the server finds it),
and called as the server's Flask view calls it, with the request's own URL: without building a WSGI environment,
nor Flask's request, routing and response for each call, which cost about as much as moto's own handling of a
small request. Errors are answered as the server answers them. Anything else (S3, Lambda's REST paths, moto's API)
goes through the application as before. The sandbox's moto server (and the one tests/integration/parallel.py runs)
answers the JSON-protocol requests it receives over HTTP the same way (`AnsweredDirectly`).

What changes is timing: a call answered in its thread holds the interpreter until it returns, so two threads' calls
made at the same moment run one after the other, where over HTTP both would be sent before either is answered. The
benchmarks that time the functions' own calls (first_page.py, press.py, storm.py) keep them over HTTP.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from http import HTTPStatus
from io import BytesIO
from typing import Any, Protocol, cast
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSRequest, AWSResponse, HeadersDict
from botocore.exceptions import ClientError
from botocore.httpsession import URLLib3Session
from moto.core.request import (
    PRESERVED_HEADER_NAMES_ENVIRON_KEY,
    environ_key_for_header,
    should_preserve_original_header_name,
)
from moto.core.request import Request as MotoRequest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from werkzeug.datastructures import EnvironHeaders
from werkzeug.exceptions import HTTPException
from werkzeug.test import EnvironBuilder, run_wsgi_app
from werkzeug.wsgi import get_current_url

WsgiApp = Callable[[dict[str, Any], Any], Any]

_lock = threading.Lock()
_apps: dict[str, WsgiApp] = {}
"""Endpoint (scheme://host:port) → the application that serves it in this process."""
_http_send = URLLib3Session.send


class _Body(BytesIO):
    """A response body botocore can read whole or stream."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        while chunk := self.read(65536):
            yield chunk


def _payload(body: Any) -> bytes:
    if hasattr(body, "read"):
        body = body.read()
    if isinstance(body, str):
        return body.encode()
    return bytes(body or b"")


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Dispatched(Protocol):
    """An application that can also name the moto server's dispatcher, and serialize a request as it would."""

    dispatcher: DomainDispatcherApplication

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any: ...

    def one_at_a_time(self, target: str) -> AbstractContextManager[None]: ...


_handlers: dict[str, Callable[..., Any] | None] = {}
"""The signature's region and service, and the target's prefix → the handler moto's server routes a POST to `/` to
(a response class's method: the same whichever dispatcher found it; as many as the services called)."""


def _handler(dispatcher: DomainDispatcherApplication, authorization: str, target: str) -> Callable[..., Any] | None:
    # Credential=<key id>/<date>/<region>/<service>/aws4_request: the region and service choose moto's backend
    scope = authorization.partition("Credential=")[2].split(",", 1)[0].split("/")
    key = f"{'/'.join(scope[2:4]) if len(scope) == 5 else authorization}|{target.split('.', 1)[0]}"
    if key not in _handlers:
        environ = {"PATH_INFO": "/", "HTTP_AUTHORIZATION": authorization, "HTTP_X_AMZ_TARGET": target}
        app = dispatcher.get_application(environ)
        try:
            endpoint, _ = app.url_map.bind("localhost").match("/", method="POST")
        except HTTPException:
            endpoint = None
        view = app.view_functions.get(endpoint) if endpoint else None
        _handlers[key] = getattr(view, "callback", None)
    return _handlers[key]


def answer(
    app: Dispatched, headers: dict[str, str], request: Callable[[], MotoRequest]
) -> tuple[int, dict[str, str], bytes] | None:
    """A JSON-protocol request (`_json_protocol`) answered by the handler moto's server routes it to (status, headers,
    body), as the server's view answers it, errors included; None when moto's server has no such handler."""
    target, authorization = headers["X-Amz-Target"], headers["Authorization"]
    handler = _handler(app.dispatcher, authorization, target)
    if handler is None:
        return None
    normalized = request()
    with app.one_at_a_time(target):
        try:
            result = handler(normalized, normalized.raw_url, dict(normalized.headers))
        except ClientError as exc:  # as the server's view answers it
            result = 400, {}, exc.response["Error"]["Message"]
        except HTTPException as exc:  # moto's service errors; Flask answers with the exception's own response
            result = exc.code or 500, dict(exc.get_headers()), exc.get_body()
    status, answer_headers, content = result if len(result) == 3 else (200, {}, result)
    answered = content.encode() if isinstance(content, str) else bytes(content or b"")
    return int(status), {name: str(value) for name, value in answer_headers.items()}, answered


class _ServerRequest(MotoRequest):
    """A request as moto's server hands it to a handler (its Flask app's request class says so too)."""

    from_wsgi_server = True


def _json_protocol(method: str, url: str, headers: dict[str, str]) -> bool:
    """A signed POST to `/` naming its action in X-Amz-Target (checked before anything reads a body)."""
    return (
        method == "POST"
        and bool(headers.get("X-Amz-Target"))
        and bool(headers.get("Authorization"))
        and urlsplit(url).path in ("", "/")
    )


def _answer_directly(app: Dispatched, request: AWSRequest | AWSPreparedRequest, url: str) -> AWSResponse | None:
    headers = {name: _text(value) for name, value in request.headers.items()}
    if not _json_protocol(str(request.method), url, headers):
        return None  # (its body, perhaps a stream, is left for the application to read)
    answered = answer(app, headers, lambda: _request(url, headers, _payload(request.body)))
    if answered is None:
        return None
    status, answer_headers, body = answered
    return AWSResponse(url, status, HeadersDict(answer_headers), _Body(body))  # type: ignore[arg-type]


def _request(url: str, headers: dict[str, str], body: bytes) -> MotoRequest:
    """MotoRequest.from_primitives("POST", ...), with the WSGI environment werkzeug's EnvironBuilder would make written
    out (the builder cost a tenth of a small DynamoDB call)."""
    parts = urlsplit(url)  # (a JSON-protocol request's path is "" or "/": nothing to quote)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": "POST",
        "SCRIPT_NAME": "",
        "PATH_INFO": parts.path,
        "QUERY_STRING": parts.query,
        "REQUEST_URI": parts.path,
        "RAW_URI": parts.path,
        "SERVER_NAME": parts.hostname,
        "SERVER_PORT": str(parts.port or (443 if parts.scheme == "https" else 80)),
        "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": parts.netloc,
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": parts.scheme,
        "wsgi.input": BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    environ.update((environ_key_for_header(name), value) for name, value in headers.items())
    environ.pop("HTTP_TRANSFER_ENCODING", None)
    environ[PRESERVED_HEADER_NAMES_ENVIRON_KEY] = {
        environ_key_for_header(name): name for name in headers if should_preserve_original_header_name(name)
    }
    return MotoRequest(environ)


class AnsweredDirectly:
    """WSGI, for a moto server: the JSON-protocol requests it receives answered by `answer`, the rest by `app`."""

    def __init__(self, app: Dispatched) -> None:
        self.app = app

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if not environ.get("HTTP_X_AMZ_TARGET"):  # (most of what is not a JSON protocol, at no cost)
            return self.app(environ, start_response)
        headers = dict(EnvironHeaders(environ).items())
        url = get_current_url(environ)
        if _json_protocol(str(environ.get("REQUEST_METHOD")), url, headers):
            environ["wsgi.input"] = BytesIO(environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0)))
            answered = answer(self.app, headers, lambda: _ServerRequest(environ))
            if answered is not None:
                status, answer_headers, content = answered
                listed = [(k, v) for k, v in answer_headers.items() if k.lower() != "content-length"]
                start_response(f"{status} {_phrase(status)}", [*listed, ("Content-Length", str(len(content)))])
                return [content]
            environ["wsgi.input"].seek(0)  # (the application reads it again)
        return self.app(environ, start_response)


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _send(session: URLLib3Session, request: AWSRequest | AWSPreparedRequest) -> AWSResponse:
    url = str(request.url)
    parts = urlsplit(url)
    app = _apps.get(f"{parts.scheme}://{parts.netloc}")
    if app is None:
        return _http_send(session, request)
    if hasattr(app, "dispatcher") and (answered := _answer_directly(cast(Dispatched, app), request, url)) is not None:
        return answered
    environ = EnvironBuilder(
        path=parts.path or "/",
        base_url=f"{parts.scheme}://{parts.netloc}",
        query_string=parts.query,
        method=str(request.method),
        headers=[(name, _text(value)) for name, value in request.headers.items()],
        data=_payload(request.body),
    ).get_environ()
    answer, status, headers = run_wsgi_app(app, environ, buffered=True)
    try:
        content = b"".join(answer)
    finally:
        close = getattr(answer, "close", None)
        if close is not None:
            close()
    return AWSResponse(url, int(status.split(" ", 1)[0]), HeadersDict(headers), _Body(content))  # type: ignore[arg-type]


@contextmanager
def answered_in_process(endpoint: str, app: WsgiApp) -> Iterator[None]:
    """While open, this process's requests to `endpoint` are answered by `app` in the calling thread."""
    with _lock:
        if not _apps:
            setattr(URLLib3Session, "send", _send)  # noqa: B010  # a method of botocore's, for a while
        _apps[endpoint] = app
    try:
        yield
    finally:
        with _lock:
            _apps.pop(endpoint, None)
            if not _apps:
                setattr(URLLib3Session, "send", _http_send)  # noqa: B010
