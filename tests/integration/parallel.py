"""Real parallel worker processes against one moto server: the harness of tests/integration/test_concurrency.py and
tests/integration/test_reconcile_race.py (where a worker may run the reconciliation sweep instead of events).

- `serve_moto` runs moto in a process of its own, answering one request at a time. DynamoDB applies each
  conditional write atomically; moto's threaded server checks a condition and writes in two steps that two
  requests can interleave, so a threaded moto would test moto's races, not ours. Serving one request at a
  time keeps every write atomic while the workers still race each other between requests, as on AWS.
- `Workers` starts N processes, each with its own AlertRouter (its own imports, clients, caches: a cold
  Lambda execution environment), and hands them the same events at the same moment (a barrier). A record
  that fails is handed again later, as SQS would redeliver it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

ROOT = Path(__file__).resolve().parents[2]
MAX_RECEIVES = 5


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def serve_moto(port: int) -> None:
    """moto on loopback, one request at a time (see the module docstring)."""
    # Imported in the server's own process only.
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app  # noqa: PLC0415

    from sandbox import moto_dynamodb  # noqa: PLC0415
    from sandbox.moto_in_process import AnsweredDirectly  # noqa: PLC0415
    from sandbox.session import _AtomicDynamoDB  # noqa: PLC0415

    moto_dynamodb.install()
    # (as the sandbox's server answers: JSON-protocol requests straight to their moto handler, without Flask)
    app = AnsweredDirectly(_AtomicDynamoDB(DomainDispatcherApplication(create_backend_app)))
    _serve_one_at_a_time(port, app)


def _serve_one_at_a_time(port: int, app: Any) -> None:
    """HTTP/1.1 on loopback for `app` (WSGI), one request at a time, connections kept open between requests.

    werkzeug's server, unthreaded, speaks HTTP/1.0: a new connection for every request, each parsed by http.server,
    which cost the server (the one process every worker waits on) about a fifth of its time. Requests here are
    what botocore sends: a request line, headers, and a body of Content-Length bytes (after a 100 Continue, when the
    request asks for one)."""
    import selectors  # noqa: PLC0415
    from io import BytesIO  # noqa: PLC0415
    from urllib.parse import unquote  # noqa: PLC0415

    listener = socket.create_server(("127.0.0.1", port), backlog=128)
    listener.setblocking(False)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    buffers: dict[socket.socket, bytearray] = {}
    continued: set[socket.socket] = set()  # connections told to send the body of the request they are sending

    def parsed(head: bytes) -> tuple[str, dict[str, str]]:
        """The request line, and the headers as a WSGI environment names them (CONTENT_TYPE, HTTP_X_AMZ_TARGET...)."""
        request_line, *lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines:
            name, _, value = line.partition(":")
            key = name.strip().upper().replace("-", "_")
            headers[key if key in ("CONTENT_TYPE", "CONTENT_LENGTH") else f"HTTP_{key}"] = value.strip()
        return request_line, headers

    def answer(connection: socket.socket, request_line: str, headers: dict[str, str], body: bytes) -> bool:
        """Writes the response; False when the connection is to be closed."""
        method, target, version = request_line.split(" ", 2)
        path, _, query = target.partition("?")
        environ: dict[str, Any] = {
            "REQUEST_METHOD": method,
            "SCRIPT_NAME": "",
            "PATH_INFO": unquote(path),
            "QUERY_STRING": query,
            "RAW_URI": target,
            "REQUEST_URI": target,
            "SERVER_NAME": "127.0.0.1",
            "SERVER_PORT": str(port),
            "SERVER_PROTOCOL": version,
            "REMOTE_ADDR": "127.0.0.1",
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": "http",
            "wsgi.input": BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": False,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
            **headers,
        }
        status_headers: list[Any] = []

        def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            status_headers[:] = [status, headers]
            return lambda _: None

        try:
            result = app(environ, start_response)
            try:
                content = b"".join(result)
            finally:
                getattr(result, "close", lambda: None)()
            status, headers = status_headers
        except Exception:  # as werkzeug answers an application's error: a 500, and the server goes on
            failure = traceback.format_exc()
            print(failure, file=sys.stderr)
            status, headers, content = "500 Internal Server Error", [("Content-Type", "text/plain")], failure.encode()
        keep = environ.get("HTTP_CONNECTION", "").lower() != "close" and version == "HTTP/1.1"
        listed = [(k, v) for k, v in headers if k.lower() not in ("content-length", "connection")]
        listed += [("Content-Length", str(len(content))), ("Connection", "keep-alive" if keep else "close")]
        response = f"HTTP/1.1 {status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in listed) + "\r\n"
        connection.setblocking(True)
        connection.sendall(response.encode("latin-1") + content)
        connection.setblocking(False)
        return keep

    def close(connection: socket.socket) -> None:
        selector.unregister(connection)
        buffers.pop(connection, None)
        continued.discard(connection)
        connection.close()

    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                with contextlib.suppress(BlockingIOError):
                    connection, _ = listener.accept()
                    connection.setblocking(False)
                    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    selector.register(connection, selectors.EVENT_READ)
                    buffers[connection] = bytearray()
                continue
            connection = cast(socket.socket, key.fileobj)
            try:
                chunk = connection.recv(1 << 16)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                close(connection)
                continue
            if not chunk:
                close(connection)
                continue
            buffer = buffers[connection]
            buffer += chunk
            while (end := buffer.find(b"\r\n\r\n")) >= 0:
                request_line, headers = parsed(bytes(buffer[:end]))
                if "HTTP_TRANSFER_ENCODING" in headers:
                    raise NotImplementedError(f"a chunked request body ({request_line!r}): not served here")
                length = int(headers.get("CONTENT_LENGTH") or 0)
                if len(buffer) < end + 4 + length:
                    if headers.get("HTTP_EXPECT", "").lower() == "100-continue" and connection not in continued:
                        # (botocore waits for it, a second at most, before it sends an S3 object's body)
                        continued.add(connection)
                        with contextlib.suppress(OSError):  # (a client gone is found at its next read)
                            connection.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
                    break  # the rest of the body is still on its way
                continued.discard(connection)
                body = bytes(buffer[end + 4 : end + 4 + length])
                del buffer[: end + 4 + length]
                try:
                    keep = answer(connection, request_line, headers, body)
                except OSError:  # the client went away before its answer was sent
                    keep = False
                if not keep:
                    close(connection)
                    break


def _worker(environment: Mapping[str, str], barrier: Any, inbox: Connection) -> None:
    os.environ.update(environment)
    sys.path[:0] = [str(ROOT / "layers" / "common"), str(ROOT)]
    logging.disable(logging.CRITICAL)  # the parent judges by what reached Slack, PagerDuty and the table
    # Imported after the environment is set, as Lambda does (Powertools reads it at import).
    from fault_responder.wiring.alert_router import alert_router  # noqa: PLC0415

    router = alert_router()
    while True:
        job = inbox.recv()
        if job is None:
            return
        if isinstance(job, dict) and "sweep" in job:
            barrier.wait()
            router.start_invocation(60.0)
            router.sweep()
            inbox.send(("done", 0))
            continue
        if isinstance(job, dict) and "reconcile" in job:
            barrier.wait()
            router.start_invocation(60.0)
            inbox.send(("done", _reconcile(router, job["reconcile"]["cluster"], job["reconcile"]["observed"])))
            continue
        delay = 0.0
        if isinstance(job, dict):
            job, delay = job["events"], float(job.get("delay", 0.0))
        bodies: list[str] = job
        failed = 0
        barrier.wait()
        time.sleep(delay)
        pending = [(body, 1) for body in bodies]
        while pending:
            body, receive = pending.pop(0)
            try:
                router.start_invocation(60.0)
                router.process_record(body, f"msg-{os.getpid()}-{receive}", receive)
            except Exception:
                failed += 1
                if receive < MAX_RECEIVES:
                    pending.append((body, receive + 1))
                else:
                    inbox.send(("error", traceback.format_exc()))
        inbox.send(("done", failed))


def _reconcile(router: Any, cluster: str, observed: list[dict[str, Any]]) -> int:
    """A run of the reconciliation sweep over the worker's own alert service, ECS answering with `observed`
    (ObservedInstance fields, datetimes as ISO text); a run that failed on an instance runs again, as its next
    schedule would. Returns the failed attempts."""
    from datetime import datetime  # noqa: PLC0415

    from fault_responder.operations.reconcile import Described, ObservedCheck, ObservedInstance, Reconciler  # noqa: PLC0415

    instances = [
        ObservedInstance(
            **{
                **fields,
                "checks": tuple(
                    ObservedCheck(
                        **{
                            **check,
                            "last_status_change": datetime.fromisoformat(check["last_status_change"]),
                            "last_updated": datetime.fromisoformat(check["last_updated"]),
                        }
                    )
                    for check in fields["checks"]
                ),
            }
        )
        for fields in observed
    ]

    class Answering:
        """ECS's answer for this run: these instances, listed and described (their health included)."""

        def clusters(self) -> Any:
            return iter([cluster])

        def instance_pages(self, _: str) -> Any:
            return iter([[instance.container_instance_arn for instance in instances]])

        def describe(self, _: str, arns: Any) -> Described:
            return Described(instances=[i for i in instances if i.container_instance_arn in arns])

    service = router.service
    failed = 0
    for _ in range(MAX_RECEIVES):
        tally = Reconciler(
            inventory=Answering(),
            records=service.store,
            observe=lambda facts, left: service.observe(facts, seconds_left=left),
            clusters=[cluster],
            epoch=time.time,
        ).run(started=datetime.now().astimezone(), seconds_left=60.0)
        failed += tally["failed"]
        if not tally["failed"]:
            break
    return failed


class Workers:
    """N worker processes, each a cold AlertRouter; `run` gives each the same events at the same moment."""

    def __init__(self, count: int, environment: Mapping[str, str]) -> None:
        context = multiprocessing.get_context("spawn")
        self.barrier = context.Barrier(count)
        self.pipes: list[Connection] = []
        self.processes = []
        for _ in range(count):
            parent, child = context.Pipe()
            process = context.Process(target=_worker, args=(dict(environment), self.barrier, child), daemon=True)
            process.start()
            self.pipes.append(parent)
            self.processes.append(process)

    def run(self, orders: list[list[dict[str, Any]]]) -> int:
        """Each worker handles its list of events (at once with the others); returns the failed attempts."""
        return self.run_jobs([[json.dumps(event) for event in events] for events in orders])

    def run_jobs(self, jobs: list[Any]) -> int:
        """Each worker does its job at the same moment as the others: a list of event bodies (or {"events": [...],
        "delay": seconds} to start that much later), a run of the reconciliation sweep ({"reconcile":
        {"cluster": ..., "observed": [...]}}), or a run of the sweep ({"sweep": True}); returns the failed attempts."""
        for pipe, job in zip(self.pipes, jobs, strict=True):
            pipe.send(job)
        failed = 0
        for pipe in self.pipes:
            kind, value = pipe.recv()
            if kind == "error":
                raise AssertionError(f"a worker gave up on a record:\n{value}")
            failed += int(value)
        return failed

    def close(self) -> None:
        for pipe in self.pipes:
            pipe.send(None)
        for process in self.processes:
            process.join(timeout=10)


def wait_for(port: int, seconds: float = 15.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def moto_client(service: str, endpoint: str, region: str = "us-east-1") -> Any:
    """A boto3 client for the moto server at `endpoint`, with moto's fake credentials."""
    import boto3  # noqa: PLC0415  (the workers import it themselves, after their environment is set)

    return boto3.client(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # nosec B106  # moto's fake credentials
    )
