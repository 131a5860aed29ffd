"""The parallel-worker tests' moto server (tests/integration/parallel.py): HTTP/1.1 as botocore speaks it."""

from __future__ import annotations

import http.client
import threading
from typing import Any

from tests.integration.parallel import _serve_one_at_a_time, free_port, wait_for


def _app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """Echoes the request's method, path, query and body; fails on /fail."""
    if environ["PATH_INFO"] == "/fail":
        raise RuntimeError("the application failed")
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']} {environ['QUERY_STRING']} ".encode(), body]


def test_requests_on_one_kept_connection_an_application_error_and_a_body_sent_after_100_continue() -> None:
    port = free_port()
    threading.Thread(target=_serve_one_at_a_time, args=(port, _app), daemon=True).start()
    wait_for(port)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)

    # Given one connection, When three requests are sent on it, one of them failing in the application
    answers = []
    for method, path, body in [("POST", "/a%20b?x=1", b"first"), ("GET", "/fail", None), ("PUT", "/c", b"third")]:
        connection.request(method, path, body=body)
        response = connection.getresponse()
        answers.append((response.status, response.read()))
    # Then each is answered in turn on the same connection, the failure as a 500 naming it
    assert answers[0] == (200, b"POST /a b x=1 first")
    assert answers[1][0] == 500 and b"the application failed" in answers[1][1]
    assert answers[2] == (200, b"PUT /c  third")

    # And a request that waits for 100 Continue before its body gets it, then its answer
    connection.putrequest("PUT", "/d")
    connection.putheader("Content-Length", "4")
    connection.putheader("Expect", "100-continue")
    connection.endheaders()
    assert connection.sock.recv(64) == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.send(b"body")
    response = connection.getresponse()
    assert (response.status, response.read()) == (200, b"PUT /d  body")
    connection.close()
