"""Slack and PagerDuty clients over real HTTP against the local stand-ins: retries, errors, secrets."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from fault_responder.adapters.http import RetryPolicy
from fault_responder.adapters.notifiers import SecretChannels
from fault_responder.adapters.pagerduty import PagerDutyEvents
from fault_responder.adapters.slack import SlackWebApi, SlackWebhook
from fault_responder.notification.contract import DeliveryError
from fault_responder.notification.render.blocks import SlackMessage
from fault_responder.notification.render.pagerduty import render_alert_trigger, render_resolve, render_trigger
from fault_responder.notification.render.slack import (
    render_alert,
    render_incident_root,
    render_superseded_alert,
    render_timeline_reply,
    render_webhook_step,
)
from sandbox.errors import SandboxError
from sandbox.standins import DEFAULT_SLACK_TOKEN, SANDBOX_ROUTING_KEY, WEBHOOK_CHANNEL, StandIns
from tests.builders import an_alert, an_incident, draining, resolved

WEBHOOK_SECRET = "sandboxwebhooksecret"
FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.02, connect_timeout=1.0, read_timeout=2.0)
MESSAGE = SlackMessage(text="hello", blocks=[{"type": "section", "text": {"type": "mrkdwn", "text": "hello"}}])


class SleepRecorder:
    """Stands in for time.sleep: records the waits instead of taking them."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleep() -> SleepRecorder:
    return SleepRecorder()


@pytest.fixture
def stand_ins() -> Iterator[StandIns]:
    with StandIns() as running:
        yield running


def slack_api(stand_ins: StandIns, sleep: SleepRecorder, token: str = DEFAULT_SLACK_TOKEN) -> SlackWebApi:
    return SlackWebApi(token, base_url=stand_ins.slack_api_url, policy=FAST, sleep=sleep)


def statuses(stand_ins: StandIns) -> list[int]:
    return [request["status"] for request in stand_ins.requests]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


# --- Slack Web API -----------------------------------------------------------------------------


def test_root_reply_and_update_build_one_thread(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    # Given an incident posted to a channel by name
    api = slack_api(stand_ins, sleep)
    incident = an_incident()
    root = api.post_message("#gpu-alerts", render_incident_root(incident))

    # When a step is replied in its thread and the root is updated to the resolved status
    api.post_message(root.channel, render_timeline_reply(incident, incident.timeline[0]), thread_ts=root.ts)
    api.update_message(root.channel, root.ts, render_incident_root(resolved(draining(incident))))

    # Then the channel holds the root (edited once, now RESOLVED) and one reply in its thread
    root_message, reply = stand_ins.slack_channels()["gpu-alerts"]
    assert root.channel.startswith("C0SANDBOX")
    assert reply["thread_ts"] == root.ts
    assert len(root_message["edits"]) == 1
    assert root_message["blocks"][0]["text"]["text"].startswith(":white_check_mark: RESOLVED")


def test_web_api_calls_declare_utf8_json(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE)

    (request,) = stand_ins.requests
    assert "warning" not in request["response"]


def test_rate_limited_post_waits_for_retry_after(sleep: SleepRecorder) -> None:
    # Given Slack answers the first request with 429 and Retry-After: 1
    with StandIns(faults={"slack": [429]}) as stand_ins:
        # When a message is posted
        ref = slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE)

        # Then the client waited exactly what Slack asked, then succeeded
        assert sleep.calls == [1.0]
        assert statuses(stand_ins) == [429, 200]
        assert ref.ts


def test_server_error_is_retried_with_jittered_backoff(sleep: SleepRecorder) -> None:
    with StandIns(faults={"slack": [500]}) as stand_ins:
        slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE)

        assert statuses(stand_ins) == [500, 200]
        assert len(sleep.calls) == 1
        assert 0.0 <= sleep.calls[0] <= FAST.base_delay


def test_ok_false_internal_error_is_retried(sleep: SleepRecorder) -> None:
    with StandIns(faults={"slack": ["ok_false"]}) as stand_ins:
        slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE)

        assert [request["response"]["ok"] for request in stand_ins.requests] == [False, True]


def test_unknown_channel_is_a_permanent_failure_sent_once(sleep: SleepRecorder) -> None:
    # Given a workspace that only has #gpu-alerts
    with StandIns(known_channels={"gpu-alerts"}) as stand_ins:
        # When a message is posted to a channel that does not exist
        with pytest.raises(DeliveryError) as raised:
            slack_api(stand_ins, sleep).post_message("#no-such-channel", MESSAGE)

        # Then the HTTP 200 `ok: false` is a permanent failure, not retried
        assert raised.value.status == 200
        assert raised.value.reason == "channel_not_found"
        assert raised.value.retryable is False
        assert len(stand_ins.requests) == 1
        assert sleep.calls == []


def test_bad_token_is_a_permanent_failure_that_does_not_leak_the_token(
    stand_ins: StandIns, sleep: SleepRecorder
) -> None:
    with pytest.raises(DeliveryError) as raised:
        slack_api(stand_ins, sleep, token="xoxb-wrong-token").post_message("gpu-alerts", MESSAGE)

    assert raised.value.reason == "invalid_auth"
    assert raised.value.retryable is False
    assert "xoxb" not in str(raised.value)


def test_reply_to_an_unknown_thread_is_refused(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    with pytest.raises(DeliveryError, match="thread_not_found"):
        slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE, thread_ts="1600000000.000100")


def test_update_of_an_unknown_message_is_refused(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    with pytest.raises(DeliveryError, match="message_not_found"):
        slack_api(stand_ins, sleep).update_message("gpu-alerts", "1600000000.000100", MESSAGE)


def test_every_rendered_message_passes_slack_validation(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    # Given every kind of message the renderers produce
    incident = an_incident()
    messages = [render_incident_root(incident), render_alert(an_alert())]
    closed = resolved(draining(incident))
    messages += [render_incident_root(closed)]
    messages += [render_timeline_reply(closed, entry) for entry in closed.timeline]
    messages += [render_webhook_step(closed, entry) for entry in closed.timeline]
    messages += [render_superseded_alert(an_alert(), closed)]

    # When each is posted, Then Slack's block validation accepts it
    api = slack_api(stand_ins, sleep)
    for message in messages:
        api.post_message("gpu-alerts", message)
    assert statuses(stand_ins) == [200] * len(messages)


# --- Slack incoming webhook --------------------------------------------------------------------


def test_webhook_post_lands_in_the_webhook_channel(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    SlackWebhook(stand_ins.slack_webhook_url, policy=FAST, sleep=sleep).post(MESSAGE)

    assert [m["text"] for m in stand_ins.slack_channels()[WEBHOOK_CHANNEL]] == ["hello"]


def test_webhook_with_a_wrong_secret_is_a_permanent_failure(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    url = stand_ins.slack_webhook_url.replace(WEBHOOK_SECRET, "revokedsecret")

    with pytest.raises(DeliveryError) as raised:
        SlackWebhook(url, policy=FAST, sleep=sleep).post(MESSAGE)

    assert (raised.value.status, raised.value.reason, raised.value.retryable) == (404, "no_service", False)
    assert "revokedsecret" not in str(raised.value)
    assert len(stand_ins.requests) == 1


def test_webhook_invalid_blocks_are_a_permanent_failure(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    too_long = SlackMessage(text="x", blocks=[{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}])

    with pytest.raises(DeliveryError) as raised:
        SlackWebhook(stand_ins.slack_webhook_url, policy=FAST, sleep=sleep).post(too_long)

    assert (raised.value.status, raised.value.reason, raised.value.retryable) == (400, "invalid_blocks", False)


def test_webhook_server_errors_are_retried_until_attempts_are_spent(sleep: SleepRecorder) -> None:
    with StandIns(faults={"slack": [500, 500, 500]}) as stand_ins:
        with pytest.raises(DeliveryError) as raised:
            SlackWebhook(stand_ins.slack_webhook_url, policy=FAST, sleep=sleep).post(MESSAGE)

        assert (raised.value.status, raised.value.retryable) == (500, True)
        assert len(stand_ins.requests) == FAST.max_attempts
        assert len(sleep.calls) == FAST.max_attempts - 1


def test_retry_logs_name_the_service_but_not_the_webhook_url(
    sleep: SleepRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    with StandIns(faults={"slack": [503]}) as stand_ins, caplog.at_level(logging.DEBUG):
        SlackWebhook(stand_ins.slack_webhook_url, policy=FAST, sleep=sleep).post(MESSAGE)

    assert "slack delivery attempt 1/3 failed" in caplog.text
    assert WEBHOOK_SECRET not in caplog.text


# --- PagerDuty ---------------------------------------------------------------------------------


def pagerduty(stand_ins: StandIns, sleep: SleepRecorder) -> PagerDutyEvents:
    return PagerDutyEvents(stand_ins.pagerduty_url, policy=FAST, sleep=sleep)


def test_trigger_returns_the_dedup_key_and_opens_an_alert(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    dedup_key = pagerduty(stand_ins, sleep).send(render_trigger(an_incident(), SANDBOX_ROUTING_KEY))

    assert dedup_key == "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE"
    (alert,) = stand_ins.pagerduty_alerts()
    assert (alert["status"], alert["severity"]) == ("triggered", "critical")
    assert stand_ins.requests[0]["effect"] == "opened"


def test_update_trigger_appends_and_resolve_closes_the_alert(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    events = pagerduty(stand_ins, sleep)
    incident = an_incident()

    events.send(render_trigger(incident, SANDBOX_ROUTING_KEY))
    events.send(render_trigger(incident, SANDBOX_ROUTING_KEY))
    events.send(render_resolve(incident.dedup_key, SANDBOX_ROUTING_KEY))

    assert [request["effect"] for request in stand_ins.requests] == ["opened", "appended", "resolved"]
    assert stand_ins.pagerduty_alerts()[0]["status"] == "resolved"


def test_resolve_for_no_open_alert_is_accepted_and_dropped(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    dedup_key = pagerduty(stand_ins, sleep).send(render_resolve(an_incident().dedup_key, SANDBOX_ROUTING_KEY))

    assert dedup_key == "gpu-training/a1b2c3d4e5f6/ACCELERATED_COMPUTE"
    assert stand_ins.requests[0]["effect"] == "dropped"
    assert stand_ins.pagerduty_alerts() == []


def test_standalone_alert_trigger_is_accepted(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    event = render_alert_trigger(an_alert(), SANDBOX_ROUTING_KEY, "standalone/evt-manual")

    assert pagerduty(stand_ins, sleep).send(event) == "standalone/evt-manual"


def test_unknown_routing_key_is_a_permanent_failure(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    unknown_key = "f" * 32

    with pytest.raises(DeliveryError) as raised:
        pagerduty(stand_ins, sleep).send(render_trigger(an_incident(), unknown_key))

    assert (raised.value.status, raised.value.retryable) == (400, False)
    assert "Invalid routing key" in raised.value.reason
    assert unknown_key not in str(raised.value)
    assert len(stand_ins.requests) == 1


def test_pagerduty_throttling_waits_for_retry_after(sleep: SleepRecorder) -> None:
    with StandIns(faults={"pagerduty": [429, 502]}) as stand_ins:
        pagerduty(stand_ins, sleep).send(render_trigger(an_incident(), SANDBOX_ROUTING_KEY))

        assert statuses(stand_ins) == [429, 502, 202]
        assert sleep.calls[0] == 1.0


def test_retry_after_longer_than_the_cap_is_left_to_the_queue(sleep: SleepRecorder) -> None:
    # Given a policy that will not wait more than half a second, and a 429 asking for one second
    patient_half_second = RetryPolicy(max_attempts=3, max_retry_after=0.5)
    with StandIns(faults={"pagerduty": [429]}) as stand_ins:
        events = PagerDutyEvents(stand_ins.pagerduty_url, policy=patient_half_second, sleep=sleep)

        # When an event is sent
        with pytest.raises(DeliveryError) as raised:
            events.send(render_trigger(an_incident(), SANDBOX_ROUTING_KEY))

        # Then it fails at once as retryable, without retrying early or sleeping in the Lambda
        assert (raised.value.status, raised.value.retryable) == (429, True)
        assert "Retry-After 1s exceeds 0.5s" in raised.value.reason
        assert sleep.calls == []
        assert len(stand_ins.requests) == 1


# --- Transport ---------------------------------------------------------------------------------


def test_connection_refused_is_retryable_after_the_last_attempt(sleep: SleepRecorder) -> None:
    events = PagerDutyEvents(f"http://127.0.0.1:{closed_port()}/v2/enqueue", policy=FAST, sleep=sleep)

    with pytest.raises(DeliveryError) as raised:
        events.send(render_resolve(an_incident().dedup_key, SANDBOX_ROUTING_KEY))

    assert (raised.value.status, raised.value.reason, raised.value.retryable) == (None, "ConnectionError", True)
    assert len(sleep.calls) == FAST.max_attempts - 1
    assert raised.value.__cause__ is None
    assert raised.value.__context__ is None


def test_a_server_that_never_answers_hits_the_read_timeout(sleep: SleepRecorder) -> None:
    # Given a socket that accepts connections (the kernel completes the handshake) but never answers
    impatient = RetryPolicy(max_attempts=2, connect_timeout=0.5, read_timeout=0.2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/{WEBHOOK_SECRET}"

        # When a webhook post is attempted
        started = time.monotonic()
        with pytest.raises(DeliveryError) as raised:
            SlackWebhook(url, policy=impatient, sleep=sleep).post(MESSAGE)

    # Then each attempt gave up after the read timeout, and the error is retryable and secret-free
    assert (raised.value.reason, raised.value.retryable) == ("ReadTimeout", True)
    assert time.monotonic() - started < 2.0
    assert WEBHOOK_SECRET not in str(raised.value)


class OneShotServer:
    """A loopback socket server that answers each connection with `reply(request_bytes)` (or hangs up on
    None), in a thread, and keeps what it read."""

    def __init__(self, reply: Callable[[bytes], bytes | None], tls: ssl.SSLContext | None = None) -> None:
        self._reply = reply
        self._tls = tls
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        self._socket.settimeout(0.05)
        self._stop = threading.Event()
        self.received: list[bytes] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def origin(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self._socket.getsockname()[1]}"

    def __enter__(self) -> OneShotServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._socket.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._socket.accept()
            except TimeoutError:
                continue
            with contextlib.suppress(OSError), connection:
                stream = self._tls.wrap_socket(connection, server_side=True) if self._tls else connection
                stream.settimeout(2)
                request = _read_request(stream)
                self.received.append(request)
                answer = self._reply(request)
                if answer is not None:
                    stream.sendall(answer)


def _read_request(stream: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = stream.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")),
        0,
    )
    while len(body) < length:
        chunk = stream.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


def test_a_connection_dropped_after_a_post_is_an_unknown_outcome_and_not_posted_again(sleep: SleepRecorder) -> None:
    # Given a Slack that reads the request and hangs up without answering
    # When a message is posted
    with OneShotServer(lambda request: None) as server, pytest.raises(DeliveryError) as raised:
        SlackWebApi(DEFAULT_SLACK_TOKEN, base_url=server.origin, policy=FAST, sleep=sleep).post_message(
            "#gpu-alerts", MESSAGE
        )

    # Then the post may have landed: it is not sent again here, and the caller is told to look before reposting
    assert (raised.value.reason, raised.value.retryable, raised.value.unknown_outcome) == (
        "ConnectionAborted",
        True,
        True,
    )
    assert len(server.received) == 1 and sleep.calls == []
    assert DEFAULT_SLACK_TOKEN not in str(raised.value)


def test_a_dropped_connection_is_retried_for_an_idempotent_pagerduty_event(sleep: SleepRecorder) -> None:
    # Given a PagerDuty endpoint that hangs up on every request
    # When an event (deduplicated by PagerDuty, so safe to send again) is sent
    with OneShotServer(lambda request: None) as server, pytest.raises(DeliveryError) as raised:
        PagerDutyEvents(f"{server.origin}/v2/enqueue", policy=FAST, sleep=sleep).send(
            render_resolve(an_incident().dedup_key, SANDBOX_ROUTING_KEY)
        )

    # Then every attempt was made, and the error stays retryable for the queue
    assert (raised.value.reason, raised.value.retryable) == ("ConnectionAborted", True)
    assert len(server.received) == FAST.max_attempts


def test_a_redirect_is_not_followed(sleep: SleepRecorder) -> None:
    # Given an endpoint that redirects elsewhere
    with OneShotServer(lambda request: None) as elsewhere:
        moved = (
            f"HTTP/1.1 307 Temporary Redirect\r\nLocation: {elsewhere.origin}/v2/enqueue\r\nContent-Length: 0\r\n\r\n"
        )
        # When an event is sent
        with OneShotServer(lambda request: moved.encode()) as server, pytest.raises(DeliveryError) as raised:
            PagerDutyEvents(f"{server.origin}/v2/enqueue", policy=FAST, sleep=sleep).send(
                render_resolve(an_incident().dedup_key, SANDBOX_ROUTING_KEY)
            )

        # Then the payload (and its routing key) went nowhere we did not choose, and the error is permanent
        assert (raised.value.status, raised.value.retryable) == (307, False)
        assert elsewhere.received == [] and len(server.received) == 1


def test_a_certificate_that_is_not_trusted_is_refused_before_anything_is_sent(
    tmp_path: Path, sleep: SleepRecorder
) -> None:
    # Given an HTTPS endpoint whose certificate no public CA signed
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(*self_signed_certificate(tmp_path))
    accepted = b"HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n"
    # When an event is sent to it
    with OneShotServer(lambda request: accepted, tls=tls) as server, pytest.raises(DeliveryError) as raised:
        PagerDutyEvents(f"{server.origin}/v2/enqueue", policy=FAST, sleep=sleep).send(
            render_resolve(an_incident().dedup_key, SANDBOX_ROUTING_KEY)
        )

    # Then the handshake failed on the certificate and the routing key never left this process
    assert (raised.value.status, raised.value.reason) == (None, "SSLError")
    assert all(SANDBOX_ROUTING_KEY.encode() not in request for request in server.received)


def self_signed_certificate(directory: Path) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by its own key: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(key, hashes.SHA256())
    )
    certificate_file, key_file = directory / "cert.pem", directory / "key.pem"
    certificate_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(certificate_file), str(key_file)


# --- Recording ---------------------------------------------------------------------------------


def test_recorded_requests_never_contain_secrets(sleep: SleepRecorder) -> None:
    # Given traffic to all three services, including injected faults
    with StandIns(faults={"slack": [429], "pagerduty": [500]}) as stand_ins:
        slack_api(stand_ins, sleep).post_message("gpu-alerts", MESSAGE)
        SlackWebhook(stand_ins.slack_webhook_url, policy=FAST, sleep=sleep).post(MESSAGE)
        pagerduty(stand_ins, sleep).send(render_trigger(an_incident(), SANDBOX_ROUTING_KEY))

        # When the recording is read
        recorded: list[dict[str, Any]] = stand_ins.requests

    # Then every request is there, and no token, routing key or webhook secret is
    dump = json.dumps(recorded)
    assert [(r["service"], r["status"], r["fault"]) for r in recorded] == [
        ("slack", 429, True),
        ("slack", 200, False),
        ("slack", 200, False),
        ("pagerduty", 500, True),
        ("pagerduty", 202, False),
    ]
    assert DEFAULT_SLACK_TOKEN not in dump
    assert SANDBOX_ROUTING_KEY not in dump
    assert WEBHOOK_SECRET not in dump
    assert recorded[2]["path"] == "/services/T0SANDBOX/B0SANDBOX/***"
    assert recorded[4]["body"]["routing_key"] == "***"


# --- The stand-ins' own contract ---------------------------------------------------------------


def test_sandbox_faults_are_read_from_the_environment() -> None:
    environ = {"SANDBOX_FAULTS": '{"slack": [429, "ok_false"], "pagerduty": [500]}'}

    assert StandIns.faults_from_env(environ) == {"slack": [429, "ok_false"], "pagerduty": [500]}
    assert StandIns.faults_from_env({}) is None


def test_sandbox_faults_that_are_not_json_say_what_to_write() -> None:
    with pytest.raises(SandboxError, match=r"SANDBOX_FAULTS is not valid JSON .*expected e\.g\."):
        StandIns.faults_from_env({"SANDBOX_FAULTS": "{slack: [429]}"})


@pytest.mark.parametrize(
    "faults",
    ['{"opsgenie": [500]}', '{"slack": 500}', '{"slack": [true]}', '{"slack": [700]}', '{"pagerduty": ["ok_false"]}'],
)
def test_sandbox_faults_that_make_no_sense_are_refused(faults: str) -> None:
    with pytest.raises(SandboxError, match="faults"):
        StandIns.faults_from_env({"SANDBOX_FAULTS": faults})


def test_a_channel_is_one_channel_by_name_with_or_without_hash_and_by_id(
    stand_ins: StandIns, sleep: SleepRecorder
) -> None:
    api = slack_api(stand_ins, sleep)

    refs = [api.post_message(channel, MESSAGE) for channel in ("#gpu-alerts", "gpu-alerts")]
    refs.append(api.post_message(refs[0].channel, MESSAGE))

    assert len({ref.channel for ref in refs}) == 1
    assert len(stand_ins.slack_channels()["gpu-alerts"]) == 3


def test_trigger_without_summary_is_refused_in_pagerduty_words(stand_ins: StandIns, sleep: SleepRecorder) -> None:
    event = {
        "routing_key": SANDBOX_ROUTING_KEY,
        "event_action": "trigger",
        "payload": {"source": "i-0abc", "severity": "fatal"},
    }

    with pytest.raises(DeliveryError):
        pagerduty(stand_ins, sleep).send(event)

    assert stand_ins.requests[0]["response"] == {
        "status": "invalid event",
        "message": "Event object is invalid",
        "errors": [
            "'payload.summary' is missing or blank",
            "'payload.severity' must be one of critical, error, warning, info",
        ],
    }


def test_a_routing_key_of_the_wrong_shape_is_a_clear_error_that_names_no_value() -> None:
    # Given a PagerDuty secret whose key has a stray space (31 characters and a blank)
    wrong = "0123456789abcdef0123456789abcde "
    channels = SecretChannels(
        fetch_secret=lambda name, force: {"routing_keys": {"gpu-oncall": wrong}},
        slack_secret_name="slack",
        pagerduty_secret_name="pagerduty",
    )
    # When a page needs it, Then the delivery fails permanently, saying which key and why, never its value
    with pytest.raises(DeliveryError) as raised:
        channels.routing_key("gpu-oncall")
    assert raised.value.retryable is False
    assert "routing_keys ['gpu-oncall']" in str(raised.value)
    assert "32 letters and digits" in str(raised.value)
    assert wrong.strip() not in str(raised.value)
