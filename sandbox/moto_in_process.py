"""This process's AWS calls answered by moto's app directly, without a socket (`Sandbox(calls_over_http=False)`).

Every boto3 client in the sandbox's process (the sandbox's own, and the functions' it runs in process) points at the
moto server. Over HTTP each call costs a connection, a thread of the server and both sides of HTTP, which is about
half of what a call costs; and the sandbox makes dozens of calls per event. ``answered_in_process`` hands a request for
the server's address to the same WSGI application the server runs (the same moto state, the same one-DynamoDB-
request-at-a-time middleware), in the calling thread. Requests to anything else, and every request from another
process (a built function in its own interpreter, the parallel workers of tests/integration), still go over HTTP.

What changes is timing: a call answered in its thread holds the interpreter until it returns, so two threads' calls
made at the same moment run one after the other, where over HTTP both would be sent before either is answered. The
benchmarks that time the functions' own calls (first_page.py, press.py, storm.py) keep them over HTTP.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from io import BytesIO
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSRequest, AWSResponse, HeadersDict
from botocore.httpsession import URLLib3Session
from werkzeug.test import EnvironBuilder, run_wsgi_app

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


def _send(session: URLLib3Session, request: AWSRequest | AWSPreparedRequest) -> AWSResponse:
    url = str(request.url)
    parts = urlsplit(url)
    app = _apps.get(f"{parts.scheme}://{parts.netloc}")
    if app is None:
        return _http_send(session, request)
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
